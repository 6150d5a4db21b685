"""A streaming client for OpenAI-compatible `/v1/completions` and `/v1/chat/completions`, timed client-side.

The first streamed text chunk is the first token; the output token ids come from the engine when it returns them,
otherwise from re-tokenizing the text with the model's own tokenizer (recorded as `token_source`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from tasks.engines import Endpoint


@dataclass
class Completion:
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    engine_tokens: int | None = None      # usage.completion_tokens, when the engine reports it
    error: str | None = None


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
        limits = httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency)
        self.http = httpx.AsyncClient(base_url=endpoint.base_url, limits=limits,
                                      timeout=httpx.Timeout(None, connect=10.0))

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

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids if text else []

    async def complete(self, prompt: tuple[int, ...],
                       on_first: Callable[[list[int]], None] | None = None) -> Completion:
        """Stream one completion; call `on_first(first_token_ids)` as soon as the first token arrives."""
        return await self.send("/v1/completions", self.request(prompt), on_first, prepared=True)

    async def send(self, path: str, body: dict, on_first: Callable[[list[int]], None] | None = None, *,
                   prepared: bool = False) -> Completion:
        """Stream one request to `path` (`/v1/completions` or `/v1/chat/completions`); `on_first` gets the first
        token ids as soon as the first text (or token) chunk arrives."""
        out = Completion()
        ids: list[int] = []
        chunks: list[str] = []
        try:
            request = body if prepared else self.prepare(path, body)
            async with self.http.stream("POST", path, json=request) as r:
                if r.status_code != 200:
                    out.error = f"HTTP {r.status_code}: {(await r.aread()).decode(errors='replace')[:300]}"
                    return out
                async for line in r.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        break
                    chunk = json.loads(payload)
                    if "error" in chunk:
                        out.error = str(chunk["error"])[:300]
                        return out
                    if chunk.get("usage"):
                        out.engine_tokens = chunk["usage"].get("completion_tokens")
                    for choice in chunk.get("choices") or []:
                        delta = choice.get("delta") or {}
                        text = choice.get("text") or delta.get("content") or ""
                        token_ids = (choice.get("token_ids") if self.endpoint.token_ids_in == "choice" else
                                     (chunk.get("nvext") or {}).get("completion_token_ids")) or []
                        if not (text or token_ids):
                            continue
                        if not chunks and on_first is not None:
                            on_first(token_ids if self.endpoint.returns_token_ids else self._ids(text))
                        chunks.append(text)
                        ids.extend(token_ids)
        except (httpx.HTTPError, json.JSONDecodeError) as e:
            out.error = f"{type(e).__name__}: {e}"
            return out
        out.text = "".join(chunks)
        out.tokens = ids if self.endpoint.returns_token_ids else self._ids(out.text)
        return out

    async def aclose(self) -> None:
        await self.http.aclose()
