"""Dispatch behind one SUT: the samples of one loadgen run spread over an engine's independent replicas
(`Endpoint.replicas`), with no hop between the head and a replica.

Each replica has its own keep-alive pool (`tasks.harness.wire.HttpPool`); at most `max_concurrency` requests are on
the wire over all of them, and a sample waits for its turn before it is given a replica, so a replica is chosen when
the request leaves, by the state of that moment. The choice is the live replica with the fewest requests in flight
(least outstanding requests), ties going round the replicas in turn so that an idle system still spreads its samples.

Why requests, not estimated tokens: measured on the simulated engine (8 replicas of 4 decode slots in one process,
32 requests in flight, known answers of lognormal length: mean 60, median 39, p99 341 tokens), charging each request a
running mean of answer lengths less what it had streamed balanced no better than counting requests. The spread of
output tokens over the replicas (standard deviation over mean) of 768 samples issued at once: 0.023 to 0.027 counting
requests, 0.014 to 0.037 counting tokens, 0.110 round robin; issued at 95 samples/s (near capacity): 0.033 to 0.049
against 0.048 to 0.065, round robin 0.110. With alternating lengths of 64 and 4 tokens, 0.019 to 0.054 against 0.046,
round robin 0.88 (every long answer on half the replicas). A request's remaining length is unknown when it is sent and,
with heavy-tailed lengths, a long-running request is the one likely to run longer still, so the tokens already
streamed predict little; the tokens policy also needs a callback on every read of every stream, the requests policy
none. Round robin stays for comparison (`POLICIES`): it gives every replica the same number of samples whatever their
length.

A replica that stops accepting connections (a request fails and its port refuses a new one) or that sends nothing for
`stall_s` with requests in flight is lost: its pool is aborted, every one of its unanswered samples is sent again to a
live replica (each sample is answered to loadgen once: a first token already reported stays reported, the answer is
the new replica's), and `on_lost` gets a `Lost` record naming it, the time and its samples in flight. With no live
replica left a send raises `NoLiveReplica`.

Per replica (`rows`): the samples it answered, its errors, p99 TTFT and TPOT (a Server run, whose first tokens are
reported) or p99 latency (Offline), measured from the moment the request left for that replica, and the samples
moved from it. The rows sum to the samples answered.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from array import array
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from time import monotonic

from tasks.engines import Replica
from tasks.harness.client import Completion, CompletionClient, post
from tasks.harness.wire import HttpPool
from tasks.serving import liveness

POLICIES = ("least-requests", "round-robin")
MOVED_KEPT = 50          # sample indices kept per lost replica, for the log


@dataclass(frozen=True)
class Lost:
    """A replica given up on during a run."""

    replica: str
    node: str
    at: str              # UTC, ISO 8601
    after_s: float       # seconds since the dispatch started
    why: str
    in_flight: int       # its samples in flight then: each is sent again to a live replica

    def line(self) -> str:
        where = f" on {self.node}" if self.node else ""
        return (f"{self.replica}{where} {self.why} at {self.at} ({self.after_s:.1f} s into the run); its "
                f"{self.in_flight} sample(s) in flight go to the live replicas")


class NoLiveReplica(RuntimeError):
    """Every replica of the dispatch is lost."""


def p99_ms(values: array) -> float | None:
    """The 99th percentile (the value at index floor(0.99 n) of the sorted values, as loadgen takes it) in ms."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3)


class _Log:
    """What one replica did in a run."""

    __slots__ = ("errors", "latency", "lost", "moved", "moved_indices", "replica", "samples", "tokens", "tpot",
                 "ttft")

    def __init__(self, replica: Replica) -> None:
        self.replica = replica
        self.samples = self.errors = self.moved = self.tokens = 0
        self.ttft, self.tpot, self.latency = array("d"), array("d"), array("d")
        self.lost: Lost | None = None
        self.moved_indices: list[int] = []

    def row(self) -> dict:
        return {"replica": self.replica.name, "node": self.replica.node, "samples": self.samples,
                "output_tokens": self.tokens, "errors": self.errors, "ttft_p99_ms": p99_ms(self.ttft),
                "tpot_p99_ms": p99_ms(self.tpot), "latency_p99_ms": p99_ms(self.latency), "moved": self.moved,
                "moved_indices": self.moved_indices, "lost": None if self.lost is None else asdict(self.lost)}


class Dispatch:
    """Least outstanding requests over `replicas`; see the module's doc. Runs on one event loop."""

    def __init__(self, replicas: Sequence[Replica], max_concurrency: int, *, stall_s: float | None = None,
                 on_lost: Callable[[Lost], None] | None = None, policy: str = POLICIES[0]) -> None:
        if policy not in POLICIES:
            raise ValueError(f"dispatch policy {policy!r}: one of {', '.join(POLICIES)}")
        self.replicas = tuple(replicas)
        self.pools = [HttpPool(r.base_url, max_connections=max_concurrency) for r in self.replicas]
        self.logs = [_Log(r) for r in self.replicas]
        self.outstanding = [0] * len(self.replicas)
        self.busy_since = [0.0] * len(self.replicas)
        self.live = list(range(len(self.replicas)))   # indices of the live replicas, in order
        self.max_concurrency = max_concurrency
        self.stall_s = stall_s
        self.on_lost = on_lost
        self.round_robin = policy == "round-robin"
        self.turn = 0
        self.started = monotonic()
        self._slots: asyncio.Semaphore | None = None
        self._checks: dict[int, asyncio.Future] = {}

    def pick(self) -> int:
        """The live replica with the fewest requests in flight, scanning from the next in turn (round robin: the
        next in turn)."""
        live = self.live
        if not live:
            raise NoLiveReplica(f"all {len(self.replicas)} replicas are lost")
        n = len(live)
        start = self.turn % n
        self.turn = start + 1
        if self.round_robin:
            return live[start]
        outstanding = self.outstanding
        best = live[start]
        for k in range(start + 1, start + n):
            i = live[k % n]
            if outstanding[i] < outstanding[best]:
                best = i
        return best

    async def send(self, client: CompletionClient, path: str, body: dict, index: int,
                   on_first: Callable[[list[int]], None] | None = None, *, prepared: bool = False) -> Completion:
        """Stream sample `index`'s request `body` to `path` on a live replica, sending it again to another while
        the one it went to is lost; `on_first` gets its first token ids once, whichever replica streamed them."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_concurrency)
        reported, first_at = False, None

        def first(tokens: list[int]) -> None:
            nonlocal reported, first_at
            first_at = monotonic()
            if not reported:
                reported = True
                on_first(tokens)

        async with self._slots:
            payload: bytes | None = None
            while True:
                i = self.pick()
                try:
                    payload = payload or client.payload(path, body, prepared=prepared)
                except (TypeError, ValueError) as e:
                    return self._record(i, Completion(error=f"{type(e).__name__}: {e}"), 0.0, None, on_first)
                first_at = None
                completion, started = await self._stream(i, client, post(path, payload, self.pools[i]),
                                                         first if on_first else None)
                if completion.error and i in self.live and not await self._reachable(i):
                    self.lose(i, "stopped accepting connections")
                if not (completion.error and i not in self.live):
                    return self._record(i, completion, started, first_at, on_first)
                log = self.logs[i]   # lost while it served this sample: it goes to a live replica
                log.moved += 1
                if len(log.moved_indices) < MOVED_KEPT:
                    log.moved_indices.append(index)

    async def _stream(self, i: int, client: CompletionClient, request: bytes,
                      first: Callable[[list[int]], None] | None) -> tuple[Completion, float]:
        if self.outstanding[i] == 0:
            self.busy_since[i] = monotonic()
        self.outstanding[i] += 1
        started = monotonic()
        try:
            return await client.send_bytes(request, first, self.pools[i]), started
        finally:
            self.outstanding[i] -= 1

    def _record(self, i: int, completion: Completion, started: float, first_at: float | None,
                on_first: Callable | None) -> Completion:
        log, now = self.logs[i], monotonic()
        log.samples += 1
        log.tokens += len(completion.tokens)
        if completion.error:
            log.errors += 1
        elif on_first is None:
            log.latency.append(now - started)
        elif first_at is not None:
            log.ttft.append(first_at - started)
            if len(completion.tokens) > 1:
                log.tpot.append((now - first_at) / (len(completion.tokens) - 1))
        return completion

    async def _reachable(self, i: int) -> bool:
        """Whether replica `i` accepts a TCP connection; one check at a time per replica."""
        check = self._checks.get(i)
        if check is None or check.done():
            check = self._checks[i] = asyncio.ensure_future(liveness.reachable_async(self.replicas[i].base_url))
        return await asyncio.shield(check)

    def lose(self, i: int, why: str) -> None:
        """Give replica `i` up: no new request goes to it, and every one on the wire to it ends and is sent again."""
        if i not in self.live:
            return
        self.live.remove(i)
        replica = self.replicas[i]
        lost = Lost(replica.name, replica.node, datetime.now(UTC).isoformat(timespec="milliseconds"),
                    round(monotonic() - self.started, 3), why, self.outstanding[i])
        self.logs[i].lost = lost
        self.pools[i].abort()
        if self.on_lost is not None:
            self.on_lost(lost)

    def check_stalls(self) -> None:
        """Lose each replica that sent nothing for `stall_s` while it had requests in flight the whole time (a hung
        replica keeps its port open: only its silence tells)."""
        if not self.stall_s:
            return
        now = monotonic()
        for i in list(self.live):
            if self.outstanding[i]:
                silent = now - max(self.pools[i].last_read, self.busy_since[i])
                if silent > self.stall_s:
                    self.lose(i, f"hung (nothing for {silent:.0f} s with {self.outstanding[i]} request(s) in "
                                 "flight, its port still open)")

    def rows(self) -> list[dict]:
        """One row per replica (see the module's doc)."""
        return [log.row() for log in self.logs]

    async def aclose(self) -> None:
        for pool in self.pools:
            await pool.aclose()


class Losses:
    """The replicas lost in one run, over all its worker processes: each is named on stderr (the run's harness.log)
    when it is lost, and one more than `max_lost` (the plan's engine.replicas.max_lost; None: no limit) ends the run
    with liveness.REPLICAS_LOST. Called from any thread."""

    def __init__(self, max_lost: int | None) -> None:
        self.max_lost = max_lost
        self.lost: list[Lost] = []
        self.lock = threading.Lock()

    def add(self, lost: Lost) -> None:
        with self.lock:
            self.lost.append(lost)
            count = len(self.lost)
        limit = "" if self.max_lost is None else f" of at most {self.max_lost}"
        sys.stderr.write(f"podium: replica lost ({count}{limit}): {lost.line()}\n")
        sys.stderr.flush()
        if self.max_lost is not None and count > self.max_lost:
            names = ", ".join(f"{x.replica} at {x.at}" for x in self.lost)
            liveness.end_run(liveness.REPLICAS_LOST, f"{count} replicas lost during the run ({names}), more than "
                                                     f"engine.replicas.max_lost ({self.max_lost}) allows")
