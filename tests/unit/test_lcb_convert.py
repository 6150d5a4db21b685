"""The LiveCodeBench converter (tasks/accuracy/lcb_convert.py): a release in the data set's form becomes the JSON lines
the evaluator reads, plain JSON with every test decoded, the same bytes each time; a pickle that would run code, or a
row the evaluator could not read, is refused at conversion naming its file and line."""

from __future__ import annotations

import base64
import hashlib
import json
import pickle
import zlib
from pathlib import Path

import pytest

from submission.base.errors import PlanError
from tasks.accuracy.lcb_convert import convert
from tasks.accuracy.livecodebench import read_problems, run_program
from tests.lcb_release import ADD, CALL, LATER, STDIN, release, row


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
