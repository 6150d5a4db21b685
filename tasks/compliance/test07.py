"""TEST07: accuracy in performance mode on a whole compliance set (gpt-oss-120b: the 990 GPQA prompts).

Every sample of the set is issued once and logged; the benchmark's evaluator scores the log against the set, and
the score must reach `test07_accuracy_threshold` of the audit.config (gpt-oss-120b: 60.698 exact_match). Loadgen
6.0.17 segfaults on such a run unless the user.conf also sets `performance_sample_count_override` to the set size
(reference §4, verified), so the run settings add it. Leaves `TEST07/verify_accuracy.txt` ("TEST PASS"),
`accuracy/mlperf_log_accuracy.json` and `performance/run_1/` (compliance/TEST07/run_verification.py).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from submission.base.errors import PlanError
from submission.results.logs import parse_accuracy_log
from submission.results.runs import AuditCheck
from tasks.accuracy import evaluator
from tasks.compliance import AuditJob, Verdict
from tasks.compliance.common import ACCURACY_LOG, AUDIT_CONFIG, BaseAudit, check_lines, verdict_line

THRESHOLD_KEY = "test07_accuracy_threshold"
PSC_KEY = "performance_sample_count_override"


def compliance_set_size(job: AuditJob) -> int | None:
    """The compliance set's size, as the run settings put it into the run's user.conf."""
    sizes = [int(v) for k, v in job.spec.user_conf if k.endswith(f".{PSC_KEY}")]
    return sizes[-1] if sizes else None


class Test07(BaseAudit):
    name = "TEST07"
    perf_logs = True
    accuracy_log = True
    verify_files = ("verify_accuracy.txt",)

    def run_settings(self, user_conf: tuple[tuple[str, str], ...], loadgen_model: str,
                     set_size: int | None) -> tuple[tuple[str, str], ...]:
        if set_size is None:
            raise PlanError("TEST07 runs on its compliance set, whose size sets performance_sample_count_override",
                            fix="name the set in the plan: dataset.compliance.TEST07")
        kept = tuple((k, v) for k, v in user_conf if not k.endswith(f".{PSC_KEY}"))
        return (*kept, (f"{loadgen_model}.*.{PSC_KEY}", str(set_size)))

    def verify(self, run_dir: Path, job: AuditJob) -> Verdict:
        if not job.evaluator or not job.metric:
            raise PlanError(f"{job.label}: TEST07 needs the benchmark's accuracy evaluator and metric",
                            fix="set the benchmark's evaluator in the plan (or use its reference evaluator)")
        threshold = job.values()[THRESHOLD_KEY]
        ev = evaluator(job.evaluator)
        result = ev.evaluate(run_dir / ACCURACY_LOG, Path(job.spec.dataset), job.tokenizer and Path(job.tokenizer))
        score = result.metrics.get(job.metric)
        logged = {entry.qsl_idx for entry in parse_accuracy_log(run_dir / ACCURACY_LOG)}
        expected = compliance_set_size(job)
        checks = (
            AuditCheck(name="compliance samples logged", passed=expected is not None and len(logged) == expected,
                       measured=len(logged), bound=f"== {expected}"),
            AuditCheck(name=job.metric, passed=score is not None and score >= threshold, measured=score,
                       bound=f">= {threshold:g}", detail=f"{job.evaluator} on {Path(job.spec.dataset).name}"),
        )
        passed = all(c.passed for c in checks)
        text = "\n".join([
            ev.accuracy_txt(result).rstrip("\n"), "",
            "TEST07 verification summary (Podium)",
            f"Accuracy score: {score}",
            f"Accuracy threshold: {threshold:g}",
            f"Accuracy check pass: {passed}",
            *check_lines(checks),
            verdict_line(passed), ""])
        return Verdict(self.name, checks, {"verify_accuracy.txt": text})

    def official_argv(self, script: Path, run_dir: Path, out_dir: Path, job: AuditJob, work: Path) -> list[str]:
        """The official script runs `--accuracy-script` through a shell with the log path filled in; Podium's own
        evaluator stands in for the benchmark's reference script (it prints the metric the same way)."""
        scorer = [sys.executable, "-m", "tasks.compliance.score", "--evaluator", str(job.evaluator),
                  "--dataset", job.spec.dataset, "--log", "{accuracy_log}"]
        if job.tokenizer:
            scorer += ["--tokenizer", job.tokenizer]
        return [sys.executable, str(script), "-c", str(run_dir), "-o", str(out_dir),
                "--audit-config", str(work / AUDIT_CONFIG), "--accuracy-script", shlex.join(scorer),
                "--score-pattern", rf"'{job.metric}':\s*([\d.]+)"]


AUDIT = Test07()
