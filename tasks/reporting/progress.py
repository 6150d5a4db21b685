"""Live progress on the run a person started: the loadgen runs and audits done of those planned, as a progress
artifact and one log line each on the top-level flow run, whichever subflow ran them (a benchmark under a
submission under a bring-up, a search under a sweep), so the run's page and `prefect deployment run --watch` show
each one as it finishes.

The top-level flow opens the tally (`tracking`) with the number of runs it plans; a subflow that opens one inside
it joins that tally. Subflows run in the flow's own process, so the tallies live here, one per top-level run.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from tasks.reporting.artifacts import create_on, top_run_id

KEY = "progress"
_LOCK = threading.Lock()
_TALLIES: dict[str, Tally] = {}


@dataclass
class Tally:
    """Runs done of `total` (an upper bound when `bounded`: a search stops when its bracket is narrow enough)."""

    flow_run_id: str
    total: int
    bounded: bool = False
    done: int = 0
    artifact_id: Any = None
    logger: Any = None          # the top-level run's logger (run_logger_of)

    @property
    def percent(self) -> float:
        return 100.0 if self.total <= 0 else round(min(100.0, 100.0 * self.done / self.total), 1)

    @property
    def of(self) -> str:
        return f"{self.done} of {'at most ' if self.bounded else ''}{self.total} runs done"


def _publish(tally: Tally, text: str, value: float) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import ArtifactUpdate

    if tally.artifact_id is None:
        tally.artifact_id = create_on(tally.flow_run_id, "progress", value, key=KEY, description=text)
        return
    with get_client(sync_client=True) as client:
        client.update_artifact(tally.artifact_id, ArtifactUpdate(data=value, description=text))


def run_logger_of(flow_run_id: str) -> logging.LoggerAdapter:
    """A logger whose lines go to the flow run `flow_run_id` (the top-level run), from any of its subflows."""
    from prefect.client.orchestration import get_client
    from prefect.logging.loggers import flow_run_logger

    with get_client(sync_client=True) as client:
        return flow_run_logger(client.read_flow_run(UUID(flow_run_id)))


@contextlib.contextmanager
def tracking(total: int, *, bounded: bool = False) -> Iterator[None]:
    """Count the runs finished inside: a new tally when this is the top-level run, else the top-level run's. A
    search's tally that ends without an error ends at 100 % (its total is only a bound)."""
    top = top_run_id()
    with _LOCK:
        owner = top is not None and top not in _TALLIES
        if owner:
            _TALLIES[str(top)] = Tally(str(top), total, bounded)
    if not owner:
        yield
        return
    tally = _TALLIES[str(top)]
    tally.logger = run_logger_of(tally.flow_run_id)
    _publish(tally, f"{tally.of}: none finished yet", 0.0)
    try:
        yield
        _publish(tally, f"{tally.of}: finished", 100.0 if tally.bounded else tally.percent)
    finally:
        with _LOCK:
            _TALLIES.pop(tally.flow_run_id, None)


def finished(line: str) -> None:
    """One run finished (cached, failed or skipped ones too): `line` says which and what it measured."""
    top = top_run_id()
    tally = _TALLIES.get(str(top)) if top else None
    if tally is None:
        return
    with _LOCK:
        tally.done += 1
    _publish(tally, f"{tally.of}; last: {line}", tally.percent)
    tally.logger.info("%s; last: %s", tally.of, line)
