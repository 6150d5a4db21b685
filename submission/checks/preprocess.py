"""The round's `preprocess_submission.py`, run from a local checkout of mlcommons/inference on a copy of the tree, and
what it changed, file by file.

    cd <inference_src>/tools/submission
    python preprocess_submission.py --input TREE --output OUT --version v6.1

The script copies the division folders of TREE into OUT (which must not exist; TREE is not modified), drops the
results its checker (`submission_checker_old.py`) finds invalid, moving a closed result whose accuracy or audits fail
to open, infers scenarios it may infer from others, and removes empty folders (`main`, `clean_invalid_results` at the
commit the round's rules pin). tools/submission/README.md calls it optional; the checker is not.

At mlcommons/inference b66003e1 (the v6.1 pin) the script cannot judge two kinds of valid v6.1 results, and no later
commit of that repository changes the lines involved (`KNOWN_CRASHES`, `ENDPOINTS_DROPPED`): a closed result with
TEST07 stops it with a TypeError, and a scenario folder in the endpoints layout is dropped (closed or open) as if it
had failed. Either is an error that says so, names the lines, and gives the way past it (`podium submit` without
`--preprocess`, the official checker still judging the tree); a dropped endpoints result is never packed silently.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from pydantic import BaseModel

from submission.base.errors import CommandError, PodiumError
from submission.checks.official import CHECKER_DIR, TAIL_CHARS, OfficialCheckerUnavailable, run_tool
from submission.tree.changes import FOLDER_DEPTH, Changes, compare
from submission.tree.paths import layout_of

SCRIPT = "preprocess_submission.py"  # in CHECKER_DIR, beside the checker it imports (submission_checker_old.py)
TIMEOUT_S = 1800  # it parses every log of the tree, as the checker does
MAX_NOTES = 200
_NOTE = re.compile(r"^\[[^\]]* (?:WARNING|ERROR)\] (?P<text>.*)$")  # its log lines (submission_checker_old's format)


PIN = "mlcommons/inference b66003e1"
# What the script does with valid v6.1 trees at the pin: the words its traceback holds -> why, with the lines.
KNOWN_CRASHES = {
    ("in check_compliance_acc_dir", "TypeError: 'NotImplementedType' object is not callable"): (
        f"a known defect at {PIN}: it cannot judge a closed result with TEST07 (gpt-oss-120b). Its line 275 calls "
        "submission_checker_old.check_compliance_dir, whose check_compliance_acc_dir knows only TEST01 and TEST06 "
        "and reaches `raise NotImplemented(...)` (submission_checker_old.py line 3669, a TypeError) on TEST07's "
        "verify_accuracy.txt, the file the official checker requires (submission_checker/checks/"
        "compliance_check.py line 147); no later mlcommons/inference commit changes that line (its TEST07 check came "
        "with mlcommons/inference#2532, the raise with mlcommons/inference#1616)"),
}
ENDPOINTS_DROPPED = (
    f"a known defect at {PIN}: it judges every scenario folder with submission_checker_old's loadgen readers "
    "(preprocess_submission.py lines 205-230: check_accuracy_dir wants accuracy/accuracy.txt, check_performance_dir "
    "performance/run_1/mlperf_log_detail.txt), which the endpoints layout (submission_structure.md, \"Endpoints "
    "submission structure\") does not have, so it drops or moves valid endpoints results (lines 286-360); no later "
    "mlcommons/inference commit changes those lines")
NO_PREPROCESS = ("leave out --preprocess: the tree goes as assembled, after the official checker (which reads both "
                 "layouts and TEST07) passed it; tools/submission/README.md calls the script optional")


def known_crash(log: str) -> str | None:
    """Why the script stopped, when its output shows one of the defects of `KNOWN_CRASHES`."""
    return next((why for words, why in KNOWN_CRASHES.items() if all(w in log for w in words)), None)


class PreprocessDroppedResults(PodiumError):
    """The script dropped or moved scenario folders in the endpoints layout: the copy is not packed."""

    exit_code = 4
    final = True

    def __init__(self, folders: list[str]) -> None:
        self.folders = folders
        super().__init__(f"{SCRIPT} dropped {len(folders)} endpoints-layout result(s) ({', '.join(folders)}): "
                         f"{ENDPOINTS_DROPPED}", fix=NO_PREPROCESS)


class Preprocessed(BaseModel):
    argv: list[str]
    output: Path
    changes: Changes
    notes: list[str] = []  # its WARNING and ERROR lines: why it dropped or moved each result


class PreprocessFailed(CommandError):
    """preprocess_submission.py exited non-zero: its output folder is not used. `log`: the tail of its output."""

    final = True

    def __init__(self, argv: list[str], returncode: int, log: str) -> None:
        self.argv, self.returncode, self.output_tail, self.log = list(argv), returncode, log, log
        self.known = known_crash(log)
        message = f"{SCRIPT} exited with code {returncode}: {log.splitlines()[-1] if log else 'no output'}"
        PodiumError.__init__(self, f"{message}; {self.known}" if self.known else message, fix=(
            f"{NO_PREPROCESS}; the tail of its output is in the run's log"))


def script(inference_src: str | Path) -> Path:
    path = Path(inference_src).expanduser().resolve() / CHECKER_DIR / SCRIPT
    if not path.is_file():
        raise OfficialCheckerUnavailable(
            f"no {SCRIPT} at {path}",
            fix="fetch the sources again: remove that checkout and run `podium fetch-inference` (it fetches the "
                "script), or leave out --preprocess to upload the tree as assembled (the script is optional)")
    return path


def argv_for(path: Path, tree: Path, out: Path, round: str, python: str | None = None) -> list[str]:
    return [python or sys.executable, str(path), "--input", str(Path(tree).resolve()), "--output",
            str(Path(out).resolve()), "--version", round]


def run_preprocess(tree: Path, inference_src: str | Path, round: str, out: Path, *, python: str | None = None,
                   timeout_s: float = TIMEOUT_S) -> Preprocessed:
    """The script on `tree` into `out` (a folder that must not exist yet), and what it changed. PreprocessFailed when
    it exits non-zero; PreprocessDroppedResults when it dropped endpoints results; OfficialCheckerUnavailable when it
    cannot run."""
    path = script(inference_src)
    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out} exists: the script writes a new folder")
    argv = argv_for(path, tree, out, round, python)
    done = run_tool(argv, path.parent, timeout_s, SCRIPT,
                    "run it by hand to see where it hangs, or leave out --preprocess", "the official tools")
    output = f"{done.stdout}\n{done.stderr}".strip()
    if done.returncode != 0:
        raise PreprocessFailed(argv, done.returncode, output[-TAIL_CHARS:])
    notes = [m["text"] for line in output.splitlines() if (m := _NOTE.match(line))][:MAX_NOTES]
    changes = compare(tree, out)
    if dropped := endpoints_dropped(tree, changes):
        raise PreprocessDroppedResults(dropped)
    return Preprocessed(argv=argv, output=out, changes=changes, notes=notes)


def endpoints_dropped(tree: Path, changes: Changes) -> list[str]:
    """The scenario folders in the endpoints layout that lost files (the script removed or moved them)."""
    folders = {"/".join(Path(p).parts[:FOLDER_DEPTH]) for p in changes.removed if len(Path(p).parts) > FOLDER_DEPTH}
    return sorted(f for f in folders if Path(tree, f).is_dir() and layout_of(Path(tree, f)) == "endpoints")
