"""A LiveCodeBench release's files (the Hugging Face data set `livecodebench/code_generation_lite`: test.jsonl,
test2.jsonl, ... one problem a line) converted into the JSON lines Podium's evaluator reads (livecodebench.py
`read_problems`), so scoring reads plain JSON and never unpickles.

Each output line holds what scoring needs of one problem, in the data set's own keys: `question_id`,
`public_test_cases` and `private_test_cases` as lists of {input, output, testtype} (the private ones decoded from
their compressed form by livecodebench.py `decode_cases`, whose unpickler admits plain values only), and `metadata`
as an object (`func_name` of a call-based problem). Every row is checked as the evaluator reads it, so a release
Podium cannot score fails here, at fetch time, naming the file and line: a row that is not JSON or not in the data
set's form, a pickle that names a class or function or runs more opcodes than one string takes
(livecodebench.py `MAX_PICKLE_OPCODES`), and a row nested deeper than Python's recursion limit lets it be read
(LiveCodeBench's rows nest three levels: the row, its list of test cases, a case).

The output is the same bytes for the same input (rows in the files' order, keys in a fixed order), so its sha256,
which `podium fetch` records, names the content. A question that appears twice is written twice; the later row wins
when read, as in the reference's question_id -> problem map.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from submission.base.errors import PlanError
from submission.base.files import replace_atomic, temporary
from tasks.accuracy.livecodebench import decode_cases, problem

FIX = ("the release at this commit is not in the form LiveCodeBench publishes (lcb_runner/benchmarks/"
       "code_generation.py reads each row so); check the commit the round's rules pin (livecodebench: in "
       "submission/rules/<round>.yaml)")
FORMAT = 1   # the output's layout; a converted file of another format is converted again
Tick = Callable[[int, int], None]   # (bytes of the release read, bytes in all)


@dataclass(frozen=True)
class Converted:
    problems: int       # output lines
    questions: int      # distinct question_ids
    tests: int          # test cases in all
    bytes: int
    sha256: str


def convert(sources: Iterable[Path], out: Path, tick: Tick = lambda done, total: None) -> Converted:
    """Write `out` from the release's files, in order (atomically: a reader sees the old file or the whole new one)."""
    sources = [Path(p) for p in sources]
    total = sum(p.stat().st_size for p in sources)
    digest, done, tests, lines = hashlib.sha256(), 0, 0, 0
    questions: set[str] = set()
    part = temporary(out, "converting")
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with part.open("wb") as sink:
            for source in sources:
                with source.open("rb") as rows:
                    for n, raw in enumerate(rows, 1):
                        done += len(raw)
                        if not raw.strip():
                            continue
                        row, line = _row(raw, f"{source} line {n}")
                        sink.write(line)
                        digest.update(line)
                        lines, tests = lines + 1, tests + len(row["public_test_cases"]) + len(row["private_test_cases"])
                        questions.add(row["question_id"])
                        tick(done, total)
        replace_atomic(part, out)
    finally:
        part.unlink(missing_ok=True)
    return Converted(lines, len(questions), tests, out.stat().st_size, digest.hexdigest())


def _row(raw: bytes, where: str) -> tuple[dict, bytes]:
    """One release row as the output holds it, checked as the evaluator reads it, and its output line."""
    try:
        row = json.loads(raw)
        if not isinstance(row, dict) or not row.get("question_id"):
            raise PlanError(f"{where}: no question_id")
        metadata = row.get("metadata") or {}
        metadata = json.loads(metadata) if isinstance(metadata, str) else metadata
        if not isinstance(metadata, dict):
            raise PlanError(f"{where}: metadata is a {type(metadata).__name__}, not an object")
        out = {"question_id": str(row["question_id"]),
               "public_test_cases": decode_cases(row.get("public_test_cases"), where),
               "private_test_cases": decode_cases(row.get("private_test_cases"), where),
               "metadata": metadata}
        problem(out, where)   # the cases as the evaluator needs them: objects with input and output text
        kinds = {case.get("testtype") for case in out["public_test_cases"] + out["private_test_cases"]}
        if not kinds <= {"stdin", "functional"}:
            raise PlanError(f"{where}: a test case's testtype is not stdin or functional ({sorted(map(str, kinds))})")
        line = (json.dumps(out, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
    except RecursionError:
        raise PlanError(f"{where}: nested deeper than Python's recursion limit lets it be read (a LiveCodeBench row "
                        "nests three levels)", fix=FIX) from None
    except ValueError as e:
        raise PlanError(f"{where}: not JSON ({e})", fix=FIX) from None
    except PlanError as e:
        raise PlanError(e.message, fix=FIX) from None
    return out, line
