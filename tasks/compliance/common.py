"""What every audit shares: its audit.config lines from the rules, the audit.config file that exists only while
its run runs, the `TESTxx/` folder it leaves (reference §1.5), and the official verification's pass lines.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from submission.base.files import write_atomic
from submission.results.logs import DETAIL_FILE, SUMMARY_FILE, LoadgenRun, load_run
from submission.results.runs import AuditCheck
from submission.rules import AuditValue, Rules
from tasks.compliance import AuditJob, Verdict

AUDIT_CONFIG = "audit.config"
ACCURACY_LOG = "mlperf_log_accuracy.json"
PERF_LOGS = (SUMMARY_FILE, DETAIL_FILE)
PASS, FAIL = "TEST PASS", "TEST FAIL"   # the lines the checker looks for in verify_*.txt


@contextlib.contextmanager
def audit_config_file(run_dir: Path, lines: tuple[str, ...]) -> Iterator[Path]:
    """`run_dir/audit.config` for the duration of the block, removed afterwards even when the run fails."""
    path = write_atomic(run_dir / AUDIT_CONFIG, "\n".join(lines) + "\n")
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def samples_per_second(run: LoadgenRun) -> float | None:
    """The score verify_performance.py compares: Offline samples/s, Server completed samples/s."""
    return run.samples_per_second if run.scenario == "Offline" else run.completed_samples_per_second


def performance_checks(reference: Path, run_dir: Path, ratio_ok: Callable[[float], bool],
                       bound: str) -> tuple[list[AuditCheck], float | None, float | None]:
    """What the performance audits (TEST01, TEST04) check alike: both runs valid, the audit's score over the
    performance run's within `bound` (`ratio_ok`), and in Server the same target latency. Returns the checks and
    the reference and audit scores."""
    ref, test = load_run(reference), load_run(run_dir)
    ref_score, test_score = samples_per_second(ref), samples_per_second(test)
    ratio = test_score / ref_score if ref_score and test_score is not None else None
    checks = [
        AuditCheck(name="performance run valid", passed=ref.valid, detail=ref.validity or "no result"),
        AuditCheck(name="audit run valid", passed=test.valid,
                   detail="; ".join(test.invalid_reasons) or (test.validity or "no result")),
        AuditCheck(name="audit score / performance score", passed=ratio is not None and ratio_ok(ratio),
                   measured=None if ratio is None else round(ratio, 4), bound=bound,
                   detail=f"{test_score} vs {ref_score} samples/s"),
    ]
    if ref.scenario == "Server":
        checks.append(AuditCheck(name="same Server target latency",
                                 passed=ref.settings.target_latency_ns == test.settings.target_latency_ns,
                                 detail=f"{test.settings.target_latency_ns} vs {ref.settings.target_latency_ns}"))
    return checks, ref_score, test_score


def reference_folder(work: Path, performance: str | None, accuracy: str | None = None) -> Path:
    """A results folder (`performance/run_1`, `accuracy`) made of links to the reference runs, as the official
    TEST01/TEST04 scripts read one with `-r`."""
    results = work / "results"
    if performance:
        (results / "performance").mkdir(parents=True, exist_ok=True)
        (results / "performance" / "run_1").symlink_to(Path(performance).resolve(), target_is_directory=True)
    if accuracy:
        results.mkdir(parents=True, exist_ok=True)
        (results / "accuracy").symlink_to(Path(accuracy).resolve(), target_is_directory=True)
    return results


def verdict_line(passed: bool) -> str:
    return PASS if passed else FAIL


def check_lines(checks: tuple[AuditCheck, ...] | list[AuditCheck]) -> list[str]:
    return [check.line() for check in checks]


class BaseAudit:
    """Defaults an audit module overrides where its test differs."""

    name = ""
    perf_logs = False          # TESTxx/performance/run_1/ holds the audit run's summary and detail logs
    accuracy_log = False       # TESTxx/accuracy/ holds the audit run's mlperf_log_accuracy.json
    verify_files: tuple[str, ...] = ()
    needs_performance_run = False   # compares against the scenario's performance run (TEST01, TEST04)
    needs_accuracy_run = False      # compares against the scenario's accuracy run (TEST01)
    needs_eos = False               # reads the model's EOS token ids (TEST06)

    def config_lines(self, rules: Rules, benchmark: str, overrides: dict[str, AuditValue] | None = None,
                     ) -> tuple[str, ...]:
        """The audit.config: a comment naming its source, then the rules' lines for `benchmark`. Overrides (the
        smoke profile's) replace values and are named in the comment."""
        rules_audit = rules.audit(self.name)
        head = [f"# {self.name} audit.config written by Podium from the {rules.round} rules for {benchmark}"]
        if overrides:
            merged = {**rules_audit.per_benchmark.get(benchmark, {}), **overrides}
            rules_audit = rules_audit.model_copy(update={"per_benchmark": {**rules_audit.per_benchmark,
                                                                           benchmark: merged}})
            head.append("# SMOKE values (not the rules'): " + ", ".join(f"{k} = {v}" for k, v in overrides.items()))
        return (*head, *rules_audit.config_lines(benchmark))

    def run_settings(self, user_conf: tuple[tuple[str, str], ...], loadgen_model: str,
                     set_size: int | None) -> tuple[tuple[str, str], ...]:
        return user_conf

    def verify(self, run_dir: Path, job: AuditJob) -> Verdict:
        raise NotImplementedError

    def lay_out(self, run_dir: Path, verdict: Verdict, dest: Path) -> Path:
        """Write `dest/<TESTxx>/` as the official run_verification.py leaves it; returns that folder."""
        folder = dest / self.name
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        for rel, text in verdict.files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text)
        if self.accuracy_log:
            (folder / "accuracy").mkdir(exist_ok=True)
            shutil.copy2(run_dir / ACCURACY_LOG, folder / "accuracy" / ACCURACY_LOG)
        if self.perf_logs:
            (folder / "performance" / "run_1").mkdir(parents=True)
            for name in PERF_LOGS:
                shutil.copy2(run_dir / name, folder / "performance" / "run_1" / name)
        return folder

    def official_argv(self, script: Path, run_dir: Path, out_dir: Path, job: AuditJob, work: Path) -> list[str]:
        raise NotImplementedError

    def official_verdict(self, folder: Path) -> bool | None:
        """The official script's verdict from the files it left in `folder` (TESTxx); None when it left none."""
        texts = [(folder / name).read_text(errors="replace") for name in self.verify_files
                 if (folder / name).is_file()]
        if len(texts) != len(self.verify_files):
            return None
        return all(PASS in text for text in texts)
