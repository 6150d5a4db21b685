"""TEST09: the output length is neither truncated nor padded in performance mode.

Every performance sample is issued once and logged (`performance_issue_unique`, `accuracy_log_sampling_target`
above the set size); the mean output length in int32 tokens must lie within `[test09_min_output_tokens,
test09_max_output_tokens]` of the audit.config (gpt-oss-120b: 1278.20 +- 10 %). Leaves `TEST09/verify_output_len.txt`
("TEST PASS"), `accuracy/mlperf_log_accuracy.json` and `performance/run_1/` (compliance/TEST09/run_verification.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from submission.results.logs import parse_accuracy_log
from submission.results.runs import AuditCheck
from tasks.compliance import AuditJob, Verdict
from tasks.compliance.common import ACCURACY_LOG, AUDIT_CONFIG, BaseAudit, check_lines, verdict_line

MIN_KEY, MAX_KEY = "test09_min_output_tokens", "test09_max_output_tokens"


class Test09(BaseAudit):
    name = "TEST09"
    perf_logs = True
    accuracy_log = True
    verify_files = ("verify_output_len.txt",)

    def verify(self, run_dir: Path, job: AuditJob) -> Verdict:
        values = job.values()
        low, high = values[MIN_KEY], values[MAX_KEY]
        lengths = [len(entry.tokens()) for entry in parse_accuracy_log(run_dir / ACCURACY_LOG)]
        mean = sum(lengths) / len(lengths) if lengths else 0.0
        checks = (
            AuditCheck(name="samples logged", passed=bool(lengths), measured=len(lengths), bound="> 0"),
            AuditCheck(name="mean output tokens", passed=bool(lengths) and low <= mean <= high,
                       measured=round(mean, 2), bound=f"in [{low:g}, {high:g}]",
                       detail=f"min {min(lengths, default=0)}, max {max(lengths, default=0)}"),
        )
        passed = all(c.passed for c in checks)
        text = "\n".join([
            "TEST09: verify output token length in performance mode (Podium)",
            f"Total samples: {len(lengths)}",
            f"Mean output tokens: {mean:.2f}",
            f"Min output tokens: {min(lengths, default=0)}",
            f"Max output tokens: {max(lengths, default=0)}",
            f"Min threshold: {low:g}",
            f"Max threshold: {high:g}",
            f"Min check pass: {mean >= low}",
            f"Max check pass: {mean <= high}",
            *check_lines(checks),
            "", verdict_line(passed), ""])
        return Verdict(self.name, checks, {"verify_output_len.txt": text})

    def official_argv(self, script: Path, run_dir: Path, out_dir: Path, job: AuditJob, work: Path) -> list[str]:
        return [sys.executable, str(script), "-c", str(run_dir), "-o", str(out_dir),
                "--audit-config", str(work / AUDIT_CONFIG)]


AUDIT = Test09()
