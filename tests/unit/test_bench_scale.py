"""`make bench-scale` stays runnable: its simulated replicas stream as vLLM does at a stream interval, and its head runs
go through the real loadgen and harness, at tiny sizes (bench/scale.py, bench/replica_server.py). No timings: the
assertions are on what was served, answered and counted."""

from __future__ import annotations

import http.client
import json
from pathlib import Path

import pytest

from bench import scale
from bench.replica_server import events_per_answer, token
from tasks.harness.sse import ResponseParser


def stream(port: int, body: dict) -> list[dict | str]:
    """The events of one streamed completion from a replica, split by the harness's own parser."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/v1/completions", json.dumps({**body, "stream": True}),
                 {"Content-Type": "application/json"})
    raw = conn.sock.recv(1 << 20)
    parser, payloads = ResponseParser(), []
    while True:
        payloads += parser.feed(raw)
        if parser.done:
            break
        raw = conn.sock.recv(1 << 20)
    conn.close()
    return [p.decode() if p == b"[DONE]" else json.loads(p) for p in payloads]


@pytest.mark.parametrize(("tokens", "interval"), [(7, 3), (5, 1), (1, 4), (12, 12)])
def test_the_replicas_stream_as_vllm_at_a_stream_interval(tokens: int, interval: int) -> None:
    """The first token comes alone, then an event per `interval` tokens, the rest with the finish; the events carry
    vLLM's fields, the prompt's ids come back once, and /stats counts the writes `events_per_answer` predicts."""
    with scale.replicas(2, 1, 1.0, tokens, interval) as ports:
        scale.server_stats(ports)
        events = stream(ports["replicas"][1], {"prompt": [5, 6, 7], "max_tokens": 100, "return_token_ids": True})
        served = scale.server_stats(ports)
        short = stream(ports["front"], {"prompt": "a b", "max_tokens": 1})
    *chunks, usage, done = events
    assert done == "[DONE]" and usage["choices"] == [] and usage["usage"]["completion_tokens"] == tokens
    sizes = [len(c["choices"][0]["token_ids"]) for c in chunks]
    assert sizes[0] == 1 and all(s == interval for s in sizes[1:-1]) and 1 <= sizes[-1] <= interval
    assert [i for c in chunks for i in c["choices"][0]["token_ids"]] == [token(k) for k in range(tokens)]
    assert chunks[0]["choices"][0]["prompt_token_ids"] == [5, 6, 7]
    assert all("prompt_token_ids" not in c["choices"][0] for c in chunks[1:])
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * (len(chunks) - 1) + ["stop"]
    assert len(chunks) == events_per_answer(tokens, interval) == served["writes"]
    assert served["streams"] == 1 and served["tokens"] == tokens and set(served["ttft_ms"]) == {"50.00", "99.00"}
    # a request that stops at max_tokens (before the answer's end, when it has more than one token), through the
    # front port, without token ids
    assert short[0]["choices"][0]["finish_reason"] == ("length" if tokens > 1 else "stop")
    assert "token_ids" not in short[0]["choices"][0]


def test_the_head_is_measured_through_loadgen(tmp_path: Path) -> None:
    """Offline and Server runs of the whole head (loadgen, two worker processes, the dispatch over the replicas
    where the harness has one) answer every sample with the replicas' tokens, and the bench counts its CPU, its
    read calls, the replicas' writes and both sides' first-token times."""
    from tasks.rehearsal import gpt_oss

    dataset = gpt_oss.build(tmp_path / "data", scale=0.01).plan["dataset.performance"]
    with scale.replicas(4, 2, 1.0, 12, 4) as ports:
        offline = scale.head(ports, dataset, tmp_path, scenario="Offline", samples=8, concurrency=4, workers=2)
        server = scale.head(ports, dataset, tmp_path, scenario="Server", samples=8, concurrency=4, workers=2,
                            qps=16)
    for run in (offline, server):
        assert run["samples"] == 8 and run["tokens"] == 8 * 12
        assert run["writes"] == 8 * events_per_answer(12, 4)
        assert run["reads"] > 0 and run["cpu_s"] > 0 and run["loadgen_process_cpu_s"] > 0
    assert set(server["ttft_ms"]) == set(server["engine_ttft_ms"]) == {"50.00", "99.00"}
    assert offline["ttft_ms"] == {}   # Offline reports no first tokens
    per = scale.marginal(offline | {"samples": 4, "cpu_s": 1.0, "reads": 100, "writes": 40,
                                    "loadgen_process_cpu_s": 0.5}, offline)
    assert per["samples"] == 4 and per["writes"] == (offline["writes"] - 40) / 4


def test_the_projection_takes_one_read_per_event() -> None:
    """cost = a + b x reads through the two points; each interval's cost at one read per event (and the reads
    besides the streams'); cores at the seed's rate; the client's first-token times beside the replicas'."""
    n, k = 100, 4
    one = {"samples": 10, "cpu_ms": 3.0, "reads": 90.0, "writes": 100.0, "loadgen_process_cpu_ms": 0.2}
    grouped = {"samples": 10, "cpu_ms": 1.0, "reads": 30.0, "writes": float(events_per_answer(n, k)),
               "loadgen_process_cpu_ms": 0.1}
    b = (3.0 - 1.0) / (90 - 30)
    a = 1.0 - b * 30
    other = 30 - (1 + events_per_answer(n, k))
    times = {"ttft_ms": {"50.00": 2.0, "99.00": 3.0}, "engine_ttft_ms": {"50.00": 1.0, "99.00": 1.5}}
    runs = [{"podium": {"Server": {"1": {"marginal": one, "large": times}, str(k): {"marginal": grouped,
                                                                                   "large": times}}}}]
    entry = scale.summary(runs, k, n)["podium"]["Server"]
    rate = scale.SEED["Server"]["samples_per_s"]
    for interval, cores in entry["projected_cores_by_stream_interval"].items():
        assert cores == round((a + b * (other + 1 + events_per_answer(n, int(interval)))) * rate / 1000, 2)
    assert entry["projected_cores"] == entry["projected_cores_by_stream_interval"][str(k)]
    assert entry["projected_cores_one_token_per_read"] == entry["projected_cores_by_stream_interval"]["1"]
    assert entry["measured"]["1"]["cpu_s_per_1000_samples"] == 3.0
    assert entry["loadgen_process_cores"] == round(0.1 * rate / 1000, 2)
    assert entry["ttft_ms"]["1"] == {"client": times["ttft_ms"], "engine": times["engine_ttft_ms"]}


@pytest.mark.engines
def test_vllm_bench_serve_runs_against_the_replicas(tmp_path: Path) -> None:
    """The peer the bench puts beside the head: `vllm bench serve` from .venv-vllm, every request answered."""
    from tasks.engines.smoke import model as smoke_model
    from tests.integration.engines_support import engine_python

    engine_python(".venv-vllm", "venv-vllm")
    smoke_model.build(tmp_path / "tiny-llama")
    with scale.replicas(4, 2, 1.0, 12, 4) as ports:
        run = scale.vllm(ports, tmp_path / "tiny-llama", tmp_path, samples=8, concurrency=4, answer_tokens=12)
    assert run["samples"] == 8 and run["writes"] == 8 * events_per_answer(12, 4) and run["cpu_s"] > 0
