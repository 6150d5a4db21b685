"""Overload signals of a search run: does the server keep up with the rate offered, or is a queue building that a
short probe ends before it shows?

Above a server's capacity the queue grows slowly: a 640-query probe can end with its p99 still under the limit while
a full-length run at the same rate, ten times longer, is far over it (docs/search.md, "What a probe predicts of a
full-length run"). Three signals tell, all from the per-query times a probe already has (issued, first token, done;
`QueryTimes`):

- **served vs offered**: queries completed per second in the second half of the issue window, against the rate
  offered (the target) and against the queries due in that window (those issued one typical latency earlier: what a
  server that keeps up completes there, whatever the schedule's local bursts);
- **latency trend**: the median TTFT, TPOT and end-to-end latency of the queries issued in the second half against
  those issued in the second quarter (the first quarter is the ramp-up, when batches are still filling);
- **backlog**: queries issued but not completed when the last one is issued, against Little's law's steady backlog
  (the issue rate x the second quarter's median latency).

A probe is **overloaded** when it served less than `1 - tolerance` of both the target rate and what was due: a
server under capacity serves what arrives, so a burst in the schedule or jitter cannot fail a probe alone. Its
verdict then looks ahead: the backlog grows by (target - served) a second, so a query at the end of a full-length run
at the same rate (`full_s`, from `submission.budget.cost`) waits that much longer; that wait is added to the p99 of the
latency the backlog waits in (TTFT when the excess queries have no first token yet, TPOT spread over the answer's
tokens when they wait after it, or end-to-end latency), and the probe fails
when the sum is over its limit, even when the short run itself is VALID.

The **queue** a run shows is fitted too (`tasks.tuning.forecast`): the fluid queue whose service rate best explains
each latency. Where it explains most of a latency's spread (`EXPLAINED`), its service rate is the capacity the
probe is judged against: a probe offered more than that is over capacity even when it still serves nearly what it is
offered (a queue just over capacity grows slowly), and the backlog's growth is offered / service - 1. The p99 of the
last quarter's queries against the second quarter's (the **p99 trend**) is shown beside it; on its own it does not
decide, since the schedule's own bursts move it 20 to 40 % on servers under capacity.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import Field

from submission.base.schema import Strict
from tasks.tuning.forecast import Forecast, Length, checked_margin, forecasts, highest_within, outlook

TOLERANCE = 0.05       # served / offered under 1 - this is a queue growing (a 320-query half varies 2 to 4 %)
SATURATED = 1.5        # a run serving under 1 - 1.5 x TOLERANCE of it was saturated: what it served is the capacity
MIN_QUERIES = 64       # fewer than this: too few to split in halves, no signals
KINDS = ("ttft", "tpot", "latency")
EXPLAINED = 0.6        # a fitted queue explaining this share of a latency's spread is the server's (measured on the
                       # simulated server: 0.95-1.0 for a prefill queue, 0.7-0.98 for a decode-slot queue at and over
                       # capacity, 0.35-0.65 where TPOT follows the batch and no queue grows)


@dataclass(frozen=True)
class QueryTimes:
    """Seconds on one clock, one entry per query: when it was issued, its first token (nan: none reported), when it
    completed, and its output tokens (0: unknown)."""

    issued: np.ndarray
    first: np.ndarray
    done: np.ndarray
    tokens: np.ndarray

    @classmethod
    def of(cls, issued, first, done, tokens=None) -> QueryTimes:
        issued = np.asarray(issued, dtype=float)
        order = np.argsort(issued, kind="stable")

        def pick(values) -> np.ndarray:
            return np.asarray(values, dtype=float)[order]

        return cls(issued[order], pick(first if first is not None else np.full(len(issued), np.nan)), pick(done),
                   pick(tokens if tokens is not None else np.zeros(len(issued))))

    def latencies(self) -> dict[str, np.ndarray]:
        """Per query, in ms: TTFT and TPOT ((done - first) / (tokens - 1)) where known, and end-to-end latency."""
        out = {"latency": (self.done - self.issued) * 1000}
        if not np.all(np.isnan(self.first)):
            out["ttft"] = (self.first - self.issued) * 1000
            many = self.tokens > 1
            if many.any():
                tpot = np.full(len(self.issued), np.nan)
                tpot[many] = (self.done[many] - self.first[many]) / (self.tokens[many] - 1) * 1000
                out["tpot"] = tpot
        return out


class Signals(Strict):
    """What a run said about keeping up (rates in queries/s, latencies as medians in ms)."""

    span_s: float                   # first to last issue
    offered_qps: float              # issued per second over the whole run
    due_qps: float                  # per second, the queries due in the second half (issued one latency earlier)
    served_qps: float               # completed per second in the second half
    backlog: int                    # issued minus completed at the last issue
    steady_backlog: float           # Little's law: issue rate x the second quarter's median latency
    first_ms: dict[str, float]      # median TTFT / TPOT / latency of the queries issued in the second quarter
    second_ms: dict[str, float]     # ... and in the second half
    tokens: float = 0.0             # median output tokens per query (0: unknown)
    before_first: int | None = None     # of the backlog, queries with no first token yet (None: not reported)
    steady_before_first: float = 0.0    # Little's law for those: issue rate x the second quarter's median TTFT
    p99_first_ms: dict[str, float] = Field(default_factory=dict)   # p99 TTFT / TPOT / latency of the queries
    p99_last_ms: dict[str, float] = Field(default_factory=dict)    # issued in the second quarter, and the last
    forecast: dict[str, Forecast] = Field(default_factory=dict)    # each latency's fitted queue and its p99 at other
                                                                   # rates (tasks.tuning.forecast)

    def p99_trend(self) -> str:
        """The p99 of TTFT and TPOT (else end-to-end latency) from the second quarter's queries to the last
        quarter's, e.g. "TPOT 52.7 -> 66.3 ms"."""
        kinds = [k for k in ("ttft", "tpot") if k in self.p99_first_ms] or ["latency"]
        return ", ".join(f"{_name(k)} {self.p99_first_ms[k]:.4g} -> {self.p99_last_ms[k]:.4g} ms" for k in kinds
                         if k in self.p99_first_ms and k in self.p99_last_ms)

    def describe_queues(self) -> str:
        """What each latency's fitted queue serves, where it explains most of it: "its queue serves TPOT 136.2 q/s"."""
        queues = ", ".join(f"{_name(k)} {q:.4g} q/s" for k in KINDS if (q := self.queue_qps(k)))
        return f"its queue serves {queues}" if queues else ""

    def queue_qps(self, kind: str) -> float | None:
        """The service rate of the queue fitted to `kind`, where it explains most of that latency's spread."""
        fitted = self.forecast.get(kind)
        if fitted is None or fitted.service_qps is None or fitted.explained < EXPLAINED:
            return None
        return fitted.service_qps

    def rise(self, kind: str) -> float:
        """The median `kind`'s relative rise from the second quarter to the second half (0 when unknown)."""
        first, second = self.first_ms.get(kind), self.second_ms.get(kind)
        return second / first - 1 if first and second is not None else 0.0

    def describe(self, target_qps: float | None = None) -> str:
        offered = target_qps or self.offered_qps
        trend = ", ".join(f"{_name(k)} {self.first_ms[k]:.4g} -> {self.second_ms[k]:.4g} ms"
                          for k in KINDS if k in self.first_ms and k in self.second_ms)
        return (f"served {self.served_qps:.4g} q/s of {offered:.4g} offered ({100 * self.served_qps / offered:.0f} %, "
                f"{self.due_qps:.4g} due); median {trend}; p99 {self.p99_trend() or '-'}; backlog {self.backlog} at "
                f"the end (steady {self.steady_backlog:.0f}); {self.describe_queues() or 'no queue'}")


def _name(kind: str) -> str:
    return kind.upper() if kind != "latency" else kind


def measure(times: QueryTimes, length: Length | None = None) -> Signals | None:
    """The signals of one run; None when it had too few queries to tell. `length`: how long a run of the same settings
    is at other rates, relative to this one (`tasks.tuning.forecast.schedule`; None: the same queries)."""
    n = len(times.issued)
    if n < MIN_QUERIES:
        return None
    start, end = float(times.issued[0]), float(times.issued[-1])
    span = end - start
    if span <= 0:
        return None
    mid, half = start + span / 2, span / 2
    quarter = (times.issued >= start + span / 4) & (times.issued < mid)
    second = times.issued >= mid
    last = times.issued >= start + 3 * span / 4
    first_ms, second_ms, p99_first, p99_last = {}, {}, {}, {}
    for kind, values in times.latencies().items():
        a, b, c = values[quarter], values[second], values[last]
        a, b, c = a[~np.isnan(a)], b[~np.isnan(b)], c[~np.isnan(c)]
        if len(a) and len(b):
            first_ms[kind], second_ms[kind] = round(float(np.median(a)), 3), round(float(np.median(b)), 3)
        if len(a) and len(c):
            p99_first[kind], p99_last[kind] = _p99(a), _p99(c)
    lag = first_ms.get("latency", 0.0) / 1000
    due = np.count_nonzero((times.issued >= mid - lag) & (times.issued <= end - lag)) / half
    served = np.count_nonzero((times.done >= mid) & (times.done <= end)) / half
    backlog = int(n - np.count_nonzero(times.done <= end))
    known = times.tokens[times.tokens > 0]
    offered = (n - 1) / span
    before_first = None if "ttft" not in first_ms else int(np.count_nonzero(~(times.first <= end)))
    return Signals(span_s=round(span, 3), offered_qps=round(offered, 3), due_qps=round(due, 3),
                   served_qps=round(served, 3), backlog=backlog, steady_backlog=round(offered * lag, 1),
                   first_ms=first_ms, second_ms=second_ms, tokens=float(np.median(known)) if len(known) else 0.0,
                   before_first=before_first,
                   steady_before_first=round(offered * first_ms.get("ttft", 0.0) / 1000, 1),
                   p99_first_ms=p99_first, p99_last_ms=p99_last,
                   forecast=forecasts(times.issued, times.first, times.done, times.tokens, length))


def _p99(values: np.ndarray) -> float:
    return round(float(np.sort(values)[int(len(values) * 0.99)]), 3)


def queued_at(signals: Signals, limited: list[str]) -> str:
    """Which limited latency a growing backlog lands in: TTFT when the excess over the steady backlog waits for its
    first token (a prefill queue), TPOT when it waits after it (for a decode slot), else end-to-end latency."""
    if signals.before_first is not None and {"ttft", "tpot"} & set(limited):
        excess_first = signals.before_first - signals.steady_before_first
        excess_after = (signals.backlog - signals.before_first) - (signals.steady_backlog - signals.steady_before_first)
        kind = "ttft" if excess_first >= excess_after else "tpot"
        if kind in limited:
            return kind
    return "latency" if "latency" in limited else limited[0]


@dataclass(frozen=True)
class Assessment:
    overloaded: bool                 # served under (1 - tolerance) x both the target and what was due, or a target
                                     # over the capacity earlier saturated runs served
    fails: bool                      # overloaded, and the p99 at the end of a full-length run would be over its limit
    why: str
    margin: float | None = None      # that extrapolated p99 over its limit (None: not overloaded)


def extrapolate(signals: Signals, kind: str, p99_ms: float, growth: float, ahead_s: float) -> float:
    """`kind`'s p99 `ahead_s` seconds later, each second adding `growth` seconds of wait (spread over the answer's
    tokens after the first for TPOT)."""
    wait_ms = growth * ahead_s * 1000
    if kind == "tpot":
        wait_ms /= max(signals.tokens - 1, 1.0)
    return p99_ms + wait_ms


def assess(signals: Signals | None, target_qps: float, p99_ms: dict[str, float | None],
           limits_ms: dict[str, float | None], full_s: float, tolerance: float = TOLERANCE,
           capacity_qps: float | None = None) -> Assessment:
    """Whether a run at `target_qps` shows overload, and whether a full-length run of `full_s` seconds at that rate
    would fail by it: the wait its queues add by its end, on the p99 (`p99_ms`, against `limits_ms`, by kind) of each
    limited latency they wait in. Over capacity: it served short of what was offered and due, or it was offered more
    than one of its own fitted queues serves (`Signals.queue_qps`), or than `capacity_qps` (what earlier saturated
    runs of the deployment served: a short probe near capacity has not saturated yet, what it serves is not its
    capacity). A latency with a fitted queue grows at inflow / service - 1 seconds a second (TPOT's inflow is what
    the TTFT queue lets through); the latency the backlog waits in (`queued_at`) at offered / capacity - 1, the
    capacity being the saturated runs', else what the run served."""
    if signals is None:
        return Assessment(False, False, "no overload signals (too few queries timed)")
    served = signals.served_qps
    limited = [k for k in KINDS if limits_ms.get(k) and k in signals.second_ms]
    queues = {k: q for k in limited if (q := signals.queue_qps(k)) is not None}
    known = [*queues.values(), *([capacity_qps] if capacity_qps else [])]
    short = served < (1 - tolerance) * min(target_qps, signals.due_qps)
    over = bool(known) and target_qps > min(known)
    if not (short or over) or not limited or not served:
        return Assessment(False, False, f"keeps up: {signals.describe(target_qps)}")
    growth = {}   # seconds of extra wait per second of run, by the latency it lands in
    for kind in limited:
        if kind in queues:   # TPOT waits after the first token: fed by what the TTFT queue lets through
            inflow = min(target_qps, queues.get("ttft", target_qps)) if kind == "tpot" else target_qps
            growth[kind] = inflow / queues[kind] - 1
    backlog = queued_at(signals, limited)
    if backlog not in queues:   # a probe near capacity serves less than a saturated run
        growth[backlog] = target_qps / (capacity_qps or served) - 1
    ahead = max(full_s - signals.span_s, 0.0)
    predicted = {k: extrapolate(signals, k, p99_ms.get(k) or signals.second_ms[k], max(g, 0.0), ahead)
                 for k, g in growth.items()}
    kind = max(predicted, key=lambda k: predicted[k] / limits_ms[k])
    seen = f", capacity {capacity_qps:.4g} q/s as saturated runs served" if capacity_qps else ""
    head = f"over capacity: {signals.describe(target_qps)}{seen}"
    margin = round(predicted[kind] / limits_ms[kind], 4)
    if predicted[kind] <= limits_ms[kind]:
        return Assessment(True, False, f"{head}; {_name(kind)} p99 {predicted[kind]:.4g} ms by the end of a "
                                       f"{full_s:.0f} s full-length run, within its limit {limits_ms[kind]:g}", margin)
    return Assessment(True, True, f"{head}; {_name(kind)} p99 would reach {predicted[kind]:.4g} ms by the end of a "
                                  f"{full_s:.0f} s full-length run (limit {limits_ms[kind]:g})", margin)


def limits(scenario) -> dict[str, float | None]:
    """The latencies a scenario limits (`submission.rules.ScenarioRules`), in ms by kind: TTFT and TPOT where it has
    token limits, else end-to-end latency."""
    if scenario.ttft_ms or scenario.tpot_ms:
        return {"ttft": scenario.ttft_ms, "tpot": scenario.tpot_ms}
    return {"latency": scenario.latency_ms}


class Capacity:
    """What saturated runs of one deployment served: a run is saturated when it served clearly less than it was
    offered and due (under 1 - SATURATED x tolerance of both; a probe just over capacity is still filling its queue
    and serves less than the server can). The median of those is the capacity later probes are judged against."""

    def __init__(self, tolerance: float = TOLERANCE) -> None:
        self.tolerance = tolerance
        self.served: list[float] = []

    def add(self, probe) -> None:
        s = probe.signals
        if s is not None and s.served_qps < (1 - SATURATED * self.tolerance) * min(probe.qps, s.due_qps):
            self.served.append(s.served_qps)

    @property
    def qps(self) -> float | None:
        return float(np.median(self.served)) if self.served else None


def early_stopping_only(probe) -> bool:
    """Whether loadgen called the run INVALID by early stopping alone, with its p99s within their limits (margin
    under 1). Early stopping bounds the p99 from the queries a run has: a 640-query probe's bound is well above its
    p99, a full-length run's (ten times the queries) close to it, so such a probe says nothing against the rate."""
    return (not probe.valid and bool(probe.reasons) and all("early stopping" in r for r in probe.reasons)
            and probe.margin is not None and probe.margin <= 1)


def judged(probe, limits_ms: dict[str, float | None], full_s: float, capacity: Capacity | None = None):
    """A probe (`tasks.tuning.bisection.Probe`) with its overload verdict: a short probe whose signals say a
    full-length run of `full_s` seconds at its rate would fail fails too, with why, and its margin is the larger of
    its own and that predicted one (`full_margin`; the bisection aims by it); every probe says why it passed or
    failed (`why`). Full-length runs keep the checker's verdict: they are what the checker sees, and their own record
    forecasts the rate at their limits (`outlook`, tasks.tuning.forecast). `capacity` learns from each run."""
    capacity = capacity or Capacity()
    p99 = {"ttft": probe.ttft_p99_ms, "tpot": probe.tpot_p99_ms, "latency": probe.latency_p99_ms}
    verdict = assess(probe.signals, probe.qps, p99, limits_ms, full_s, capacity.tolerance, capacity.qps)
    capacity.add(probe)
    if probe.signals is not None and probe.signals.forecast:
        probe = probe.model_copy(update={"outlook": outlook(probe.signals.forecast, limits_ms, probe.qps, EXPLAINED),
                                         "checked_margin": checked_margin(probe.signals.forecast, limits_ms)})
    checker = "; ".join(probe.reasons) if probe.reasons else probe.checked
    if probe.stage != "probe":
        at = highest_within(probe.outlook, 1.0)
        ahead = f"; its own record forecasts its limits at {at:.4g} q/s" if at else ""
        return probe.model_copy(update={"why": f"{probe.verdict} by the checker ({checker}); {verdict.why}{ahead}"})
    margin = max(m for m in (probe.margin, verdict.margin, 0.0) if m is not None) or probe.margin
    probe = probe.model_copy(update={"margin": margin, "full_margin": verdict.margin})
    if early_stopping_only(probe) and not verdict.overloaded:
        return probe.model_copy(update={
            "valid": True,
            "why": f"PASS for the search: the checker's INVALID is early stopping alone at this probe's length "
                   f"({checker}), its p99s within their limits (margin {probe.margin:g}); a full-length run has the "
                   f"queries the estimate needs, and the confirmation decides; {verdict.why}"})
    if not probe.valid or not verdict.fails:
        return probe.model_copy(update={"why": f"{probe.verdict} by the checker ({checker}); {verdict.why}"})
    return probe.model_copy(update={"valid": False, "reasons": (*probe.reasons, verdict.why),
                                    "why": f"FAIL: the short run is {checker}, but it is {verdict.why}"})
