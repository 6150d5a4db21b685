"""An instant OpenAI-compatible streaming server, for measuring clients: no model, no queue, answers as fast as it can.

`POST /v1/completions` and `/v1/chat/completions` stream `max_tokens` tokens (the request's `max_tokens`, or
`max_completion_tokens`), one token per server-sent event as vLLM streams them (`text` and `token_ids` in the
choice, usage in a last event, then `data: [DONE]`), chunked, over HTTP/1.1 keep-alive. `GET /v1/models` and
`/health` answer for the clients' readiness checks. Every response records the server's own first-byte time.

    python bench/instant.py --port 8800 --mode burst            # the whole answer in one write
    python bench/instant.py --port 8800 --mode paced --tick-ms 2  # one token per stream per tick, like a decode step

`burst` measures a client's parsing cost per token at its most efficient (events arrive many per read); `paced`
writes every event separately, on a shared clock, so each token reaches the client in a read of its own, the way a
real engine's decode steps deliver them. Binds 127.0.0.1 only. With `--first-byte-log FILE` (paced mode) the server
records, for every request with a `user` field, its time.monotonic_ns() when it wrote the first token, and writes
them to FILE as JSON when it stops: the bench compares the client's first-token time against it (one clock: the
monotonic clock is the machine's, not the process's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time

MODEL = "instant"


def _event(payload: dict) -> bytes:
    data = b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def _token_event(k: int, chat: bool) -> bytes:
    token = 3 + (k * 7) % 997
    text = f" t{token}"
    choice = ({"index": 0, "delta": {"content": text}, "token_ids": [token], "finish_reason": None} if chat else
              {"index": 0, "text": text, "token_ids": [token], "logprobs": None, "finish_reason": None})
    return _event({"id": "cmpl-instant", "object": "chat.completion.chunk" if chat else "text_completion",
                   "created": 0, "model": MODEL, "choices": [choice]})


class Tables:
    """Every byte the server writes is built once: the events of token k, the tails by length."""

    def __init__(self, max_tokens: int = 4096) -> None:
        self.tokens = {chat: [_token_event(k, chat) for k in range(max_tokens)] for chat in (False, True)}
        self.done = b"%x\r\n%s\r\n0\r\n\r\n" % (len(b"data: [DONE]\n\n"), b"data: [DONE]\n\n")

    def tail(self, n: int, prompt: int) -> bytes:
        usage = {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}
        return _event({"id": "cmpl-instant", "object": "text_completion", "created": 0, "model": MODEL,
                       "choices": [{"index": 0, "text": "", "finish_reason": "length"}], "usage": usage}) + self.done


HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n")


class Stream:
    __slots__ = ("chat", "k", "n", "prompt", "transport", "user")

    def __init__(self, transport: asyncio.Transport, n: int, prompt: int, chat: bool, user: str | None) -> None:
        self.transport, self.n, self.prompt, self.chat, self.k, self.user = transport, n, prompt, chat, 0, user


class Server(asyncio.Protocol):
    tables: Tables
    mode = "burst"
    active: list[Stream]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            head = self.buf[:end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                key, _, value = line.partition(":")
                if key.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buf) < end + 4 + length:
                return
            body, self.buf = self.buf[end + 4:end + 4 + length], self.buf[end + 4 + length:]
            method, path = head.split(" ", 2)[:2]
            self.answer(method, path, body)

    def answer(self, method: str, path: str, body: bytes) -> None:
        if method == "GET":
            payload = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}
                                 if path.startswith("/v1/models") else {"status": "ok"}).encode()
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                                 % (len(payload), payload))
            return
        request = json.loads(body or b"{}")
        n = int(request.get("max_tokens") or request.get("max_completion_tokens") or 16)
        prompt = request.get("prompt")
        prompt_len = len(prompt) if isinstance(prompt, list) else len(str(prompt or request.get("messages")).split())
        chat = path.endswith("chat/completions")
        head = HEAD + b"\r\n"
        if self.mode == "burst":
            events = self.tables.tokens[chat]
            self.transport.write(head + b"".join(events[k % len(events)] for k in range(n))
                                 + self.tables.tail(n, prompt_len))
        else:
            self.transport.write(head)
            self.active.append(Stream(self.transport, n, prompt_len, chat, request.get("user")))


FIRST_BYTE: dict[str, int] = {}


async def tick(tables: Tables, active: list[Stream], every_s: float) -> None:
    """Paced mode: every tick, one more token to every stream in flight (a decode step of a batch)."""
    loop = asyncio.get_running_loop()
    next_at = loop.time()
    while True:
        keep = []
        for s in active:
            events = tables.tokens[s.chat]
            if s.transport.is_closing():
                continue
            s.transport.write(events[s.k % len(events)])
            if s.k == 0 and s.user is not None:
                FIRST_BYTE[s.user] = time.monotonic_ns()
            s.k += 1
            if s.k >= s.n:
                s.transport.write(tables.tail(s.n, s.prompt))
            else:
                keep.append(s)
        active[:] = keep
        next_at += every_s
        await asyncio.sleep(max(0.0, next_at - loop.time()))


async def serve(port: int, mode: str, tick_ms: float, first_byte_log: str | None = None) -> None:
    Server.tables, Server.mode, Server.active = Tables(), mode, []
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Server, "127.0.0.1", port, backlog=4096)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ticker = asyncio.ensure_future(tick(Server.tables, Server.active, tick_ms / 1000)) if mode == "paced" else None
    print(json.dumps({"listening": f"127.0.0.1:{port}", "mode": mode}), flush=True)
    async with server:
        await stop.wait()
    if ticker is not None:
        ticker.cancel()
    if first_byte_log:
        with open(first_byte_log, "w") as f:
            json.dump(FIRST_BYTE, f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=("burst", "paced"), default="burst")
    parser.add_argument("--tick-ms", type=float, default=2.0)
    parser.add_argument("--first-byte-log", help="paced mode: write the first-token write times here on exit")
    args = parser.parse_args()
    try:
        from uvloop import new_event_loop
    except ImportError:
        new_event_loop = asyncio.new_event_loop
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        runner.run(serve(args.port, args.mode, args.tick_ms, args.first_byte_log))


if __name__ == "__main__":
    main()
