"""Podium's submission checker: every check of the official MLCommons checker, and the gaps it leaves, as findings.

Each finding carries a rule id, a severity, the path, a message and the fix. Stricter than the official checker: an
INVALID run, loadgen errors, an Interactive run configured with Server limits, seeds of another round, an empty
tree, unexpected files anywhere, unsafe names and symlinks are errors here. Under the `smoke` profile the rules in
`SMOKE_DEVIATIONS` are reported as named deviations, never passed in silence, and nothing calls the tree a valid
submission. The checks live in `submission.checks`; docs/checker.md maps each official check to its rule id.

    report = check_tree(Path("tree"), "v6.1")
    report.ok, report.errors, report.deviations, report.summary(), report.write_csv("summary.csv")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from submission.base.errors import PlanError, did_you_mean
from submission.checks import structure, summary
from submission.checks.findings import SMOKE_DEVIATIONS, Context, Finding, ScenarioResult, Severity
from submission.rules import load_rules
from submission.tree.paths import SMOKE_MARKER

PROFILES = ("submission", "smoke")
__all__ = ["PROFILES", "SMOKE_DEVIATIONS", "CheckReport", "Finding", "ScenarioResult", "Severity", "check_tree"]


class CheckReport(BaseModel):
    round: str
    profile: str
    scenarios_checked: int
    findings: list[Finding]
    results: list[ScenarioResult] = Field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def deviations(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "deviation"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def rules(self, severity: Severity | None = None) -> set[str]:
        """The rule ids found, optionally of one severity."""
        return {f.rule for f in self.findings if severity is None or f.severity == severity}

    def summary(self) -> str:
        verdict = "no errors" if self.ok else f"{len(self.errors)} error(s)"
        text = (f"{self.scenarios_checked} scenario folder(s) checked against {self.round}: {verdict}, "
                f"{len(self.deviations)} deviation(s), {len(self.warnings)} warning(s)")
        if self.profile == "smoke":
            text += "; SMOKE tree: not a valid MLPerf submission"
        return text

    def text(self) -> str:
        """The human report: one line per finding, then the summary."""
        return "\n".join([*(f.line() for f in self.findings), self.summary()]) + "\n"

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json") | {
            "ok": self.ok, "counts": {s: sum(f.severity == s for f in self.findings)
                                      for s in ("error", "warning", "deviation")}}

    def csv_rows(self) -> list[dict[str, str]]:
        """One row per scenario folder, in the official checker's CSV columns."""
        return summary.rows(self.round, self.results, self.findings)

    def write_csv(self, path: str | Path) -> Path:
        return summary.write_csv(self.csv_rows(), Path(path))


def check_tree(root: Path, round: str, *, profile: str | None = None) -> CheckReport:
    """Check a tree. With no profile given, a tree carrying the smoke marker is checked as a smoke tree.

    Raises PlanError (the CLI's exit code 2, "could not run") when the folder does not exist or the round or the
    profile is unknown; everything found in the tree is a finding.
    """
    root = Path(root)
    rules = load_rules(round)
    if not root.is_dir():
        raise PlanError(f"{root} is not a folder", fix="pass the folder that holds closed/, open/ or network/")
    if profile is None:
        profile = "smoke" if (root / SMOKE_MARKER).is_file() else "submission"
    if profile not in PROFILES:
        raise PlanError(f"unknown profile {profile!r}", fix=did_you_mean(profile, PROFILES))
    ctx = Context(root, rules, profile)
    structure.walk(ctx)
    return CheckReport(round=round, profile=profile, scenarios_checked=len(ctx.results), findings=ctx.findings,
                       results=ctx.results)
