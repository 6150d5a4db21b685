"""The LiveCodeBench sandbox: verdicts, the limits (time, memory, wall clock, network, file system), the tests file."""

from __future__ import annotations

import base64
import json
import pickle
import time
import zlib
from pathlib import Path

import pytest

from submission.base.errors import PlanError
from tasks.accuracy import livecodebench
from tasks.accuracy.livecodebench import Limits, Problem, read_problems, run_program

ADD = Problem("add", ({"input": "2 3\n", "output": "5\n", "testtype": "stdin"},
                      {"input": "1.5 1", "output": "2.50", "testtype": "stdin"}))
FAST = Limits(test_timeout_s=1.0, slack_s=3.0)
SUM = "import sys\nd = sys.stdin.buffer.read().split()\nprint(float(d[0]) + float(d[1]))"


def test_passing_and_failing_programs() -> None:
    good = run_program(SUM, ADD, FAST)
    assert good.passed and good.tests_passed == 2 and "namespace" in good.isolation
    wrong = run_program("print(4)", ADD, FAST)
    assert not wrong.passed and wrong.detail == "test 0: wrong output"
    broken = run_program("def (:", ADD, FAST)
    assert not broken.passed and "SyntaxError" in broken.detail
    assert not run_program("raise ValueError('no')", ADD, FAST).passed


def test_call_based_problem() -> None:
    two_sum = Problem("ts", ({"input": "[2, 7, 11]\n9", "output": "[0, 1]", "testtype": "functional"},), "twoSum")
    code = "class Solution:\n    def twoSum(self, nums, target):\n        return (0, 1)\n"
    assert run_program(code, two_sum, FAST).passed
    assert not run_program(code.replace("(0, 1)", "[1, 0]"), two_sum, FAST).passed
    no_name = Problem("x", two_sum.tests, None)
    assert "no func_name" in run_program(code, no_name, FAST).detail


def test_time_and_memory_limits() -> None:
    started = time.monotonic()
    loop = run_program("while True:\n    pass", ADD, FAST)
    assert not loop.passed and loop.detail == "test 0: time limit exceeded"
    memory = run_program("x = bytearray(4 * 1024 ** 3)", ADD, FAST)
    assert not memory.passed and "memory limit exceeded" in memory.detail
    stubborn = "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass"
    killed = run_program(stubborn, ADD, FAST)   # ignores the alarm: the CPU limit or the wall clock ends it
    assert not killed.passed and ("killed" in killed.detail or "resource limit" in killed.detail)
    assert time.monotonic() - started < 20


def test_no_network_and_no_reach_outside(tmp_path: Path) -> None:
    net = run_program("import socket\nsocket.create_connection(('127.0.0.1', 9))", ADD, FAST)
    assert not net.passed and "PermissionError" in net.detail
    victim = tmp_path / "keep.txt"
    victim.write_text("x")
    rm = run_program(f"import os\nos.remove({str(victim)!r})", ADD, FAST)
    assert not rm.passed and victim.exists()
    assert not run_program("import subprocess\nsubprocess.run(['true'])", ADD, FAST).passed


def test_tests_file_in_the_dataset_forms(tmp_path: Path) -> None:
    private = base64.b64encode(zlib.compress(pickle.dumps(json.dumps(
        [{"input": "1 1", "output": "2", "testtype": "stdin"}])))).decode()
    rows = [{"question_id": "a", "public_test_cases": json.dumps([{"input": "1", "output": "1",
                                                                    "testtype": "functional"}]),
             "private_test_cases": private, "metadata": json.dumps({"func_name": "f"})}]
    (tmp_path / "t.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    problem = read_problems(tmp_path / "t.jsonl")["a"]
    assert problem.func_name == "f" and len(problem.tests) == 2
    (tmp_path / "t.json").write_text(json.dumps(rows))
    assert read_problems(tmp_path / "t.json") == {"a": problem}


def test_tests_file_errors(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self) -> tuple:
            return (print, ("pwned",))

    evil = base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode()
    (tmp_path / "evil.jsonl").write_text(json.dumps({"question_id": "e", "private_test_cases": evil}) + "\n")
    with pytest.raises(PlanError, match="neither JSON nor the compressed LiveCodeBench form"):
        read_problems(tmp_path / "evil.jsonl")   # the unpickler admits plain strings only
    (tmp_path / "none.jsonl").write_text(json.dumps({"question_id": "n", "public_test_cases": "[]"}) + "\n")
    with pytest.raises(PlanError, match="problem n has no test cases"):
        read_problems(tmp_path / "none.jsonl")
    (tmp_path / "noid.jsonl").write_text('{"public_test_cases": "[]"}\n')
    with pytest.raises(PlanError, match=r"noid\.jsonl line 1: no question_id key"):
        read_problems(tmp_path / "noid.jsonl")


def test_the_compressed_form_holds_the_tests_json_text_and_inflates_within_a_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cases = [{"input": "1 1", "output": "2", "testtype": "stdin"}]
    packed = {"text": base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode(),
              "list": base64.b64encode(zlib.compress(pickle.dumps(cases))).decode()}
    assert livecodebench.decode_cases(packed["text"], "row") == cases
    with pytest.raises(PlanError, match="the pickle holds a list, not the tests' JSON text"):
        livecodebench.decode_cases(packed["list"], "row")
    monkeypatch.setattr(livecodebench, "MAX_DECOMPRESSED", 64)
    with pytest.raises(PlanError, match="more than 64 bytes uncompressed"):
        livecodebench.decode_cases(packed["text"], "row")
