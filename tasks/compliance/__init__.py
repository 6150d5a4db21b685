"""Compliance audits: one module per test (TEST01, TEST04, TEST06, TEST07, TEST09), looked up by name.

Each audit knows its `audit.config` (read from the round's rules, never from model names), the run settings it
needs on top of the scenario's user.conf, how to verify its run against the reference pass criteria
(mlcommons/inference `compliance/TESTxx/run_verification.py` at the round's `inference_sources` commit) and which
files it leaves in `TESTxx/` (the checker's `checks/compliance_check.py` there). Which tests run comes
from the rules: `required_tests(rules, benchmark)`.

    audit("TEST09").verify(run_dir, job) -> Verdict   # plain functions; tasks/compliance/step.py is the task
"""

from __future__ import annotations

import hashlib
import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from submission.base.errors import PlanError, did_you_mean
from submission.base.schema import Strict
from submission.results.runs import AuditCheck, RunSpec
from submission.rules import AuditValue, Rules

AUDITS = {
    "TEST01": "tasks.compliance.test01",
    "TEST04": "tasks.compliance.test04",
    "TEST06": "tasks.compliance.test06",
    "TEST07": "tasks.compliance.test07",
    "TEST09": "tasks.compliance.test09",
}


class AuditJob(Strict):
    """Everything one audit needs: its loadgen run (a RunSpec with the audit and its audit.config lines) and
    what its verification reads. Serialisable, so a Prefect task can take it and cache on `key()`."""

    spec: RunSpec
    evaluator: str | None = None              # TEST07, and TEST01 when outputs differ: tasks.accuracy.evaluator
    metric: str | None = None                 # the evaluator metric the TEST07 threshold applies to
    tokenizer: str | None = None
    eos_token_ids: tuple[int, ...] = ()       # TEST06
    reference_performance: str | None = None  # TEST01, TEST04: the scenario's performance run folder
    reference_accuracy: str | None = None     # TEST01: the scenario's accuracy run folder
    target_qps: float | None = None           # the derated rate of a Server/Interactive audit
    inference_src: str | None = None          # a checkout of mlcommons/inference: run its verification too

    @property
    def test(self) -> str:
        assert self.spec.audit is not None
        return self.spec.audit

    @property
    def label(self) -> str:
        return self.spec.label

    def key(self) -> str:
        data = self.model_dump(mode="json", exclude={"spec"}) | {"spec": self.spec.key()}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:20]

    def values(self) -> dict[str, float]:
        """The numeric values of the audit.config this run used (the last key segment, as the scripts read them)."""
        return audit_values(self.spec.audit_config)


@dataclass(frozen=True)
class Verdict:
    """What a verification found: its checks, and the verify_*.txt files (and any extra files) it writes,
    keyed by their path inside `TESTxx/`."""

    test: str
    checks: tuple[AuditCheck, ...]
    files: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return any(c.passed for c in self.checks) and not any(c.passed is False for c in self.checks)


class Audit(Protocol):
    name: str
    verify_files: tuple[str, ...]
    needs_performance_run: bool
    needs_accuracy_run: bool
    needs_eos: bool

    def config_lines(self, rules: Rules, benchmark: str, overrides: dict[str, AuditValue] | None = None,
                     ) -> tuple[str, ...]: ...

    def run_settings(self, user_conf: tuple[tuple[str, str], ...], loadgen_model: str,
                     set_size: int | None) -> tuple[tuple[str, str], ...]: ...

    def verify(self, run_dir: Path, job: AuditJob) -> Verdict: ...

    def lay_out(self, run_dir: Path, verdict: Verdict, dest: Path) -> Path: ...

    def official_argv(self, script: Path, run_dir: Path, out_dir: Path, job: AuditJob,
                      work: Path) -> list[str]: ...

    def official_verdict(self, folder: Path) -> bool | None: ...


def audit(name: str) -> Audit:
    """The audit registered under `name` (TEST01, TEST04, TEST06, TEST07, TEST09)."""
    if name not in AUDITS:
        raise PlanError(f"unknown compliance test {name!r}", fix=did_you_mean(name, AUDITS))
    return importlib.import_module(AUDITS[name]).AUDIT


def required_tests(rules: Rules, benchmark: str) -> tuple[str, ...]:
    """The compliance tests the round's rules require for `benchmark` (each scenario folder runs all of them)."""
    return rules.benchmark(benchmark).compliance_tests


def audit_values(lines: tuple[str, ...] | list[str]) -> dict[str, float]:
    """`*.<scenario>.key = number` lines of an audit.config, keyed by the setting name (`*.*.min_query_count` ->
    min_query_count), as the verification scripts read them. Lines for a named model (TEST04's SDXL line) are left
    out."""
    values: dict[str, float] = {}
    for line in lines:
        text = line.split("#", 1)[0].strip()
        if "=" not in text:
            continue
        key, value = (part.strip() for part in text.split("=", 1))
        parts = key.split(".")
        if len(parts) != 3 or parts[0] != "*":
            continue
        try:
            values[parts[2]] = float(value)
        except ValueError:
            continue
    return values
