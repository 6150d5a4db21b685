"""The audit step: one compliance test of one scenario, run, verified and laid out as `TESTxx/`, cached by the
job's content key.

The run happens in its own folder (`<work>/runs/<key>/`, the harness child's working directory) with
`audit.config` written there just before and removed right after, even when the run fails. Under a rehearsal's
accelerated clock a TEST01/TEST04 run INVALID for its latency alone is measured again on a slower client clock before
it is verified (tasks.clock); the other tests' verdicts never read their run's validity, nor does the checker. A
failed verdict is retried once on a fresh run; a second failure raises `AuditFailed` carrying the record (what
failed, by how much) and is not cached. A crash (engine died, harness failed) is retried once by Prefect, like a
loadgen run.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from prefect import task

from submission.base.errors import RunFailed
from submission.checks.compliance import FULL_PERFORMANCE_CHECK
from submission.plan.selection import Reuse
from submission.results.logs import LoadgenRun, load_run
from submission.results.runs import AuditCheck, AuditRecord
from tasks.compliance import AuditJob, audit
from tasks.compliance.common import audit_config_file
from tasks.compliance.official_scripts import Official, run_official
from tasks.engines import Endpoint
from tasks.harness import runner
from tasks.harness.measure import latency_alone
from tasks.measuring import on_slower_clocks
from tasks.serving import telemetry
from tasks.serving.session import EngineSession
from tasks.steps import call_cached, retry_transient, run_logger
from tasks.workspace import folder_key

ATTEMPTS = 2   # a failed audit is retried once, then reported


class EndpointSource(Protocol):
    """What an audit needs of an engine session (tasks.serving.session.EngineSession): its endpoint, the engine
    launched on first use (with replicas, as many as an audit needs: `performance=False`); the stall timeout, the
    replicas a run may lose, and the engine stopped when a run ends because it hung."""

    stall_s: float | None
    max_lost: int | None

    def endpoint(self, performance: bool = True) -> Endpoint: ...

    def stopped_if_hung(self) -> AbstractContextManager[None]: ...


class AuditFailed(RunFailed):
    """An audit that failed its verification twice; `record` says what failed and by how much."""

    def __init__(self, message: str, record: AuditRecord) -> None:
        super().__init__(message, fix="read verify_*.txt in the audit's TESTxx folder; fix the engine or its "
                                      "settings and run the plan again")
        self.record = record


def _set_aside(run_dir: Path) -> None:
    """A previous attempt's folder is kept beside the new one, never reused."""
    if not run_dir.exists():
        return
    n = 1
    while run_dir.with_name(f"{run_dir.name}.attempt-{n}").exists():
        n += 1
    run_dir.rename(run_dir.with_name(f"{run_dir.name}.attempt-{n}"))


def audit_once(job: AuditJob, engine: EndpointSource, work_dir: Path, attempt: int = 1) -> AuditRecord:
    """Run the audit's loadgen test with its audit.config, verify it, lay out TESTxx (plain function)."""
    impl = audit(job.test)
    run_dir = work_dir / "runs" / job.spec.key()
    _set_aside(run_dir)
    endpoint = engine.endpoint(performance=False)

    def measure(speed: float | None) -> tuple[dict, LoadgenRun]:
        with (engine.stopped_if_hung(), audit_config_file(run_dir, job.spec.audit_config),
              telemetry.sampling(run_dir, endpoint, job.spec.engine, job.spec.harness)):   # as for every run
            stats = runner.run(job.spec, endpoint, run_dir, stall_s=engine.stall_s, speed=speed,
                               max_lost=engine.max_lost)
        return stats, load_run(run_dir)

    judged = job.spec.audit in FULL_PERFORMANCE_CHECK   # TEST07/TEST09: no checker reads the run's validity
    (stats, run), speed = on_slower_clocks(job.label, run_dir, measure,
                                           lambda measured: judged and latency_alone(measured[1], measured[0]))
    verdict = impl.verify(run_dir, job)
    checks = list(verdict.checks)
    if not any("audit.config" in w for w in run.warnings):   # loadgen logs this warning when it applied the file
        checks.append(AuditCheck(name="loadgen read audit.config", passed=False,
                                 detail="no 'Found Audit Config file' warning in mlperf_log_detail.txt"))
    if stats.get("failed"):
        checks.append(AuditCheck(name="failed requests", passed=False, measured=stats["failed"], bound="== 0",
                                 detail="; ".join(stats.get("errors", [])[:2])))
    if run.num_errors:
        checks.append(AuditCheck(name="loadgen errors", passed=False, measured=run.num_errors, bound="== 0",
                                 detail="; ".join(run.errors[:2])))
    passed = verdict.passed and all(c.passed is not False for c in checks)
    folder = impl.lay_out(run_dir, verdict, run_dir / "compliance")
    official = run_official(impl, job, run_dir) if job.inference_src else Official("not configured")
    return AuditRecord(
        key=job.key(), system=job.spec.system, benchmark=job.spec.benchmark, scenario=job.spec.scenario,
        test=job.test, run_dir=str(run_dir), folder=str(folder), passed=passed, checks=tuple(checks),
        attempts=attempt, target_qps=job.target_qps, official=official.verdict,
        disagreement=official.disagreement(passed), clock=speed)


def run_audit(job: AuditJob, engine: EndpointSource, work_dir: Path, attempts: int = ATTEMPTS) -> AuditRecord:
    """The audit, retried once when its verification fails; raises AuditFailed after the last failure."""
    logger = run_logger("audits")
    for attempt in range(1, attempts + 1):
        record = audit_once(job, engine, work_dir, attempt)
        if record.disagreement:
            logger.warning("%s: %s", job.label, record.disagreement)
        if record.passed:
            return record
        logger.warning("%s attempt %d of %d: %s", job.label, attempt, attempts, record.summary())
    raise AuditFailed(f"{job.label}: {record.summary()} (after {attempts} attempts)", record)


def _cache_key(context, parameters: dict) -> str:
    return f"audit-{parameters['job'].key()}-{folder_key(parameters['work_dir'])}"


@task(name="audit", task_run_name="{job.spec.audit}[{job.spec.system}/{job.spec.benchmark}/{job.spec.scenario}]",
      cache_key_fn=_cache_key, persist_result=True, retries=1, retry_delay_seconds=2,
      retry_condition_fn=retry_transient)
def audit_task(job: AuditJob, engine: EngineSession, work_dir: str) -> AuditRecord:
    record = run_audit(job, engine, Path(work_dir))
    run_logger("audits").info("%s: %s%s", job.label, record.summary(),
                              f" (official: {record.official})" if job.inference_src else "")
    return record


def run_audit_task(job: AuditJob, engine: EngineSession, work_dir: str, reuse: Reuse = "cache", **call: Any) -> Any:
    """The audit task with its cache entry in the workspace, used as `reuse` says (`tasks.steps.call_cached`: None when
    "cached" finds none); `call`: Prefect's call options (`return_state=True`)."""
    return call_cached(audit_task, work_dir, {"job": job, "engine": engine, "work_dir": work_dir}, reuse, **call)
