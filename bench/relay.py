"""What one userspace TCP relay adds to a request: HTTP/1.1 keep-alive requests on loopback, straight to a small
server and through a relay process in front of it (a stand-in for a `kubectl port-forward` hop or an L4 proxy; a
Kubernetes Service is translated in the kernel and costs less). The two paths take turns, round by round, on one
connection each, so both see the same machine.

    python bench/relay.py [--requests 2000] [--rounds 5]     # writes bench/results/relay.json

Binds 127.0.0.1 only; the server and the relay run in child processes of their own, stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import sys
import time
from multiprocessing import Process
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BODY = b'{"choices":[{"text":" x"}]}'
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
REQUEST = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


async def _serve(port: int) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                writer.write(ANSWER)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
    await (await asyncio.start_server(answer, "127.0.0.1", port)).serve_forever()


async def _relay(port: int, target: int) -> None:
    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    async def connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
    await (await asyncio.start_server(connect, "127.0.0.1", port)).serve_forever()


async def _timed(port: int, requests: int) -> list[float]:
    """Microseconds per request, one keep-alive connection, one request at a time."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    out = []
    for _ in range(requests):
        began = time.perf_counter_ns()
        writer.write(REQUEST)
        await reader.readexactly(len(ANSWER))
        out.append((time.perf_counter_ns() - began) / 1000)
    writer.close()
    return out


def _stats(us: list[float]) -> dict[str, float]:
    ordered = sorted(us)
    return {"median_us": round(statistics.median(ordered), 1), "p99_us": round(ordered[int(0.99 * len(ordered))], 1)}


def _in_child(serve: object, *ports: int) -> None:
    asyncio.run(serve(*ports))   # type: ignore[operator]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per path per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "relay.json")
    args = parser.parse_args()
    server, relay = _free_port(), _free_port()
    children = [Process(target=_in_child, args=(_serve, server), daemon=True),
                Process(target=_in_child, args=(_relay, relay, server), daemon=True)]
    for child in children:
        child.start()
    time.sleep(1.0)
    try:
        rounds = []
        for _ in range(args.rounds):
            direct = asyncio.run(_timed(server, args.requests))
            relayed = asyncio.run(_timed(relay, args.requests))
            rounds.append({"direct": _stats(direct), "relayed": _stats(relayed)})
            print(json.dumps(rounds[-1]), flush=True)
    finally:
        for child in children:
            child.terminate()
            child.join(timeout=5)
    added = statistics.median(r["relayed"]["median_us"] - r["direct"]["median_us"] for r in rounds)
    result = {"requests": args.requests, "rounds": rounds, "added_median_us": round(added, 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"a relay adds {added:.1f} us per request at the median; {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
