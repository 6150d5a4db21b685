"""The simulated server speaks OpenAI-compatible streaming HTTP on 127.0.0.1, on the model's own schedule."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tasks.engines.simulated import MODEL_NAME
from tasks.engines.simulated.queueing import SimConfig
from tasks.engines.simulated.server import running
from tasks.launchers.local import free_port

pytestmark = pytest.mark.integration


def events(response: httpx.Response) -> list[tuple[float, dict]]:
    out = []
    for line in response.iter_lines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            out.append((time.monotonic(), json.loads(line[5:])))
    return out


def test_completions_stream_token_ids_on_the_model_schedule() -> None:
    cfg = SimConfig(prefill_ms=50, decode_slots=4, tpot_ms=20, tpot_load=0.0, output_tokens=6)
    with running(cfg, free_port()) as url, httpx.Client(base_url=url, timeout=10) as http:
        assert http.get("/health").json() == {"status": "ok"}
        assert http.get("/v1/models").json()["data"][0]["id"] == MODEL_NAME
        assert http.get("/nothing").status_code == 404
        began = time.monotonic()
        with http.stream("POST", "/v1/completions", json={"model": MODEL_NAME, "prompt": [5, 6, 7], "max_tokens": 4,
                                                          "stream": True}) as r:
            assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"
            got = events(r)
        tokens = [t for _, e in got for c in e["choices"] for t in c.get("token_ids", [])]
        assert len(tokens) == 4                                    # max_tokens caps the model's 6
        assert got[-1][1]["usage"]["completion_tokens"] == 4 and got[-1][1]["usage"]["prompt_tokens"] == 3
        first = got[0][0] - began
        last = got[-2][0] - began
        assert 0.045 <= first <= 0.2                               # prefill 50 ms
        assert 0.045 + 3 * 0.020 <= last <= 0.35                   # then 3 more tokens at 20 ms
        assert http.post("/v1/completions", content=b"not json").status_code == 400


def test_chat_and_chunked_events() -> None:
    cfg = SimConfig(prefill_ms=1, tpot_ms=2, output_tokens=9)
    with running(cfg, free_port(), chunk_tokens=4) as url, httpx.Client(base_url=url, timeout=10) as http:
        with http.stream("POST", "/v1/chat/completions", json={"model": MODEL_NAME, "stream": True,
                                                               "messages": [{"role": "user", "content": "hi"}]}) as r:
            got = [e for _, e in events(r) if e["choices"][0].get("token_ids")]
        assert [len(e["choices"][0]["token_ids"]) for e in got] == [1, 4, 4]     # the first alone, then 4 a time
        assert got[0]["choices"][0]["delta"]["content"].startswith(" t")       # chat chunks carry a delta


@pytest.mark.parametrize("stream", [False, None])   # None: the field absent, as the endpoints client sends it
def test_without_stream_one_json_completion_when_the_last_token_is_due(stream: bool | None) -> None:
    cfg = SimConfig(prefill_ms=30, tpot_ms=10, tpot_load=0.0, output_tokens=5)
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 3}
    with running(cfg, free_port()) as url, httpx.Client(base_url=url, timeout=10) as http:
        began = time.monotonic()
        r = http.post("/v1/chat/completions", json=body if stream is None else {**body, "stream": stream})
        took = time.monotonic() - began
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        answer = r.json()
        choice = answer["choices"][0]
        assert answer["object"] == "chat.completion" and answer["id"] and choice["finish_reason"] == "length"
        assert choice["message"]["role"] == "assistant" and len(choice["message"]["content"].split()) == 3
        assert answer["usage"]["completion_tokens"] == 3 == len(choice["token_ids"])   # max_completion_tokens caps 5
        assert 0.03 + 2 * 0.010 <= took < 2                        # prefill, then 2 more tokens, then the answer
        text = http.post("/v1/completions", json={"model": MODEL_NAME, "prompt": [1, 2], "max_tokens": 2}).json()
        assert text["object"] == "text_completion" and len(text["choices"][0]["token_ids"]) == 2
