"""A tiny LiveCodeBench release in the data set's own form (livecodebench/code_generation_lite: one problem a JSON
line; public_test_cases and metadata JSON text, private_test_cases base64 of zlib of a pickled JSON string), for the
converter's and `podium fetch`'s tests."""

from __future__ import annotations

import base64
import json
import pickle
import zlib

STDIN = {"question_id": "abc301_a", "question_title": "Add", "platform": "atcoder", "difficulty": "easy",
         "public": [{"input": "2 3\n", "output": "5\n", "testtype": "stdin"}],
         "private": [{"input": "10 20\n", "output": "30\n", "testtype": "stdin"},
                     {"input": "-1 1\n", "output": "0\n", "testtype": "stdin"}],
         "metadata": {}}
CALL = {"question_id": "3000", "question_title": "Twice", "platform": "leetcode", "difficulty": "medium",
        "public": [{"input": "3", "output": "6", "testtype": "functional"}],
        "private": [{"input": "-4", "output": "-8", "testtype": "functional"}],
        "metadata": {"func_name": "twice"}}
LATER = {**STDIN, "question_id": "abc399_b", "question_title": "Add again"}
ADD = "a, b = map(int, input().split())\nprint(a + b)\n"   # a program that passes STDIN's and LATER's tests


def packed(cases: list[dict]) -> str:
    """The data set's compressed form of test cases."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()


def row(problem: dict) -> dict:
    """One line of a release file, with the keys the data set has."""
    return {"question_title": problem["question_title"], "question_content": f"{problem['question_title']}: ...",
            "platform": problem["platform"], "question_id": problem["question_id"], "contest_id": "c1",
            "contest_date": "2025-03-01T00:00:00", "starter_code": "", "difficulty": problem["difficulty"],
            "public_test_cases": json.dumps(problem["public"]), "private_test_cases": packed(problem["private"]),
            "metadata": json.dumps(problem["metadata"])}


def release(*files: list[dict]) -> dict[str, bytes]:
    """name -> bytes of each release file (test.jsonl, test2.jsonl, ...), one per list of problems."""
    names = ["test.jsonl", *(f"test{i}.jsonl" for i in range(2, len(files) + 1))]
    return {name: "".join(json.dumps(row(p)) + "\n" for p in problems).encode()
            for name, problems in zip(names, files, strict=True)}
