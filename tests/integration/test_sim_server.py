"""The simulated server speaks OpenAI-compatible streaming HTTP on 127.0.0.1, on the model's own schedule."""

from __future__ import annotations

import asyncio
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


@pytest.fixture()
def server_log(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """What the simulated server did, on its own clock (its event loop's), by task: ("admit", arrival, Timeline) for
    each request; ("wait", due, slept) each time a task waits for a token's time, `slept` False when that time had
    passed already (a late loop then writes the overdue tokens at once); ("event", t, task) for each streamed event
    and ("send", t, task, body) for each whole answer it wrote."""
    from tasks.engines.simulated import server
    from tasks.engines.simulated.queueing import SimModel

    log: list[tuple] = []
    admit, send, event, sleep_until = SimModel.admit, server.SimServer._send, server._event, server._sleep_until

    def admitted(self, arrival: float, *args, **kwargs):
        timeline = admit(self, arrival, *args, **kwargs)
        log.append(("admit", arrival, timeline))
        return timeline

    async def waited(loop, when: float) -> None:
        log.append(("wait", when, when > loop.time(), asyncio.current_task()))
        await sleep_until(loop, when)

    async def sent(self, writer, status, kind, data, keep):
        log.append(("send", asyncio.get_running_loop().time(), asyncio.current_task(), data))
        await send(self, writer, status, kind, data, keep)

    def evented(writer, payload):
        log.append(("event", asyncio.get_running_loop().time(), asyncio.current_task()))
        event(writer, payload)

    monkeypatch.setattr(SimModel, "admit", admitted)
    monkeypatch.setattr(server, "_sleep_until", waited)
    monkeypatch.setattr(server.SimServer, "_send", sent)
    monkeypatch.setattr(server, "_event", evented)
    return log


@pytest.mark.parametrize("stream", [False, None])   # None: the field absent, as the endpoints client sends it
def test_without_stream_one_json_completion_when_the_last_token_is_due(stream: bool | None,
                                                                       server_log: list[tuple]) -> None:
    """Judged on the server's own clock and order, which a busy machine cannot move: beside a streamed request
    whose tokens, 10 ms apart for 10 s, serve as a clock, the whole answer is written no earlier than its last token
    is due, and before every streamed token due after it that the server waited for (the event loop wakes waiting
    tasks in the order of their times; a loop running late writes a stream's overdue tokens without waiting)."""
    cfg = SimConfig(prefill_workers=2, prefill_ms=30, decode_slots=4, tpot_ms=10, tpot_load=0.0, output_tokens=1000)
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 3}
    with running(cfg, free_port()) as url, httpx.Client(base_url=url, timeout=10) as http, \
            httpx.Client(base_url=url, timeout=10) as other:
        clock_request = {"model": MODEL_NAME, "prompt": [9], "stream": True}
        with other.stream("POST", "/v1/completions", json=clock_request) as ticks:
            lines = (line for line in ticks.iter_lines() if line.startswith("data:"))
            next(lines)                                            # the clock is decoding
            r = http.post("/v1/chat/completions", json=body if stream is None else {**body, "stream": stream})
            (_, _, clock), (_, _, timeline) = [x for x in server_log if x[0] == "admit"]
            due = timeline.token_times()[-1]
            ticked = 1
            while clock.token_times()[ticked - 1] <= due + 0.001:    # until a tick due after the answer was sent
                next(lines)
                ticked += 1
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        answer = r.json()
        choice = answer["choices"][0]
        assert answer["object"] == "chat.completion" and answer["id"] and choice["finish_reason"] == "length"
        assert choice["message"]["role"] == "assistant" and len(choice["message"]["content"].split()) == 3
        assert answer["usage"]["completion_tokens"] == 3 == len(choice["token_ids"])   # max_completion_tokens caps 1000
        text = http.post("/v1/completions", json={"model": MODEL_NAME, "prompt": [1, 2], "max_tokens": 2}).json()
        assert text["object"] == "text_completion" and len(text["choices"][0]["token_ids"]) == 2
    assert len(timeline.token_times()) == 3 and due == timeline.first_token + 2 * timeline.tpot_s
    [at] = [i for i, x in enumerate(server_log) if x[0] == "send" and b"chat.completion" in x[3]]
    _, written, task, _ = server_log[at]
    assert written >= due - 1e-6                                   # not before its last token is due
    assert [x[1] for x in server_log[:at] if x[0] == "wait" and x[3] is task] == [due]   # it waited for that token
    ticks, waits = [], {}   # each tick: (its due time, whether the server waited for it, written before the answer)
    for i, entry in enumerate(server_log):
        if entry[0] == "wait":
            waits[entry[3]] = entry[1:3]
        elif entry[0] == "event" and entry[2] is not task:
            ticks.append((*waits[entry[2]], i < at))
    later = [tick for tick in ticks if tick[0] > due + 0.001]
    assert later and not later[-1][2], ticks                       # a tick due after the answer went out after it
    assert not [t for t in later if t[1] and t[2]], (due, written, later)   # none waited for went out before it
