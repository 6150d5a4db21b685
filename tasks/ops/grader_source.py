"""The MATH-500 grader deepseek-r1's accuracy score runs (`podium fetch-grader`; a plan's `dataset.math_grader`):
openai/prm800k at the commit the round's rules pin (`math_grader` in submission/rules/<round>.yaml), in
`<root>/<commit>/`, as `podium fetch` unpacks a `github` source: GitHub's archive of the commit, or with `--archive` a
`git archive` of it (tasks/ops/inference_sources.py `unpack_archive`, the way mlcommons/inference's is unpacked; CI's
copy is one). Either way the folder holds `.podium-manifest.json` and `.podium-fetch.json`, and `check` verifies
both and the grader file before a run (preflight) and when a later call finds the folder.
"""

from __future__ import annotations

from pathlib import Path

from submission.base.errors import PlanError, PodiumError
from submission.plan.fetch import FetchItem, FetchSource
from submission.rules import Rules, SourcePin
from tasks.accuracy.math_grader import GRADER
from tasks.ops.inference_sources import Fetched, unpack_archive, verify_unpacked
from tasks.staging.fetch_http import FETCHED, GITHUB, fetch_archive

NAME = "openai/prm800k"   # as a plan's fetch entry names it (`github:`)
REQUIRED = (GRADER,)


def pin_of(rules: Rules) -> SourcePin:
    if rules.math_grader is None:
        raise PlanError(f"round {rules.round} pins no MATH-500 grader", fix="use a round whose rules name one (v6.1)")
    return rules.math_grader


def fetch(rules: Rules, root: Path, *, archive: Path | None = None, github: str = GITHUB) -> Fetched:
    """openai/prm800k at the round's commit in `root/<commit>/`: unpacked from `archive`, or GitHub's archive of the
    commit fetched and unpacked, unless a verified copy is there already."""
    pin = pin_of(rules)
    if archive is not None:
        return unpack_archive(pin, archive, root, name=NAME, required=REQUIRED, make_var="PRM800K_ARCHIVE")
    folder = Path(root).resolve() / pin.commit
    if (folder / FETCHED).is_file():
        check(folder, rules)
        return Fetched(folder, pin.commit, reused=True)
    item = FetchItem(field="fetch-grader", dest=str(folder), source=FetchSource(github=NAME), revision=pin.commit,
                     repo=NAME)
    folder.parent.mkdir(parents=True, exist_ok=True)
    fetch_archive(item, folder, lambda _: None, lambda *_: None, github=github)
    check(folder, rules)
    return Fetched(folder, pin.commit, reused=False)


def check(folder: Path, rules: Rules) -> None:
    """`folder` is openai/prm800k at the round's commit as `podium fetch-grader` or `podium fetch` unpacked it, every
    file of its manifest unchanged and the grader in it; PodiumError otherwise."""
    verify_unpacked(Path(folder), pin_of(rules).commit, name=NAME, required=REQUIRED)


def problems(folder: str, rules: Rules, where: str) -> list[PodiumError]:
    """What is wrong with a plan's `dataset.math_grader` (preflight): not there, not the grader, another commit."""
    fix = (f"`podium fetch-grader --round {rules.round}` fetches {NAME} at {pin_of(rules).commit[:12]} (or unpacks a "
           "`git archive` of it with --archive) and prints its folder; or a fetch entry {github: openai/prm800k} "
           "for `podium fetch PLAN`")
    path = Path(folder).expanduser()
    if not (path / GRADER).is_file():
        return [PlanError(f"{path} holds no {GRADER}", where=where, fix=fix)]
    try:
        check(path, rules)
    except PodiumError as e:
        return [PlanError(e.message, where=where, fix=fix)]
    return []
