"""One loadgen run measured, scored and judged: the plain function under the loadgen-run task (tasks.run_step),
free of Prefect so that a host without it (the GPU acceptance script's carried leg) measures the same way.

A run that cannot change by retrying (INVALID, loadgen errors, accuracy under the target) raises `RunRejected`
carrying its record (tasks.measuring). The partial logs of a failed attempt are moved aside and never reach the tree.
Under a rehearsal's accelerated clock a performance run INVALID for its latency alone (`latency_alone`) is measured
again on a slower client clock first (tasks.clock, tasks.measuring.on_slower_clocks).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

from submission.base.errors import CommandError, LaunchError
from submission.plan.selection import rerun
from submission.results.logs import LoadgenRun, load_run
from submission.results.runs import RunRecord, RunSpec, record
from submission.rules import load_rules
from tasks.accuracy import score
from tasks.harness import runner
from tasks.harness.dispatch import Lost
from tasks.measuring import Engine, RunRejected, on_slower_clocks, problems, set_aside, utc_now
from tasks.serving import liveness, telemetry

log = logging.getLogger("podium.harness")   # the flow's log under `podium` (PREFECT_LOGGING_EXTRA_LOGGERS)


def offline_resize(spec: RunSpec, run) -> str | None:
    """The fix for an Offline run that ended before its minimum duration: loadgen issues one query of about
    1.1 x target_qps x min_duration samples, so a faster engine than target_qps says finishes it too soon."""
    if spec.loadgen_scenario != "Offline" or run.min_duration_met is not False or not run.samples_per_second:
        return None
    return (f"the engine did {run.samples_per_second:.1f} samples/s, more than the Offline target_qps sized the "
            f"query for: set benchmarks[{spec.benchmark}].scenarios.{spec.scenario}.target_qps to at least "
            f"{math.ceil(1.5 * run.samples_per_second)} and run the plan again "
            f"({rerun(spec.system, spec.benchmark, spec.scenario)})")


def over_latency(run: LoadgenRun) -> bool:
    """Whether some query of a Server run took longer than a latency limit: its slowest TTFT or TPOT over the limit
    where loadgen measures token latencies, else its slowest latency over the target latency. Loadgen's early
    stopping counts those queries; with none it fails only for too few queries, saying "Would need to run at least N
    more queries" either way (a 32-query Server run of the fake SUT, none over: N = 427)."""
    s = run.settings
    pairs = ((run.ttft_ns.get("max"), s.ttft_latency_ns), (run.tpot_ns.get("max"), s.tpot_latency_ns)) \
        if s.use_token_latencies else ((run.latency_ns.get("max"), s.target_latency_ns),)
    return run.scenario == "Server" and any(slowest is not None and limit and slowest > limit
                                            for slowest, limit in pairs)


def latency_alone(run: LoadgenRun, stats: dict) -> bool:
    """Whether a loadgen performance run is INVALID for its latency alone, the verdict a slower client clock can
    change: its latency constraint failed (the p99 latency, or TTFT / TPOT where loadgen measures token latencies),
    or its early stopping with queries over a limit (`over_latency`), while it met its min duration and min queries
    and had no loadgen error and no failed request."""
    if run.validity != "INVALID" or run.num_errors or stats.get("failed"):
        return False
    if run.min_duration_met is False or run.min_queries_met is False:
        return False
    return run.perf_constraints_met is False or (run.early_stopping_met is False and over_latency(run))


def engine_gone(label: str, code: int, engine: Engine, aside: Path) -> LaunchError:
    """The error for a run the harness ended because the engine died (`ENDPOINT_DOWN`) or hung (`ENGINE_STALLED`).
    Either way the engine is stopped here: a hung one still holds its port and accelerators, and of one that refuses
    connections processes may be left (a remote step whose srun has not noticed yet, a worker whose frontend died);
    the step's retry launches a fresh one (`EngineSession.endpoint`)."""
    report = engine.log_report()
    if code == liveness.ENGINE_STALLED:
        what = (f"the engine hung during the run (nothing for {engine.stall_s:g} s with requests in flight, its "
                f"port still open) and was stopped")
    elif code == liveness.REPLICAS_LOST:
        what = (f"more replicas were lost during the run than engine.replicas.max_lost ({engine.max_lost}) allows "
                f"(each is named, with the time, in {aside / 'harness.log'}); the engine was stopped")
    else:
        state = "still running" if engine.alive() else "its process has exited"
        what = f"the engine stopped accepting connections during the run ({state}); what was left of it was stopped"
    engine.close()
    return LaunchError(f"{label}: {what}; the run's partial logs are set aside in {aside}\n{report}",
                       fix="read the engine log; the step is retried once on a relaunched engine")


def log_losses(label: str, stats: dict) -> None:
    """Each replica lost during the run, in the flow's log: its name and node, when, why, and the samples moved from
    it to live replicas (their data-set indices, the first MOVED_KEPT of them)."""
    for row in stats.get("replicas", ()):
        lost = row.get("lost")
        if lost:
            shown = ", ".join(map(str, row["moved_indices"])) + (" ..." if row["moved"] > len(row["moved_indices"])
                                                                 else "")
            log.warning("%s: %s; %d sample(s) moved to live replicas (data-set indices %s); the run went on",
                        label, Lost(**lost).line(), row["moved"], shown or "none")


def run_once(spec: RunSpec, engine: Engine, work_dir: Path, evaluator: str | None, tokenizer: str | None,
             flow_run_id: str | None = None) -> RunRecord:
    """Run, parse, score and judge one loadgen run; `flow_run_id`: the Prefect flow run that measured it, if any."""
    run_dir = work_dir / "runs" / spec.key()
    if run_dir.exists():   # a failed attempt's partial logs: kept apart, never reused
        set_aside(run_dir)
    endpoint = engine.endpoint(performance=spec.mode == "performance")

    def measure(speed: float | None) -> tuple[str, dict, LoadgenRun]:
        started_at = utc_now()
        with telemetry.sampling(run_dir, endpoint, spec.engine, spec.harness):
            stats = runner.run(spec, endpoint, run_dir, stall_s=engine.stall_s, speed=speed, max_lost=engine.max_lost)
        return started_at, stats, load_run(run_dir)

    try:
        (started_at, stats, run), speed = on_slower_clocks(spec.label, run_dir, measure,
                                                           lambda measured: latency_alone(measured[2], measured[1]))
    except CommandError as e:
        if e.returncode not in liveness.ENGINE_GONE:
            raise
        raise engine_gone(spec.label, e.returncode, engine, set_aside(run_dir)) from None
    ended_at = utc_now()
    log_losses(spec.label, stats)
    metrics = passed = None
    if spec.mode == "accuracy":
        result = score(evaluator or spec.benchmark, run_dir, Path(spec.dataset), tokenizer and Path(tokenizer),
                       benchmark=spec.benchmark, scenario=spec.scenario, round=spec.round,
                       **({"lcb_tests": Path(spec.lcb_tests)} if spec.lcb_tests else {}),
                       **({"math_grader": Path(spec.math_grader)} if spec.math_grader else {}))
        metrics, passed = result.metrics, result.verdict is not None and result.verdict.passed
    rec = record(spec, str(run_dir), run, load_rules(spec.round), stats, metrics, passed,
                 flow_run_id=flow_run_id, started_at=started_at, ended_at=ended_at, clock=speed)
    found = problems(rec)
    if found:
        raise RunRejected(f"{spec.label}: {'; '.join(found)}", rec, fix=offline_resize(spec, run))
    return rec

