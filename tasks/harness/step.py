"""The loadgen run step: one performance or accuracy run of one scenario, cached by the run's content key.

A run that cannot change by retrying (INVALID, loadgen errors, accuracy under the target) raises `RunFailed`
carrying its record, is not retried and not cached, so the next run of the plan measures it again. Any other
failure (the engine died, the harness crashed) is retried once on a relaunched engine. The partial logs of a
failed attempt are moved aside and never reach the tree.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import task
from prefect.runtime import flow_run

from submission.errors import CommandError, LaunchError, RunFailed
from submission.logs import load_run
from submission.rules import load_rules
from submission.runs import RunRecord, RunSpec, record
from tasks.accuracy import score
from tasks.harness import liveness, runner
from tasks.serving.session import EngineSession
from tasks.steps import cached_in, retry_transient, run_logger
from tasks.workspace import folder_key


class RunRejected(RunFailed):
    """A finished run whose result cannot be used; `record` is its results row."""

    def __init__(self, message: str, record: RunRecord, fix: str | None = None) -> None:
        super().__init__(message, fix=fix or "see the run's mlperf_log_summary.txt; adjust the plan and run it again")
        self.record = record


def _cache_key(context, parameters: dict) -> str:
    return f"loadgen-{parameters['spec'].key()}-{folder_key(parameters['work_dir'])}"


def problems(rec: RunRecord) -> list[str]:
    out = []
    if rec.mode == "performance" and not rec.valid:
        out.append(f"Result is {rec.validity}: {'; '.join(rec.invalid_reasons)}")
    if rec.num_errors:
        out.append(f"{rec.num_errors} loadgen error(s)")
    if rec.sut_failures:
        out.append(f"{rec.sut_failures} request(s) failed")
    if rec.accuracy_pass is False:
        out.append(f"accuracy misses a target or upper limit ({rec.accuracy_metric} {rec.accuracy}); "
                   "see accuracy.txt")
    return out


def offline_resize(spec: RunSpec, run) -> str | None:
    """The fix for an Offline run that ended before its minimum duration: loadgen issues one query of about
    1.1 x target_qps x min_duration samples, so a faster engine than target_qps says finishes it too soon."""
    if spec.loadgen_scenario != "Offline" or run.min_duration_met is not False or not run.samples_per_second:
        return None
    return (f"the engine did {run.samples_per_second:.1f} samples/s, more than the Offline target_qps sized the "
            f"query for: set benchmarks[{spec.benchmark}].scenarios.{spec.scenario}.target_qps to at least "
            f"{math.ceil(1.5 * run.samples_per_second)} and run the plan again")


def engine_gone(label: str, code: int, engine: EngineSession, aside: Path) -> LaunchError:
    """The error for a run the harness ended because the engine died (`ENDPOINT_DOWN`) or hung (`ENGINE_STALLED`).
    Either way the engine is stopped here: a hung one still holds its port and accelerators, and of one that refuses
    connections processes may be left (a remote step whose srun has not noticed yet, a worker whose frontend died);
    the step's retry launches a fresh one (`EngineSession.endpoint`)."""
    report = engine.log_report()
    if code == liveness.ENGINE_STALLED:
        what = (f"the engine hung during the run (nothing for {engine.stall_s:g} s with requests in flight, its "
                f"port still open) and was stopped")
    else:
        state = "still running" if engine.alive() else "its process has exited"
        what = f"the engine stopped accepting connections during the run ({state}); what was left of it was stopped"
    engine.close()
    return LaunchError(f"{label}: {what}; the run's partial logs are set aside in {aside}\n{report}",
                       fix="read the engine log; the step is retried once on a relaunched engine")


def utc_now() -> str:
    """ISO 8601 in UTC to the millisecond: `2026-12-01T18:30:00.123+00:00`."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def run_once(spec: RunSpec, engine: EngineSession, work_dir: Path, evaluator: str | None,
             tokenizer: str | None) -> RunRecord:
    """Run, parse, score and judge one loadgen run (plain function; the task below wraps it)."""
    run_dir = work_dir / "runs" / spec.key()
    if run_dir.exists():   # a failed attempt's partial logs: kept apart, never reused
        runner.set_aside(run_dir)
    endpoint = engine.endpoint()
    started_at = utc_now()
    try:
        stats = runner.run(spec, endpoint, run_dir, stall_s=engine.stall_s)
    except CommandError as e:
        if e.returncode not in liveness.ENGINE_GONE:
            raise
        raise engine_gone(spec.label, e.returncode, engine, runner.set_aside(run_dir)) from None
    ended_at = utc_now()
    run = load_run(run_dir)
    metrics = passed = None
    if spec.mode == "accuracy":
        result = score(evaluator or spec.benchmark, run_dir, Path(spec.dataset), tokenizer and Path(tokenizer),
                       benchmark=spec.benchmark, scenario=spec.scenario, round=spec.round)
        metrics, passed = result.metrics, result.verdict is not None and result.verdict.passed
    rec = record(spec, str(run_dir), run, load_rules(spec.round), stats, metrics, passed,
                 flow_run_id=flow_run.get_id(), started_at=started_at, ended_at=ended_at)
    found = problems(rec)
    if found:
        raise RunRejected(f"{spec.label}: {'; '.join(found)}", rec, fix=offline_resize(spec, run))
    return rec


def summary(rec: RunRecord) -> str:
    """One line of what a run measured, naming only what it has: `VALID, 1594.1 Tokens/s, TTFT p99 23.4 ms`."""
    parts = [rec.validity or ""] if rec.valid is not None else []
    if rec.metric is not None:
        parts.append(f"{rec.metric:g} {rec.unit or ''}".strip())
    parts += [f"{name} p99 {value:g} ms" for name, value in (("TTFT", rec.ttft_p99_ms), ("TPOT", rec.tpot_p99_ms))
              if value is not None]
    if rec.accuracy is not None:
        parts.append(f"{rec.accuracy_metric} {rec.accuracy:g}")
    return ", ".join(p for p in parts if p) or "no result"


@task(name="loadgen-run", task_run_name="{spec.mode}[{spec.system}/{spec.benchmark}/{spec.scenario}]",
      cache_key_fn=_cache_key, persist_result=True, retries=1, retry_delay_seconds=2,
      retry_condition_fn=retry_transient)
def loadgen_task(spec: RunSpec, engine: EngineSession, work_dir: str, evaluator: str | None,
                 tokenizer: str | None) -> RunRecord:
    rec = run_once(spec, engine, Path(work_dir), evaluator, tokenizer)
    run_logger("run").info("%s: %s", spec.label, summary(rec))
    return rec


def run_loadgen(spec: RunSpec, engine: EngineSession, work_dir: str, evaluator: str | None, tokenizer: str | None,
                **call: Any) -> Any:
    """The loadgen-run task with its cache entry in the workspace (`tasks.steps.cached_in`); `call`: Prefect's call
    options (`return_state=True`)."""
    return cached_in(loadgen_task, work_dir)(spec, engine, work_dir, evaluator, tokenizer, **call)
