"""What every measured run shares, whichever client measures it (`tasks.harness`: loadgen; `tasks.endpoints`: the
MLCommons endpoints client): what it needs of its engine, where a failed attempt's logs go, how its results row is
judged and summed up in one line, and the accelerated clock's fall-back for a run INVALID for its latency alone
(`on_slower_clocks`, tasks.clock).

A run that cannot change by retrying (INVALID, client errors, accuracy under the target) raises `RunRejected`
carrying its record; the steps neither retry nor cache it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol, TypeVar

from submission.base.errors import RunFailed
from submission.plan.selection import rerun
from submission.results.runs import RunRecord
from tasks import clock
from tasks.engines import Endpoint

T = TypeVar("T")
log = logging.getLogger("podium.measuring")


class Engine(Protocol):
    """What a run needs of its engine (tasks.serving.session.EngineSession): its endpoint (launched on first use; with
    replicas, as many as a performance run or else an accuracy run needs), the stall watchdog's seconds, the replicas
    a run may lose (None: one serving instance), its logs for an error, whether it still runs, and a way to stop it."""

    stall_s: float | None
    max_lost: int | None

    def endpoint(self, performance: bool = True) -> Endpoint: ...

    def alive(self) -> bool: ...

    def log_report(self, lines: int = 20) -> str: ...

    def close(self) -> None: ...


class RunRejected(RunFailed):
    """A finished run whose result cannot be used; `record` is its results row."""

    def __init__(self, message: str, record: RunRecord, fix: str | None = None) -> None:
        super().__init__(message, fix=fix or "see the run's logs in its run folder; adjust the plan and run it again ("
                                            f"{rerun(record.system, record.benchmark, record.scenario)})")
        self.record = record


def problems(rec: RunRecord) -> list[str]:
    """Why a finished run's results row cannot be used (none: it can)."""
    out = []
    if rec.mode == "performance" and not rec.valid:
        out.append(f"Result is {rec.validity}: {'; '.join(rec.invalid_reasons)}")
    if rec.num_errors:
        out.append(f"{rec.num_errors} {rec.harness} error(s)")
    if rec.sut_failures:
        out.append(f"{rec.sut_failures} request(s) failed")
    if rec.accuracy_pass is False:
        out.append(f"accuracy misses a target or upper limit ({rec.accuracy_metric} {rec.accuracy}); "
                   "see accuracy.txt")
    return out


def set_aside(run_dir: Path, why: str = "failed") -> Path:
    """Move a run folder no later step may read to `<key>.<why>-<time>`: a failed attempt's (`failed`), or a cached
    run's that `podium run --only` measures again (`replaced`, tasks.steps.call_cached)."""
    aside = run_dir.with_name(f"{run_dir.name}.{why}-{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 10**6:06d}")
    run_dir.rename(aside)
    return aside


def on_slower_clocks(label: str, run_dir: Path, measure: Callable[[float | None], T],
                     latency_alone: Callable[[T], bool]) -> tuple[T, float | None]:
    """Measure a run on the client's clock and, under an accelerated one, again on each slower clock of the ladder
    while it comes out INVALID for its latency alone (tasks.clock: the fall-back); returns what the last measurement
    gave and the clock it ran on (None: the real clock, measured once). `measure(factor)` runs the client on clock
    `factor` and returns what its judge needs; `latency_alone` judges it. Each faster attempt's folder is set aside as
    `<key>.clock-x10-<time>` (kept, never read again). The last clock's result stands, whatever it is."""
    factor, *slower = clock.ladder()
    result = measure(factor)
    for next_factor in slower:
        if not latency_alone(result):
            break
        aside = set_aside(run_dir, f"clock-{clock.label(factor)}")
        log.warning("%s: INVALID for its latency alone on the %s clock (kept in %s); measuring it again on %s", label,
                    clock.label(factor), aside, clock.label(next_factor))
        factor, result = next_factor, measure(next_factor)
    return result, factor


def utc_now() -> str:
    """ISO 8601 in UTC to the millisecond: `2026-12-01T18:30:00.123+00:00`."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def summary(rec: RunRecord) -> str:
    """One line of what a run measured, naming only what it has: `VALID, 1594.1 Tokens/s, TTFT p99 23.4 ms`."""
    parts = [rec.validity or ""] if rec.valid is not None else []
    if rec.metric is not None:
        parts.append(f"{rec.metric:g} {rec.unit or ''}".strip())
    parts += [f"{name} p99 {value:g} ms" for name, value in (("TTFT", rec.ttft_p99_ms), ("TPOT", rec.tpot_p99_ms))
              if value is not None]
    if rec.harness == "endpoints" and rec.latency_p99_ms is not None:
        parts.append(f"latency p99 (early stopping) {rec.latency_p99_ms:g} ms")
    if rec.accuracy is not None:
        parts.append(f"{rec.accuracy_metric} {rec.accuracy:g}")
    if rec.accuracy_reference is not None:
        parts.append(f"reference evaluator {rec.accuracy_reference:g}")
    parts += [f"warning: {w}" for w in rec.warnings]
    return ", ".join(p for p in parts if p) or "no result"
