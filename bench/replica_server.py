"""Simulated serving replicas for measuring a head: many light replicas in one process, paced like decode steps.

Each replica listens on a port of its own and holds at most `--slots` streams at once (the rest wait in its queue,
first come first served). Every `--step-ms` all replicas take one decode step: each admitted stream gets one more
token; a stream admitted during a step gets its first token at the next one. A late step is not made up by steps back
to back. A stream ends after `--answer-tokens` tokens (finish_reason `stop`, as at an end-of-sequence token) or at
the request's `max_tokens` (`length`). One more port, the front, takes requests for the whole system and gives each to
the replica with the fewest streams, for a client that drives one URL (`vllm bench serve`, or a head without a
dispatch of its own).

Events are shaped as vLLM 0.32.0's `/v1/completions` stream (`vllm/entrypoints/openai/completion/serving.py`): one
`data:` event per HTTP chunk and per write, `text` and, when the request asks `return_token_ids`, `token_ids` in the
choice (and the prompt's ids in the first event), then a usage event and `data: [DONE]`. `--stream-interval K` sends
them as vLLM's `--stream-interval K` does (`vllm/v1/engine/output_processor.py` `make_request_output`): the first
token at once, then an event whenever K tokens are waiting, and the rest when the stream finishes
(`events_per_answer`). K = 1 is one event per token.

    python bench/replica_server.py --replicas 64 --slots 4 --step-ms 10 --answer-tokens 1365 [--stream-interval 1]

Binds 127.0.0.1 only, on ports the kernel picks; the first line on stdout is JSON: {"front": port, "replicas":
[ports]}. `GET /stats` on any port answers what was served since the last `GET /stats`: streams, writes (one per
event), tokens, and the time from a request's arrival to its first token's write (`ttft_ms` p50 and p99: the
engine's own, to hold a client's first-token times against). SIGTERM or SIGINT stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.instant import HEAD, Server

MODEL = "gpt-oss-120b"
ID = b"cmpl-0123456789abcdef0123456789abcdef"
START = b'data: {"id":"%s","object":"text_completion","created":1767225600,"model":"%s",' % (ID, MODEL.encode())


def token(k: int) -> int:
    """The id of the k-th output token: spread over a 200k vocabulary, as gpt-oss's o200k ids are."""
    return 1000 + (k * 7919) % 199_000


def events_per_answer(n: int, interval: int) -> int:
    """The events (writes) of an n-token answer at a stream interval: the first token alone, one per `interval`
    tokens after it, and the last write with the rest, the usage and [DONE]."""
    writes = sent = 0
    for made in range(1, n + 1):
        if made == n or sent == 0 or made - sent >= interval:
            writes += 1
            sent = made
    return writes


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Events:
    """The bytes of each event, built once per (first token, count, with ids, finish reason)."""

    def __init__(self) -> None:
        self.cache: dict[tuple[int, int, bool, str | None], bytes] = {}

    def tokens(self, start: int, count: int, ids: bool, finish: str | None = None, prompt: bytes = b"") -> bytes:
        key = (start, count, ids, finish)
        if not prompt and key in self.cache:
            return self.cache[key]
        span = range(start, start + count)
        data = (START + b'"choices":[{"index":0,"text":' + json.dumps("".join(f" w{token(k) % 1000}" for k in span))
                .encode() + b',"logprobs":null,"finish_reason":' + json.dumps(finish).encode()
                + b',"stop_reason":null' + prompt)
        if ids:
            data += b',"token_ids":[' + ",".join(str(token(k)) for k in span).encode() + b"]"
        event = chunk(data + b"}]}\n\n")
        if not prompt:
            self.cache[key] = event
        return event

    @staticmethod
    def end(prompt_tokens: int, n: int) -> bytes:
        usage = b'{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}' % (prompt_tokens, n, prompt_tokens + n)
        return (chunk(START + b'"choices":[],"usage":' + usage + b"}\n\n") + chunk(b"data: [DONE]\n\n")
                + b"0\r\n\r\n")


class Stream:
    __slots__ = ("arrived", "ids", "made", "n", "prompt", "prompt_tokens", "sent", "transport")

    def __init__(self, transport: asyncio.Transport, n: int, prompt: list | str, ids: bool) -> None:
        self.transport, self.n, self.ids = transport, n, ids
        self.arrived = time.monotonic()
        self.prompt_tokens = len(prompt) if isinstance(prompt, list) else len(prompt.split())
        # vLLM returns the prompt's ids once, in the first event, when the request asks for token ids
        self.prompt = (b',"prompt_token_ids":' + json.dumps(prompt, separators=(",", ":")).encode()
                       if ids and isinstance(prompt, list) else b"")
        self.made = self.sent = 0


class Replica:
    __slots__ = ("active", "queue")

    def __init__(self) -> None:
        self.active: list[Stream] = []
        self.queue: deque[Stream] = deque()

    @property
    def load(self) -> int:
        return len(self.active) + len(self.queue)


class System:
    def __init__(self, replicas: int, slots: int, answer_tokens: int, interval: int) -> None:
        self.replicas = [Replica() for _ in range(replicas)]
        self.slots, self.answer_tokens, self.interval = slots, answer_tokens, interval
        self.events = Events()
        self.reset()

    def reset(self) -> dict:
        """What was served since the last reset."""
        ttft = sorted(getattr(self, "ttft", []))
        out = {"streams": getattr(self, "streams", 0), "writes": getattr(self, "writes", 0),
               "tokens": getattr(self, "tokens", 0),
               "ttft_ms": {"50.00": round(ttft[len(ttft) // 2], 3), "99.00": round(ttft[int(len(ttft) * 0.99)], 3)}
               if ttft else {}}
        self.streams = self.writes = self.tokens = 0
        self.ttft: list[float] = []
        return out

    def step(self) -> None:
        """One decode step of every replica: a token for each admitted stream, its event when one is due."""
        events, interval = self.events, self.interval
        for replica in self.replicas:
            keep = []
            for s in replica.active:
                if s.transport.is_closing():
                    continue
                s.made += 1
                if s.made == s.n:
                    finish = "stop" if s.n == self.answer_tokens else "length"
                    s.transport.write(events.tokens(s.sent, s.made - s.sent, s.ids, finish, s.prompt)
                                      + events.end(s.prompt_tokens, s.n))
                elif s.sent == 0 or s.made - s.sent >= interval:
                    s.transport.write(events.tokens(s.sent, s.made - s.sent, s.ids, None, s.prompt))
                else:
                    keep.append(s)
                    continue
                if s.sent == 0:
                    self.ttft.append((time.monotonic() - s.arrived) * 1000)
                self.writes += 1
                s.sent, s.prompt = s.made, b""
                if s.made == s.n:
                    self.streams += 1
                    self.tokens += s.n
                else:
                    keep.append(s)
            while replica.queue and len(keep) < self.slots:   # admitted now, first token at the next step
                keep.append(replica.queue.popleft())
            replica.active = keep


class Port(Server):
    """One listening port: a replica's own (`replica` set) or the front (None: the least-loaded replica)."""

    system: System

    def __init__(self, replica: Replica | None) -> None:
        self.replica = replica

    def answer(self, method: str, path: str, body: bytes) -> None:
        if method == "GET":
            if path != "/stats":
                super().answer(method, path, body)
                return
            payload = json.dumps(self.system.reset()).encode()
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                                 % (len(payload), payload))
            return
        if not path.endswith("/completions"):   # e.g. `vllm bench serve`'s /tokenize probe
            self.transport.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            return
        request = json.loads(body or b"{}")
        n = min(int(request.get("max_tokens") or 16), self.system.answer_tokens)
        self.transport.write(HEAD + b"\r\n")
        replica = self.replica or min(self.system.replicas, key=lambda r: r.load)
        replica.queue.append(Stream(self.transport, n, request.get("prompt") or "",
                                    bool(request.get("return_token_ids"))))


async def ticker(system: System, every_s: float) -> None:
    loop = asyncio.get_running_loop()
    next_at = loop.time()
    while True:
        system.step()
        # a late step is not made up by steps back to back: their events would land in one read of the client
        next_at = max(next_at + every_s, loop.time() + every_s / 2)
        await asyncio.sleep(next_at - loop.time())


async def serve(args: argparse.Namespace) -> None:
    system = System(args.replicas, args.slots, args.answer_tokens, args.stream_interval)
    Port.system = system
    loop = asyncio.get_running_loop()
    servers = [await loop.create_server(lambda r=r: Port(r), "127.0.0.1", 0, backlog=4096)
               for r in [None, *system.replicas]]
    ports = [s.sockets[0].getsockname()[1] for s in servers]
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tick = asyncio.ensure_future(ticker(system, args.step_ms / 1000))
    print(json.dumps({"front": ports[0], "replicas": ports[1:]}), flush=True)
    await stop.wait()
    tick.cancel()
    for s in servers:
        s.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=64)
    parser.add_argument("--slots", type=int, default=4, help="streams a replica serves at once")
    parser.add_argument("--step-ms", type=float, default=10.0, help="one decode step of every replica")
    parser.add_argument("--answer-tokens", type=int, default=1365)
    parser.add_argument("--stream-interval", type=int, default=1)
    args = parser.parse_args()
    try:
        from uvloop import new_event_loop
    except ImportError:
        new_event_loop = asyncio.new_event_loop
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        runner.run(serve(args))


if __name__ == "__main__":
    main()
