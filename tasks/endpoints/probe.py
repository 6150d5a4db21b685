"""One run of the peak-QPS search (tasks.tuning) measured by the MLCommons endpoints client: the Offline run that
starts the bracket (`max_throughput`) or a Server/Interactive run at a rate (`poisson`), judged by the bar the official
v6.1 checker applies (tasks.endpoints.measure.invalid_reasons): the early-stopping p99 latency against the scenario's
limit (Qwen3-VL: 12 s Server, 1.5 s Interactive), never the plain p99. The peer of tasks.harness.probe; tasks.clients
names it as the endpoints client's probe.

Why not the plain p99: the seed's Interactive submission tracked it by hand, and its first config (target_qps 43,
plain p99 1481 ms) failed the checker (early-stopping p99 1516 ms over 1500); 40 (1487 ms) was the highest that passed.

A probe's length (`probe_length`). The client has no min_query_count and rounds its sample count up to whole passes
over its data set (submission/budget/run_length.py): a Server probe at 40 q/s on the 48289-row set would issue a whole
pass, 1207 s, whatever its min duration. A short probe therefore sets its exact sample count (its min_query_count line,
the client's `n_samples_to_issue`: tasks.endpoints.config), the client's own padded count (1.1 x rate x min duration)
for a min duration long enough to issue max(`probe_queries`, P99_MIN_SAMPLES) samples, at least `probe_duration_ms`;
the client estimates no early-stopping p99 from fewer than P99_MIN_SAMPLES. A run the client still could not
estimate is a failing probe with that reason, never a pass. A probe at least as long as the plan's runs is the plan's
run (its confirmation, whole passes and all), and a confirmation keeps the plan's own length.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from submission.base.errors import CommandError, LaunchError, PlanError, RunFailed
from submission.plan import client_length
from submission.results.runs import RunSpec
from submission.rules import load_rules
from tasks.endpoints import runner
from tasks.endpoints.config import REPORT, min_duration_ms
from tasks.endpoints.measure import invalid_reasons
from tasks.endpoints.results import ClientResult, issued, query_times
from tasks.measuring import Engine, set_aside
from tasks.serving import telemetry
from tasks.tuning import overload
from tasks.tuning.bisection import Probe, SearchSettings, Stage, margin

# The fewest samples the client estimates an early-stopping p99 from: its metrics/early_stopping.py
# `es_percentile_estimate` (min_queries = find_min_passing(1, 0.99) + 1, loadgen's early_stopping.cc at confidence
# 0.99, tolerance 0); its log prints it ("p99.0: estimate=None ... min_queries=662").
P99_MIN_SAMPLES = 662


def probe_length(qps: float, settings: SearchSettings, base: RunSpec | None = None) -> tuple[int, int | None]:
    """(min_duration_ms, min_query_count) of a probe at `qps` (the module's doc): the exact sample count of a short
    probe, the client's own padded count for its min duration (so it outlasts that duration as the client's runs
    do), none for a probe as long as the plan's own runs of `base`."""
    needed = max(settings.probe_queries, P99_MIN_SAMPLES)
    duration_ms = max(settings.probe_duration_ms, math.ceil(1000 * needed / (client_length.PADDING * qps)))
    if base is not None and duration_ms >= min_duration_ms(base, load_rules(base.round)):
        return duration_ms, None
    return duration_ms, client_length.client_samples(qps, duration_ms, 0, offline=False)


def judge(spec: RunSpec, stage: Stage, qps: float, result: ClientResult, *, duration_s: float = 0.0,
          run_dir: str | None = None) -> Probe:
    """The probe of a finished client run: the checker's verdict (invalid_reasons), the early-stopping p99 as its
    latency and margin, the client's qps as its throughput (the Offline result, and where the bracket starts)."""
    rules = load_rules(spec.round)
    scenario = rules.benchmark(spec.benchmark).scenario(spec.scenario)
    reasons = invalid_reasons(spec, result, rules)
    times = query_times(Path(result.report_dir))
    return Probe(qps=qps, stage=stage, valid=not reasons, reasons=tuple(reasons), ttft_p99_ms=result.ttft_p99_ms,
                 tpot_p99_ms=result.tpot_p99_ms, latency_p99_ms=result.latency_p99_ms,
                 margin=margin(scenario, result.ttft_p99_ms, result.tpot_p99_ms, result.latency_p99_ms),
                 metric=result.qps, completed_qps=result.qps, duration_s=round(duration_s, 3), run_dir=run_dir,
                 samples=result.issued, measured_s=round(result.duration_s, 3),
                 signals=None if times is None else overload.measure(overload.QueryTimes.of(**times)))


def probe(spec: RunSpec, stage: Stage, qps: float, engine: Engine, work_dir: str, tokenizer: str | None) -> Probe:
    """Run the client once at the spec's rate and length and judge it. Samples that failed (an engine refusing work
    under load) fail the probe with the client's reasons; an engine that died is a LaunchError, so the probe task's
    retry relaunches it. `tokenizer`: the staged model's tokenizer.json (the client reads the folder it is in)."""
    if tokenizer is None:
        raise PlanError(f"{spec.label}: the endpoints client needs the staged model's tokenizer for a search run",
                        fix="pass the staged model's tokenizer.json to the search's Prober")
    run_dir = Path(work_dir) / "search-runs" / spec.key()
    if run_dir.exists():   # a crashed attempt's partial logs: kept apart, never judged
        set_aside(run_dir)
    started = time.monotonic()
    try:
        endpoint = engine.endpoint()
        with telemetry.sampling(run_dir, endpoint, spec.engine, spec.harness):   # as every measured run
            result = runner.run(spec, endpoint, run_dir, tokenizer=Path(tokenizer).parent,
                                data_dir=Path(work_dir) / "endpoints-data")
    except (CommandError, RunFailed) as error:
        if not engine.alive():
            report = engine.log_report()
            engine.close()
            raise LaunchError(f"{spec.label}: the engine stopped during a search run at {qps:g} q/s\n{error}\n"
                              f"{report}", fix="read the engine log; the probe is retried once on a relaunched "
                                               "engine") from None
        if isinstance(error, CommandError):
            raise
        samples, seconds = issued(run_dir / REPORT) or (None, None)   # what the failed run cost, as its report says
        return Probe(qps=qps, stage=stage, valid=False, reasons=(str(error).splitlines()[0],),
                     duration_s=round(time.monotonic() - started, 3), run_dir=str(run_dir), samples=samples,
                     measured_s=None if seconds is None else round(seconds, 3), telemetry=telemetry.of_run(run_dir))
    probe = judge(spec, stage, qps, result, duration_s=time.monotonic() - started, run_dir=str(run_dir))
    return probe.model_copy(update={"telemetry": telemetry.of_run(run_dir)})
