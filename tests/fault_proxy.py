"""A fault-injecting proxy in front of an OpenAI-compatible engine, for the compliance audits' negative tests.

It listens on 127.0.0.1 (stdlib asyncio server, httpx towards the engine). `/v1/completions` streams are read
whole from the engine, changed as the mode says, and streamed back one word per chunk; every other request is
passed through. Modes, each a way a SUT can cheat or break that one audit must catch:

    pass         the engine's words, unchanged
    pad          every answer padded with `<pad>` to `pad_to` words      (TEST09: fixed-length outputs)
    cache        a repeated request answered from a cache, at once       (TEST04: a caching SUT)
    eos          the answer cut after `keep` words, the rest `</s>`      (TEST06: early EOS, padded with EOS)
    split_first  the first word streamed in two pieces, so the first     (TEST06: a first token that is not the
                 chunk is not the output's first token                    output's first token)
    corrupt      the words of every answer in reverse order              (TEST07: wrong answers in performance mode)
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable

import httpx

MODES = ("pass", "pad", "cache", "eos", "split_first", "corrupt")
EOS_TEXT, PAD_TEXT = "</s>", "<pad>"   # the tiny Llama's special tokens (tasks/engines/smoke/model.py)


class FaultProxy:
    def __init__(self, upstream: str, mode: str, *, pad_to: int = 32, keep: int = 4) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        self.upstream, self.mode, self.pad_to, self.keep = upstream, mode, pad_to, keep
        self.cache: dict[str, list[str]] = {}
        self.requests = 0
        self.cache_hits = 0
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fault-proxy", daemon=True)
        self.server: asyncio.AbstractServer | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultProxy:
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(self._serve(), self.loop).result(timeout=10)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        async def close() -> None:
            assert self.server is not None
            self.server.close()
            await self.server.wait_closed()
            await self.http.aclose()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)

    async def _serve(self) -> asyncio.AbstractServer:
        self.http = httpx.AsyncClient(base_url=self.upstream, timeout=httpx.Timeout(None, connect=10.0),
                                      limits=httpx.Limits(max_connections=256))
        return await asyncio.start_server(self._handle, "127.0.0.1", 0)

    # -- HTTP ---------------------------------------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
            length = int(next((v for k, v in headers.items() if k.lower() == "content-length"), "0"))
            body = await reader.readexactly(length) if length else b""
            if method == "POST" and path == "/v1/completions" and json.loads(body or b"{}").get("stream"):
                await self._completion(json.loads(body), writer)
            else:
                await self._pass_through(method, path, body, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _pass_through(self, method: str, path: str, body: bytes, writer: asyncio.StreamWriter) -> None:
        response = await self.http.request(method, path, content=body or None,
                                           headers={"content-type": "application/json"} if body else None)
        writer.write(f"HTTP/1.1 {response.status_code} X\r\ncontent-type: "
                     f"{response.headers.get('content-type', 'application/json')}\r\ncontent-length: "
                     f"{len(response.content)}\r\nconnection: close\r\n\r\n".encode() + response.content)
        await writer.drain()

    async def _completion(self, request: dict, writer: asyncio.StreamWriter) -> None:
        self.requests += 1
        key = json.dumps(request, sort_keys=True)
        if self.mode == "cache" and key in self.cache:
            self.cache_hits += 1
            chunks = self.cache[key]
        else:
            chunks = self._change(await self._words(request))
            self.cache[key] = chunks
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
        for text in chunks:
            writer.write(_event({"choices": [{"index": 0, "text": text}], "object": "text_completion"}))
            await writer.drain()
        words = len("".join(chunks).split())
        writer.write(_event({"choices": [{"index": 0, "text": "", "finish_reason": "length"}],
                             "object": "text_completion", "usage": {"completion_tokens": words}}))
        writer.write(b"data: [DONE]\n\n")
        await writer.drain()

    async def _words(self, request: dict) -> list[str]:
        texts = []
        async with self.http.stream("POST", "/v1/completions", json=request) as r:
            async for line in r.aiter_lines():
                if line.startswith("data:") and line[5:].strip() != "[DONE]":
                    texts += [c.get("text") or "" for c in json.loads(line[5:]).get("choices") or []]
        return "".join(texts).split()

    # -- faults -------------------------------------------------------------------------------------------------
    def _change(self, words: list[str]) -> list[str]:
        change: dict[str, Callable[[list[str]], list[str]]] = {
            "pass": lambda w: w,
            "cache": lambda w: w,
            "pad": lambda w: w + [PAD_TEXT] * max(0, self.pad_to - len(w)),
            "eos": lambda w: w[:self.keep] + [EOS_TEXT] * max(0, len(w) - self.keep),
            "corrupt": lambda w: w[::-1],
            "split_first": lambda w: w,
        }
        out = change[self.mode](words)
        chunks = [out[0]] + [f" {w}" for w in out[1:]] if out else []
        if self.mode == "split_first" and chunks and len(chunks[0]) > 1:
            head = chunks[0]
            chunks = [head[:-1], head[-1:] + (chunks[1] if len(chunks) > 1 else ""), *chunks[2:]]
        return chunks


def _event(payload: dict) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()
