"""MATH-500 grading by the PRM800K grader, as `language/deepseek-r1/eval_accuracy.py` grades it: the reference puts
`prm800k/` (its `submodules/prm800k` at openai/prm800k, the commit the round's rules pin as `math_grader`) on its path
and calls `from grading.grader import grade_answer`; `grade_answer(given_answer=..., ground_truth=...)` decides each
answer (its own normalisation, then sympy's simplification of the difference). Podium runs that very file, never a
copy: the folder a user fetches (`podium fetch-grader`, or a plan's fetch entry `{github: openai/prm800k}`) is
handed to `math_grader_child.py`, a child Python that imports the grader from it and grades every answer of a log.

A child, not an import here: the grader needs `grading` as a top-level package on `sys.path` and may leave sympy
running for long on a hostile answer; in its own process neither reaches the pipeline, and each answer has a time
limit (`ANSWER_TIMEOUT_S`, the reference has none: an answer over it is scored wrong and counted in the notes).
The grader needs `sympy` and `pylatexenc` (Podium's dependencies).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from submission.base.errors import CommandError, PlanError

GRADER = Path("prm800k") / "grading" / "grader.py"   # inside the fetched folder (the repository's root)
CHILD = Path(__file__).with_name("math_grader_child.py")
ANSWER_TIMEOUT_S = 30     # one answer's sympy time in the child; the reference waits forever
START_S = 60              # the child's start-up (sympy's import) on a busy machine
FIX = ("fetch openai/prm800k at the commit the round's rules pin (`podium fetch-grader` prints its folder; in a plan, "
       "a fetch entry {github: openai/prm800k}) and pass that folder: --math-grader DIR, or dataset.math_grader")


@dataclass(frozen=True)
class Graded:
    verdicts: tuple[bool, ...]    # one per (given, truth) pair, in order
    timed_out: int                # answers stopped at ANSWER_TIMEOUT_S (scored wrong)


def grader_root(folder: Path | None) -> Path:
    """The folder holding `prm800k/grading/grader.py` (openai/prm800k's root as fetched); PlanError otherwise."""
    if folder is None:
        raise PlanError("the deepseek-r1 evaluator grades MATH-500 with the PRM800K grader and was given none", fix=FIX)
    root = Path(folder).expanduser()
    if not (root / GRADER).is_file():
        raise PlanError(f"no {GRADER} there: not openai/prm800k as `podium fetch-grader` unpacks it", where=str(root),
                        fix=FIX)
    return root


def grade(folder: Path | None, pairs: list[tuple[str, str]], *, answer_timeout_s: float = ANSWER_TIMEOUT_S) -> Graded:
    """`grade_answer(given_answer=given, ground_truth=truth)` of the grader in `folder` for each pair, in one child."""
    if not pairs:
        return Graded((), 0)
    root = grader_root(folder)
    argv = [sys.executable, "-I", str(CHILD), str((root / GRADER.parent.parent).resolve()), str(answer_timeout_s)]
    budget = START_S + answer_timeout_s * len(pairs)
    try:
        done = subprocess.run(argv, input=json.dumps(pairs), capture_output=True, text=True, timeout=budget,  # noqa: S603
                              check=False)
    except subprocess.TimeoutExpired:
        raise CommandError(argv, -9, f"stopped after {budget:g} s", fix="see the grader's answers") from None
    if done.returncode != 0:
        raise CommandError(argv, done.returncode, done.stderr[-2000:],
                           fix="the PRM800K grader needs sympy and pylatexenc (`make install`); " + FIX)
    verdicts = json.loads(done.stdout.strip().splitlines()[-1])
    return Graded(tuple(v is True for v in verdicts), sum(v is None for v in verdicts))
