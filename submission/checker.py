"""Podium's submission checker: the official checker's checks, and the gaps it leaves, as findings.

Each finding carries a rule id, a severity, the path and the fix. Stricter than the official checker: an INVALID
run, loadgen errors, an Interactive run configured with Server limits, seeds of another round and an empty tree
are errors here. Under the `smoke` profile the rules in `SMOKE_DEVIATIONS` are reported as named deviations,
never passed in silence, and nothing calls the tree a valid submission.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from submission.errors import RunFailed
from submission.logs import load_run
from submission.rules import BenchmarkRules, Rules, ScenarioRules, load_rules
from submission.systems import validate as validate_system
from submission.tree import DIVISIONS, SCENARIO_FOLDERS, SMOKE_MARKER

Severity = Literal["error", "warning", "deviation"]
SMOKE_DEVIATIONS = frozenset({
    "min-duration", "performance-sample-count", "offline-samples-per-query", "accuracy-coverage",
    "required-scenarios", "compliance-missing",
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


class CheckReport(BaseModel):
    round: str
    profile: str
    scenarios_checked: int
    findings: list[Finding]

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def deviations(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "deviation"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def summary(self) -> str:
        verdict = "no errors" if self.ok else f"{len(self.errors)} error(s)"
        text = (f"{self.scenarios_checked} scenario folder(s) checked against {self.round}: {verdict}, "
                f"{len(self.deviations)} deviation(s), "
                f"{sum(f.severity == 'warning' for f in self.findings)} warning(s)")
        if self.profile == "smoke":
            text += "; SMOKE tree: not a valid MLPerf submission"
        return text


class _Checker:
    def __init__(self, root: Path, rules: Rules, profile: str) -> None:
        self.root, self.rules, self.profile = root, rules, profile
        self.findings: list[Finding] = []
        self.scenarios = 0

    def add(self, rule: str, path: Path, message: str, fix: str = "", severity: Severity = "error") -> None:
        if severity == "error" and self.profile == "smoke" and rule in SMOKE_DEVIATIONS:
            severity, message = "deviation", f"{message} (smoke profile)"
        rel = str(path.relative_to(self.root)) if path.is_relative_to(self.root) else str(path)
        self.findings.append(Finding(rule=rule, severity=severity, path=rel, message=message, fix=fix))

    def need_files(self, rule: str, folder: Path, names: tuple[str, ...], non_empty: bool = False) -> bool:
        missing = [n for n in names if not (folder / n).is_file() or (non_empty and not (folder / n).stat().st_size)]
        if missing:
            self.add(rule, folder, f"missing or empty: {', '.join(missing)}", "re-run the step that writes them")
        return not missing

    # -- tree -------------------------------------------------------------------------------------------------
    def tree(self) -> None:
        divisions = [d for d in sorted(self.root.iterdir()) if d.is_dir() and d.name in DIVISIONS] \
            if self.root.is_dir() else []
        for division in divisions:
            for org in sorted(p for p in division.iterdir() if p.is_dir()):
                self.organisation(division.name, org)
        if not self.scenarios:
            self.add("empty-tree", self.root, "no results/<system>/<benchmark>/<scenario> folders found",
                     "point at the folder that holds closed/, open/ or network/")

    def organisation(self, division: str, org: Path) -> None:
        if not (org / "src").is_dir():
            self.add("src-dir", org / "src", "the src directory does not exist", "add the code used (Podium writes it)")
        if division == "closed" and not any((org / p).is_file() for p in
                                            ("calibration.md", "documentation/calibration.md")):
            self.add("calibration", org, "no calibration.md or documentation/calibration.md")
        mapping = {}
        if (org / "model_mapping.json").is_file():
            mapping = json.loads((org / "model_mapping.json").read_text())
        for system in sorted(p for p in (org / "results").glob("*") if p.is_dir()):
            self.system(division, org, system)
            for bench in sorted(p for p in system.iterdir() if p.is_dir()):
                name = bench.name if bench.name in self.rules.benchmarks else mapping.get(bench.name)
                if name not in self.rules.benchmarks:
                    self.add("unknown-benchmark", bench, f"{bench.name!r} is not a {self.rules.round} benchmark",
                             "use the checker's benchmark name, or map it in model_mapping.json (open division)")
                    continue
                self.benchmark(division, bench, self.rules.benchmark(name))

    def system(self, division: str, org: Path, system: Path) -> None:
        path = org / "systems" / f"{system.name}.json"
        if not path.is_file():
            self.add("system-description", path, "missing", "write the system description (podium does)")
            return
        desc = json.loads(path.read_text())
        for problem in validate_system(desc, division=division, submitter=org.name, round=self.rules.round):
            self.add("system-description", path, problem)

    def benchmark(self, division: str, bench: Path, b: BenchmarkRules) -> None:
        present = {p.name for p in bench.iterdir() if p.is_dir()}
        if division != "open":
            missing = [s for s in b.required_scenarios if s not in present]
            if missing or (b.one_of_scenarios and not present & set(b.one_of_scenarios)):
                need = missing + ([f"one of {'/'.join(b.one_of_scenarios)}"] if not present & set(b.one_of_scenarios)
                                  else [])
                self.add("required-scenarios", bench, f"missing scenarios: {', '.join(need)}")
        for scenario in sorted(present):
            if scenario not in SCENARIO_FOLDERS or scenario not in b.allowed_scenarios:
                self.add("unknown-scenario", bench / scenario, f"{scenario!r} is not a {b.name} scenario",
                         f"use one of {', '.join(b.allowed_scenarios)}")
                continue
            self.scenarios += 1
            self.scenario(division, bench / scenario, b, b.scenario(scenario))

    # -- scenario ---------------------------------------------------------------------------------------------
    def scenario(self, division: str, folder: Path, b: BenchmarkRules, sc: ScenarioRules) -> None:
        self.need_files("scenario-files", folder, ("user.conf", "README.md"), non_empty=True)
        self.measurements(folder / "measurements.json")
        self.performance(folder / "performance" / "run_1", b, sc)
        self.accuracy(division, folder / "accuracy", b, sc)
        if division != "open":
            for test in b.compliance_tests:
                if not (folder / test).is_dir():
                    self.add("compliance-missing", folder / test, f"{test} is required for {b.name}",
                             f"run the {test} audit for this scenario")

    def measurements(self, path: Path) -> None:
        if not path.is_file():
            self.add("measurements", path, "missing")
            return
        data = json.loads(path.read_text())
        empty = [k for k in self.rules.measurement_fields if not data.get(k)]
        if empty:
            self.add("measurements", path, f"missing or empty keys: {', '.join(empty)}")

    def performance(self, folder: Path, b: BenchmarkRules, sc: ScenarioRules) -> None:
        if not self.need_files("performance-files", folder, self.rules.required_files.performance):
            return
        try:
            run = load_run(folder)
        except RunFailed as e:
            self.add("performance-files", folder, e.message)
            return
        s = run.settings
        if run.validity != "VALID":
            self.add("result-valid", folder, f"Result is {run.validity}: {'; '.join(run.invalid_reasons) or '?'}",
                     "lower target_qps (Server) or raise it (Offline), then re-run")
        if run.num_errors:
            self.add("loadgen-errors", folder, f"{run.num_errors} loadgen error(s): {'; '.join(run.errors[:3])}")
        expected_seeds = self.rules.seeds.model_dump()
        wrong = {k: v for k, v in run.seeds.items() if expected_seeds.get(k) != v}
        if wrong:
            self.add("seeds", folder, f"seeds are not the {self.rules.round} seeds: {wrong}",
                     "use the loadgen release of the round; never set seeds in user.conf")
        if (run.scenario == "Offline") != (sc.loadgen_scenario == "Offline"):
            self.add("scenario-mismatch", folder, f"log scenario {run.scenario} in a {sc.name} folder")
        if s.min_duration_ms is not None and s.min_duration_ms < self.rules.min_duration_ms:
            self.add("min-duration", folder, f"min_duration {s.min_duration_ms} ms < {self.rules.min_duration_ms} ms",
                     "remove min_duration from user.conf")
        if s.performance_sample_count is not None and s.performance_sample_count < b.performance_sample_count:
            self.add("performance-sample-count", folder,
                     f"performance_sample_count {s.performance_sample_count} < {b.performance_sample_count}")
        if sc.name == "Offline" and (s.samples_per_query or 0) < b.offline_min_samples_per_query:
            self.add("offline-samples-per-query", folder,
                     f"samples per query {s.samples_per_query} < {b.offline_min_samples_per_query}",
                     f"set {b.loadgen_model}.Offline.min_query_count = {b.offline_min_samples_per_query}")
        if b.use_token_latencies and not s.use_token_latencies:
            self.add("token-latencies", folder, "use_token_latencies is off for an LLM benchmark")
        self.latency(folder, run, sc)

    def latency(self, folder: Path, run, sc: ScenarioRules) -> None:
        if sc.loadgen_scenario == "Server":
            if run.early_stopping_met is False:
                self.add("early-stopping", folder, "early stopping not met", "run more queries (min_query_count)")
            for what, limit, measured, requested in (
                    ("ttft", sc.ttft_ns, run.ttft_p99_ns, run.settings.ttft_latency_ns),
                    ("tpot", sc.tpot_ns, run.tpot_p99_ns, run.settings.tpot_latency_ns)):
                if limit is None:
                    continue
                if requested != limit:
                    self.add("latency-config", folder, f"loadgen ran with {what} limit {requested} ns, but "
                             f"{sc.name} requires {limit} ns", f"run {sc.name} with the right loadgen model name")
                if measured is None or measured >= limit:
                    self.add(f"{what}-limit", folder, f"{what.upper()} p99 {measured} ns is not under {limit} ns",
                             "lower target_qps")
        if sc.latency_ns is not None:
            p99 = run.latency_ns.get("99.00")
            if p99 is None or p99 > sc.latency_ns:
                self.add("latency-limit", folder, f"p99 latency {p99} ns exceeds {sc.latency_ns} ns",
                         "lower target_qps")

    def accuracy(self, division: str, folder: Path, b: BenchmarkRules, sc: ScenarioRules) -> None:
        if not self.need_files("accuracy-files", folder, self.rules.required_files.accuracy):
            return
        text = (folder / "accuracy.txt").read_text()
        if not any(line.startswith("hash=") for line in text.splitlines()):
            self.add("accuracy-hash", folder / "accuracy.txt", "no hash= line", "truncate the accuracy log")
        if (folder / "mlperf_log_accuracy.json").stat().st_size > self.rules.max_accuracy_log_bytes:
            self.add("accuracy-truncated", folder / "mlperf_log_accuracy.json",
                     f"larger than {self.rules.max_accuracy_log_bytes} bytes", "truncate the accuracy log")
        for target in sc.accuracy:
            value = target.read(text)
            if value is None:
                if target.required:
                    self.add("accuracy-metric", folder / "accuracy.txt", f"no {target.metric} value found")
            elif not target.passes(value):
                bound = f">= {target.target}" if target.target is not None else ""
                bound += f" <= {target.upper_limit}" if target.upper_limit is not None else ""
                self.add("accuracy-target", folder / "accuracy.txt", f"{target.metric} {value} is not {bound.strip()}",
                         severity="warning" if division == "open" else "error")
        try:
            run = load_run(folder)
        except RunFailed as e:
            self.add("accuracy-files", folder, e.message)
            return
        if run.num_errors:
            self.add("accuracy-loadgen-errors", folder, f"{run.num_errors} loadgen error(s) in the accuracy run")
        count = run.settings.accuracy_sample_count or run.qsl_total_count
        if count != sc.accuracy_sample_count:
            self.add("accuracy-coverage", folder,
                     f"accuracy run covered {count} samples, not {sc.accuracy_sample_count}")


def check_tree(root: Path, round: str, *, profile: str | None = None) -> CheckReport:
    """Check a tree. With no profile given, a tree carrying the smoke marker is checked as a smoke tree."""
    rules = load_rules(round)
    if profile is None:
        profile = "smoke" if (root / SMOKE_MARKER).is_file() else "submission"
    checker = _Checker(root, rules, profile)
    checker.tree()
    return CheckReport(round=round, profile=profile, scenarios_checked=checker.scenarios, findings=checker.findings)
