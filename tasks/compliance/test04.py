"""TEST04: the SUT must not cache duplicate samples.

The audit run issues one sample (`performance_issue_same_index = 3`) over and over; a SUT that caches answers
gets much faster. Both runs must be VALID, and the audit's score (Offline samples/s, Server completed samples/s)
must stay under the performance run's times (1 + `max_speedup`) (rules criteria; compliance/TEST04/
verify_performance.py). Leaves `TEST04/verify_performance.txt` ("TEST PASS") and `performance/run_1/`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from submission.errors import PlanError
from submission.logs import load_run
from submission.rules import load_rules
from submission.runs import AuditCheck
from tasks.compliance import AuditJob, Verdict
from tasks.compliance.common import BaseAudit, check_lines, reference_folder, samples_per_second, verdict_line


class Test04(BaseAudit):
    name = "TEST04"
    perf_logs = True
    verify_files = ("verify_performance.txt",)
    needs_performance_run = True

    def verify(self, run_dir: Path, job: AuditJob) -> Verdict:
        if not job.reference_performance:
            raise PlanError(f"{job.label}: TEST04 compares against the scenario's performance run, which is missing",
                            fix="run the scenario's performance run first")
        speedup = float(load_rules(job.spec.round).audit(self.name).criteria["max_speedup"])
        ref, test = load_run(Path(job.reference_performance)), load_run(run_dir)
        ref_score, test_score = samples_per_second(ref), samples_per_second(test)
        ratio = test_score / ref_score if ref_score and test_score is not None else None
        checks = [
            AuditCheck(name="performance run valid", passed=ref.valid, detail=ref.validity or "no result"),
            AuditCheck(name="audit run valid", passed=test.valid,
                       detail="; ".join(test.invalid_reasons) or (test.validity or "no result")),
            AuditCheck(name="audit score / performance score", passed=ratio is not None and ratio < 1 + speedup,
                       measured=None if ratio is None else round(ratio, 4), bound=f"< {1 + speedup:g}",
                       detail=f"{test_score} vs {ref_score} samples/s"),
        ]
        if ref.scenario == "Server":
            same = ref.settings.target_latency_ns == test.settings.target_latency_ns
            checks.append(AuditCheck(name="same Server target latency", passed=same,
                                     detail=f"{test.settings.target_latency_ns} vs {ref.settings.target_latency_ns}"))
        passed = all(c.passed for c in checks)
        text = "\n".join([
            "TEST04: verify performance with a repeated sample (Podium)",
            f"reference score = {ref_score}", f"test score = {test_score}",
            *check_lines(checks), verdict_line(passed), ""])
        return Verdict(self.name, tuple(checks), {"verify_performance.txt": text})

    def official_argv(self, script: Path, run_dir: Path, out_dir: Path, job: AuditJob, work: Path) -> list[str]:
        results = reference_folder(work, job.reference_performance)
        return [sys.executable, str(script), "-r", str(results), "-c", str(run_dir), "-o", str(out_dir)]


AUDIT = Test04()
