"""The harness client against real servers: the same tokens as the httpx + json path it replaced on the smoke engine,
and an Offline burst over `max_concurrency` served at the server's own rate (the old client's pool queue halved it).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from tasks.datasets.requests import build_requests
from tasks.engines import Endpoint
from tasks.harness.client import CompletionClient

pytestmark = pytest.mark.integration


async def reference_stream(endpoint: Endpoint, body: dict) -> tuple[str, int | None]:
    """The previous client's path, kept here as the oracle: httpx streaming, every `data:` line through json.loads."""
    text, usage = [], None
    async with httpx.AsyncClient(base_url=endpoint.base_url, timeout=httpx.Timeout(None, connect=10.0)) as http, \
            http.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                break
            chunk = json.loads(payload)
            if chunk.get("usage"):
                usage = chunk["usage"].get("completion_tokens")
            for choice in chunk.get("choices") or []:
                text.append(choice.get("text") or (choice.get("delta") or {}).get("content") or "")
    return "".join(text), usage


def test_fast_client_gives_the_old_paths_tokens_on_the_smoke_engine(smoke_server: Endpoint,
                                                                      smoke_store: Path) -> None:
    requests = build_requests("gpt-oss-120b", smoke_store / "datasets" / "smoke" / "acc_eval_inputs.parquet",
                              "accuracy", max_tokens=16, temperature=0.0)
    count = 8

    async def main() -> tuple[list, list]:
        client = CompletionClient(smoke_server, max_tokens=16, temperature=0.0, max_concurrency=4)
        firsts: list[list[int]] = []
        try:
            fast = await asyncio.gather(*[client.send(requests.path, requests.body(i), firsts.append)
                                          for i in range(count)])
            old = [await reference_stream(smoke_server, client.prepare(requests.path, requests.body(i)))
                   for i in range(count)]
        finally:
            await client.aclose()
        assert len(firsts) == count and all(firsts)
        return fast, [(text, usage, client._ids(text)) for text, usage in old]

    fast, old = asyncio.run(main())
    for f, (text, usage, ids) in zip(fast, old, strict=True):
        assert f.error is None
        assert (f.text, f.tokens) == (text, ids) and len(ids) > 0
        assert f.engine_tokens == usage


def _thread_cpu_s(native_id: int) -> float:
    """CPU seconds a thread of this process has used (Linux: /proc/self/task/ID/stat, utime + stime)."""
    fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_offline_burst_over_max_concurrency_runs_at_the_servers_rate() -> None:
    """935 requests at once, 64 on the wire. An httpx client whose pool queues the 871 beyond its connections spends
    its time on the pool's bookkeeping: 19.4 CPU-s on the client's thread for the 0.72 the server's took (27 times),
    40.3 q/s of the 69.5 the server's model gives (docs/performance.md). Podium's client, with a semaphore in front
    of the connections, takes about half the server's CPU and keeps the wire full. CPU time, not wall time, is the
    measure: a busy machine slows both threads, not the work either does. The server runs in a thread of this
    process, as in `podium search` on the CPU."""
    from tasks.engines.simulated import server as testing
    from tasks.engines.simulated.queueing import SimConfig, replay

    config = SimConfig(prefill_workers=1, prefill_ms=3, decode_workers=2, decode_slots=32, tpot_ms=30,
                       tpot_load=1.0, output_tokens=16)
    count = 935
    ttft, tpot = replay(config, np.zeros(count), 16)
    model_qps = count / float(np.max(ttft + tpot * 15))
    with socket.socket() as probe:   # a free port on the loopback
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    before = {t.native_id for t in threading.enumerate()}
    with testing.running(config, port, chunk_tokens=5) as url:
        [server_thread] = [t.native_id for t in threading.enumerate() if t.native_id not in before]
        endpoint = Endpoint(url, "simulated", accepts_token_ids=True, returns_token_ids=True)

        async def main() -> tuple[float, list, int, float, float]:
            client = CompletionClient(endpoint, max_tokens=16, temperature=0.0, max_concurrency=64)
            started, client_cpu, server_cpu = time.monotonic(), time.thread_time(), _thread_cpu_s(server_thread)
            results = await asyncio.gather(*[client.complete((1, 2, i)) for i in range(count)])
            elapsed = time.monotonic() - started
            client_cpu, server_cpu = time.thread_time() - client_cpu, _thread_cpu_s(server_thread) - server_cpu
            await client.aclose()
            return count / elapsed, results, client.http.peak_open, client_cpu, server_cpu

        qps, results, peak, client_cpu, server_cpu = asyncio.run(main())
    print(f"{qps:.1f} q/s of the model's {model_qps:.1f}; CPU: client {client_cpu:.2f} s, server {server_cpu:.2f} s")
    assert all(r.error is None and len(r.tokens) == 16 for r in results)
    assert peak == 64
    assert server_cpu > 0 and client_cpu <= 3 * server_cpu, (client_cpu, server_cpu)
