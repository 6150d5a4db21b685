"""The loadgen SUT and QSL over a streaming completions client.

Loadgen calls `issue` from its own thread; the batch is handed to an asyncio loop (uvloop when installed) in a
second thread with one wake-up, where each sample becomes a task. Every issued sample is completed, also when its
request fails or the harness itself raises: loadgen waits for all of them.
In the Server scenario (Server and Interactive folders) the first token is reported with `FirstTokenComplete`,
then all output tokens with `QuerySamplesComplete`; both carry int32 token ids and `n_tokens`.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

import mlperf_loadgen as lg
import numpy as np

from tasks.harness import liveness
from tasks.harness.client import Completion, CompletionClient
from tasks.harness.requests import RequestBuilder

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


def _response(sample_id: int, tokens: list[int]) -> tuple[lg.QuerySampleResponse, np.ndarray]:
    """A response over an int32 buffer; the caller keeps the array alive until loadgen has copied it."""
    data = np.asarray(tokens, dtype=np.int32)
    return lg.QuerySampleResponse(sample_id, data.ctypes.data, data.nbytes, len(tokens)), data


def _text_response(sample_id: int, completion: Completion) -> tuple[lg.QuerySampleResponse, np.ndarray]:
    """A response over the UTF-8 answer; n_tokens is the engine's count, else the re-tokenized length."""
    data = np.frombuffer(completion.text.encode("utf-8"), dtype=np.uint8).copy()
    n_tokens = completion.engine_tokens if completion.engine_tokens is not None else len(completion.tokens)
    return lg.QuerySampleResponse(sample_id, data.ctypes.data, data.nbytes, n_tokens), data


class StreamingSUT:
    """`prompts` is a tuple of token-id prompts (sent with the client's own settings) or a request builder
    (`tasks.harness.requests`): its bodies are sent as they are, and a text-output builder (Qwen3-VL) gets the
    UTF-8 answer in the accuracy log, with the engine's completion-token count as n_tokens."""

    def __init__(self, client: CompletionClient, prompts: tuple[tuple[int, ...], ...] | RequestBuilder, *,
                 report_first_token: bool):
        self.client = client
        self.prompts = prompts
        self.builder: RequestBuilder | None = None if isinstance(prompts, tuple) else prompts
        self.report_first_token = report_first_token
        self.stats = SutStats(token_source=client.token_source)
        self.loop = new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="sut-loop", daemon=True)
        self.lock = threading.Lock()
        self.pending: set[asyncio.Future] = set()

    def __enter__(self) -> StreamingSUT:
        self.thread.start()
        self.handle = lg.ConstructSUT(self.issue, self.flush)
        return self

    def __exit__(self, *exc: object) -> None:
        lg.DestroySUT(self.handle)
        asyncio.run_coroutine_threadsafe(self.client.aclose(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)

    def issue(self, samples: list[lg.QuerySample]) -> None:
        batch = [(s.id, s.index) for s in samples]
        with self.lock:
            self.stats.issued += len(batch)
        self.loop.call_soon_threadsafe(self._start, batch)

    def _start(self, batch: list[tuple[int, int]]) -> None:
        for sample_id, index in batch:
            task = self.loop.create_task(self.serve(sample_id, index))
            self.pending.add(task)
            task.add_done_callback(self.pending.discard)

    def flush(self) -> None:
        pass

    async def serve(self, sample_id: int, index: int) -> None:
        def first(tokens: list[int]) -> None:
            if self.report_first_token:
                response, _keep = _response(sample_id, tokens)
                lg.FirstTokenComplete([response])

        try:
            if self.builder is None:
                completion = await self.client.complete(self.prompts[index], first)
            else:
                completion = await self.client.send(self.builder.path, self.builder.body(index), first)
        except Exception as e:   # the harness's own failure still completes the sample (with no tokens)
            completion = Completion(error=f"harness: {type(e).__name__}: {e}")
        if completion.error:   # a dead engine ends the run here, before loadgen sees a 0-token answer
            liveness.exit_if_down(self.client.endpoint.base_url, completion.error)
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
        if self.builder is not None and self.builder.output == "text":
            response, _keep = _text_response(sample_id, completion)
        else:
            response, _keep = _response(sample_id, completion.tokens)
        lg.QuerySamplesComplete([response])


class PromptQSL:
    """All prompts are in memory already; load and unload are no-ops."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __enter__(self) -> PromptQSL:
        self.handle = lg.ConstructQSL(self.count, self.count, lambda _: None, lambda _: None)
        return self

    def __exit__(self, *exc: object) -> None:
        lg.DestroyQSL(self.handle)
