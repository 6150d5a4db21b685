"""A streaming client for OpenAI-compatible `/v1/completions` and `/v1/chat/completions`, timed client-side.

The first streamed text chunk is the first token; the output token ids come from the engine when it returns them,
otherwise from re-tokenizing the text with the model's own tokenizer (recorded as `token_source`).

The HTTP is `tasks.harness.wire`: raw asyncio HTTP/1.1 with keep-alive and at most `max_concurrency` requests on
the wire, the rest waiting their turn outside any connection pool; events are split by hand (`tasks.harness.sse`)
and each event's JSON is decoded with orjson when it is installed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from tasks.engines import Endpoint
from tasks.harness.wire import HttpPool, post_bytes

try:
    from orjson import dumps as _dumps
    from orjson import loads as _loads
except ImportError:   # pragma: no cover - orjson is a dependency; the stdlib is the fallback
    _loads = json.loads

    def _dumps(obj: object) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

ERROR_KEPT = 300


def post(path: str, payload: bytes, pool: HttpPool) -> bytes:
    """The HTTP request of a JSON `payload` to `path` on `pool`'s server."""
    return post_bytes(pool.prefix + path, payload, pool.host_header)


@dataclass
class Completion:
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    engine_tokens: int | None = None      # usage.completion_tokens, when the engine reports it
    error: str | None = None


class _Stream:
    """One request's answer, fed event by event on the event loop."""

    __slots__ = ("chunks", "client", "engine_tokens", "error", "finished", "first_ids", "ids", "nvext", "on_first")

    def __init__(self, client: CompletionClient, nvext: bool, on_first: Callable[[list[int]], None] | None,
                 first_ids: Callable[[str, list[int]], list[int]]) -> None:
        self.client = client
        self.nvext = nvext
        self.on_first = on_first
        self.first_ids = first_ids
        self.chunks: list[str] = []
        self.ids: list[int] = []
        self.engine_tokens: int | None = None
        self.error: str | None = None
        self.finished = False

    def events(self, payloads: list[bytes]) -> None:
        """The events of one read: decoded together (one orjson call for all of them) when they all parse."""
        if self.finished:
            return
        if b"[DONE]" in payloads:
            payloads = payloads[:payloads.index(b"[DONE]")]
            self.finished = True
        if not payloads:
            return
        if len(payloads) == 1:
            self.chunk(_loads(payloads[0]))
            return
        try:
            chunks = _loads(b"[" + b",".join(payloads) + b"]")
        except ValueError:   # one of them is not JSON: decode one by one, so the events before it still count
            chunks = None
        if chunks is None or len(chunks) != len(payloads):
            chunks = [_loads(p) for p in payloads]
        for chunk in chunks:
            if self.error is None:
                self.chunk(chunk)

    def chunk(self, chunk: dict) -> None:
        if "error" in chunk:
            self.error = str(chunk["error"])[:ERROR_KEPT]
            self.finished = True
            return
        usage = chunk.get("usage")
        if usage:
            self.engine_tokens = usage.get("completion_tokens")
        for choice in chunk.get("choices") or ():
            text = choice.get("text") or (choice.get("delta") or {}).get("content") or ""
            token_ids = ((chunk.get("nvext") or {}).get("completion_token_ids") if self.nvext else
                         choice.get("token_ids")) or ()
            if not (text or token_ids):
                continue
            if not self.chunks and self.on_first is not None:
                self.on_first(self.first_ids(text, list(token_ids)))
            self.chunks.append(text)
            self.ids.extend(token_ids)


class CompletionClient:
    def __init__(self, endpoint: Endpoint, *, max_tokens: int, temperature: float, max_concurrency: int) -> None:
        self.endpoint = endpoint
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.tokenizer = None
        if not endpoint.returns_token_ids or not endpoint.accepts_token_ids:
            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_file(endpoint.tokenizer)
        self.token_source = "engine" if endpoint.returns_token_ids else "re-tokenized text"
        self.http = HttpPool(endpoint.base_url, max_connections=max_concurrency)

    @property
    def last_read(self) -> float:
        """When the engine last sent bytes on any of this client's streams: the SUT's stall watchdog reads it."""
        return self.http.last_read

    def request(self, prompt: tuple[int, ...]) -> dict:
        """A completions body for a token-id prompt with this client's max_tokens and temperature."""
        return self.prepare("/v1/completions",
                            {"prompt": list(prompt), "max_tokens": self.max_tokens, "temperature": self.temperature})

    def prepare(self, path: str, body: dict) -> dict:
        """An engine-neutral body (from a request builder) made ready for this endpoint: model, streaming, token
        ids turned into text for engines that take text only, and the fields the engine rejects dropped."""
        out = {"model": self.endpoint.model, **body, "stream": True, "stream_options": {"include_usage": True}}
        if "prompt" in out:   # /v1/completions; chat bodies carry messages
            if not self.endpoint.accepts_token_ids and not isinstance(out["prompt"], str):
                out["prompt"] = self.tokenizer.decode(list(out["prompt"]))
            if self.endpoint.returns_token_ids:   # what makes this engine stream its output token ids
                out.update(self.endpoint.request_fields or {"return_token_ids": True})
        return {k: v for k, v in out.items() if k not in self.endpoint.drop_fields}

    def payload(self, path: str, body: dict, *, prepared: bool = False) -> bytes:
        """The JSON bytes of `body` made ready for this endpoint (`prepared`: it already is)."""
        return _dumps(body if prepared else self.prepare(path, body))

    def encode(self, path: str, body: dict, *, prepared: bool = False, pool: HttpPool | None = None) -> bytes:
        """The whole HTTP request for `body` to `pool` (default: the endpoint's own), ready to write: build it once,
        send it with `send_bytes`."""
        return post(path, self.payload(path, body, prepared=prepared), pool or self.http)

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids if text else []

    def _first_ids(self, text: str, token_ids: list[int]) -> list[int]:
        return token_ids if self.endpoint.returns_token_ids else self._ids(text)

    async def complete(self, prompt: tuple[int, ...],
                       on_first: Callable[[list[int]], None] | None = None) -> Completion:
        """Stream one completion; call `on_first(first_token_ids)` as soon as the first token arrives."""
        return await self.send("/v1/completions", self.request(prompt), on_first, prepared=True)

    async def send(self, path: str, body: dict, on_first: Callable[[list[int]], None] | None = None, *,
                   prepared: bool = False, pool: HttpPool | None = None) -> Completion:
        """Stream one request to `path` (`/v1/completions` or `/v1/chat/completions`) on `pool` (default: the
        endpoint's own); `on_first` gets the first token ids as soon as the first text (or token) chunk arrives."""
        try:
            data = self.encode(path, body, prepared=prepared, pool=pool)
        except (TypeError, ValueError) as e:
            return Completion(error=f"{type(e).__name__}: {e}")
        return await self.send_bytes(data, on_first, pool)

    async def send_bytes(self, data: bytes, on_first: Callable[[list[int]], None] | None = None,
                         pool: HttpPool | None = None) -> Completion:
        """Stream one request built by `encode` (for `pool`, default the endpoint's own)."""
        stream = _Stream(self, self.endpoint.token_ids_in == "nvext", on_first, self._first_ids)
        try:
            status, body = await (pool or self.http).stream(data, stream.events)
        except (OSError, ValueError, TypeError, AttributeError) as e:   # the network, or an answer not as expected
            return Completion(error=f"{type(e).__name__}: {e}"[:ERROR_KEPT + 40])
        if status != 200:
            return Completion(error=f"HTTP {status}: {body.decode(errors='replace')[:ERROR_KEPT]}")
        if stream.error is not None:
            return Completion(error=stream.error)
        out = Completion(text="".join(stream.chunks), engine_tokens=stream.engine_tokens)
        out.tokens = stream.ids if self.endpoint.returns_token_ids else self._ids(out.text)
        return out

    async def aclose(self) -> None:
        await self.http.aclose()
