"""The loadgen SUT and QSL over a streaming completions client.

Loadgen calls `issue` from its own thread; the batch is handed to an asyncio loop in a second thread
(`SampleServer`), where each sample becomes a task. Every issued sample is completed, also when its request fails
or the harness itself raises: loadgen waits for all of them. `tasks.harness.workers` runs the same SampleServer in
several worker processes behind one loadgen SUT. With an engine of several replicas (`Endpoint.replicas`) each sample
goes to one of them through `tasks.harness.dispatch`; a replica lost mid-run is named on stderr (`on_lost`) and its
unanswered samples are served by the live ones.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import mlperf_loadgen as lg
import numpy as np

from tasks import clock
from tasks.datasets.requests import RequestBuilder
from tasks.harness.client import Completion, CompletionClient
from tasks.harness.dispatch import Dispatch, Losses, Lost, NoLiveReplica
from tasks.harness.timing import QueryClock
from tasks.serving import liveness

MAX_ERRORS_KEPT = 20


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when it is installed, else asyncio's."""
    try:
        import uvloop
    except ImportError:   # pragma: no cover - uvloop is a dependency; asyncio is the fallback
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


@dataclass
class SutStats:
    issued: int = 0
    completed: int = 0
    failed: int = 0
    output_tokens: int = 0
    engine_token_mismatches: int = 0      # samples where re-tokenized length != the engine's usage count
    errors: list[str] = field(default_factory=list)
    token_source: str = ""
    replicas: list[dict] = field(default_factory=list)   # one row per replica (tasks.harness.dispatch), if any


def answer(completion: Completion, text_output: bool) -> tuple[np.ndarray, int]:
    """What loadgen gets for a sample: int32 token ids, or for a text-output builder (Qwen3-VL) the UTF-8 answer
    with the engine's completion-token count as n_tokens (else the re-tokenized length)."""
    if text_output:
        n_tokens = completion.engine_tokens if completion.engine_tokens is not None else len(completion.tokens)
        return np.frombuffer(completion.text.encode("utf-8"), dtype=np.uint8).copy(), n_tokens
    return np.asarray(completion.tokens, dtype=np.int32), len(completion.tokens)


def response(sample_id: int, data: np.ndarray, n_tokens: int) -> lg.QuerySampleResponse:
    """A response over `data`; the caller keeps the array alive until loadgen has copied it."""
    return lg.QuerySampleResponse(sample_id, data.ctypes.data, data.nbytes, n_tokens)


class SampleServer:
    """Serves samples on an asyncio loop (uvloop when installed) in a thread of its own: `submit` hands it a batch
    of (sample id, index) with one wake-up and each sample becomes a task. Each answer goes to `done(sample_id,
    data, n_tokens)` and, when `first` is given, the first token ids to `first(sample_id, tokens)`, both on the
    loop's thread. Every submitted sample is answered, also when its request fails or the harness itself raises.

    `prompts` is a tuple of token-id prompts (sent with the client's own settings) or a request builder
    (`tasks.datasets.requests`) whose bodies are sent as they are.

    With replicas, `on_lost` hears of each one lost, and a sample that finds none live goes to `bounce(sample_id,
    index)` (a worker hands it back to the runner) or, without one, ends the run (liveness.ENDPOINT_DOWN)."""

    def __init__(self, client: CompletionClient, prompts: tuple[tuple[int, ...], ...] | RequestBuilder, *,
                 done: Callable[[int, np.ndarray, int], None],
                 first: Callable[[int, list[int]], None] | None = None, stall_s: float | None = None,
                 on_lost: Callable[[Lost], None] | None = None,
                 bounce: Callable[[int, int], None] | None = None) -> None:
        self.client = client
        self.prompts = prompts
        self.builder: RequestBuilder | None = None if isinstance(prompts, tuple) else prompts
        self.text_output = self.builder is not None and self.builder.output == "text"
        self.done = done
        self.first = first
        self.stats = SutStats(token_source=client.token_source)
        self.loop = new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="sut-loop", daemon=True)
        self.lock = threading.Lock()
        self.pending: set[asyncio.Future] = set()
        self.stall_s = stall_s and clock.real(stall_s)   # real seconds, whatever this process's clock
        self.busy_since = 0.0   # when requests were last in flight after none were
        replicas = client.endpoint.replicas
        self.dispatch = Dispatch(replicas, client.http.max_connections, stall_s=self.stall_s,
                                 on_lost=on_lost) if replicas else None
        self.bounce = bounce

    def start(self) -> None:
        self.thread.start()
        if self.stall_s:
            self.loop.call_soon_threadsafe(self._watch)

    def _watch(self) -> None:
        """The stall watchdog: the engine sent no byte on any stream for `stall_s` while requests were in flight
        the whole time. A hung engine keeps its port open, so only silence tells; the run ends (liveness). With
        replicas, each is judged alone (`Dispatch.check_stalls`)."""
        if self.dispatch is not None:
            self.dispatch.check_stalls()
        elif self.pending:
            silent = time.monotonic() - max(self.client.last_read, self.busy_since)
            if silent > self.stall_s:
                liveness.exit_stalled(self.client.endpoint.base_url, silent, len(self.pending))
        self.loop.call_later(min(1.0, self.stall_s / 4), self._watch)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.client.aclose(), self.loop).result(timeout=30)
        if self.dispatch is not None:
            asyncio.run_coroutine_threadsafe(self.dispatch.aclose(), self.loop).result(timeout=30)
            self.stats.replicas = self.dispatch.rows()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)

    def submit(self, batch: list[tuple[int, int]]) -> None:
        with self.lock:
            self.stats.issued += len(batch)
        self.loop.call_soon_threadsafe(self._start, batch)

    def _start(self, batch: list[tuple[int, int]]) -> None:
        if not self.pending:
            self.busy_since = time.monotonic()
        for sample_id, index in batch:
            task = self.loop.create_task(self.serve(sample_id, index))
            self.pending.add(task)
            task.add_done_callback(self.pending.discard)

    async def serve(self, sample_id: int, index: int) -> None:
        first = None if self.first is None else (lambda tokens: self.first(sample_id, tokens))
        try:
            if self.dispatch is not None:
                completion = await self._dispatched(index, first)
            elif self.builder is None:
                completion = await self.client.complete(self.prompts[index], first)
            else:
                completion = await self.client.send(self.builder.path, self.builder.body(index), first)
        except NoLiveReplica as e:
            if self.bounce is None:
                liveness.end_run(liveness.ENDPOINT_DOWN, f"no replica of the engine is left ({e})")
            with self.lock:
                self.stats.issued -= 1
            self.bounce(sample_id, index)
            return
        except Exception as e:   # the harness's own failure still completes the sample (with no tokens)
            completion = Completion(error=f"harness: {type(e).__name__}: {e}")
        if completion.error and self.dispatch is None:   # a dead engine ends the run here, before loadgen sees a
            liveness.exit_if_down(self.client.endpoint.base_url, completion.error)   # 0-token answer
        with self.lock:
            if completion.error:
                self.stats.failed += 1
                if len(self.stats.errors) < MAX_ERRORS_KEPT:
                    self.stats.errors.append(f"sample {index}: {completion.error}")
            else:
                self.stats.completed += 1
                self.stats.output_tokens += len(completion.tokens)
                if completion.engine_tokens is not None and completion.engine_tokens != len(completion.tokens):
                    self.stats.engine_token_mismatches += 1
        # A failed sample is still completed (loadgen waits for every sample); with no tokens loadgen logs an
        # error, so the run cannot pass as valid.
        self.done(sample_id, *answer(completion, self.text_output))

    async def _dispatched(self, index: int, first: Callable[[list[int]], None] | None) -> Completion:
        if self.builder is None:
            body, path, prepared = self.client.request(self.prompts[index]), "/v1/completions", True
        else:
            body, path, prepared = self.builder.body(index), self.builder.path, False
        return await self.dispatch.send(self.client, path, body, index, first, prepared=prepared)


class StreamingSUT:
    """The loadgen SUT over a `SampleServer` in this process. In the Server scenario (Server and Interactive
    folders) the first token is reported with `FirstTokenComplete`, then all output tokens with
    `QuerySamplesComplete`; both carry int32 token ids and `n_tokens`. More replicas lost than `max_lost` end the run
    (`tasks.harness.dispatch.Losses`)."""

    def __init__(self, client: CompletionClient, prompts: tuple[tuple[int, ...], ...] | RequestBuilder, *,
                 report_first_token: bool, stall_s: float | None = None, max_lost: int | None = None) -> None:
        self.losses = Losses(max_lost)
        self.server = SampleServer(client, prompts, done=self._done, first=self._first if report_first_token else None,
                                   stall_s=stall_s, on_lost=self.losses.add)
        self.stats = self.server.stats
        self.clock = QueryClock()

    def __enter__(self) -> StreamingSUT:
        self.server.start()
        self.handle = lg.ConstructSUT(self.issue, self.flush)
        return self

    def __exit__(self, *exc: object) -> None:
        lg.DestroySUT(self.handle)
        self.server.close()

    def issue(self, samples: list[lg.QuerySample]) -> None:
        self.clock.on_issue([s.id for s in samples])
        self.server.submit([(s.id, s.index) for s in samples])

    def flush(self) -> None:
        pass

    def _first(self, sample_id: int, tokens: list[int]) -> None:
        data = np.asarray(tokens, dtype=np.int32)
        self.clock.on_first([sample_id])
        lg.FirstTokenComplete([response(sample_id, data, len(tokens))])

    def _done(self, sample_id: int, data: np.ndarray, n_tokens: int) -> None:
        self.clock.on_done([(sample_id, n_tokens)])
        lg.QuerySamplesComplete([response(sample_id, data, n_tokens)])


class PromptQSL:
    """All prompts are in memory already; load and unload are no-ops."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __enter__(self) -> PromptQSL:
        self.handle = lg.ConstructQSL(self.count, self.count, lambda _: None, lambda _: None)
        return self

    def __exit__(self, *exc: object) -> None:
        lg.DestroyQSL(self.handle)
