"""TEST04: the SUT must not cache duplicate samples.

The audit run issues one sample (`performance_issue_same_index = 3`) over and over; a SUT that caches answers
gets much faster. Both runs must be VALID, and the audit's score (Offline samples/s, Server completed samples/s)
must stay under the performance run's times (1 + `max_speedup`) (rules criteria; compliance/TEST04/
verify_performance.py). Leaves `TEST04/verify_performance.txt` ("TEST PASS") and `performance/run_1/`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from submission.base.errors import PlanError
from submission.rules import load_rules
from tasks.compliance import AuditJob, Verdict
from tasks.compliance.common import BaseAudit, check_lines, performance_checks, reference_folder, verdict_line


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
        checks, ref_score, test_score = performance_checks(Path(job.reference_performance), run_dir,
                                                           lambda ratio: ratio < 1 + speedup, f"< {1 + speedup:g}")
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
