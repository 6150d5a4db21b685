"""Peak-QPS search: the bracketing, bisection and confirmation logic, as plain functions over a `judge`.

A judge runs (or recalls) one run at a rate, measured by the plan's client, and says what that client's checker
would say: `judge(qps, stage) -> Probe`, with stage "probe" (a short run) or "confirm" (a full-length run). The
search:

1. probes at `start_fraction` x the Offline throughput; while probes fail it steps down by `step_down`, while they
   pass it steps up by `step_up`, until one passing and one failing rate bracket the peak;
2. bisects the bracket (geometric midpoint) until `high / low - 1 <= precision`;
3. confirms the highest passing rate with one full-length run; its own record (the queue fitted to its per-query
   times, replayed at other rates: tasks.tuning.forecast) says where a full-length run's p99 meets the limit, and a
   second full-length run goes there, half a precision under it: down when the first failed (`step_down`), up when
   it passed with room (`step_up`). With `max_confirmations` 2 (the default) that is all: the answer is the
   highest rate a full-length run passed, or none with the reason, never an unconfirmed guess.

Short probes are judged by what they predict of a full-length run (tasks.tuning.overload: served against offered,
the queue fitted to them, its growth over the longer run), and stop once they took `probe_budget` full-length runs'
time, so a search measures at most about four full-length runs' time in all.

Rates are rounded to 4 significant digits, so a re-run asks for exactly the same rates and finds them cached.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

from pydantic import Field

from submission.base.errors import RunFailed
from submission.base.schema import Strict
from tasks.tuning.forecast import highest_within
from tasks.tuning.overload import Signals

Stage = Literal["offline", "probe", "confirm"]   # the search itself judges probes and confirmations


class SearchSettings(Strict):
    precision: float = Field(0.02, gt=0, lt=1, description="stop when the bracket is this narrow (relative)")
    start_fraction: float = Field(1.0, gt=0, description="first probe at this fraction of the Offline throughput")
    step_down: float = Field(0.8, gt=0, lt=1, description="after a failing probe, try this fraction of it")
    step_up: float = Field(1.25, gt=1, description="after a passing probe (while none failed), try this multiple")
    max_probes: int = Field(24, ge=2, description="short probes at most")
    max_confirmations: int = Field(2, ge=1, description="full-length runs at most (the first one included): each is "
                                                        "the plan's whole length (600 s of the whole system)")
    probe_budget: float = Field(2.0, gt=0, description="short probes stop once their seconds reach this many "
                                                       "full-length runs' (the judge's `full_seconds`), and the "
                                                       "search confirms the highest passing rate")
    probe_duration_ms: int = Field(60_000, ge=0, description="a probe's min_duration (a full run: 600 s)")
    probe_queries: int = Field(640, ge=1, description="a probe's samples at least: loadgen's min_query_count (early "
                                                        "stopping needs ~460); the endpoints client, which has none, "
                                                        "runs long enough to issue them, and at least the 662 its "
                                                        "early-stopping p99 needs (tasks.endpoints.probe)")
    refine_up: bool = Field(False, description="after the confirmation passes, also try higher rates with "
                                               "full-length runs (short probes can be pessimistic too)")
    overload_tolerance: float = Field(0.05, gt=0, lt=1, description="a probe serving less than 1 - this of the rate "
                                      "offered (and of what was due) is over capacity (tasks.tuning.overload)")
    interpolate: bool = Field(True, description="aim each bisection step where the p99 margins say the limit is "
                                                "crossed, kept within the middle of the bracket; False: midpoint")


class Probe(Strict):
    """One run of the search: its rate, its verdict (loadgen's, or the endpoints checker's bar) and what was
    measured."""

    qps: float
    stage: Stage
    valid: bool
    reasons: tuple[str, ...] = ()
    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None
    latency_p99_ms: float | None = None         # the endpoints client's: its early-stopping estimate, the checker's
    metric: float | None = None                 # the scenario's result (e.g. completed tokens/s)
    completed_qps: float | None = None          # completed samples per second (loadgen's, or the client's qps)
    margin: float | None = None                 # the worst p99 over its limit (TTFT, TPOT or latency); < 1 is under
    duration_s: float = 0.0                     # wall seconds the run took (when it ran)
    samples: int | None = None                  # samples the client issued, from its report (the endpoints client's
                                                # n_samples_issued); None: no report says
    measured_s: float | None = None             # the run's length on the client's clock, from its report (duration_ns)
    planned_samples: int | None = None          # what the one model of a run's length says it issues (endpoints:
                                                # the client's own arithmetic, submission.budget.run_length)
    cached: bool = False                        # recalled from the probe cache, not run now
    run_dir: str | None = None
    signals: Signals | None = None              # served vs offered, latency trend, backlog (tasks.tuning.overload)
    # what its telemetry says at a glance (tasks.serving.telemetry.summary: mean GPU use per role, peak KV use and
    # queue, tokens/s); empty when nothing was sampled
    telemetry: dict[str, float] = Field(default_factory=dict)
    full_margin: float | None = None            # a probe over capacity: the margin its queue's growth predicts
                                                # for a full-length run at its rate (None: it keeps up)
    checked_margin: float | None = None         # its p99s over their limits as the checker judges this many
                                                # queries: early stopping's bound where stricter (tasks.tuning.forecast)
    outlook: tuple[tuple[float, float], ...] = ()   # (rate, margin) its own queue forecasts for a run as long at
                                                    # rates 0.7-1.5x its own (tasks.tuning.forecast)
    why: str = ""                               # why it passed or failed: the checker's verdict and the signals'

    @property
    def verdict(self) -> str:
        return "PASS" if self.valid else "FAIL"

    @property
    def checked(self) -> str:
        """The run's own verdict in the checker's words, as measured (before the search's judgement, which may turn
        `valid` either way: tasks.tuning.overload.judged)."""
        return "VALID" if self.valid else "INVALID"


class SearchResult(Strict):
    qps: float | None                           # the highest rate a full-length run confirmed
    confirmed: bool
    start_qps: float
    bracket: tuple[float, float | None]         # (highest passing probe, lowest failing probe)
    trace: tuple[Probe, ...]
    message: str = ""

    @property
    def runs(self) -> int:
        """Runs actually made (not recalled from the cache)."""
        return sum(not p.cached for p in self.trace)

    @property
    def run_seconds(self) -> float:
        return round(sum(p.duration_s for p in self.trace if not p.cached), 3)

    @property
    def confirmation(self) -> Probe | None:
        passing = [p for p in self.trace if p.stage == "confirm" and p.valid and p.qps == self.qps]
        return passing[-1] if passing else None


Judge = Callable[[float, Stage], Probe]


def margin(scenario, ttft_ms: float | None, tpot_ms: float | None, latency_ms: float | None) -> float | None:
    """A probe's `margin`: the worst p99 over its limit (`submission.rules.ScenarioRules`), TTFT and TPOT where the
    scenario limits them, else end-to-end latency; None for Offline. Each client passes the p99 its checker judges
    (loadgen's, the endpoints client's early-stopping estimate)."""
    pairs = [(ttft_ms, scenario.ttft_ms), (tpot_ms, scenario.tpot_ms)] if scenario.ttft_ms or scenario.tpot_ms \
        else [(latency_ms, scenario.latency_ms)]
    ratios = [value / limit for value, limit in pairs if value is not None and limit]
    return round(max(ratios), 4) if ratios else None


def round_qps(qps: float) -> float:
    """4 significant digits: stable cache keys and user.conf values."""
    if qps <= 0 or not math.isfinite(qps):
        raise ValueError(f"a rate must be positive and finite, got {qps}")
    return float(f"{qps:.4g}")


def _narrow(low: float, high: float, precision: float) -> bool:
    return high / low - 1 <= precision


MAX_STEP = 4          # a step-down learnt from a p99 margin goes at most this many precisions under the failed rate
AIM = 2.5             # ... and aims its p99 this many precisions under the limit: loadgen's early stopping bounds a
                      # full-length run's p99 a little above the p99 itself (~p99.3 at 6400 queries)
TOTAL_RUNS = 4        # everything a search measures, probes included, within this many full-length runs' time
NEAR = 0.2            # the margin's elasticity is fitted over the probes within 20 % of the failed rate
SAFE = (0.25, 0.75)   # an interpolated step stays within the middle half of the bracket (in log rate)


def _midpoint(low: float, high: float, m_low: float | None = None, m_high: float | None = None) -> float | None:
    """The next rate between a passing `low` and a failing `high`, rounded; None when rounding leaves nothing
    between them. With p99 margins on both sides of 1, where the margin (linear in log rate and log margin)
    crosses 1, kept in the middle half of the bracket so a bad guess costs little; otherwise (no margins, or a
    failure by early stopping with its p99 still under the limit) the geometric midpoint."""
    t = 0.5
    if m_low and m_high and m_low < 1 < m_high:
        t = min(max(-math.log(m_low) / (math.log(m_high) - math.log(m_low)), SAFE[0]), SAFE[1])
    mid = round_qps(math.exp(math.log(low) + t * (math.log(high) - math.log(low))))
    return None if mid in (low, high) else mid


def over_budget(judge: Judge, trace: list[Probe], qps: float, budget_runs: float | None) -> bool:
    """Whether one more short probe (as long as the last) would take the probes past `budget_runs` full-length runs'
    time at `qps`, counting recalled probes at the seconds they took (never, for a judge that cannot say how
    long a full-length run lasts)."""
    full_seconds = getattr(judge, "full_seconds", None)
    if budget_runs is None or full_seconds is None:
        return False
    made = [p.duration_s for p in trace if p.stage == "probe"]   # cached ones too: a re-run asks the same rates
    full = full_seconds(qps)
    if not made or made[-1] >= full:   # probes as long as full-length runs: stopping them early saves nothing
        return False
    return sum(made) + made[-1] > budget_runs * full


def bisect(judge: Judge, stage: Stage, low: float, high: float, precision: float, budget: int,
           trace: list[Probe], interpolate: bool = True, budget_runs: float | None = None) -> tuple[float, float, int]:
    """Narrow a (passing, failing) pair to `precision`; returns the new pair and the budget left."""
    while budget > 0 and not _narrow(low, high, precision) and not over_budget(judge, trace, low, budget_runs):
        margins = {p.qps: p.margin for p in trace if p.stage == stage} if interpolate else {}
        mid = _midpoint(low, high, margins.get(low), margins.get(high))
        if mid is None:
            break
        probe = judge(mid, stage)
        trace.append(probe)
        budget -= stage == "confirm" or not probe.cached
        low, high = (mid, high) if probe.valid else (low, mid)
    return low, high, budget


def _down(failed: Probe, settings: SearchSettings) -> float:
    """The factor to the next probe after a failing one, while none passed: just under the rate it served when it
    fell behind (its capacity), else where its p99 margin would be 1 at elasticity 2; within [step_down,
    1 - 2 x precision] (a smaller step would leave the bracket open for another probe)."""
    s = failed.signals
    if s is not None and s.served_qps < failed.qps * (1 - settings.overload_tolerance):
        step = s.served_qps / failed.qps * (1 - settings.precision)
    elif failed.margin and failed.margin > 1:
        step = failed.margin ** -0.5
    else:
        step = settings.step_down
    return min(max(step, settings.step_down), 1 - 2 * settings.precision)


def bracket(judge: Judge, start: float, settings: SearchSettings,
            trace: list[Probe]) -> tuple[float | None, float | None, int]:
    """(highest passing, lowest failing) probe rates around the peak, stepping from `start`; budget left."""
    budget = settings.max_probes
    qps = round_qps(start)
    low = high = None
    while budget > 0:
        probe = judge(qps, "probe")
        trace.append(probe)
        budget -= not probe.cached
        if probe.valid:
            low = qps
            if high is not None or over_budget(judge, trace, qps, settings.probe_budget):
                break   # bracketed, or out of probe time: the confirmation's own record looks higher
            qps = round_qps(qps * settings.step_up)
        else:
            high = qps
            if low is not None:
                break
            qps = round_qps(qps * _down(probe, settings))
            if qps < start * 1e-3:
                break
    return low, high, budget


def elasticity(trace: list[Probe], near: float | None = None) -> float:
    """How steeply the p99 margin rises with the rate (d log margin / d log rate), fitted over the probes with
    margins (those within NEAR of the rate `near` when at least two differ there: the curve bends at the knee),
    within [1, 4]; 2 when fewer than two differ."""
    points = [(math.log(p.qps), math.log(p.margin)) for p in trace if p.stage == "probe" and p.margin]
    if near:
        close = [(x, y) for x, y in points if abs(x - math.log(near)) <= math.log(1 + NEAR)]
        points = close if len({x for x, _ in close}) >= 2 else points
    if len({x for x, _ in points}) < 2:
        return 2.0
    mx, my = sum(x for x, _ in points) / len(points), sum(y for _, y in points) / len(points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return min(max(slope, 1.0), 4.0)


def forecast_rate(run: Probe, settings: SearchSettings) -> tuple[float | None, str]:
    """The rate a full-length run's own record puts at its limits (`Probe.outlook`: its fitted queue replayed at
    other rates, tasks.tuning.forecast), half a precision under it; None with why when the record forecasts
    nothing (no per-query times, or every rate forecast is over the limits)."""
    if not run.outlook:
        return None, "no per-query times to forecast from"
    at = highest_within(run.outlook, 1.0)
    if at is None:
        return None, f"its queue forecasts every rate down to {min(q for q, _ in run.outlook):g} q/s over the limits"
    queues = run.signals.describe_queues() if run.signals is not None else ""
    return at * (1 - settings.precision / 2), (f"where its own record ({queues or 'no queue'}) forecasts its p99 "
                                               f"at the limit, {at:.4g} q/s, half a precision under it")


def step_down(failed: Probe, trace: list[Probe], settings: SearchSettings) -> tuple[float, str]:
    """The next full-length rate after `failed`, learnt from that run's own record: where its fitted queue forecasts
    its p99 at the limit (`forecast_rate`), half a precision under it. Without a forecast (no per-query times, or
    latencies no queue explains): the rate it served when it fell behind (its capacity; half a precision under it),
    and the rate where its p99 margin would fall to its limit at the probes' elasticity near it (the margin the
    checker judges at its length, early stopping included; else the p99's against an aim of 1 - AIM precisions), at
    most MAX_STEP precisions down; the lower, at least one precision under the failed rate."""
    forecast, why = forecast_rate(failed, settings)
    if forecast is not None:
        return round_qps(min(forecast, failed.qps * (1 - settings.precision / 2))), why
    estimates = {}
    s = failed.signals
    if s is not None and s.served_qps < failed.qps * (1 - settings.overload_tolerance):
        estimates["the rate it served"] = s.served_qps
    margin, aim = (failed.checked_margin, 1.0) if failed.checked_margin else (failed.margin,
                                                                              1 - AIM * settings.precision)
    if margin and margin > aim:   # over its limit, or under it but failed by early stopping
        e = elasticity(trace, failed.qps)
        estimates[f"where its p99 margin {margin:g} falls to {aim:g} (elasticity {e:.2g})"] = \
            failed.qps * (aim / margin) ** (1 / e)
    if not estimates and margin:   # failed at its limit (by early stopping on a p99 at the limit): just under it
        return round_qps(failed.qps * (1 - settings.precision)), f"its p99 margin {margin:g}: a precision down"
    if not estimates:
        return round_qps(failed.qps * (1 - 2 * settings.precision)), "no measurement to learn from: two precisions down"
    how = min(estimates, key=estimates.get)
    qps = estimates[how]
    if how == "the rate it served":   # just under it (the margin's estimate has its headroom in its aim)
        qps *= 1 - settings.precision / 2
    else:   # a margin's elasticity near the knee is steeper than the probes': step at most MAX_STEP precisions on its
        qps = max(qps, failed.qps * (1 - MAX_STEP * settings.precision))   # word alone
    return round_qps(min(qps, failed.qps * (1 - settings.precision))), f"{how}: {estimates[how]:.4g} q/s"


def full_run_seconds(judge: Judge, trace: list[Probe] | tuple[Probe, ...], qps: float) -> float | None:
    """How long a full-length run at `qps` takes: the judge's model of its length (`full_seconds`), stretched by what
    the last full-length run took over what that model said of it (its start, its drain); None for a judge that
    cannot say."""
    full_seconds = getattr(judge, "full_seconds", None)
    if full_seconds is None:
        return None
    made = [p for p in trace if p.stage == "confirm" and p.duration_s]
    stretch = max(made[-1].duration_s / full_seconds(made[-1].qps), 1.0) if made else 1.0
    return full_seconds(qps) * stretch


def affordable(judge: Judge, trace: list[Probe], qps: float) -> bool:
    """Whether one more full-length run at `qps` keeps everything the search measured within TOTAL_RUNS full-length
    runs' time, a full-length run being as long as the last one took (always, for a judge that cannot say how long
    a full-length run lasts)."""
    full = full_run_seconds(judge, trace, qps)
    return full is None or sum(p.duration_s for p in trace) + full <= TOTAL_RUNS * full


def step_up(passed: Probe, trace: list[Probe], settings: SearchSettings) -> tuple[float | None, str]:
    """A higher rate worth one more full-length run after `passed` (a full-length run that passed), with why: where
    its own record forecasts its p99 at the limit (`forecast_rate`); without a forecast, where its p99 margin would
    reach its limit at the probes' elasticity near it (the margin the checker judges, else the p99's against 1 - AIM
    precisions), at most MAX_STEP precisions up. None when that is under half a precision up (no room worth a run)
    or nothing says. Short probes can be pessimistic (a queue still filling in a short run, early stopping on few
    queries): the full-length run's own record is the better evidence."""
    forecast, why = forecast_rate(passed, settings)
    if passed.outlook:
        if forecast is None or forecast < passed.qps * (1 + settings.precision / 2):
            return None, why
        return round_qps(forecast), why
    margin, aim = (passed.checked_margin, 1.0) if passed.checked_margin else (passed.margin,
                                                                              1 - AIM * settings.precision)
    if not margin or margin >= aim:
        return None, "its p99 margin leaves no room"
    factor = min((aim / margin) ** (1 / elasticity(trace, passed.qps)), 1 + MAX_STEP * settings.precision)
    if factor * (1 - settings.precision / 2) < 1 + settings.precision / 2:
        return None, "its p99 margin leaves no room"
    return (round_qps(passed.qps * factor * (1 - settings.precision / 2)),
            f"where its p99 margin {margin:g} reaches {aim:g}, half a precision under it")


def confirm(judge: Judge, qps: float, settings: SearchSettings, trace: list[Probe]) -> tuple[float | None, str]:
    """The highest rate a full-length run confirms, at or below `qps`; None when none did within the budget. After a
    failed full-length run the next rate is learnt from what it measured (`step_down`); with two full-length runs
    (the default) a second failure ends the search with the highest rate any full-length run passed, or none."""
    budget = settings.max_confirmations
    probe = judge(qps, "confirm")
    trace.append(probe)
    budget -= 1   # cached or not: a re-run decides alike
    if probe.valid:
        if settings.refine_up and budget > 0:
            return _refine_up(judge, qps, settings, budget, trace)
        up, how = step_up(probe, trace, settings) if budget > 0 else (None, "")
        if up is not None and affordable(judge, trace, up):
            higher = judge(up, "confirm")
            trace.append(higher)
            if higher.valid:
                return up, (f"confirmed at {qps:g} q/s with a full-length run, which left room; a second one "
                            f"confirmed {up:g} q/s ({how})")
            return qps, (f"confirmed at {qps:g} q/s with a full-length run; a second one at {up:g} q/s ({how}) "
                         f"did not pass")
        return qps, f"confirmed at {qps:g} q/s with a full-length run"
    high, low, notes = qps, None, []
    while budget > 0 and low is None:
        candidate, how = step_down(trace[-1], trace, settings)
        notes.append(f"{candidate:g} q/s from {how}")
        known = [p.qps for p in trace if p.stage == "confirm" and p.valid and candidate <= p.qps < high]
        if known:   # a full-length run passed there already: it is the answer, never run again
            low = max(known)
            break
        probe = judge(candidate, "confirm")
        trace.append(probe)
        budget -= 1   # cached or not: a re-run decides alike
        low, high = (candidate, high) if probe.valid else (None, candidate)
    if low is None:
        passed = [p.qps for p in trace if p.stage == "confirm" and p.valid and p.qps < qps]
        tried = ", ".join(f"{p.qps:g}" for p in trace if p.stage == "confirm")
        if passed:
            return max(passed), (f"full-length runs failed at {tried} q/s; the highest rate a full-length run passed "
                                 f"is {max(passed):g} q/s")
        last = trace[-1]
        return None, (f"no full-length run passed ({tried} q/s, {settings.max_confirmations} at most); the last "
                      f"said: {'; '.join(last.reasons) or 'INVALID'}; stepped down to {'; '.join(notes)}")
    if budget > 0:
        low, high, _ = bisect(judge, "confirm", low, high, settings.precision, budget, trace, settings.interpolate)
    return low, (f"the short probes passed {qps:g} q/s but a full-length run did not; stepped down to "
                 f"{'; '.join(notes)}; confirmed {low:g} q/s")


def _refine_up(judge: Judge, low: float, settings: SearchSettings, budget: int,
               trace: list[Probe]) -> tuple[float, str]:
    """From a confirmed rate, step up by precision, 2x, 4x ... with full-length runs until one fails, then bisect."""
    step, high = settings.precision, None
    while budget > 0 and high is None:
        candidate = round_qps(low * (1 + step))
        probe = judge(candidate, "confirm")
        trace.append(probe)
        budget -= 1   # cached or not: a re-run decides alike
        low, high, step = (candidate, None, step * 2) if probe.valid else (low, candidate, step)
    if high is not None:
        low, high, _ = bisect(judge, "confirm", low, high, settings.precision, budget, trace, settings.interpolate)
    return low, f"confirmed at {low:g} q/s with full-length runs, refined upwards"


def search(judge: Judge, start_qps: float, settings: SearchSettings) -> SearchResult:
    """Bracket, bisect, confirm. Raises RunFailed when no rate passes at all."""
    trace: list[Probe] = []
    low, high, budget = bracket(judge, start_qps, settings, trace)
    if low is None:
        raise RunFailed(f"no probe passed between {start_qps:g} and {trace[-1].qps:g} q/s; the last one said: "
                        f"{'; '.join(trace[-1].reasons) or 'INVALID'}",
                        fix="check the engine and its latency at low load, or start lower with --start-qps")
    message = ""
    if high is None:
        message = (f"every probe passed up to {low:g} q/s (the probe budget ran out before one failed); "
                   f"raise max_probes or start_fraction")
    else:
        low, high, budget = bisect(judge, "probe", low, high, settings.precision, budget, trace,
                                   settings.interpolate, settings.probe_budget)
    qps, note = confirm(judge, low, settings, trace)
    return SearchResult(qps=qps, confirmed=qps is not None, start_qps=round_qps(start_qps), bracket=(low, high),
                        trace=tuple(trace), message="; ".join(m for m in (message, note) if m))
