"""The official MLCommons submission checker, run from a local checkout of mlcommons/inference, and where its
verdict differs from Podium's.

    cd <inference_src>/tools/submission
    python -m submission_checker.main --input TREE --version v6.1 --csv out.csv [--submitter ORG]

Its exit code is 0 ("submission looks OK") or 1 ("submission has errors"); its CSV lists one row per result it
accepted; it logs `ERROR:...` lines and `NoResults <path>` for the rest (`main.py`, `results.py` at the commit the
round's rules pin, `inference_sources`). It needs only PyYAML, which Podium's environment has. The checks never fetch
the sources: `podium fetch-inference` does (tasks/ops/inference_sources.py), and the plan (`inference_src`) or
`podium check --inference-src DIR` names the folder. The comparison is pure: `compare(ours, theirs)`.
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, Field

from submission.base.errors import PodiumError
from submission.checks.checker import CheckReport, ScenarioResult, check_tree

MODULE = "submission_checker.main"
CHECKER_DIR = Path("tools") / "submission"  # the module is run from here (`python -m submission_checker.main`)
TIMEOUT_S = 1800  # the checker parses every log of the tree; big trees take minutes
TAIL_CHARS = 4000
# its ERROR lines: `[time file:line ERROR] text` (submission_checker/loader.py's log format) or `ERROR:name:text`
_ERROR = re.compile(r"^(?:ERROR:[^:]*:|\[[^\]]* ERROR\] )(?P<text>.*)$")
# What an official ERROR line says, as the Podium rule that reports the same thing (submission_checker/checks/*.py
# messages at the v6.1 commit; `accurcy` is its spelling). A rejection whose every error is one of Podium's named
# deviations of that folder is expected; the rest are real disagreements.
OFFICIAL_MESSAGES = {
    "performance_sample_count, found": "performance-sample-count",  # performance_check.py
    "Test duration less than 600s in user config": "min-duration",  # performance_check.py
    "Required minimum samples per query not met": "offline-samples-per-query",  # performance_check.py
    "Required minimum Query Count not met": "min-queries",  # performance_check.py
    "does not have all required scenarios": "required-scenarios",  # performance_check.py
    "accurcy run does not cover all dataset": "accuracy-coverage",  # accuracy_check.py
    "Latency constraint not met": "latency-limit",  # performance_check.py (p99 over the folder's constraint)
    "Failed extra check for TTFT and TPOT": "latency-limit",  # performance_check.py (LLM token latencies)
}
_AGGREGATE = ("Some ", "NoResults ", "SUMMARY:")  # base.py "Some %s Checks failed for", main.py: follow from others
_NO_RESULTS = re.compile(r"NoResults (?P<path>\S+)")
# its closing counts and verdict (main.py: `Results=..`, `Closed Results=..`, `Systems=..`, ..., `SUMMARY: ..`), after
# either log prefix: `[time file:line LEVEL] ` (loader.py) or `LEVEL:name:`
_SUMMARY = re.compile(r"^(?:[A-Z]+:[^:]*:|\[[^\]]* [A-Z]+\] )(?P<text>(?:\w+ )?(?:Results|Systems)=.*|SUMMARY: .*)$")
_TRACEBACK = "Traceback (most recent call last)"


class OfficialCheckerUnavailable(PodiumError):
    """The official checker could not be run (no checkout there, a timeout): the CLI's "could not run"."""

    exit_code = 2


class OfficialReport(BaseModel):
    argv: list[str]
    cwd: str
    returncode: int
    rows: list[dict[str, str]] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)  # its ERROR log lines, in order
    no_results: list[str] = Field(default_factory=list)  # performance logs it rejected
    summary: list[str] = Field(default_factory=list)  # its closing lines: result and system counts, the verdict
    crashed: bool = False  # a Python traceback: the checker stopped before checking everything
    output_tail: str = ""
    csv_path: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.crashed

    def verdict(self) -> str:
        if self.crashed:
            return f"crashed (exit code {self.returncode})"
        return "submission looks OK" if self.ok else f"submission has errors (exit code {self.returncode})"


class Difference(BaseModel):
    kind: Literal["verdict", "accepted-by-official", "rejected-by-official", "unknown-row", "crash"]
    path: str
    message: str
    expected: bool = False  # fully explained by Podium's named deviations (the message names them)

    def line(self) -> str:
        return f"{'EXPECTED' if self.expected else 'DIFFERS':9} {self.kind}: {self.path}: {self.message}"


def checker_dir(inference_src: str | Path) -> Path:
    """`<inference_src>/tools/submission`, after checking the checker is there."""
    folder = Path(inference_src).expanduser().resolve() / CHECKER_DIR
    if not (folder / "submission_checker" / "main.py").is_file():
        raise OfficialCheckerUnavailable(
            f"no official checker at {folder / 'submission_checker' / 'main.py'}",
            fix="run `podium fetch-inference` (mlcommons/inference at the round's pinned commit) and pass the folder "
                "it prints as --inference-src (or the plan's inference_src)")
    return folder


def argv_for(tree: Path, round: str, csv_path: Path, *, submitter: str | None = None,
             python: str | None = None) -> list[str]:
    argv = [python or sys.executable, "-m", MODULE, "--input", str(Path(tree).resolve()), "--version", round,
            "--csv", str(Path(csv_path).resolve())]
    return argv + (["--submitter", submitter] if submitter else [])


def run_tool(argv: list[str], cwd: Path, timeout_s: float, what: str, hang_fix: str,
             interpreter: str) -> subprocess.CompletedProcess[str]:
    """Run one of the round's tools (the checker, preprocess_submission.py) and return what it did, whatever its exit
    code. OfficialCheckerUnavailable when it runs past `timeout_s` (named `what`, fixed by `hang_fix`) or cannot start
    (`interpreter`: which Python to check)."""
    try:
        return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout_s,  # noqa: S603
                              check=False)
    except subprocess.TimeoutExpired as error:
        raise OfficialCheckerUnavailable(f"{what} ran over {timeout_s:g} s and was stopped", fix=hang_fix) from error
    except OSError as error:
        raise OfficialCheckerUnavailable(f"cannot start {argv[0]}: {error.strerror}",
                                         fix=f"check the Python interpreter used for {interpreter}") from error


def run_official(tree: Path, inference_src: str | Path, round: str, csv_path: Path, *, submitter: str | None = None,
                 python: str | None = None, timeout_s: float = TIMEOUT_S) -> OfficialReport:
    """Run the official checker on `tree`; its CSV goes to `csv_path`. Raises OfficialCheckerUnavailable when it
    cannot run; an exit code of 1 or a crash is a result, not an exception."""
    cwd = checker_dir(inference_src)
    csv_path = Path(csv_path)
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    csv_path.unlink(missing_ok=True)
    argv = argv_for(tree, round, csv_path, submitter=submitter, python=python)
    done = run_tool(argv, cwd, timeout_s, "the official checker",
                    "run it by hand to see where it hangs, or raise the timeout", "the official checker")
    output = f"{done.stdout}\n{done.stderr}"
    lines = output.splitlines()
    return OfficialReport(
        argv=argv, cwd=str(cwd), returncode=done.returncode, rows=read_csv(csv_path),
        errors=[m["text"].strip() for line in lines if (m := _ERROR.match(line.strip()))],
        no_results=[m["path"] for line in lines if (m := _NO_RESULTS.search(line))],
        summary=summary_lines(lines),
        crashed=_TRACEBACK in output, output_tail=output[-TAIL_CHARS:], csv_path=str(csv_path))


def summary_lines(lines: list[str]) -> list[str]:
    """The checker's closing lines (counts of results and systems per division, then `SUMMARY: ...`), unprefixed."""
    return [m["text"].strip() for line in lines if (m := _SUMMARY.match(line.strip()))]


def read_csv(path: Path) -> list[dict[str, str]]:
    if not Path(path).is_file():
        return []
    with Path(path).open(newline="", encoding="utf-8") as stream:
        return [dict(row) for row in csv.DictReader(stream)]


def _key(division: str, submitter: str, system: str, model: str, scenario: str) -> tuple[str, ...]:
    return tuple(v.lower() for v in (division, submitter, system, model, scenario))


def _inside(path: str, folder: str) -> bool:
    return PurePosixPath(path) == PurePosixPath(folder) or PurePosixPath(folder) in PurePosixPath(path).parents


def _about(path: str, result: str) -> bool:
    """Whether a finding at `path` is about the scenario folder `result`: inside it, or on its benchmark folder (the
    scenarios a benchmark lacks: `required-scenarios`, which the official checker reports on each folder there)."""
    return _inside(path, result) or PurePosixPath(path) == PurePosixPath(result).parent


def official_rule(message: str) -> str | None:
    """The Podium rule id that reports what an official ERROR line says, or None for one Podium has no name for."""
    return next((rule for text, rule in OFFICIAL_MESSAGES.items() if text in message), None)


def unexplained(errors: list[str], ours: CheckReport, folder: str | None = None) -> tuple[list[str], set[str]]:
    """The official errors (inside `folder`, when given) that none of Podium's named deviations explains, and the
    deviations that explain the others. A deviation explains an error of its own rule about its own scenario folder."""
    left, named = [], set()
    for error, where in _located(errors):
        if error.startswith(_AGGREGATE) or (folder is not None and folder not in where):
            continue
        rule = official_rule(error)
        match = [f for f in ours.deviations if f.rule == rule and _scenario_of(f.path) in where]
        if match:
            named.add(rule)
        else:
            left.append(error)
    return left, named


def _located(errors: list[str]) -> list[tuple[str, str]]:
    """Each official error with the text that places it: itself when it names a file, else the next "Some ... Checks
    failed for: FILE" line (the checker logs some findings, e.g. the token-latency check, without the file and closes
    each file's checks with that line)."""
    out, closing = [], ""
    for error in reversed(errors):
        if error.startswith("Some ") and " for: " in error:
            closing = error
        out.append((error, error if "/" in error else closing))
    return out[::-1]


def _scenario_of(path: str) -> str:
    """division/org/results/system/benchmark/scenario of a finding's path (the path itself when shorter)."""
    return str(PurePosixPath(*PurePosixPath(path).parts[:6]))


def _rejected(result: ScenarioResult, ours: CheckReport, theirs: OfficialReport) -> Difference:
    left, named = unexplained(theirs.errors, ours, result.path)
    if named and not left:
        return Difference(kind="rejected-by-official", path=result.path, expected=True, message="the official "
                          f"checker rejects it for Podium's named deviation(s) only: {', '.join(sorted(named))}")
    said = left[:3] or [p for p in theirs.no_results if result.path in p]
    why = f" ({'; '.join(said)})" if said else ""
    return Difference(kind="rejected-by-official", path=result.path,
                      message=f"Podium accepts it; the official checker lists no result{why}")


def compare(ours: CheckReport, theirs: OfficialReport) -> list[Difference]:
    """Where the two checkers disagree: the overall verdict, then each scenario folder (accepted by one, rejected
    by the other), rows the official checker lists that Podium does not know, and a crash."""
    diffs: list[Difference] = []
    if theirs.crashed:
        diffs.append(Difference(kind="crash", path=".", message="the official checker crashed (a traceback), so "
                                f"it did not check everything; last output: {theirs.output_tail[-300:].strip()}"))
    if ours.ok != theirs.ok:
        diffs.append(_verdict(ours, theirs))
    rows = {_key(r.get("Division", ""), r.get("Organization", ""), r.get("Platform", ""), r.get("Model", ""),
                 r.get("Scenario", "")): r for r in theirs.rows}
    known = set()
    for result in ours.results:
        key = _key(result.division, result.submitter, result.system, result.benchmark_folder, result.scenario)
        known.add(key)
        errors = sorted({f.rule for f in ours.errors if _about(f.path, result.path)})
        if key in rows and errors:
            diffs.append(Difference(kind="accepted-by-official", path=result.path, message="the official checker "
                                    f"accepts it; Podium finds: {', '.join(errors)}"))
        elif key not in rows and not errors:
            diffs.append(_rejected(result, ours, theirs))
    for key, row in rows.items():
        if key not in known:
            diffs.append(Difference(kind="unknown-row", path=row.get("Location", ""), message="the official checker "
                                    f"lists {'/'.join(key)}, which Podium did not check"))
    return diffs


def _verdict(ours: CheckReport, theirs: OfficialReport) -> Difference:
    """The overall verdicts differ: expected when Podium found no error and every official error is one of its
    named deviations (a smoke tree), a real difference otherwise."""
    ours_text = "no errors" if ours.ok else f"{len(ours.errors)} error(s): {', '.join(sorted(ours.rules('error')))}"
    message = f"official: {theirs.verdict()}; Podium: {ours_text}"
    if ours.ok and not theirs.crashed:
        left, named = unexplained(theirs.errors, ours)
        if named and not left:
            return Difference(kind="verdict", path=".", expected=True, message=f"{message}; the official errors are "
                              f"Podium's named deviation(s) only: {', '.join(sorted(named))}")
    return Difference(kind="verdict", path=".", message=message)


@dataclass
class Checked:
    """Podium's verdict on a tree and, when asked, the official checker's with every place the two differ."""

    report: CheckReport
    official: OfficialReport | None = None
    differences: list[Difference] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.report.ok and (self.official is None or self.official.ok)

    def text(self) -> str:
        lines = [self.report.text().rstrip("\n")]
        if self.official is not None:
            lines.append(f"official checker: {self.official.verdict()}, {len(self.official.rows)} result row(s)")
            lines += [d.line() for d in self.differences]
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict:
        extra = {} if self.official is None else {
            "official": self.official.model_dump(mode="json") | {"ok": self.official.ok},
            "differences": [d.model_dump(mode="json") for d in self.differences]}
        return self.report.to_json() | extra


def check_all(tree: Path, round: str, *, profile: str | None = None, csv_file: Path | None = None,
              inference_src: str | Path | None = None) -> Checked:
    """Podium's checker on `tree` (its CSV to `csv_file` when given) and, with a checkout of mlcommons/inference, the
    official one too (its CSV beside ours, `<csv>.official.csv`): what `podium check` and `podium assemble` print."""
    checked = Checked(check_tree(tree, round, profile=profile))
    if csv_file:
        checked.report.write_csv(csv_file)
    if inference_src:
        with tempfile.TemporaryDirectory(prefix="podium-official-") as scratch:
            out = Path(csv_file).with_suffix(".official.csv") if csv_file else Path(scratch) / "summary.csv"
            checked.official = run_official(tree, inference_src, round, out)
        checked.differences = compare(checked.report, checked.official)
    return checked
