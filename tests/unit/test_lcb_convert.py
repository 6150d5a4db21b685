"""The LiveCodeBench converter (tasks/accuracy/lcb_convert.py): a release in the data set's form becomes the JSON lines
the evaluator reads, plain JSON with every test decoded, the same bytes each time; a pickle that would run code, a
pickle of millions of opcodes (refused with the process growing by a few MiB, measured in a child process), a row
nested past Python's recursion limit, or a row the evaluator could not read, is refused at conversion naming its
file and line."""

from __future__ import annotations

import base64
import hashlib
import json
import pickle
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from submission.base.errors import PlanError
from tasks.accuracy.lcb_convert import convert
from tasks.accuracy.livecodebench import read_problems, run_program
from tests.lcb_release import ADD, CALL, LATER, STDIN, release, row

REPO = Path(__file__).parents[2]
DEEP = "[" * 100_000 + "]" * 100_000   # JSON text 100,000 lists deep
# Run in a child process: converts the release in argv[1] and prints what it said and how much its peak memory grew.
CONVERT = """
import json, resource, sys
from pathlib import Path
from submission.base.errors import PlanError
from tasks.accuracy.lcb_convert import convert

def peak():   # the most memory the process has held, in bytes (ru_maxrss: KiB on Linux, bytes on macOS)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)

folder = Path(sys.argv[1])
before = peak()
try:
    convert([folder / "test.jsonl"], folder / "out.jsonl")
    said = None
except PlanError as e:
    said = str(e)
print(json.dumps({"said": said, "grew": peak() - before}))
"""


def _write(folder: Path, files: dict[str, bytes]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return [folder / name for name in files]


def test_a_release_becomes_plain_json_lines_the_evaluator_scores_with(tmp_path: Path) -> None:
    sources = _write(tmp_path / "release", release([STDIN, CALL], [LATER]))
    out = tmp_path / "livecodebench_tests.jsonl"
    ticks: list[tuple[int, int]] = []
    done = convert(sources, out, lambda d, t: ticks.append((d, t)))

    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["question_id"] for line in lines] == ["abc301_a", "3000", "abc399_b"]
    for line, problem in zip(lines, (STDIN, CALL, LATER), strict=True):
        assert line == {"question_id": problem["question_id"], "public_test_cases": problem["public"],
                        "private_test_cases": problem["private"], "metadata": problem["metadata"]}
    assert (done.problems, done.questions, done.tests) == (3, 3, 8)
    assert done.sha256 == hashlib.sha256(out.read_bytes()).hexdigest() and done.bytes == out.stat().st_size
    total = sum(p.stat().st_size for p in sources)
    assert ticks[-1] == (total, total)

    problems = read_problems(out)
    assert problems["3000"].func_name == "twice" and len(problems["abc301_a"].tests) == 3
    assert run_program(ADD, problems["abc301_a"]).passed          # scored from the converted file
    assert not run_program("print(0)\n", problems["abc399_b"]).passed

    again = convert(sources, tmp_path / "again.jsonl")
    assert again.sha256 == done.sha256                             # the same bytes for the same release


def test_a_pickle_that_would_run_code_is_refused_naming_the_file_and_line(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self) -> tuple:
            return (print, ("pwned",))

    evil = {**row(CALL), "private_test_cases": base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode()}
    files = release([STDIN])
    files["test.jsonl"] += (json.dumps(evil) + "\n").encode()
    sources = _write(tmp_path / "release", files)
    out = tmp_path / "livecodebench_tests.jsonl"
    out.write_text("the previous conversion\n")
    with pytest.raises(PlanError) as e:
        convert(sources, out)
    assert f"{sources[0]} line 2" in str(e.value) and "refusing builtins.print" in str(e.value)
    assert "livecodebench:" in str(e.value)                        # the fix: the rules' pin
    assert out.read_text() == "the previous conversion\n"          # nothing half-written in its place
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name, "release"]


@pytest.mark.parametrize(("change", "said"), [
    ({"question_id": ""}, "no question_id"),
    ({"metadata": "[1]"}, "metadata is a list, not an object"),
    ({"public_test_cases": json.dumps([{"input": "1"}])}, "lacks its input or output text"),
    ({"public_test_cases": json.dumps([{"input": "1", "output": "1", "testtype": "file"}])}, "not stdin or functional"),
])
def test_a_row_the_evaluator_could_not_read_is_refused(tmp_path: Path, change: dict, said: str) -> None:
    sources = _write(tmp_path / "release", {"test.jsonl": (json.dumps({**row(STDIN), **change}) + "\n").encode()})
    with pytest.raises(PlanError, match=said):
        convert(sources, tmp_path / "out.jsonl")


def test_a_pickle_of_millions_of_opcodes_is_refused_with_the_process_growing_little(tmp_path: Path) -> None:
    """4 M EMPTY_LIST opcodes, which zlib packs into about 5 kB, make 4 M lists when unpickled (the process grew by
    over 250 MiB); the unpickler stops at 64 opcodes, so the row is refused and the process grows by less than 64 MiB
    (it holds the 4 MB of inflated pickle)."""
    flood = base64.b64encode(zlib.compress(b"\x80\x04" + b"]" * 4_000_000 + b".", 9)).decode()
    assert len(flood) < 6000
    sources = _write(tmp_path / "release", {"test.jsonl": (json.dumps({**row(STDIN), "private_test_cases": flood})
                                                           + "\n").encode()})
    child = subprocess.run([sys.executable, "-c", CONVERT, str(tmp_path / "release")], cwd=REPO, capture_output=True,
                           text=True, timeout=600)
    assert child.returncode == 0, child.stderr
    result = json.loads(child.stdout)
    assert f"{sources[0]} line 1: test cases are neither JSON nor the compressed LiveCodeBench form (more than 64 " \
           "pickle opcodes" in str(result["said"])
    assert result["grew"] < 64 << 20, f"the process grew by {result['grew'] / 2**20:.0f} MiB"


@pytest.mark.parametrize(("line", "said"), [
    ('{"question_id": "abc301_a", "deep": ' + DEEP + "}", "nested deeper than Python's recursion limit"),
    (json.dumps({**row(STDIN), "public_test_cases": DEEP}), "nested deeper than Python's recursion limit"),
    (json.dumps({**row(STDIN), "metadata": DEEP}), "nested deeper than Python's recursion limit"),
    (json.dumps({**row(STDIN), "private_test_cases": base64.b64encode(zlib.compress(
        b"\x80\x04" + b"]" * 100_000 + b"a" * 99_999 + b".")).decode()}), "more than 64 pickle opcodes"),
    (json.dumps({**row(STDIN), "private_test_cases": base64.b64encode(zlib.compress(pickle.dumps(DEEP))).decode()}),
     "maximum recursion depth exceeded"),
], ids=["row", "public-cases", "metadata", "pickle-of-deep-lists", "pickle-of-deep-json"])
def test_a_row_nested_past_the_recursion_limit_is_the_converters_error(tmp_path: Path, line: str, said: str) -> None:
    sources = _write(tmp_path / "release", {"test.jsonl": (line + "\n").encode()})
    with pytest.raises(PlanError) as e:
        convert(sources, tmp_path / "out.jsonl")
    assert f"{sources[0]} line 1: " in str(e.value) and said in str(e.value)
    assert "livecodebench:" in str(e.value)                        # the fix: the rules' pin
    assert not (tmp_path / "out.jsonl").exists()
