"""One run of the peak-QPS search (tasks.tuning) measured by loadgen: a Server-type run at a rate, judged by loadgen's
own verdict (VALID, with no loadgen errors and no failed requests); the peer of tasks.endpoints.probe, and what
tasks.clients names as loadgen's probe.

A probe's length: `min_duration` and `min_query_count`, both loadgen's own settings, from the search's settings.
"""

from __future__ import annotations

import time
from pathlib import Path

from submission.budget import cost
from submission.results.logs import load_run
from submission.results.runs import RunSpec
from submission.rules import load_rules
from tasks.harness import runner, timing
from tasks.measuring import set_aside
from tasks.serving import telemetry
from tasks.serving.session import EngineSession
from tasks.tuning import overload
from tasks.tuning.bisection import Probe, SearchSettings, Stage, margin


def probe_length(qps: float, settings: SearchSettings, base: RunSpec | None = None) -> tuple[int | None, int | None]:
    """(min_duration_ms, min_query_count) of a probe at `qps`: the settings' own, loadgen honours both."""
    return settings.probe_duration_ms, settings.probe_queries


def run_probe(spec: RunSpec, stage: Stage, qps: float, endpoint, work_dir: Path,
              stall_s: float | None = None, max_lost: int | None = None) -> Probe:
    """Run one probe, sampled as every measured run is (tasks.serving.telemetry), and judge it by loadgen's verdict
    (VALID, with no loadgen errors and no failed requests)."""
    run_dir = Path(work_dir) / "search-runs" / spec.key()
    if run_dir.exists():   # a crashed attempt's partial logs: kept apart, never judged
        set_aside(run_dir)
    started = time.monotonic()
    with telemetry.sampling(run_dir, endpoint, spec.engine, spec.harness):
        stats = runner.run(spec, endpoint, run_dir, stall_s=stall_s, max_lost=max_lost)
    duration = time.monotonic() - started
    run = load_run(run_dir)
    scenario = load_rules(spec.round).benchmark(spec.benchmark).scenario(spec.scenario)
    reasons = list(run.invalid_reasons)
    if run.num_errors:
        reasons.append(f"{run.num_errors} loadgen error(s)")
    if stats.get("failed"):
        reasons.append(f"{stats['failed']} request(s) failed")

    def ms(ns: int | None) -> float | None:
        return None if ns is None else round(ns / 1e6, 3)

    ttft, tpot, latency = ms(run.ttft_p99_ns), ms(run.tpot_p99_ns), ms(run.latency_ns.get("99.00"))
    return Probe(qps=qps, stage=stage, valid=run.valid and not run.num_errors and not stats.get("failed"),
                 reasons=tuple(reasons), ttft_p99_ms=ttft, tpot_p99_ms=tpot, latency_p99_ms=latency,
                 margin=margin(scenario, ttft, tpot, latency), metric=run.result(scenario.result_field),
                 completed_qps=run.completed_samples_per_second or run.samples_per_second,
                 duration_s=round(duration, 3), run_dir=str(run_dir), signals=signals(run_dir, spec, qps),
                 samples=None if run.generated_query_count is None
                 else run.generated_query_count * (run.generated_samples_per_query or 1),
                 telemetry=telemetry.of_run(run_dir))


def signals(run_dir: Path, spec: RunSpec, qps: float) -> overload.Signals | None:
    """The run's overload signals, from the per-query times the harness wrote (tasks.harness.timing); its forecast
    at other rates keeps loadgen's length for the spec (min_duration and min_query_count: submission.budget)."""
    times = timing.read(run_dir)
    if times is None:
        return None
    own = cost.spec_seconds(spec, qps)
    return overload.measure(overload.QueryTimes.of(**times), lambda f: cost.spec_seconds(spec, qps * f) / own)


def probe(spec: RunSpec, stage: Stage, qps: float, engine: EngineSession, work_dir: str,
          tokenizer: str | None = None) -> Probe:
    """The probe on the search's engine session; a hung engine (the harness's stall watchdog) is stopped first, so
    the probe task's retry gets a fresh one. Loadgen's requests need no tokenizer."""
    with engine.stopped_if_hung():
        return run_probe(spec, stage, qps, engine.endpoint(), Path(work_dir), stall_s=engine.stall_s,
                         max_lost=engine.max_lost)
