"""Findings and the context every check writes into: the rules of the round, the profile, the findings so far, and
the results the CSV summary lists.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from submission.rules import Rules
from submission.tree.paths import TOLERATED_EXTRAS

Severity = Literal["error", "warning", "deviation"]
SMOKE_DEVIATIONS = frozenset({
    "min-duration", "performance-sample-count", "offline-samples-per-query", "accuracy-coverage",
    "required-scenarios", "compliance-missing",
    "latency-limit",   # a stand-in model on a shared CPU, judged by the plan's `latency_ms` (docs/benchmarks.md)
})


class Finding(BaseModel):
    model_config = ConfigDict(frozen=True)

    rule: str
    severity: Severity
    path: str
    message: str
    fix: str = ""

    def line(self) -> str:
        fix = f" (fix: {self.fix})" if self.fix else ""
        return f"{self.severity.upper():9} {self.rule}: {self.path}: {self.message}{fix}"


class ScenarioResult(BaseModel):
    """One scenario folder's result: what a row of the official CSV summary holds."""

    division: str
    submitter: str
    system: str  # the results/<system> folder
    benchmark_folder: str  # the results/<system>/<benchmark> folder (a custom model name in the open division)
    benchmark: str  # the MLPerf benchmark it maps to
    scenario: str  # the folder: Offline, Server, Interactive
    layout: Literal["loadgen", "endpoints"]
    path: str  # the scenario folder, relative to the tree root
    log_scenario: str | None = None  # what the run's log calls its scenario (effective_scenario, endpoints type)
    result: float | None = None
    unit: str = ""
    accuracy: dict[str, str] = Field(default_factory=dict)
    system_desc: dict[str, Any] = Field(default_factory=dict)
    weight_data_types: str = ""
    compliance_tests: tuple[str, ...] = ()


class Context:
    """What the checks share: the tree root, the rules, the profile; they append findings and results."""

    def __init__(self, root: Path, rules: Rules, profile: str) -> None:
        self.root, self.rules, self.profile = root, rules, profile
        self.findings: list[Finding] = []
        self.results: list[ScenarioResult] = []

    def rel(self, path: Path) -> str:
        return str(path.relative_to(self.root)) if path.is_relative_to(self.root) else str(path)

    def add(self, rule: str, path: Path, message: str, fix: str = "", severity: Severity = "error") -> None:
        if severity == "error" and self.profile == "smoke" and rule in SMOKE_DEVIATIONS:
            severity, message = "deviation", f"{message} (smoke profile)"
        self.findings.append(Finding(rule=rule, severity=severity, path=self.rel(path), message=message, fix=fix))

    def missing(self, rule: str, folder: Path, names: tuple[str, ...], *, non_empty: bool = False,
                fix: str = "re-run the step that writes them") -> list[str]:
        """Report the files of `names` (relative to `folder`) that are absent, or empty when `non_empty`."""
        gone = [n for n in names if not (folder / n).is_file() or (non_empty and not (folder / n).stat().st_size)]
        if gone:
            what = "missing or empty" if non_empty else "missing"
            self.add(rule, folder, f"{what}: {', '.join(gone)}", fix)
        return gone

    def unexpected(self, folder: Path, files: tuple[str, ...] | set[str], dirs: tuple[str, ...] | set[str] = (),
                   *, why: str = "") -> None:
        """Report every entry of `folder` that is neither an allowed file nor an allowed folder (the checker
        compares file lists exactly; loadgen's trace and .gitkeep are tolerated)."""
        if not folder.is_dir():
            return
        for entry in sorted(folder.iterdir()):
            allowed = dirs if entry.is_dir() and not entry.is_symlink() else files
            if entry.name in allowed or (entry.is_file() and entry.name in TOLERATED_EXTRAS):
                continue
            kind = "folder" if entry.is_dir() else "file"
            self.add("unexpected-file", entry, f"unexpected {kind} {entry.name!r}{why}",
                     "remove it: the checker compares each folder's file list exactly")

    def read_json(self, rule: str, path: Path) -> Any:
        """The JSON content of `path`, or None after a finding saying why it cannot be read."""
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            self.add(rule, path, "missing", "write it (Podium's assemble step does)")
        except (OSError, UnicodeDecodeError, ValueError) as error:
            self.add(rule, path, f"not valid JSON: {error}", "rewrite the file as a JSON object")
        return None

    def read_json_object(self, rule: str, path: Path, holding: str = "") -> dict[str, Any] | None:
        """The JSON object in `path`, or None after a finding saying why there is none (`holding` says what the
        object should hold, for the message)."""
        data = self.read_json(rule, path)
        if isinstance(data, dict):
            return data
        if data is not None:
            self.add(rule, path, f"not a JSON object{holding}")
        return None
