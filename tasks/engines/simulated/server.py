"""A simulated OpenAI-compatible streaming server over the queueing model of `tasks.engines.simulated.queueing`.

It answers `POST /v1/completions` and `/v1/chat/completions` as OpenAI does: with `"stream": true`, server-sent
events, one token per event, each sent at the time the model gives it (token ids in `choices[].token_ids`, usage in
the last event); without it (absent or false), one JSON completion when the model's last token is due (the
MLCommons endpoints client with `--streaming off` omits the field). `GET /health`, `/version` (as vLLM's and
trtllm-serve's: `{"version": ...}`) and `/v1/models` (as vLLM's: the card's `root` is the checkpoint it serves,
`--checkpoint`) answer too. `--port` may be given several times: one independent server per port in one process,
light replicas for the head's dispatch.
Plain asyncio and HTTP/1.1 with keep-alive: no framework, no model, no GPU. It binds 127.0.0.1 unless told otherwise.
Tests and `podium search` on the CPU use it through the `simulated` engine. Given data sets with known answers
(`--answers FILE`, `tasks.engines.simulated.answers`), it answers their prompts with those answers at their lengths.

    python -m tasks.engines.simulated.server --port 8011 --prefill-workers 2 --decode-workers 4 --decode-slots 8
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import time
from collections.abc import Iterator
from dataclasses import asdict, fields

from tasks.engines.simulated import MODEL_NAME, VERSION, answers
from tasks.engines.simulated.answers import AnswerBook, text_pieces
from tasks.engines.simulated.queueing import SimConfig, SimModel, Timeline

MAX_BODY = 64 * 1024 * 1024
METRICS = {   # name -> help of each gauge `GET /metrics` serves, named after vLLM's (vllm/v1/metrics/loggers.py)
    "simulated:num_requests_running": "Requests in prefill or in a decode batch.",
    "simulated:num_requests_waiting": "Requests waiting for a prefill worker or a decode slot.",
    "simulated:kv_cache_usage_perc": "Decode slots in use over all slots (1 means all).",
}
TOKENS = ("simulated:generation_tokens", "Output tokens sent.")   # a counter, as vLLM's vllm:generation_tokens


class SimServer:
    def __init__(self, config: SimConfig, model_name: str = MODEL_NAME, chunk_tokens: int = 1,
                 answers: AnswerBook | None = None, checkpoint: str | None = None, version: str = VERSION) -> None:
        self.config = config
        self.checkpoint = checkpoint or model_name
        self.version = version
        self.answers = answers
        self.model_name = model_name
        self.chunk_tokens = chunk_tokens
        self.model = SimModel(config)
        self.served = 0
        self.tokens_sent = 0
        self.in_flight: dict[int, Timeline] = {}   # request number -> its timeline, until its answer is sent

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        line = await reader.readline()
        if not line:
            return False
        method, path, _ = line.decode("latin-1").split(" ", 2)
        headers = {}
        while (raw := await reader.readline()) not in (b"\r\n", b"\n", b""):
            key, _, value = raw.decode("latin-1").partition(":")
            headers[key.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        if length > MAX_BODY:
            raise ValueError("body too large")
        body = await reader.readexactly(length) if length else b""
        keep = headers.get("connection", "").lower() != "close"
        if method == "GET" and path == "/metrics":
            await self._send(writer, 200, "text/plain; version=0.0.4", self.metrics().encode(), keep)
        elif method == "GET" and path in ("/health", "/v1/models", "/version"):
            payload = {"status": "ok"} if path == "/health" else {"version": self.version} if path == "/version" else {
                "object": "list", "data": [{"id": self.model_name, "object": "model", "owned_by": "podium",
                                            "root": self.checkpoint}]}
            await self._json(writer, 200, payload, keep)
        elif method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            try:
                request = json.loads(body or b"{}")
            except ValueError:
                await self._json(writer, 400, {"error": {"message": "the body is not JSON"}}, keep)
                return keep
            await self._complete(writer, request, chat=path.endswith("chat/completions"), keep=keep)
        else:
            await self._json(writer, 404, {"error": {"message": f"no route {method} {path}"}}, keep)
        return keep

    async def _json(self, writer: asyncio.StreamWriter, status: int, payload: dict, keep: bool) -> None:
        await self._send(writer, status, "application/json", json.dumps(payload).encode(), keep)

    async def _send(self, writer: asyncio.StreamWriter, status: int, kind: str, data: bytes, keep: bool) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}[status]
        writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {len(data)}\r\n"
                     f"Connection: {'keep-alive' if keep else 'close'}\r\n\r\n".encode() + data)
        await writer.drain()

    def metrics(self) -> str:
        """The gauges of `METRICS` now and the tokens sent so far, in the Prometheus text format: a request waits
        until its prefill starts and again between its first token and its decode slot; it runs otherwise, and holds
        a slot while decoding."""
        now = asyncio.get_running_loop().time()
        prefill_s = self.config.prefill_ms / 1000.0
        waiting = sum(now < t.first_token - prefill_s or t.first_token <= now < t.decode_start
                      for t in self.in_flight.values())
        decoding = sum(t.decode_start <= now and t.tokens > 1 for t in self.in_flight.values())
        slots = self.config.decode_workers * self.config.decode_slots
        values = {"simulated:num_requests_running": len(self.in_flight) - waiting,
                  "simulated:num_requests_waiting": waiting,
                  "simulated:kv_cache_usage_perc": min(1.0, decoding / slots)}
        counter, about = TOKENS
        return "".join(f"# HELP {name} {METRICS[name]}\n# TYPE {name} gauge\n{name} {values[name]:g}\n"
                       for name in METRICS) + \
            f"# HELP {counter} {about}\n# TYPE {counter} counter\n{counter}_total {self.tokens_sent}\n"

    async def _complete(self, writer: asyncio.StreamWriter, request: dict, *, chat: bool, keep: bool) -> None:
        loop = asyncio.get_running_loop()
        max_tokens = request.get("max_tokens") or request.get("max_completion_tokens")
        limit = int(max_tokens) if max_tokens else None
        known = self.answers.find(request) if self.answers else None
        ids, pieces = [], []
        if known is not None and self.answers is not None:
            ids = self.answers.token_ids(known, limit) if known.ids or not known.text else []
            pieces = text_pieces(known, limit) if known.text else []
        timeline = self.model.admit(loop.time(), limit, tokens=len(ids or pieces) or None)
        self.served += 1
        number = self.served
        self.in_flight[number] = timeline
        try:
            await self._answer(writer, request, timeline, chat=chat, keep=keep, ids=ids, pieces=pieces)
        finally:
            self.in_flight.pop(number, None)

    async def _answer(self, writer: asyncio.StreamWriter, request: dict, timeline: Timeline, *, chat: bool,
                      keep: bool, ids: list[int], pieces: list[str]) -> None:
        """Stream (or send whole) the timeline's tokens: `ids` / `pieces` when the answer is known, else seeded
        filler tokens."""
        loop = asyncio.get_running_loop()
        times = timeline.token_times()
        seed = _seed(request)
        tokens = ids or [3 + (seed + 7 * k) % 997 for k in range(len(times))]
        texts = pieces or [_text([t]) for t in tokens]
        usage = {"prompt_tokens": _prompt_tokens(request), "completion_tokens": timeline.tokens,
                 "total_tokens": _prompt_tokens(request) + timeline.tokens}
        if not request.get("stream"):
            await _sleep_until(loop, times[-1] if times else loop.time())
            self.tokens_sent += len(tokens)
            await self._json(writer, 200, self._completion(tokens, "".join(texts), usage, chat=chat), keep)
            return
        connection = b"keep-alive" if keep else b"close"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                     b"Transfer-Encoding: chunked\r\nConnection: " + connection + b"\r\n\r\n")
        for first, last in _chunks(len(times), self.chunk_tokens):
            await _sleep_until(loop, times[last - 1])
            self.tokens_sent += last - first
            ids = tokens[first:last]
            text = "".join(texts[first:last])
            choice = ({"index": 0, "delta": {"content": text}, "token_ids": ids} if chat else
                      {"index": 0, "text": text, "token_ids": ids})
            _event(writer, {"object": "chat.completion.chunk" if chat else "text_completion",
                            "model": self.model_name, "choices": [choice]})
            await writer.drain()
        _event(writer, {"object": "text_completion", "model": self.model_name,
                        "choices": [{"index": 0, "text": "", "finish_reason": "length"}], "usage": usage})
        data = b"data: [DONE]\n\n"
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))
        await writer.drain()

    def _completion(self, tokens: list[int], text: str, usage: dict, *, chat: bool) -> dict:
        """The whole answer as one JSON object (`"stream"` absent or false)."""
        choice = ({"index": 0, "message": {"role": "assistant", "content": text}} if chat else
                  {"index": 0, "text": text})
        return {"id": f"sim-{self.served}", "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()), "model": self.model_name,
                "choices": [{**choice, "token_ids": tokens, "finish_reason": "length"}], "usage": usage}


async def _sleep_until(loop: asyncio.AbstractEventLoop, when: float) -> None:
    delay = when - loop.time()
    if delay > 0:
        await asyncio.sleep(delay)


def _text(ids: list[int]) -> str:
    return "".join(f" t{t}" for t in ids)


def _chunks(count: int, size: int) -> list[tuple[int, int]]:
    """Token index ranges of the events: the first token alone, then `size` at a time."""
    return [(0, min(1, count))] + [(i, min(i + size, count)) for i in range(1, count, size)]


def _event(writer: asyncio.StreamWriter, payload: dict) -> None:
    data = b"data: " + json.dumps(payload).encode() + b"\n\n"
    writer.write(b"%x\r\n%s\r\n" % (len(data), data))


def _prompt_tokens(request: dict) -> int:
    prompt = request.get("prompt")
    if isinstance(prompt, list):
        return len(prompt)
    return len(str(prompt or request.get("messages") or "").split())


def _seed(request: dict) -> int:
    prompt = request.get("prompt")
    if isinstance(prompt, list):
        return sum(int(t) for t in prompt[:64] if isinstance(t, int))
    return sum(map(ord, str(prompt or request.get("messages") or "")[:256]))


async def serve(config: SimConfig, host: str, port: int, model_name: str = MODEL_NAME,
                ready: asyncio.Event | None = None, stop: asyncio.Event | None = None, chunk_tokens: int = 1,
                answers: AnswerBook | None = None, checkpoint: str | None = None, version: str = VERSION) -> None:
    """Serve until `stop` is set (or forever)."""
    server = SimServer(config, model_name, chunk_tokens, answers, checkpoint, version)
    listener = await asyncio.start_server(server.handle, host, port, backlog=1024)
    if ready is not None:
        ready.set()
    async with listener:
        await (stop.wait() if stop is not None else asyncio.Event().wait())


@contextlib.contextmanager
def running(config: SimConfig, port: int, host: str = "127.0.0.1", chunk_tokens: int = 1,
            answers: AnswerBook | None = None) -> Iterator[str]:
    """Run the server in a thread of this process (tests); yields its base URL, stops on exit."""
    import threading

    loop = asyncio.new_event_loop()
    ready, stop = asyncio.Event(), asyncio.Event()
    server = serve(config, host, port, ready=ready, stop=stop, chunk_tokens=chunk_tokens, answers=answers)
    thread = threading.Thread(target=loop.run_until_complete, args=(server,), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not ready.is_set() and time.monotonic() < deadline and thread.is_alive():
        time.sleep(0.01)
    try:
        yield f"http://{host}:{port}"
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)
        loop.close()


def config_args(parser: argparse.ArgumentParser) -> None:
    for f in fields(SimConfig):
        parser.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default)


def parse_config(args: argparse.Namespace) -> SimConfig:
    return SimConfig(**{f.name: getattr(args, f.name) for f in fields(SimConfig)})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, action="append", required=True,
                        help="repeatable: one independent server on each port")
    parser.add_argument("--model-name", default=MODEL_NAME)
    parser.add_argument("--checkpoint", help="what /v1/models names as the card's root (default: the model name)")
    parser.add_argument("--engine-version", default=VERSION, help="what /version answers")
    parser.add_argument("--chunk-tokens", type=int, default=1, help="tokens per event after the first")
    parser.add_argument("--answers", action="append", default=[], metavar="PARQUET",
                        help="a data set with known answers (tasks.engines.simulated.answers); repeatable")
    config_args(parser)
    args = parser.parse_args(argv)
    config = parse_config(args)
    book = answers.load(args.answers) if args.answers else None
    line = json.dumps({"listening": f"{args.host}:{args.port[0]}", "ports": args.port, **asdict(config),
                       "capacity_qps": round(config.capacity(), 3), "known_answers": len(book or ())})

    async def every_port() -> None:   # the line goes out once every port listens
        stop, ready = asyncio.Event(), [asyncio.Event() for _ in args.port]
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        servers = asyncio.gather(*(
            serve(config, args.host, port, args.model_name, ready=up, stop=stop, chunk_tokens=args.chunk_tokens,
                  answers=book, checkpoint=args.checkpoint, version=args.engine_version)
            for port, up in zip(args.port, ready, strict=True)))
        await asyncio.wait([servers, asyncio.gather(*(up.wait() for up in ready))],
                           return_when=asyncio.FIRST_COMPLETED)
        if servers.done():   # a port could not be bound: its error, and no line
            servers.result()
        print(line, flush=True)
        await servers

    asyncio.new_event_loop().run_until_complete(every_port())


if __name__ == "__main__":
    main()
