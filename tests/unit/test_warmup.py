"""The engine's warm-up (tasks/serving/warmup.py) through the real session path: after the readiness probe, and
before any measured request, the engine gets requests built like the run's own (Qwen3-VL: its sampling settings and
an image), again after a relaunch; a warm-up that is not answered in time fails the launch, naming the engine."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from submission.base.errors import LaunchError
from submission.results.runs import RunSpec
from tasks.engines.simulated.queueing import SimConfig
from tasks.engines.simulated.server import SimServer
from tasks.harness import runner
from tasks.launchers.nodes import NodeSlot
from tasks.serving import session as sessions
from tasks.serving.warmup import WarmUp
from tests.unit.test_datasets import shopify_parquet

QWEN = "qwen3-vl-235b-a22b"
SAMPLES = 2       # the products in shopify_parquet
WARM = 3          # more than the data set holds: the samples come round again
SAMPLING = {"max_tokens": 150, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.0,
            "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}   # rules/generation.yaml


class Recording(SimServer):
    """The simulated engine, noting every generation request's body in the order they came."""

    def __init__(self, config: SimConfig) -> None:
        super().__init__(config, model_name="rec")
        self.bodies: list[dict] = []

    async def _complete(self, writer: asyncio.StreamWriter, request: dict, *, chat: bool, keep: bool) -> None:
        self.bodies.append(request)
        await super()._complete(writer, request, chat=chat, keep=keep)


@contextlib.contextmanager
def recording(config: SimConfig) -> Iterator[tuple[Recording, str]]:
    """A recording engine on 127.0.0.1, in a thread of this process, stopped on the way out."""
    server = Recording(config)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="recording-engine", daemon=True)
    thread.start()
    listening = asyncio.run_coroutine_threadsafe(asyncio.start_server(server.handle, "127.0.0.1", 0), loop).result(10)
    try:
        yield server, f"http://127.0.0.1:{listening.sockets[0].getsockname()[1]}"
    finally:
        async def stop() -> None:
            listening.close()
            for task in asyncio.all_tasks() - {asyncio.current_task()}:
                task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def qwen_spec(dataset: Path) -> RunSpec:
    """A Qwen3-VL accuracy run of both products, as plan_runs makes it from a plan with generation max_tokens 150,
    temperature 0.7 (the reference's)."""
    return RunSpec(plan="warm", profile="smoke", round="v6.1", system="s", benchmark=QWEN, scenario="Offline",
                   mode="accuracy", loadgen_model=QWEN, loadgen_scenario="Offline",
                   user_conf=((f"{QWEN}.*.performance_sample_count_override", str(SAMPLES)),
                              (f"{QWEN}.*.accuracy_sample_count_override", str(SAMPLES))),
                   dataset=str(dataset), dataset_sha256="-", model_sha256="-", engine="external", max_tokens=150,
                   temperature=0.7, max_concurrency=2)


def session_on(url: str, tmp_path: Path, warm: WarmUp, monkeypatch: pytest.MonkeyPatch) -> sessions.EngineSession:
    """An EngineSession on the recording engine (as an external engine: the session probes it, as it would any).
    No Prefect server for a unit test: the launch task runs as its plain function, and the session holds no node
    slot (a Prefect concurrency limit)."""
    monkeypatch.setattr(sessions, "launch_engine", sessions.launch_engine.fn)
    options = {"base_url": url, "served_model_name": "rec", "accepts_token_ids": True, "returns_token_ids": "vllm"}
    session = sessions.EngineSession("external", options, str(tmp_path), str(tmp_path / "state"),
                                     str(tmp_path / "logs"), timeout_s=10, warmup=warm)
    session.slot = NodeSlot([])
    return session


def is_probe(body: dict) -> bool:
    return body.get("prompt") == "hello" and body["max_tokens"] == 1   # tasks.engines.common.ready_probes


def assert_warm_up(bodies: list[dict]) -> None:
    """The readiness probe, then WARM requests like the run's: its sampling settings, a product and its image."""
    assert is_probe(bodies[0]), bodies[0]
    for body in bodies[1:1 + WARM]:
        assert {k: body.get(k) for k in SAMPLING} == SAMPLING
        user = body["messages"][1]["content"]
        assert user[1]["image_url"]["url"].startswith("data:image/png;base64,")
        assert body["stream"] is True and body["model"] == "rec"
    titles = [b["messages"][1]["content"][0]["text"].splitlines()[1] for b in bodies[1:1 + WARM]]
    assert titles == ["Desk lamp", "Hiking boot", "Desk lamp"]


def test_each_launch_is_warmed_up_with_the_runs_requests_before_the_measured_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = qwen_spec(shopify_parquet(tmp_path / "products.parquet"))
    with recording(SimConfig(prefill_ms=1, tpot_ms=1, output_tokens=4)) as (engine, url), \
            session_on(url, tmp_path, WarmUp(spec, WARM, timeout_s=30), monkeypatch) as session:
        endpoint = session.endpoint()
        assert_warm_up(engine.bodies)
        warmed = len(engine.bodies)
        stats = runner.run(spec, endpoint, tmp_path / "run", timeout_s=120)   # the measured run, real loadgen
        assert stats["completed"] == SAMPLES   # the warm-up is none of the run's
        measured = engine.bodies[warmed:]
        assert len(measured) == SAMPLES and not any(is_probe(b) for b in measured)
        assert all({k: b.get(k) for k in SAMPLING} == SAMPLING for b in measured)

        died = iter([False])   # the engine died: its next use relaunches it
        monkeypatch.setattr(session, "alive", lambda: next(died, True))
        session.endpoint()
        assert session.launches == 2
        assert_warm_up(engine.bodies[warmed + SAMPLES:])
        assert len(engine.bodies) == warmed + SAMPLES + 1 + WARM


def test_a_warm_up_not_answered_in_time_fails_the_launch_and_stops_the_engine(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = qwen_spec(shopify_parquet(tmp_path / "products.parquet"))
    slow = SimConfig(prefill_ms=1, tpot_ms=60_000, output_tokens=2)   # the probe's one token at once, then nothing
    with recording(slow) as (engine, url):
        session = session_on(url, tmp_path, WarmUp(spec, WARM, timeout_s=0.5), monkeypatch)
        with pytest.raises(LaunchError, match=r"engine external: the warm-up \(3 qwen3-vl-235b-a22b request\(s\) "
                                              r"at once with the run's sampling .*\"top_k\": 20.*within 0.5 s"):
            session.endpoint()
        assert not session.alive() and session.launches == 1   # closed: the next use launches afresh
        assert len(engine.bodies) == 1 + WARM   # the probe, then the warm-up, sent and never answered


def test_the_plan_sets_it_and_each_scenario_readme_says_what_ran_before_the_timed_runs(tmp_path: Path) -> None:
    from submission.plan import model as plans
    from submission.tree.assemble import _scenario_readme
    from tasks.serving.warmup import planned
    from tests.unit.test_guided_decoding import qwen_plan

    data = qwen_plan({"name": "vllm", "options": {"gpus_per_node": 0}}, guided=False)
    data["benchmarks"][0]["generation"] = {"max_tokens": 150, "temperature": 0.7}
    plan = plans.parse(data, "plan.yaml")
    bench = plan.benchmarks[0]
    spec = qwen_spec(tmp_path / "products.parquet")
    assert planned(bench.engine, [spec]) == WarmUp(spec, 8, 600)   # the defaults
    readme = _scenario_readme(plan, bench, "Offline", "abc", plan.harness(bench))
    line = next(x for x in readme.splitlines() if x.startswith("- warm-up:"))
    assert "the engine answered 8 untimed requests" in line and '"top_k": 20' in line and '"top_p": 0.8' in line
    assert "inference_rules.adoc, LoadGen Operation, run procedure steps 2-3" in line

    data["benchmarks"][0]["engine"] |= {"warmup_requests": 0}
    off = plans.parse(data, "plan.yaml")
    assert planned(off.benchmarks[0].engine, [spec]) is None
    readme = _scenario_readme(off, off.benchmarks[0], "Offline", "x", off.harness(off.benchmarks[0]))
    assert "- warm-up: none (`engine.warmup_requests: 0`)" in readme
