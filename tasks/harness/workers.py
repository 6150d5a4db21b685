"""Client worker processes: one loadgen SUT whose samples are served by N processes, so that the harness's CPU
(reading streams, decoding events, re-tokenizing text) spreads over N cores instead of one.

The runner's process keeps loadgen. `issue` deals each sample to a worker in turn (Server queries arrive one at a
time, so a rotating start spreads them) as packed (sample id, index) pairs on a pipe. Each worker runs the same
`SampleServer` as the in-process SUT, with its share of `max_concurrency`, and sends its answers back on a second
pipe: records of (kind, sample id, n_tokens, payload), gathered per turn of its event loop so that a busy worker
makes one write for many answers. A reader thread per worker turns each message into one `FirstTokenComplete` and
one `QuerySamplesComplete` call.

Workers start (spawn, so no loadgen or loop thread is inherited) and build their requests before loadgen starts;
each says it is ready, so no query waits on a worker's start-up. A worker dies with the runner (PR_SET_PDEATHSIG).
A worker that exits during the run ends the run: with its own code when it found the engine down or hung
(`liveness.ENGINE_GONE`), else with code 1 and a line naming the worker; loadgen would otherwise wait forever for
the worker's samples.

With an engine of several replicas (`Endpoint.replicas`) each worker owns a share of them (replica i goes to worker
i mod W; at most one worker per replica) and dispatches its samples over its own (`tasks.harness.dispatch`), so the
least-outstanding choice is exact inside a worker with no state shared between processes on the hot path; the
runner deals each sample to the worker with the fewest samples outstanding per live replica it owns, which keeps
the workers level when their replicas differ in speed or some are lost. A shared view (counters in shared memory)
would need a cross-process lock or atomic per request at 4,000 samples/s; ownership needs none. A worker reports
each replica it loses at once (`LOST`: the runner names it and counts it against engine.replicas.max_lost), and a
worker with none left hands its unanswered samples back (`BOUNCE`), which the runner deals to the others.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import multiprocessing
import os
import struct
import sys
import threading
from multiprocessing.connection import Connection

import mlperf_loadgen as lg
import numpy as np

from tasks.harness.child import client_for, die_with_parent, requests_for
from tasks.harness.dispatch import Losses, Lost
from tasks.harness.sut import MAX_ERRORS_KEPT, SampleServer, SutStats, response
from tasks.harness.timing import QueryClock
from tasks.serving import liveness

RECORD = struct.Struct("<cQiI")   # kind, loadgen sample id, n_tokens, payload bytes; then the payload
PAIR = np.dtype([("id", "<u8"), ("index", "<u4")])
FIRST, DONE = b"F", b"D"          # record kinds
LOST, BOUNCE = b"L", b"B"         # a replica lost (payload: its Lost as JSON); a sample handed back (n_tokens: index)
WHOLESALE = 4096                  # samples in one batch over which they are dealt in proportion (`fewest_per_replica`)
READY, STATS = b"R", b"S"         # whole-message kinds: the worker can serve; the worker's statistics (JSON)
STOP = b""                        # the runner's last command: no more samples


def shares(total: int, workers: int) -> list[int]:
    """`total` in-flight requests split over `workers`: sizes differ by at most one and add up to `total`."""
    return [total // workers + (i < total % workers) for i in range(workers)]


def worker_count(requested: int, replicas: int) -> int:
    """How many worker processes serve a run: as requested, but no more than the engine's replicas (when it has
    several), each owning one at least."""
    return min(requested, replicas) if replicas else requested


def split(total: int, weights: list[int]) -> list[int]:
    """`total` split in proportion to `weights` (largest remainders), each part at least one."""
    raw = [total * w / sum(weights) for w in weights]
    parts = [max(1, int(r)) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: raw[i] - int(raw[i]), reverse=True)[:max(0, total - sum(parts))]:
        parts[i] += 1
    return parts


def fewest_per_replica(outstanding: list[int], live: list[int], samples: int) -> list[int]:
    """How many of `samples` each worker gets: one at a time to the worker with the fewest outstanding per live
    replica (none to a worker with none live). A batch over WHOLESALE (an Offline query: every sample at once, none
    outstanding yet) is split in proportion to the live replicas instead, so a query of millions costs no loop."""
    if samples > WHOLESALE:
        raw = [samples * n / sum(live) for n in live]
        counts = [int(r) for r in raw]
        for w in sorted(range(len(raw)), key=lambda w: raw[w] - counts[w], reverse=True)[:samples - sum(counts)]:
            counts[w] += 1
        return counts
    counts, load = [0] * len(live), list(outstanding)
    heap = [((load[w] + 1) / live[w], w) for w in range(len(live)) if live[w]]
    heapq.heapify(heap)
    for _ in range(samples):
        _, w = heap[0]
        counts[w] += 1
        load[w] += 1
        heapq.heapreplace(heap, ((load[w] + 1) / live[w], w))
    return counts


def worker_setups(setup: dict, workers: int) -> list[dict]:
    """Each worker's setup: the run's, with its share of the endpoint's replicas (replica i to worker i mod W)."""
    endpoint = json.loads(setup["endpoint"])
    replicas = endpoint.get("replicas") or []
    if not replicas:
        return [setup] * workers
    return [setup | {"endpoint": json.dumps(endpoint | {"replicas": replicas[w::workers]})} for w in range(workers)]


class PooledSUT:
    """The loadgen SUT over `workers` processes; `stats` holds their merged statistics after exit.

    `setup` is the run's spec and endpoint as JSON (`tasks.harness.child.client_for`, `requests_for`): plain data,
    sent to each spawned worker, with its share of the replicas when the engine has several (`worker_setups`);
    `max_lost`: the replicas the run may lose (`tasks.harness.dispatch.Losses`)."""

    def __init__(self, setup: dict, *, workers: int, max_concurrency: int, report_first_token: bool,
                 max_lost: int | None = None) -> None:
        if not 1 < workers <= max_concurrency:
            raise ValueError(f"harness_workers {workers}: must be at least 2 here and at most max_concurrency "
                             f"({max_concurrency}), each worker needs a request of its own")
        context = multiprocessing.get_context("spawn")
        self.commands: list[Connection] = []
        self.events: list[Connection] = []
        self.procs = []
        setups = worker_setups(setup, workers)
        owned = [len(json.loads(s["endpoint"]).get("replicas") or ()) for s in setups]
        self.live = owned if any(owned) else []   # live replicas per worker; [] : one engine, samples dealt in turn
        self.outstanding = [0] * workers
        self.losses = Losses(max_lost)
        self.setup_endpoint = setup["endpoint"]
        concurrency = split(max_concurrency, owned) if self.live else shares(max_concurrency, workers)
        for i, (share, own) in enumerate(zip(concurrency, setups, strict=True)):
            command_in, command_out = context.Pipe(duplex=False)
            event_in, event_out = context.Pipe(duplex=False)
            proc = context.Process(target=worker_main, name=f"harness-worker-{i}", daemon=True,
                                   args=(own, share, report_first_token, command_in, event_out, os.getpid()))
            self.commands.append(command_out)
            self.events.append(event_in)
            self.procs.append((proc, command_in, event_out))
        self.readers = [threading.Thread(target=self._read, args=(i,), name=f"harness-reader-{i}", daemon=True)
                        for i in range(workers)]
        self.stats = SutStats()
        self.clock = QueryClock()
        self.worker_stats: list[dict] = []
        self.next = 0
        self.lock = threading.Lock()
        self.deal_lock = threading.Lock()   # loadgen's thread deals samples, reader threads deal bounced ones

    def __enter__(self) -> PooledSUT:
        for proc, command_in, event_out in self.procs:
            proc.start()
            command_in.close()   # the worker's ends
            event_out.close()
        for i, events in enumerate(self.events):   # every worker has its client and requests before loadgen starts
            try:
                message = events.recv_bytes()
            except EOFError:
                self._lost(i)
            if message != READY:
                raise RuntimeError(f"harness worker {i}: expected its ready message, got {message[:40]!r}")
        for reader in self.readers:
            reader.start()
        self.handle = lg.ConstructSUT(self.issue, self.flush)
        return self

    def __exit__(self, *exc: object) -> None:
        lg.DestroySUT(self.handle)
        for commands in self.commands:
            commands.send_bytes(STOP)
        for reader in self.readers:
            reader.join(timeout=60)
        for proc, _, _ in self.procs:
            proc.join(timeout=30)
        self._merge()

    def issue(self, samples: list[lg.QuerySample]) -> None:
        pairs = np.array([(s.id, s.index) for s in samples], dtype=PAIR)
        self.clock.on_issue([s.id for s in samples])
        self.deal(pairs)

    def deal(self, pairs: np.ndarray) -> None:
        """Send each sample to a worker: in turn, or, with replicas, to the one with the fewest samples outstanding
        per live replica (a worker with none live gets nothing; with none live anywhere the run ends)."""
        n = len(self.commands)
        with self.deal_lock:
            if not self.live:
                start, self.next = self.next, (self.next + len(pairs)) % n
                for k in range(min(n, len(pairs))):
                    self.commands[(start + k) % n].send_bytes(pairs[k::n].tobytes())
                return
            with self.lock:
                live, outstanding = list(self.live), list(self.outstanding)
            if not any(live):
                liveness.end_run(liveness.ENDPOINT_DOWN, "no replica of the engine is left")
            counts = fewest_per_replica(outstanding, live, len(pairs))
            start = 0
            for w, count in enumerate(counts):
                if count:
                    with self.lock:
                        self.outstanding[w] += count
                    self.commands[w].send_bytes(pairs[start:start + count].tobytes())
                    start += count

    def flush(self) -> None:
        pass

    def _read(self, i: int) -> None:
        events = self.events[i]
        while True:
            try:
                message = events.recv_bytes()
            except EOFError:
                self._lost(i)
            if message[:1] == STATS:
                with self.lock:
                    self.worker_stats.append(json.loads(message[1:]))
                return
            firsts, dones, bounced, keep = [], [], [], []
            offset = 0
            while offset < len(message):
                kind, sample_id, n_tokens, size = RECORD.unpack_from(message, offset)
                offset += RECORD.size
                data = np.frombuffer(message, dtype=np.uint8, count=size, offset=offset) if size else np.zeros(0)
                offset += size
                if kind == LOST:
                    self._lost_replica(i, Lost(**json.loads(data.tobytes())))
                elif kind == BOUNCE:
                    bounced.append((sample_id, n_tokens))
                else:
                    keep.append(data)
                    (firsts if kind == FIRST else dones).append(response(sample_id, data, n_tokens))
            if self.live:
                with self.lock:
                    self.outstanding[i] -= len(dones) + len(bounced)
            if bounced:
                self.deal(np.array(bounced, dtype=PAIR))
            if firsts:   # a sample's first token always comes before its answer, also within one message
                self.clock.on_first([r.id for r in firsts])
                lg.FirstTokenComplete(firsts)
            if dones:
                self.clock.on_done([(r.id, r.n_tokens) for r in dones])
                lg.QuerySamplesComplete(dones)

    def _lost(self, i: int) -> None:
        """A worker's pipe closed before its statistics came: it died (while starting or during the run). End the
        run; loadgen would wait for its samples otherwise."""
        proc = self.procs[i][0]
        proc.join(timeout=10)
        code = proc.exitcode
        if code not in liveness.ENGINE_GONE:   # the worker has said why when it found the engine down or hung
            sys.stderr.write(f"podium: harness worker {i} (pid {proc.pid}) exited with code {code}; ending the run "
                             "(its log lines, if any, are above)\n")
        sys.stderr.flush()
        os._exit(code if code in liveness.ENGINE_GONE else 1)

    def _lost_replica(self, i: int, lost: Lost) -> None:
        with self.lock:
            self.live[i] -= 1
        self.losses.add(lost)

    def _merge(self) -> None:
        rows = {}
        for part in self.worker_stats:
            for name in ("issued", "completed", "failed", "output_tokens", "engine_token_mismatches"):
                setattr(self.stats, name, getattr(self.stats, name) + part[name])
            self.stats.errors += part["errors"][:MAX_ERRORS_KEPT - len(self.stats.errors)]
            self.stats.token_source = part["token_source"]
            rows |= {row["replica"]: row for row in part["replicas"]}
        order = [r["name"] for r in json.loads(self.setup_endpoint).get("replicas") or ()]
        self.stats.replicas = [rows[name] for name in order if name in rows]


class Outbox:
    """A worker's answers, packed as records and written as one message per turn of its event loop (`loop` is
    the SampleServer's, set once the server exists)."""

    def __init__(self, events: Connection) -> None:
        self.events = events
        self.loop = None
        self.records: list[bytes] = []

    def first(self, sample_id: int, tokens: list[int]) -> None:
        self._add(FIRST, sample_id, len(tokens), np.asarray(tokens, dtype=np.int32).tobytes())

    def lost(self, lost: Lost) -> None:
        self._add(LOST, 0, 0, json.dumps(dataclasses.asdict(lost)).encode())

    def bounce(self, sample_id: int, index: int) -> None:
        self._add(BOUNCE, sample_id, index, b"")

    def done(self, sample_id: int, data: np.ndarray, n_tokens: int) -> None:
        self._add(DONE, sample_id, n_tokens, data.tobytes())

    def _add(self, kind: bytes, sample_id: int, n_tokens: int, payload: bytes) -> None:
        if not self.records:
            self.loop.call_soon(self.flush)
        self.records += (RECORD.pack(kind, sample_id, n_tokens, len(payload)), payload)

    def flush(self) -> None:
        message, self.records = b"".join(self.records), []
        self.events.send_bytes(message)


def worker_main(setup: dict, max_concurrency: int, report_first_token: bool, commands: Connection,
                events: Connection, parent: int) -> None:
    """A worker's body: build the client and requests, say ready, serve each batch until STOP, send statistics."""
    die_with_parent(parent)
    client, requests = client_for(setup, max_concurrency), requests_for(setup)
    outbox = Outbox(events)
    server = SampleServer(client, requests, done=outbox.done, first=outbox.first if report_first_token else None,
                          stall_s=setup.get("stall_s"), on_lost=outbox.lost, bounce=outbox.bounce)
    outbox.loop = server.loop
    server.start()
    events.send_bytes(READY)
    while batch := commands.recv_bytes():
        pairs = np.frombuffer(batch, dtype=PAIR)
        server.submit(list(zip(pairs["id"].tolist(), pairs["index"].tolist(), strict=True)))
    server.close()
    events.send_bytes(STATS + json.dumps(dataclasses.asdict(server.stats)).encode())
