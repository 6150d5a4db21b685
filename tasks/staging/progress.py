"""How far a `podium fetch` is: each item an equal share of the whole (a Prefect progress artifact shows it) and each
download's bytes (tasks/staging/fetch.py and the downloads it runs report here)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SHARE = 1000                              # one item's share of the whole fetch, in the progress reported


def _ignore(*_: Any) -> None:
    return None


@dataclass(frozen=True)
class Progress:
    """How a fetch shows how far it is: `bytes(label, done, total)` for a download or a conversion read byte by byte
    (a hub file's bars are huggingface_hub's own); `share(done, total)` for the whole fetch, each item an equal
    share (what a Prefect progress artifact shows)."""

    bytes: Callable[[str, int, int], None] = _ignore
    share: Callable[[int, int], None] = _ignore


@dataclass(frozen=True)
class Meter:
    """One item's part of the whole fetch's progress: from `low` to `high` of its share."""

    progress: Progress
    index: int
    count: int
    low: float = 0.0
    high: float = 1.0

    def item(self, done: int, total: int) -> None:
        part = self.low + (self.high - self.low) * (done / total if total else 1.0)
        self.progress.share(self.index * SHARE + round(SHARE * min(part, 1.0)), self.count * SHARE)

    def bytes(self, label: str, done: int, total: int) -> None:
        self.progress.bytes(label, done, total)
        if total:   # 0: the size is not known yet
            self.item(done, total)

    def within(self, low: float, high: float) -> Meter:
        return Meter(self.progress, self.index, self.count, low, high)


QUIET = Progress()                        # a fetch that reports no progress
