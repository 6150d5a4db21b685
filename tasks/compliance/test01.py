"""TEST01: accuracy in performance mode. A random subset of the performance run's outputs is logged; each must
equal the accuracy run's output for the same sample, and the audit's score must be within +-`performance_tolerance`
of the performance run (rules criteria; compliance/TEST01/verify_accuracy.py, verify_performance.py).

When outputs differ (allowed non-determinism), the benchmark's evaluator scores the accuracy run's outputs for the
logged samples (`baseline_accuracy.txt`) and the audit's (`compliance_accuracy.txt`); the test then passes if the
score moved by at most `accuracy_delta_pct_<class>` percent: 1 % for a 99 % benchmark, 0.1 % for a 99.9 % one
(compliance/TEST01/README.md Part III; the checker's get_delta_perc).
Leaves `TEST01/verify_accuracy.txt`, `verify_performance.txt`, `accuracy/` and `performance/run_1/`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from submission.base.errors import PlanError
from submission.results.logs import AccuracyEntry, parse_accuracy_log
from submission.results.runs import AuditCheck
from submission.rules import load_rules
from tasks.accuracy import evaluator
from tasks.compliance import AuditJob, Verdict
from tasks.compliance.common import (
    ACCURACY_LOG,
    FAIL,
    BaseAudit,
    check_lines,
    performance_checks,
    reference_folder,
    verdict_line,
)


def _write_log(path: Path, entries: list[AccuracyEntry]) -> Path:
    path.write_text(json.dumps([e.model_dump(exclude_none=True) for e in entries]))
    return path


class Test01(BaseAudit):
    name = "TEST01"
    perf_logs = True
    accuracy_log = True
    verify_files = ("verify_accuracy.txt", "verify_performance.txt")
    needs_performance_run = True
    needs_accuracy_run = True

    def verify(self, run_dir: Path, job: AuditJob) -> Verdict:
        if not (job.reference_performance and job.reference_accuracy):
            raise PlanError(f"{job.label}: TEST01 compares against the scenario's performance and accuracy runs",
                            fix="run both first (the plan needs accuracy: true)")
        rules = load_rules(job.spec.round)
        criteria = rules.audit(self.name).criteria
        accuracy_class = rules.benchmark(job.spec.benchmark).accuracy_class
        accuracy, files = self._accuracy(run_dir, job, float(criteria[f"accuracy_delta_pct_{accuracy_class}"]))
        performance, perf_text = self._performance(run_dir, job, float(criteria["performance_tolerance"]))
        files |= {"verify_performance.txt": perf_text}
        return Verdict(self.name, (*accuracy, *performance), files)

    def _accuracy(self, run_dir: Path, job: AuditJob, delta_pct: float) -> tuple[list[AuditCheck], dict[str, str]]:
        logged = parse_accuracy_log(run_dir / ACCURACY_LOG)
        reference = {e.qsl_idx: e for e in parse_accuracy_log(Path(job.reference_accuracy or "") / ACCURACY_LOG)}
        matched = [e for e in logged if e.qsl_idx in reference]
        differing = [e for e in matched if e.tokens() != reference[e.qsl_idx].tokens()]
        identical = AuditCheck(name="logged outputs differing from the accuracy run", passed=bool(matched) and
                               not differing, measured=len(differing), bound=f"== 0 of {len(matched)} logged",
                               detail=f"{len(logged) - len(matched)} logged sample(s) not in the accuracy run")
        lines = [f"num_perf_log_entries = {len(logged)}", f"num_perf_log_qsl_idx_match = {len(matched)}",
                 f"num_perf_log_data_mismatch = {len(differing)}"]
        files: dict[str, str] = {}
        checks = [identical]
        if identical.passed or not matched or not (job.evaluator and job.metric):
            files["verify_accuracy.txt"] = "\n".join([*lines, *check_lines(checks),
                                                      verdict_line(bool(identical.passed)), ""])
            return checks, files
        # outputs differ: compare the scores of the same samples (README Part III)
        ev = evaluator(job.evaluator)
        tok = job.tokenizer and Path(job.tokenizer)
        baseline_log = _write_log(run_dir / "test01_baseline_log.json", [reference[e.qsl_idx] for e in matched])
        baseline = ev.evaluate(baseline_log, Path(job.spec.dataset), tok)
        compliance = ev.evaluate(run_dir / ACCURACY_LOG, Path(job.spec.dataset), tok)
        base, comp = baseline.metrics.get(job.metric), compliance.metrics.get(job.metric)
        # as the checker computes it (compliance_check.py accuracy_check): relative to the audit's score
        delta = abs(1 - base / comp) * 100 if base and comp else None
        checks = [identical.model_copy(update={"passed": None, "detail": "outputs differ: scores compared"}),
                  AuditCheck(name=f"{job.metric} change from the accuracy run (%)",
                             passed=delta is not None and delta <= delta_pct,
                             measured=None if delta is None else round(delta, 4), bound=f"<= {delta_pct:g}",
                             detail=f"baseline {base}, compliance {comp}")]
        files["verify_accuracy.txt"] = "\n".join([*lines, *check_lines(checks), FAIL, ""])  # as the official script
        files["accuracy/baseline_accuracy.txt"] = ev.accuracy_txt(baseline)
        files["accuracy/compliance_accuracy.txt"] = ev.accuracy_txt(compliance)
        return checks, files

    def _performance(self, run_dir: Path, job: AuditJob, tolerance: float) -> tuple[list[AuditCheck], str]:
        checks, ref_score, test_score = performance_checks(
            Path(job.reference_performance or ""), run_dir, lambda ratio: 1 - tolerance <= ratio <= 1 + tolerance,
            f"in [{1 - tolerance:g}, {1 + tolerance:g}]")
        passed = all(c.passed for c in checks)
        text = "\n".join([f"Reference score = {ref_score}", f"Test score = {test_score}", *check_lines(checks),
                          verdict_line(passed), ""])
        return checks, text

    def official_argv(self, script: Path, run_dir: Path, out_dir: Path, job: AuditJob, work: Path) -> list[str]:
        results = reference_folder(work, job.reference_performance, job.reference_accuracy)
        return [sys.executable, str(script), "-r", str(results), "-c", str(run_dir), "-o", str(out_dir),
                "--dtype", "int32"]

    def official_verdict(self, folder: Path) -> bool | None:
        """TEST PASS in verify_performance.txt, and in verify_accuracy.txt unless the scores were compared."""
        acc, perf = folder / "verify_accuracy.txt", folder / "verify_performance.txt"
        if not (acc.is_file() and perf.is_file()):
            return None
        return "TEST PASS" in perf.read_text(errors="replace") and "TEST PASS" in acc.read_text(errors="replace")


AUDIT = Test01()
