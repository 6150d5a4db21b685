"""The round's `preprocess_submission.py`, run from a local checkout of mlcommons/inference on a copy of the tree, and
what it changed, file by file.

    cd <inference_src>/tools/submission
    python preprocess_submission.py --input TREE --output OUT --version v6.1

The script copies the division folders of TREE into OUT (which must not exist; TREE is not modified), drops the
results its checker (`submission_checker_old.py`) finds invalid, moving a closed result whose accuracy or audits fail
to open, infers scenarios it may infer from others, and removes empty folders (`main`, `clean_invalid_results` at the
commit the round's rules pin). tools/submission/README.md calls it optional; the checker is not.

At mlcommons/inference b66003e1 it stops with a traceback on a closed gpt-oss-120b tree: `check_compliance_acc_dir`
of the old checker raises `NotImplemented(...)` for TEST07, and a result it moves to open needs a `src/<benchmark>/`
folder. A failure is an error that names the script's last line and the way past it (`podium submit --no-preprocess`).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

from submission.base.errors import CommandError, PodiumError
from submission.checks.official import CHECKER_DIR, TAIL_CHARS, OfficialCheckerUnavailable
from submission.tree.changes import Changes, compare

SCRIPT = "preprocess_submission.py"  # in CHECKER_DIR, beside the checker it imports (submission_checker_old.py)
TIMEOUT_S = 1800  # it parses every log of the tree, as the checker does
MAX_NOTES = 200
_NOTE = re.compile(r"^\[[^\]]* (?:WARNING|ERROR)\] (?P<text>.*)$")  # its log lines (submission_checker_old's format)


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
        PodiumError.__init__(self, f"{SCRIPT} exited with code {returncode}: "
                             f"{log.splitlines()[-1] if log else 'no output'}", fix=(
            f"{SCRIPT} is optional (tools/submission/README.md): pass --no-preprocess to upload the tree as "
            "assembled, checked by the official checker; the tail of its output is in the run's log"))


def script(inference_src: str | Path) -> Path:
    path = Path(inference_src).expanduser().resolve() / CHECKER_DIR / SCRIPT
    if not path.is_file():
        raise OfficialCheckerUnavailable(
            f"no {SCRIPT} at {path}",
            fix="fetch the sources again: remove that checkout and run `podium fetch-inference` (it fetches the "
                "script), or pass --no-preprocess to upload the tree as assembled (the script is optional)")
    return path


def argv_for(path: Path, tree: Path, out: Path, round: str, python: str | None = None) -> list[str]:
    return [python or sys.executable, str(path), "--input", str(Path(tree).resolve()), "--output",
            str(Path(out).resolve()), "--version", round]


def run_preprocess(tree: Path, inference_src: str | Path, round: str, out: Path, *, python: str | None = None,
                   timeout_s: float = TIMEOUT_S) -> Preprocessed:
    """The script on `tree` into `out` (a folder that must not exist yet), and what it changed. PreprocessFailed when
    it exits non-zero; OfficialCheckerUnavailable when it cannot run."""
    path = script(inference_src)
    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out} exists: the script writes a new folder")
    argv = argv_for(path, tree, out, round, python)
    try:
        done = subprocess.run(argv, cwd=path.parent, capture_output=True, text=True, timeout=timeout_s,  # noqa: S603
                              check=False)
    except subprocess.TimeoutExpired as error:
        raise OfficialCheckerUnavailable(f"{SCRIPT} ran over {timeout_s:g} s and was stopped",
                                         fix="run it by hand to see where it hangs, or pass --no-preprocess") from error
    except OSError as error:
        raise OfficialCheckerUnavailable(f"cannot start {argv[0]}: {error.strerror}",
                                         fix="check the Python interpreter used for the official tools") from error
    output = f"{done.stdout}\n{done.stderr}".strip()
    if done.returncode != 0:
        raise PreprocessFailed(argv, done.returncode, output[-TAIL_CHARS:])
    notes = [m["text"] for line in output.splitlines() if (m := _NOTE.match(line))][:MAX_NOTES]
    return Preprocessed(argv=argv, output=out, changes=compare(tree, out), notes=notes)
