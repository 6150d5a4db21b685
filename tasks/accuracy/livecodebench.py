"""LiveCodeBench: a program passes when it passes every test of its problem, run in a sandboxed child process.

The tests are not in the MLCommons parquet (its `ground_truth` for LiveCodeBench rows is the `question_id`); the
reference loads them from LiveCodeBench `release_v6` (Hugging Face `livecodebench/code_generation_lite`). Podium
reads that data set's rows from a JSON list or JSON-lines file (`read_problems`): `question_id`,
`public_test_cases` and `private_test_cases` (JSON text or lists, or the data set's compressed form: base64 of zlib
of a pickled JSON string, `decode_cases`), and `metadata` (JSON text or an object, with `func_name` for call-based
problems). `podium fetch` writes that file from the release itself (tasks/accuracy/lcb_convert.py).

The compressed form is a pickle from the internet, and unpickling can run code: the unpickler here refuses every
global (a class or function is the only way a pickle calls anything), so only the plain values pickle's own opcodes
build (strings, numbers, lists, dicts, ...) come out, and the result must be the tests' JSON text. Its zlib stream
is read to at most MAX_DECOMPRESSED bytes, and the unpickler runs at most MAX_PICKLE_OPCODES opcodes, which bounds
the objects it makes (each opcode makes one at most): a few kB of zlib inflate to millions of opcodes.

Each program runs in `python -I lcb_child.py` in a fresh temporary folder, in its own session, with a minimal
environment, no network, and rlimits on memory, CPU, file size; the whole process group is killed when the
wall-clock budget (per-test timeout x tests + slack) runs out.
"""

from __future__ import annotations

import base64
import io
import json
import os
import pickle
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Self

from submission.base.errors import PlanError

CHILD = Path(__file__).with_name("lcb_child.py")
FIX = ("`podium fetch PLAN` writes a LiveCodeBench release's tests as JSON lines where the plan's dataset.lcb_tests "
       "says (a fetch entry {livecodebench: release_v6} for gpt-oss-120b, release_v1 for deepseek-r1); pass that file "
       "with --lcb-tests, or put it beside the data set as livecodebench_tests.jsonl")
MAX_DECOMPRESSED = 1 << 30   # one problem's tests, uncompressed; a zlib stream that inflates further is refused
# LiveCodeBench pickles one string, the tests' JSON text (lcb_runner/benchmarks/code_generation.py unpickles it and
# json.loads the result): PROTO, FRAME, the string, its memo entry, STOP: at most 5 opcodes in any protocol (0-5).
# 64 leaves room over that and lets no pickle make more than 64 objects: unbounded, 4 M EMPTY_LIST opcodes, which
# zlib packs into 5 kB, make 4 M lists (over 250 MiB).
MAX_PICKLE_OPCODES = 64
DEFAULT_NAMES = ("livecodebench_tests.jsonl", "livecodebench_tests.json")


@dataclass(frozen=True)
class Limits:
    test_timeout_s: float = 6.0     # per test case (LiveCodeBench's own default timeout)
    memory_mb: int = 2048           # RLIMIT_AS of the child
    file_mb: int = 16               # RLIMIT_FSIZE: largest file the program may write
    slack_s: float = 5.0            # start-up and teardown on top of the tests' budget

    def child(self, tests: int) -> dict[str, float]:
        return {"test_timeout_s": self.test_timeout_s, "memory_mb": self.memory_mb, "file_mb": self.file_mb,
                "cpu_s": int(self.test_timeout_s * max(tests, 1) + self.slack_s)}


@dataclass(frozen=True)
class Problem:
    question_id: str
    tests: tuple[dict[str, str], ...]          # {"input", "output", "testtype": "stdin" | "functional"}
    func_name: str | None = None


@dataclass(frozen=True)
class RunResult:
    passed: bool
    detail: str
    isolation: str = ""
    tests_passed: int = 0
    tests: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def _counted(load: Callable[[Any], None]) -> Callable[[Any], None]:
    """One opcode's step of the unpickler, counted against MAX_PICKLE_OPCODES."""
    def step(unpickler: _PlainValues) -> None:
        unpickler.opcodes += 1
        if unpickler.opcodes > MAX_PICKLE_OPCODES:
            raise pickle.UnpicklingError(f"more than {MAX_PICKLE_OPCODES} pickle opcodes, where the tests' JSON "
                                         "text, one string, takes at most 5")
        load(unpickler)
    return step


class _PlainValues(pickle._Unpickler):   # the Python unpickler, whose opcodes can be counted (the C one's cannot)
    """Builds only what pickle's own opcodes make (str, bytes, int, float, bool, None, list, tuple, dict, set), in at
    most MAX_PICKLE_OPCODES opcodes: every global, the one way a pickle reaches a class or a function to call, is
    refused."""

    dispatch: ClassVar[dict[int, Callable[[Any], None]]] = {
        code: _counted(load) for code, load in pickle._Unpickler.dispatch.items()}

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file)
        self.opcodes = 0

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing {module}.{name}: only plain values (the tests' JSON text) are expected")


def decode_cases(value: Any, where: str) -> list[dict[str, str]]:
    """Test cases as given: a list, JSON text, or the compressed LiveCodeBench form (see the module's doc)."""
    if not isinstance(value, str) or not value:
        cases = value or []
    else:
        try:
            cases = json.loads(value)
        except ValueError:
            cases = _inflated(value, where)
    if not isinstance(cases, list):
        raise PlanError(f"{where}: test cases are a {type(cases).__name__}, not a list", fix=FIX)
    return cases


def _inflated(value: str, where: str) -> Any:
    try:
        inflate = zlib.decompressobj()
        raw = inflate.decompress(base64.b64decode(value), MAX_DECOMPRESSED)
        if inflate.unconsumed_tail:
            raise ValueError(f"more than {MAX_DECOMPRESSED:,} bytes uncompressed")
        text = _PlainValues(io.BytesIO(raw)).load()
        if not isinstance(text, str):
            raise ValueError(f"the pickle holds a {type(text).__name__}, not the tests' JSON text")
        return json.loads(text)
    except Exception as e:
        raise PlanError(f"{where}: test cases are neither JSON nor the compressed LiveCodeBench form ({e})",
                        fix=FIX) from None


def read_problems(path: Path) -> dict[str, Problem]:
    """question_id -> Problem, from a JSON list or JSON-lines file of LiveCodeBench rows (a later row of a question
    replaces an earlier one, as the reference's question_id -> problem map does). A JSON-lines file is read a line
    at a time."""
    problems = {}
    for where, row in _rows(Path(path)):
        found = problem(row, where)
        problems[found.question_id] = found
    return problems


def problem(row: Any, where: str) -> Problem:
    """One LiveCodeBench row as a Problem, its test cases decoded and checked."""
    if not isinstance(row, dict) or "question_id" not in row:
        raise PlanError(f"{where}: no question_id key", fix=FIX)
    tests = decode_cases(row.get("public_test_cases"), where) + decode_cases(row.get("private_test_cases"), where)
    for case in tests:
        if not (isinstance(case, dict) and isinstance(case.get("input"), str) and isinstance(case.get("output"), str)):
            raise PlanError(f"{where}: a test case lacks its input or output text", fix=FIX)
    metadata = row.get("metadata") or {}
    metadata = json.loads(metadata) if isinstance(metadata, str) and metadata else metadata
    if not tests:
        raise PlanError(f"{where}: problem {row['question_id']} has no test cases", fix=FIX)
    return Problem(str(row["question_id"]), tuple(tests),
                   metadata.get("func_name") if isinstance(metadata, dict) else None)


def _rows(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, row) of a JSON list or JSON-lines file."""
    try:
        with path.open(encoding="utf-8") as f:
            if f.read(4096).lstrip().startswith("["):
                f.seek(0)
                yield from ((f"{path} row {i}", row) for i, row in enumerate(json.load(f)))
                return
            f.seek(0)
            for n, line in enumerate(f, 1):
                if line.strip():
                    yield f"{path} line {n}", json.loads(line)
    except OSError as e:
        raise PlanError(f"cannot read the LiveCodeBench tests: {e.strerror}", where=str(path), fix=FIX) from None
    except ValueError as e:
        raise PlanError(f"not JSON or JSON lines: {e}", where=str(path), fix=FIX) from None


def find_tests(explicit: Path | None, dataset: Path) -> Path:
    if explicit is not None:
        return Path(explicit)
    for name in DEFAULT_NAMES:
        if (Path(dataset).parent / name).is_file():
            return Path(dataset).parent / name
    raise PlanError("the accuracy log has LiveCodeBench samples but no LiveCodeBench tests were given",
                    where=str(dataset), fix=FIX)


DEFAULT_LIMITS = Limits()


def run_program(code: str, problem: Problem, limits: Limits = DEFAULT_LIMITS) -> RunResult:
    """Run `code` against every test of `problem` in the sandboxed child; passed only if all tests pass."""
    if problem.func_name is None and any(t.get("testtype") == "functional" for t in problem.tests):
        return RunResult(False, "call-based tests but no func_name in the problem's metadata")
    work = Path(tempfile.mkdtemp(prefix="podium-lcb-"))
    nonce = secrets.token_hex(16)
    try:
        (work / "solution.py").write_text(code, encoding="utf-8")
        spec = {"tests": list(problem.tests), "func_name": problem.func_name,
                "limits": limits.child(len(problem.tests))}
        (work / "tests.json").write_text(json.dumps(spec), encoding="utf-8")
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
        budget = limits.test_timeout_s * max(len(problem.tests), 1) + limits.slack_s
        child = subprocess.Popen([sys.executable, "-I", str(CHILD), nonce], cwd=work, env=env,  # noqa: S603
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 start_new_session=True)
        try:
            out, _ = child.communicate(timeout=budget)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
            return RunResult(False, f"killed after the {budget:g} s wall-clock budget", tests=len(problem.tests))
        finally:
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
        for line in reversed(out.decode("utf-8", errors="replace").splitlines()):
            if line.startswith(nonce + " "):
                verdict = json.loads(line[len(nonce) + 1:])
                return RunResult(verdict["passed"] == verdict["total"], verdict["detail"], verdict["isolation"],
                                 verdict["passed"], verdict["total"])
        reason = "killed by a resource limit" if child.returncode and child.returncode < 0 else "no verdict"
        return RunResult(False, f"{reason} (exit code {child.returncode})", tests=len(problem.tests))
    finally:
        shutil.rmtree(work, ignore_errors=True)


@dataclass(frozen=True)
class CodeGrading:
    """The sandbox settings of an evaluator that runs generated programs against LiveCodeBench tests; an
    evaluator dataclass extends it and gets `with_options` (the CLI's --lcb-tests/--workers) and `grade`."""

    lcb_tests: Path | None = None
    limits: Limits = DEFAULT_LIMITS
    workers: int = 2

    def with_options(self, *, lcb_tests: Path | None = None, workers: int | None = None) -> Self:
        return replace(self, lcb_tests=lcb_tests or self.lcb_tests, workers=workers or self.workers)

    def grade(self, jobs: list[tuple[str | None, str]], dataset: Path) -> list[bool | None]:
        """Each (program, question_id) job: passed, failed, or None when it cannot run (no program was
        extracted, or the tests hold no such question). Programs run `workers` at a time."""
        problems = read_problems(find_tests(self.lcb_tests, Path(dataset)))

        def one(job: tuple[str | None, str]) -> bool | None:
            code, question = job
            if code is None or question not in problems:
                return None
            return run_program(code, problems[question], self.limits).passed

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return list(pool.map(one, jobs))
