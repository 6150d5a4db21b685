"""Per-query times of a loadgen run, as the SUT sees them: when loadgen issued each sample, when its first token
and its answer went back, and its token count. Written beside the loadgen logs as `query_times.json` (loadgen's own
trace is off: it is large and slows the run); the peak-QPS search reads them for its overload signals
(tasks.tuning.overload: served vs offered, the latency trend, the backlog at the end).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

FILE = "query_times.json"


class QueryClock:
    """Time stamps by sample id, on the monotonic clock; safe to call from loadgen's and the SUT's threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.issued: dict[int, float] = {}
        self.first: dict[int, float] = {}
        self.done: dict[int, tuple[float, int]] = {}

    def on_issue(self, ids: list[int]) -> None:
        now = time.monotonic()
        with self.lock:
            self.issued.update(dict.fromkeys(ids, now))

    def on_first(self, ids: list[int]) -> None:
        now = time.monotonic()
        with self.lock:
            for i in ids:
                self.first.setdefault(i, now)

    def on_done(self, pairs: list[tuple[int, int]]) -> None:
        """`pairs`: (sample id, output tokens)."""
        now = time.monotonic()
        with self.lock:
            for i, n in pairs:
                self.done[i] = (now, n)

    def write(self, run_dir: Path) -> None:
        """The samples answered, in issue order, as seconds since the first issue (first: null where none came)."""
        with self.lock:
            ids = sorted((i for i in self.issued if i in self.done), key=self.issued.__getitem__)
            t0 = min(self.issued.values(), default=0.0)
            data = {"issued": [round(self.issued[i] - t0, 6) for i in ids],
                    "first": [round(self.first[i] - t0, 6) if i in self.first else None for i in ids],
                    "done": [round(self.done[i][0] - t0, 6) for i in ids],
                    "tokens": [self.done[i][1] for i in ids]}
        (Path(run_dir) / FILE).write_text(json.dumps(data))


def read(run_dir: Path) -> dict | None:
    """The run's query times, or None when it has none (an older run, or an Offline run)."""
    path = Path(run_dir) / FILE
    return json.loads(path.read_text()) if path.is_file() else None
