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
"""

from __future__ import annotations

import dataclasses
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
from tasks.harness.sut import MAX_ERRORS_KEPT, SampleServer, SutStats, response
from tasks.harness.timing import QueryClock
from tasks.serving import liveness

RECORD = struct.Struct("<cQiI")   # kind, loadgen sample id, n_tokens, payload bytes; then the payload
PAIR = np.dtype([("id", "<u8"), ("index", "<u4")])
FIRST, DONE = b"F", b"D"          # record kinds
READY, STATS = b"R", b"S"         # whole-message kinds: the worker can serve; the worker's statistics (JSON)
STOP = b""                        # the runner's last command: no more samples


def shares(total: int, workers: int) -> list[int]:
    """`total` in-flight requests split over `workers`: sizes differ by at most one and add up to `total`."""
    return [total // workers + (i < total % workers) for i in range(workers)]


class PooledSUT:
    """The loadgen SUT over `workers` processes; `stats` holds their merged statistics after exit.

    `setup` is the run's spec and endpoint as JSON (`tasks.harness.child.client_for`, `requests_for`): plain data,
    sent to each spawned worker."""

    def __init__(self, setup: dict, *, workers: int, max_concurrency: int, report_first_token: bool) -> None:
        if not 1 < workers <= max_concurrency:
            raise ValueError(f"harness_workers {workers}: must be at least 2 here and at most max_concurrency "
                             f"({max_concurrency}), each worker needs a request of its own")
        context = multiprocessing.get_context("spawn")
        self.commands: list[Connection] = []
        self.events: list[Connection] = []
        self.procs = []
        for i, share in enumerate(shares(max_concurrency, workers)):
            command_in, command_out = context.Pipe(duplex=False)
            event_in, event_out = context.Pipe(duplex=False)
            proc = context.Process(target=worker_main, name=f"harness-worker-{i}", daemon=True,
                                   args=(setup, share, report_first_token, command_in, event_out, os.getpid()))
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
        n = len(self.commands)
        start, self.next = self.next, (self.next + len(pairs)) % n
        for k in range(min(n, len(pairs))):
            self.commands[(start + k) % n].send_bytes(pairs[k::n].tobytes())

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
            firsts, dones, keep = [], [], []
            offset = 0
            while offset < len(message):
                kind, sample_id, n_tokens, size = RECORD.unpack_from(message, offset)
                offset += RECORD.size
                data = np.frombuffer(message, dtype=np.uint8, count=size, offset=offset) if size else np.zeros(0)
                offset += size
                keep.append(data)
                (firsts if kind == FIRST else dones).append(response(sample_id, data, n_tokens))
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

    def _merge(self) -> None:
        for part in self.worker_stats:
            for name in ("issued", "completed", "failed", "output_tokens", "engine_token_mismatches"):
                setattr(self.stats, name, getattr(self.stats, name) + part[name])
            self.stats.errors += part["errors"][:MAX_ERRORS_KEPT - len(self.stats.errors)]
            self.stats.token_source = part["token_source"]


class Outbox:
    """A worker's answers, packed as records and written as one message per turn of its event loop (`loop` is
    the SampleServer's, set once the server exists)."""

    def __init__(self, events: Connection) -> None:
        self.events = events
        self.loop = None
        self.records: list[bytes] = []

    def first(self, sample_id: int, tokens: list[int]) -> None:
        self._add(FIRST, sample_id, len(tokens), np.asarray(tokens, dtype=np.int32).tobytes())

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
                          stall_s=setup.get("stall_s"))
    outbox.loop = server.loop
    server.start()
    events.send_bytes(READY)
    while batch := commands.recv_bytes():
        pairs = np.frombuffer(batch, dtype=PAIR)
        server.submit(list(zip(pairs["id"].tolist(), pairs["index"].tolist(), strict=True)))
    server.close()
    events.send_bytes(STATS + json.dumps(dataclasses.asdict(server.stats)).encode())
