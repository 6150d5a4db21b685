"""The start-up of an engine of replicas through the real engine session (tasks/serving/session.py): simulated
replicas started by the local launcher, each ready by a real generation, warmed one by one (counted per replica in
the log), all serving the same checkpoint and engine version. Two replicas that never start are named and left out:
an accuracy run proceeds at `min_ready`, a performance run is refused with their names at once; a replica that
serves another checkpoint stops the launch before any run, named."""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from pathlib import Path

import pytest

from submission.base.errors import LaunchError
from submission.plan.replicas import Layout
from tasks.engines import ProcessSpec, backend
from tasks.engines.replicas import Replicated
from tasks.harness import runner
from tasks.launchers.nodes import NodeSlot
from tasks.serving import session as sessions
from tasks.serving import startup
from tasks.serving.warmup import WarmUp
from tests.integration.engines_support import offline_spec, replica_servers

pytestmark = pytest.mark.integration
WARM = 2   # warm-up requests per replica


def layout(min_ready: int) -> Layout:
    return Layout(per_node=2, nodes=2, gpus=0, min_ready=min_ready, performance_min_ready=4, max_lost=0,
                  head="beside")


def with_argv(changes: dict[int, list[str]]) -> type[Replicated]:
    """Simulated replicas, replica i's argv replaced (a list starting with "+": its flags added)."""
    class Changed(Replicated):
        def processes(self, *args: object, **kwargs: object) -> list[ProcessSpec]:
            specs = super().processes(*args, **kwargs)   # type: ignore[arg-type]
            for i, argv in changes.items():
                new = (*specs[i].argv, *argv[1:]) if argv[0] == "+" else tuple(argv)
                specs[i] = dataclasses.replace(specs[i], argv=new)
            return specs
    return Changed


def session(tmp_path: Path, lay: Layout, changes: dict[int, list[str]], smoke_store: Path,
            monkeypatch: pytest.MonkeyPatch) -> sessions.EngineSession:
    """An engine session of four simulated replicas on this host (two "nodes" as labels), `changes` made to their
    argv, warmed with WARM requests each of the smoke data set; no node slot (tests run side by side)."""
    made = with_argv(changes)
    monkeypatch.setattr(sessions, "backend", lambda name: made(backend(name), lay))
    spec = offline_spec(smoke_store / "datasets" / "smoke" / "acc_eval_inputs.parquet", "accuracy", samples=16,
                        max_tokens=8, engine="simulated")
    engine = sessions.EngineSession("simulated", {}, str(tmp_path), str(tmp_path / "state"), str(tmp_path / "logs"),
                                    timeout_s=8, where={"launcher": "local", "replicas": lay},
                                    warmup=WarmUp(spec, WARM, timeout_s=60))
    engine.slot = NodeSlot([])
    return engine


def test_two_replicas_that_never_start_are_left_out_for_accuracy_and_refused_for_performance(
        smoke_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    slow = [sys.executable, "-c", "import time; print('loading weights', flush=True); time.sleep(600)"]
    broken = [sys.executable, "-c", "import sys; print('CUDA error: out of memory', flush=True); sys.exit(3)"]
    caplog.set_level(logging.INFO)
    with session(tmp_path, layout(min_ready=2), {1: slow, 2: broken}, smoke_store, monkeypatch) as engine:
        endpoint = engine.endpoint(performance=False)
        assert [(r.name, r.node) for r in endpoint.replicas] == [("replica-0", "node0"), ("replica-3", "node1")]
        log = caplog.text
        for name in ("replica-0", "replica-3"):
            assert f"engine simulated: {name} warmed up: {WARM} request(s) answered in " in log
        assert "engine simulated: 2 of 4 replicas serve engine version podium-simulated 1, checkpoint simulated " \
               "(performance runs need 4, accuracy runs and audits 2); left out:" in log
        assert "- replica-1 on node0 (pid " in log and "not ready after 8 s (GET /health on 127.0.0.1:" in log
        assert "- replica-2 on node1 (pid " in log and "exited with code 3" in log and "CUDA error" in log

        spec = offline_spec(smoke_store / "datasets" / "smoke" / "acc_eval_inputs.parquet", "accuracy", samples=16,
                            max_tokens=8, engine="simulated")
        stats = runner.run(spec, endpoint, tmp_path / "accuracy", timeout_s=120)   # real loadgen, two replicas
        assert stats["completed"] == 16 and stats["failed"] == 0
        assert [r["replica"] for r in stats["replicas"]] == ["replica-0", "replica-3"]
        assert sum(r["samples"] for r in stats["replicas"]) == 16

        started = time.monotonic()
        with pytest.raises(LaunchError) as refused:
            engine.endpoint(performance=True)
        assert time.monotonic() - started < 5   # refused at once: no wait for replicas that never came
        text = str(refused.value)
        assert text.startswith("2 of 4 replicas serve, a performance run needs 4; left out:\n- replica-1 on node0")
        assert "loading weights" in text and "- replica-2 on node1" in text and "exited with code 3" in text
        assert engine.launches == 1 and engine.alive() is False   # replicas 1 and 2 are not running
    assert engine.deployment is None


def test_a_replica_serving_another_checkpoint_stops_the_launch_named(
        smoke_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    odd = ["+", "--checkpoint", "gpt-oss-120b-0badc0ffee00"]
    with session(tmp_path, layout(min_ready=4), {3: odd}, smoke_store, monkeypatch) as engine:
        with pytest.raises(LaunchError, match=r"the replicas do not all serve the same checkpoint and engine version; "
                                              r"the other 3 serve engine version podium-simulated 1, checkpoint "
                                              r"simulated:\n- replica-3 on node1: engine version podium-simulated 1, "
                                              r"checkpoint gpt-oss-120b-0badc0ffee00\n  fix: "):
            engine.endpoint(performance=False)
        assert engine.deployment is None and engine.launches == 1   # stopped before any run


def test_what_each_replica_serves_is_read_from_its_version_and_models_routes() -> None:
    """/version and /v1/models of each replica (a model card's root, else its id: the last part of the path); an
    odd engine version is named too, and two groups of equal size name every replica."""
    same = ["--checkpoint", "/models/gpt-oss-120b-aaaaaaaaaaaa", "--port", "0", "--port", "0"]
    newer = ["--checkpoint", "/models/gpt-oss-120b-aaaaaaaaaaaa", "--engine-version", "0.33.0", "--port", "0"]
    with replica_servers([same, newer]) as (_, replicas):
        found = startup.identities(replicas, "simulated")
        assert found["replica-0"] == startup.Identity("podium-simulated 1", "gpt-oss-120b-aaaaaaaaaaaa")
        assert startup.check_identical({k: found[k] for k in ("replica-0", "replica-1")},
                                       replicas) == found["replica-0"]
        with pytest.raises(LaunchError, match=r"\n- replica-2 on node1: engine version 0.33.0, checkpoint "
                                              r"gpt-oss-120b-aaaaaaaaaaaa\n  fix: "):
            startup.check_identical(found, replicas)
        with pytest.raises(LaunchError, match=r"same checkpoint and engine version:\n- replica-1 .*\n- replica-2 "):
            startup.check_identical({k: found[k] for k in ("replica-1", "replica-2")}, replicas)
    assert startup.checkpoint_of({"data": [{"id": "gpt-oss-120b-aaaaaaaaaaaa"}]}, "x") == "gpt-oss-120b-aaaaaaaaaaaa"
