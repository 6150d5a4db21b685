"""The fleet, for real: `podium dev up --pool cluster-a --pool cluster-b` (a Prefect server, a process worker per
pool, the S3 server), then `podium run` of the fleet-smoke plan, whose two systems run at once as deployment runs on
their pools. Then a cluster that dies mid-run (its worker and everything under it killed): that member is reported
Crashed by name while the other system's results are published; and the re-run after the worker is back measures
only what had not finished."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import yaml

from tasks.launchers.nodes import limit_name

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[2]
FLEET = REPO / "deployments" / "plans" / "fleet-smoke.yaml"
POOLS = ("cluster-a", "cluster-b")
WATCH_S = 60   # a dead member is marked Crashed 30-65 s after its cluster dies (heartbeats every 30 s)


@dataclass
class Fleet:
    ws: Path
    api: str
    plan: Path          # fleet-smoke with its sources in the test's store
    wider: Path         # the same with cluster-b's Server at another rate (new runs for it alone)
    first: dict         # the first run: its exit code, output and results rows


def podium(*args: str, api: str | None = None, timeout: float = 600, wait: bool = True) -> object:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | ({"PREFECT_API_URL": api} if api else {})
    argv = [str(Path(sys.executable).parent / "podium"), *args]
    if not wait:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)


def fleet_plan(path: Path, store: Path, *, rerate_b: bool = False, pool_b: str = "cluster-b") -> Path:
    data = yaml.safe_load(FLEET.read_text())
    for bench in data["benchmarks"]:
        bench["model"] = {**bench["model"], "source": str(store / "models" / "tiny-llama")}
        bench["dataset"] = {"performance": str(store / "datasets" / "smoke" / "perf_eval_ref.parquet"),
                            "accuracy": str(store / "datasets" / "smoke" / "acc_eval_inputs.parquet")}
    data["systems"][1]["work_pool"] = pool_b
    if rerate_b:   # new dicts: the plan's systems share one `scenarios` mapping (a YAML alias)
        scenarios = data["benchmarks"][1]["scenarios"]
        data["benchmarks"][1]["scenarios"] = {**scenarios, "Server": {**scenarios["Server"], "target_qps": 19}}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_folder(ws: Path, output: str) -> Path:
    line = next(x for x in output.splitlines() if x.startswith("run folder: "))
    return Path(line.removeprefix("run folder: ").strip())


def rows(folder: Path) -> list[dict]:
    return json.loads((folder / "results.json").read_text())


def at(stamp: str) -> datetime:
    moment = datetime.fromisoformat(stamp)
    assert moment.utcoffset().total_seconds() == 0, stamp   # ISO 8601 in UTC
    return moment


@pytest.fixture(scope="module")
def fleet(smoke_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    base = tmp_path_factory.mktemp("fleet")
    ws = base / "ws"
    plan, wider = fleet_plan(base / "fleet.yaml", smoke_store), fleet_plan(base / "wider.yaml", smoke_store,
                                                                             rerate_b=True)
    pools = [arg for pool in POOLS for arg in ("--pool", pool)]
    try:
        up = podium("dev", "up", "--workspace", str(ws), "--port", "0", "--no-deploy", *pools,
                    "--member-watch", str(WATCH_S))
        assert up.returncode == 0, up.stdout + up.stderr
        assert all(f"on pool {pool}" in up.stdout for pool in POOLS), up.stdout
        api = json.loads((ws / "dev" / "state.json").read_text())["api_url"]
        done = podium("run", str(plan), "--workspace", str(ws), api=api)
        yield Fleet(ws, api, plan, wider, {"code": done.returncode, "output": done.stdout + done.stderr})
    finally:
        podium("dev", "down", "--workspace", str(ws))


def test_a_members_parameters_on_the_server_hold_no_engine_env_value(tmp_path: Path, smoke_store: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent's start against a Prefect server (the session's): each member's flow run keeps the plan with its
    engine env as `<set>` and the name of the Secret block that holds the values; the member reads them back from
    it; once the members ended the block is gone. No pool here has a worker: the runs stay Scheduled, then are
    cancelled."""
    import asyncio
    import logging

    from prefect.blocks.system import Secret
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.states import Cancelled

    from flows import fleet as fleet_flow
    from submission.base.errors import PlanError
    from submission.plan import model as plans
    from tests.secret_search import leaks, prefect_texts

    planted = "hf_plantedFleetParameters0123456789"
    data = yaml.safe_load(fleet_plan(tmp_path / "fleet.yaml", smoke_store).read_text())
    data["benchmarks"][1]["engine"] = {"name": "smoke", "options": {"env": {"HF_TOKEN": planted}}}
    plan = plans.parse(data)
    pools = {s.work_pool for s in plan.systems}
    with get_client(sync_client=True) as client:
        for pool in pools - {p.name for p in client.read_work_pools()}:
            client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
    monkeypatch.setattr(fleet_flow, "get_run_logger", lambda: logging.getLogger("test.fleet"))
    started = fleet_flow.start(plan, "parent-with-a-token")
    try:
        with get_client(sync_client=True) as client:
            runs = [client.read_flow_run(s.flow_run_id) for s in started]
        assert len(runs) == 2 and {r.parameters["env_block"] for r in runs} == {"podium-engine-env-parent-with-a-token"}
        assert runs[1].parameters["plan"]["benchmarks"][1]["engine"]["options"]["env"] == {"HF_TOKEN": "<set>"}
        assert leaks(asyncio.run(prefect_texts()), planted) == []   # flow runs, task runs, logs, artifacts
        values = fleet_flow.carried_env(runs[1].parameters["env_block"])   # what the member reads
        restored = fleet_flow.with_env(runs[1].parameters["plan"], values)
        assert plans.parse(restored).benchmarks[1].engine.config().env == {"HF_TOKEN": planted}
    finally:
        with get_client(sync_client=True) as client:
            for s in started:
                client.set_flow_run_state(s.flow_run_id, Cancelled(message="test"), force=True)
        fleet_flow.forget_env(started)   # what wait() does once every member ended
    with pytest.raises(ValueError):
        Secret.load("podium-engine-env-parent-with-a-token")
    with pytest.raises(PlanError, match="podium-engine-env-parent-with-a-token with the engine env of this fleet "
                                        "run is gone"):
        fleet_flow.carried_env("podium-engine-env-parent-with-a-token")


def test_a_missing_pool_is_refused_before_anything_runs(fleet: Fleet, tmp_path: Path) -> None:
    plan = fleet_plan(tmp_path / "z.yaml", Path("/nonexistent-store"), pool_b="cluster-z")   # sources not checked
    before = set((fleet.ws / "runs").iterdir())
    done = podium("run", str(plan), "--workspace", str(fleet.ws), api=fleet.api)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "systems[cpu-smoke-b].work_pool: cluster-z: no such work pool" in done.stderr, done.stderr
    assert "podium dev up --pool cluster-z" in done.stderr
    assert set((fleet.ws / "runs").iterdir()) == before   # no run started
    without = podium("run", str(plan), "--workspace", str(fleet.ws))   # no server at all: one line, its fix
    assert without.returncode != 0 and "PREFECT_API_URL" in without.stderr, without.stderr


def test_two_systems_on_two_pools_run_at_once(fleet: Fleet) -> None:
    assert fleet.first["code"] == 0, fleet.first["output"][-4000:]
    folder = run_folder(fleet.ws, fleet.first["output"])
    found = rows(folder)
    assert {r["system"] for r in found} == {"cpu-smoke-a", "cpu-smoke-b"}
    assert all(r["valid"] for r in found if r["mode"] == "performance") and len(found) == 8
    span = {s: (min(at(r["started_at"]) for r in found if r["system"] == s),
                max(at(r["ended_at"]) for r in found if r["system"] == s)) for s in ("cpu-smoke-a", "cpu-smoke-b")}
    (a0, a1), (b0, b1) = span["cpu-smoke-a"], span["cpu-smoke-b"]
    assert a0 < b1 and b0 < a1, f"the two systems' runs did not overlap: {span}"
    members = {r["system"]: r["flow_run_id"] for r in found}
    assert len(set(members.values())) == 2 and folder.name not in members.values()
    for system, run_id in members.items():   # each row names the member flow run, on its system's pool
        run = httpx.get(f"{fleet.api}/flow_runs/{run_id}", timeout=30).json()
        deployment = httpx.get(f"{fleet.api}/deployments/{run['deployment_id']}", timeout=30).json()
        assert deployment["work_pool_name"] == {"cpu-smoke-a": "cluster-a", "cpu-smoke-b": "cluster-b"}[system]
        assert run["state"]["type"] == "COMPLETED" and run["parent_task_run_id"]   # a subflow of the parent
    tree = folder / "submission" / "open" / "Podium"
    assert {p.stem for p in (tree / "systems").glob("*.json")} == {"cpu-smoke-a", "cpu-smoke-b"}
    assert "checker 0 errors" in fleet.first["output"]
    limits = {x["name"] for x in httpx.post(f"{fleet.api}/v2/concurrency_limits/filter", json={}, timeout=30).json()}
    assert {limit_name(f"{socket.gethostname()}-{pool}") for pool in POOLS} <= limits   # each member took its node's


def descendants(pid: int) -> list[int]:
    """`pid` and every process under it (by parent pid), the flow runs' own sessions included."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += [child for child, parent in parents.items() if parent == current]
    return found


def test_a_dead_cluster_is_reported_and_a_rerun_measures_nothing_twice(fleet: Fleet) -> None:
    first = {r["key"]: r for r in rows(run_folder(fleet.ws, fleet.first["output"]))}
    known = set((fleet.ws / "work" / "runs").iterdir())
    parent = podium("run", str(fleet.wider), "--workspace", str(fleet.ws), api=fleet.api, wait=False)
    deadline = time.monotonic() + 300
    while not (set((fleet.ws / "work" / "runs").iterdir()) - known):   # cluster-b's Server run began
        assert parent.poll() is None and time.monotonic() < deadline, "cluster-b's Server run never started"
        time.sleep(0.5)
    time.sleep(2)
    worker = json.loads((fleet.ws / "dev" / "state.json").read_text())["pools"]["cluster-b"]["pid"]
    for pid in descendants(worker):   # the cluster dies: its worker, the member under it, its engine, its loadgen
        os.kill(pid, signal.SIGKILL)
    killed = datetime.now(UTC)
    output, _ = parent.communicate(timeout=400)
    assert parent.returncode != 0, output[-3000:]
    assert "cpu-smoke-b/gpt-oss-120b: fleet member" in output and "ended Crashed" in output, output[-3000:]
    crashed = run_folder(fleet.ws, output)
    kept = rows(crashed)
    assert {r["system"] for r in kept} == {"cpu-smoke-a"} and len(kept) == 4   # the other system's results stay
    assert (crashed / "submission" / "open" / "Podium" / "systems" / "cpu-smoke-a.json").is_file()
    assert f"s3://podium/runs/fleet-smoke/{crashed.name}/" in output          # and are published

    again = podium("dev", "up", "--workspace", str(fleet.ws), "--port", "0", "--no-deploy",
                   *[arg for pool in POOLS for arg in ("--pool", pool)], "--member-watch", str(WATCH_S))
    assert again.returncode == 0, again.stdout + again.stderr
    resumed_at = datetime.now(UTC)
    resumed = podium("run", str(fleet.wider), "--workspace", str(fleet.ws), api=fleet.api)
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-4000:]
    folder = run_folder(fleet.ws, resumed.stdout)
    fresh = []
    for r in rows(folder):
        if r["key"] in first:   # measured by the first run: reused, not measured again
            assert r["started_at"] == first[r["key"]]["started_at"], r["key"]
        else:                   # cluster-b's Server at its new rate: the killed run left nothing; measured once, now
            assert at(r["started_at"]) > resumed_at > killed, r["key"]
            fresh.append((r["system"], r["scenario"], r["mode"]))
    assert ("cpu-smoke-b", "Server", "performance") in fresh and {s for s, _, _ in fresh} == {"cpu-smoke-b"}, fresh
    launches = {m.name: json.loads((m / "member.json").read_text())["engine_launches"]
                for m in (folder / "members").iterdir()}
    assert launches == {"cpu-smoke-a--gpt-oss-120b": 0, "cpu-smoke-b--gpt-oss-120b": 1}
