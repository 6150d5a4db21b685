"""The peak-QPS search judged by the simulated server's queueing model (`tasks.engines.simulated.queueing`) instead
of live runs: the verdict loadgen would give at each rate, the seconds the run would take, and the overload signals of
its per-query times. The search's tests and its benchmark (bench/search.py) use it to try many servers in seconds.
"""

from __future__ import annotations

import numpy as np

from submission.budget.cost import run_seconds
from tasks.engines.simulated.queueing import (
    PERCENTILE,
    Protocol,
    SimConfig,
    loadgen_reasons,
    loadgen_schedule,
    query_count,
    replay,
)
from tasks.tuning import overload
from tasks.tuning.bisection import Probe


def judge(config: SimConfig, probe: Protocol, confirm: Protocol, overhead_s: float = 1.5):
    """A search judge (`tasks.tuning.bisection.Judge`) that asks the model instead of running loadgen: the verdict
    loadgen would give, the seconds the run would take (its schedule, the last answer, `overhead_s` to start), and
    the overload signals of its per-query times, judged as the Prober judges a live probe (a full-length run is
    `confirm` long)."""
    limits = {"ttft": confirm.ttft_limit_ms, "tpot": confirm.tpot_limit_ms}
    capacity = overload.Capacity()

    def run(qps: float, stage: str) -> Probe:
        protocol = probe if stage == "probe" else confirm
        n = query_count(protocol.schedule_seed, qps, protocol.min_duration_ms, protocol.min_queries,
                        protocol.sample_count, protocol.equal_issue)
        arrivals = loadgen_schedule(protocol.schedule_seed, qps, n)
        ttft, tpot = replay(config, arrivals, protocol.max_tokens)
        reasons = loadgen_reasons(ttft, tpot, ttft_limit_s=protocol.ttft_limit_ms / 1000,
                                  last_scheduled_s=arrivals[-1], tpot_limit_s=protocol.tpot_limit_ms / 1000,
                                  min_duration_ms=protocol.min_duration_ms)
        tokens = config.tokens(protocol.max_tokens)
        done = arrivals + ttft + tpot * max(tokens - 1, 0)
        end = float(np.max(done))
        ttft_ms = float(np.sort(ttft)[int(n * PERCENTILE)]) * 1000
        tpot_ms = float(np.sort(tpot)[int(n * PERCENTILE)]) * 1000
        margin = max(ttft_ms / protocol.ttft_limit_ms, tpot_ms / protocol.tpot_limit_ms)
        def length(f: float) -> float:
            floor, count = protocol.min_duration_ms / 1000, protocol.min_queries
            return run_seconds(floor, count, qps * f) / run_seconds(floor, count, qps)

        signals = overload.measure(overload.QueryTimes.of(arrivals, arrivals + ttft, done, np.full(n, tokens)), length)
        result = Probe(qps=qps, stage=stage, valid=not reasons, reasons=tuple(reasons), ttft_p99_ms=round(ttft_ms, 3),
                       tpot_p99_ms=round(tpot_ms, 3), margin=round(margin, 4), duration_s=round(end + overhead_s, 3),
                       signals=signals, completed_qps=round(n / end, 3), metric=round(n * tokens / end, 3))
        full_s = run_seconds(confirm.min_duration_ms / 1000, confirm.min_queries, qps)
        return overload.judged(result, limits, full_s, capacity)

    # how long a full-length run lasts at a rate (the search's probe budget): its schedule plus the start
    run.full_seconds = lambda qps: float(loadgen_schedule(confirm.schedule_seed, qps, query_count(
        confirm.schedule_seed, qps, confirm.min_duration_ms, confirm.min_queries, confirm.sample_count,
        confirm.equal_issue))[-1]) + overhead_s
    return run
