"""What a run's own record says about the same run at other rates: the queue it showed, fitted and replayed.

A server that falls behind queues the excess; each query waits for the work ahead of it. The fit is the fluid queue
of one service rate that best explains the run's latencies (Lindley's recursion on their arrival times: a query
waits what the one before it waited, plus one service time, minus the gap between them; TTFT queued from the issue,
TPOT from the first token): per query, latency = base + wait (TTFT and end-to-end latency take the wait whole, TPOT
spread over the answer's tokens after the first), plus what the queue does not explain (the query's residual: a
batch's TPOT, a long prompt). The service rate is the rate the server served while it fell behind.

The same run at another rate is the same schedule stretched (loadgen's Server schedule is one sequence of
exponential gaps scaled by 1 / target_qps; the endpoints client's Poisson schedule alike), as long as the run's
settings make it there (`schedule`), so the forecast replays the fitted queue over it, keeps each query's residual,
and reads the p99 the checker judges: the larger of the plain p99 and loadgen's early-stopping bound for that many
queries. Measured on random simulated servers (docs/search.md, "The forecast"): where the queue explains 80 % of a
latency's spread or more, a full-length run at 0.94 to 1.1 x the peak forecasts it within -0.3 to +0.8 % (5th to
95th percentile).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from submission.base.schema import Strict
from tasks.engines.simulated.queueing import PERCENTILE, min_passing

FACTORS = tuple(round(0.7 + 0.005 * i, 3) for i in range(161))   # rates forecast, as multiples of the run's (0.7-1.5)
SERVICE = np.exp(np.linspace(np.log(0.6), np.log(1.8), 241))     # service rates tried, as multiples of the offered
MIN_QUERIES = 64


class Forecast(Strict):
    """One latency's forecast from one run: the fitted queue and the p99 the checker would judge at other rates."""

    service_qps: float | None             # the fitted service rate; None: no queue explains the latencies better
    base_ms: float                        # the latency a query that waits for nothing has (the median residual)
    explained: float                      # how much of the latencies' spread the queue explains (0..1)
    p99_ms: tuple[tuple[float, float], ...]   # (rate factor, forecast p99 in ms): FACTORS x the run's rate


def waits(issued: np.ndarray, service_s: float) -> np.ndarray:
    """Each query's wait in a FIFO fluid queue of one service time `service_s` (Lindley's recursion, closed form:
    the largest work that arrived faster than it was served, ending at that query)."""
    drift = np.concatenate([[0.0], np.cumsum(service_s - np.diff(issued))])
    return drift - np.minimum.accumulate(np.minimum(drift, 0.0))


@functools.lru_cache(maxsize=64)
def allowed_over(n: int) -> int:
    """The most queries over the limit loadgen's early stopping allows in `n` (MinPassingQueriesFinder, loadgen's
    early_stopping.cc: percentile 0.99, confidence 0.99); -1 when even none would do."""
    t = -1
    while min_passing(t + 1) + t + 1 <= n:
        t += 1
    return t


def judged_p99(latency_ms: np.ndarray) -> float:
    """The p99 the checker judges: loadgen's p99 (index int(0.99 n)) or, stricter on few queries, the latency its
    early stopping needs under the limit (at most `allowed_over(n)` queries above it)."""
    ordered = np.sort(latency_ms)
    n = len(ordered)
    at = min(int(n * PERCENTILE), n - 1)
    stop = n - 1 - max(allowed_over(n), 0)
    return float(max(ordered[at], ordered[max(stop, 0)]))


@dataclass(frozen=True)
class Queue:
    """One latency's fitted fluid queue: queries arriving at their arrival times (issue, or first token for TPOT)
    wait for one server of `service_qps`; each query's latency is base + its wait (x `per_wait`) + its residual."""

    service_qps: float | None
    base_ms: float
    explained: float
    per_wait: np.ndarray
    residual: np.ndarray

    def latencies(self, arrivals: np.ndarray, which: np.ndarray | None = None) -> np.ndarray:
        """Each query's latency (ms) when queries `which` (indices into the fitted ones; all by default) arrive at
        `arrivals` (seconds, one per query, any order)."""
        which = np.arange(len(self.residual)) if which is None else which
        if self.service_qps is None:
            return self.base_ms + self.residual[which]
        order = np.argsort(arrivals, kind="stable")
        wait = np.empty(len(arrivals))
        wait[order] = waits(arrivals[order], 1.0 / self.service_qps)
        return self.base_ms + self.per_wait[which] * wait * 1000 + self.residual[which]


def fit(arrivals: np.ndarray, latency_ms: np.ndarray, per_wait: np.ndarray) -> Queue:
    """The fluid queue that best explains `latency_ms` of queries arriving at `arrivals` (least absolute error;
    `per_wait`: ms of this latency per ms of wait), or none (`service_qps` None) when no queue explains it better
    than a constant: the latencies do not grow with the work waiting."""
    order = np.argsort(arrivals, kind="stable")
    at, values, scale = arrivals[order], latency_ms[order], per_wait[order]
    offered = (len(at) - 1) / (at[-1] - at[0])
    flat = float(np.median(values))
    spread = float(np.mean(np.abs(values - flat))) or 1e-9
    best = (spread, None, flat)
    for mu in SERVICE * offered:
        modelled = scale * waits(at, 1.0 / mu) * 1000
        base = float(np.median(values - modelled))
        error = float(np.mean(np.abs(values - base - modelled)))
        if error < best[0]:
            best = (error, float(mu), base)
    error, mu, base = best
    queue = Queue(mu, base, round(1 - error / spread, 4), per_wait, np.zeros(len(arrivals)))
    return Queue(mu, base, queue.explained, per_wait, latency_ms - queue.latencies(arrivals))


Length = Callable[[float], float]   # a run's issue span at f x its rate, over its own (1 at f = 1)


def schedule(issued: np.ndarray, f: float, length: Length | None) -> tuple[np.ndarray, np.ndarray]:
    """(query indices, issue times) of the run at `f` x its rate: its schedule stretched by 1 / f (loadgen's Server
    schedule is one sequence scaled by 1 / target_qps), over the span `length` gives (None: the same queries, the
    length of a run a query count bounds): cut short, or the record repeated where the run is longer."""
    start, span = issued[0], issued[-1] - issued[0]
    times = (issued - start) / f
    if length is None:
        return np.arange(len(issued)), start + times
    want = span * length(f)
    period = (span + span / max(len(issued) - 1, 1)) / f
    copies = max(int(np.ceil(want / period)), 1)
    which = np.tile(np.arange(len(issued)), copies)
    times = np.tile(times, copies) + np.repeat(np.arange(copies) * period, len(issued))
    keep = times <= want + 1e-9
    keep[:MIN_QUERIES] = True
    return which[keep], start + times[keep]


def _curve(queue: Queue, latencies: Callable[[float], np.ndarray]) -> Forecast:
    """A Forecast of `queue`: the judged p99 of `latencies(f)` (ms per query at FACTORS x the run's rate)."""
    return Forecast(service_qps=None if queue.service_qps is None else round(queue.service_qps, 3),
                    base_ms=round(queue.base_ms, 3), explained=queue.explained if queue.service_qps else 0.0,
                    p99_ms=tuple((f, round(judged_p99(latencies(f)), 3)) for f in FACTORS))


def forecasts(issued: np.ndarray, first: np.ndarray, done: np.ndarray, tokens: np.ndarray,
              length: Length | None = None) -> dict[str, Forecast]:
    """The forecast of each latency a run measured (too few queries: none): end-to-end latency and, where it has
    first tokens, TTFT (queued from the issue) and TPOT where answers are longer than one token (queued from the
    first token: a decode slot is waited for after prefill, so at another rate TPOT's queue is fed by the forecast
    first tokens). `length`: how long a run of these settings is at other rates (`schedule`)."""
    if len(issued) < MIN_QUERIES or issued[-1] <= issued[0]:
        return {}
    latency = fit(issued, (done - issued) * 1000, np.ones(len(issued)))
    out = {"latency": _curve(latency, lambda f: latency.latencies(*reversed(schedule(issued, f, length))))}
    known = ~np.isnan(first)
    if known.sum() < MIN_QUERIES:
        return out
    issued, first, done, tokens = issued[known], first[known], done[known], tokens[known]
    ttft = fit(issued, (first - issued) * 1000, np.ones(len(issued)))
    out["ttft"] = _curve(ttft, lambda f: ttft.latencies(*reversed(schedule(issued, f, length))))
    many = tokens > 1
    if many.sum() >= MIN_QUERIES:
        n = tokens[many] - 1
        tpot = fit(first[many], (done[many] - first[many]) / n * 1000, 1.0 / n)
        among = np.cumsum(many) - 1   # a query's index among those with more than one token

        def tpot_at(f: float) -> np.ndarray:
            which, times = schedule(issued, f, length)
            first_f = times + ttft.latencies(times, which) / 1000
            decoding = many[which]
            return tpot.latencies(first_f[decoding], among[which[decoding]])

        out["tpot"] = _curve(tpot, tpot_at)
    return out


def outlook(fitted: dict[str, Forecast], limits_ms: dict[str, float | None], qps: float,
            explained: float) -> tuple[tuple[float, float], ...]:
    """(rate, margin) a run at `qps` forecasts for a run as long at each rate of FACTORS: the worst forecast p99 over
    its limit among the latencies the scenario limits (`limits_ms` by kind, tasks.tuning.overload.limits). None
    (empty) unless the latency nearest its limit waits in a queue that explains at least `explained` of its spread:
    a latency that follows the load without a queue (a batch's TPOT far under capacity) moves with the rate more
    gently than a queue's, and its forecast would overshoot."""
    limited = [k for k, limit in limits_ms.items() if limit and k in fitted]
    if not limited:
        return ()
    curves = {k: dict(fitted[k].p99_ms) for k in limited}
    nearest = max(limited, key=lambda k: curves[k][1.0] / limits_ms[k])
    if fitted[nearest].service_qps is None or fitted[nearest].explained < explained:
        return ()
    return tuple((round(qps * f, 4), round(max(curves[k][f] / limits_ms[k] for k in limited), 4)) for f in FACTORS)


def checked_margin(fitted: dict[str, Forecast], limits_ms: dict[str, float | None]) -> float | None:
    """The run's own p99s as the checker judges them (`judged_p99`: early stopping's bound where stricter) over their
    limits, the worst of the latencies the scenario limits; None when it measured none of them."""
    ratios = [dict(fitted[k].p99_ms)[1.0] / limit for k, limit in limits_ms.items() if limit and k in fitted]
    return round(max(ratios), 4) if ratios else None


def highest_within(points: tuple[tuple[float, float], ...], aim: float) -> float | None:
    """The rate where an outlook's margin first rises past `aim` (linear between the two rates around it), or its
    highest rate when none does; None when its lowest is over it already."""
    ordered = sorted(points)
    if not ordered or ordered[0][1] > aim:
        return None
    for (q0, m0), (q1, m1) in itertools.pairwise(ordered):
        if m1 > aim:
            return q0 + (q1 - q0) * (aim - m0) / (m1 - m0)
    return ordered[-1][0]
