"""The fleet's parts that need no server: the plan's pools and its cut for one member, the member's records carried
into its run folder and landed where the parent downloads it, what the parent makes of a member that published or
did not, the engine state kept per node, and the member's job variables against the pool's job template; and, on the
session's Prefect server, the parent's `--only` in each member's own flow run."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from flows import fleet
from submission.base.errors import PlanError
from submission.plan import model as plans
from submission.results.runs import AuditCheck, AuditRecord, RunRecord
from tasks.ops import registration
from tasks.storage.objects import StorageConfig
from tasks.workspace import Workspace

REPO = Path(__file__).parents[2]
FLEET = REPO / "deployments" / "plans" / "fleet-smoke.yaml"
CFG = StorageConfig(None, "podium", "runs")


def fleet_data() -> dict:
    return yaml.safe_load(FLEET.read_text())


def test_the_fleet_plan_names_a_pool_per_system_and_cuts_to_one_member() -> None:
    plan = plans.parse(fleet_data())
    assert plan.pools() == {"cpu-smoke-a": "cluster-a", "cpu-smoke-b": "cluster-b"}
    member = plan.as_member("cpu-smoke-b")
    assert [s.name for s in member.systems] == ["cpu-smoke-b"] and member.systems[0].work_pool is None
    assert [b.key for b in member.benchmarks] == ["cpu-smoke-b/gpt-oss-120b"] and not member.pools()
    assert plan.pools() == {"cpu-smoke-a": "cluster-a", "cpu-smoke-b": "cluster-b"}   # the plan itself unchanged
    assert plans.parse(fleet_data()).only({"cpu-smoke-a"}).pools() == {"cpu-smoke-a": "cluster-a"}
    assert not plan.local().systems and not plan.local().benchmarks   # nothing of the fleet runs in the parent
    data = fleet_data()
    del data["systems"][0]["work_pool"]
    assert [b.key for b in plans.parse(data).local().benchmarks] == ["cpu-smoke-a/gpt-oss-120b"]


def test_a_work_pool_that_is_no_safe_name_is_refused_with_its_field() -> None:
    data = fleet_data()
    data["systems"][1]["work_pool"] = "cluster b/../x"
    with pytest.raises(PlanError, match=r"systems\.1\.work_pool: 'cluster b/\.\./x' is not a safe folder name"):
        plans.parse(data)


def _run(tmp: Path, scenario: str, mode: str) -> RunRecord:
    folder = tmp / "work" / f"{scenario}-{mode}"
    folder.mkdir(parents=True)
    (folder / "mlperf_log_summary.txt").write_text(f"{scenario} {mode}\n")
    return RunRecord(key=f"k-{scenario}-{mode}", system="cpu-smoke-b", benchmark="gpt-oss-120b", scenario=scenario,
                     mode=mode, run_dir=str(folder), valid=True if mode == "performance" else None, validity="VALID",
                     metric=10.0, flow_run_id="member-1", started_at="2026-12-01T18:00:00.000+00:00",
                     ended_at="2026-12-01T18:00:05.000+00:00")


def _audit(tmp: Path) -> AuditRecord:
    run, test = tmp / "work" / "audit-run", tmp / "work" / "audit-run" / "TEST07"
    test.mkdir(parents=True)
    (test / "verify_accuracy.txt").write_text("TEST PASS\n")
    return AuditRecord(key="a", system="cpu-smoke-b", benchmark="gpt-oss-120b", scenario="Offline", test="TEST07",
                       run_dir=str(run), folder=str(test), passed=True,
                       checks=(AuditCheck(name="accuracy", passed=True, measured=100.0, bound=">= 99"),))


def test_a_members_records_travel_with_its_run_folder(tmp_path: Path) -> None:
    """carry -> (object storage) -> landed: the records name the copies, wherever the folder is downloaded."""
    records, audits = [_run(tmp_path, "Offline", "performance"), _run(tmp_path, "Offline", "accuracy")], \
        [_audit(tmp_path)]
    member = tmp_path / "member"
    carried, carried_audits = fleet.carry(records, member), fleet.carry(audits, member)
    assert carried[0]["run_dir"] == "logs/runs/cpu-smoke-b-gpt-oss-120b-Offline-performance"
    assert carried_audits[0]["folder"] == "logs/audits/cpu-smoke-b-gpt-oss-120b-Offline-TEST07"
    shutil.rmtree(tmp_path / "work")   # the member's host is not the parent's: only the folder travels
    parent = tmp_path / "parent" / "members" / "x"
    shutil.copytree(member, parent)
    landed = fleet.landed(carried, parent, RunRecord)
    assert (Path(landed[0].run_dir) / "mlperf_log_summary.txt").read_text() == "Offline performance\n"
    assert landed[0].model_dump(exclude={"run_dir"}) == records[0].model_dump(exclude={"run_dir"})
    (audit,) = fleet.landed(carried_audits, parent, AuditRecord)
    assert (Path(audit.folder) / "verify_accuracy.txt").read_text() == "TEST PASS\n" and audit.passed


def test_a_run_folder_travels_without_the_inputs_linked_into_it(tmp_path: Path) -> None:
    """The Qwen3-VL rehearsal uploaded its 68 MB converted data set once per run (293 of its 589 MB): the endpoints
    client reads it through a link in the run folder, which the copies followed."""
    from flows.submission import _keep_logs

    record = _run(tmp_path, "Offline", "performance")
    data = tmp_path / "endpoints-data" / "converted.parquet"
    data.parent.mkdir()
    data.write_bytes(b"x" * 1000)
    cache = Path(record.run_dir) / "dataset_cache" / "shopify_product_catalogue" / "train+test"
    cache.mkdir(parents=True)
    (cache / "shopify_product_catalogue_train+test.parquet").symlink_to(data)
    fleet.carry([record], tmp_path / "member")
    _keep_logs([record], tmp_path / "run-folder")
    for copy in (tmp_path / "member" / "logs" / "runs", tmp_path / "run-folder" / "logs" / "runs"):
        assert [p.name for p in copy.rglob("*") if p.is_file()] == ["mlperf_log_summary.txt"]


@dataclass
class State:
    name: str
    message: str | None = None

    @property
    def type(self) -> object:
        return type("T", (), {"value": self.name.upper()})()


def test_the_parent_reports_a_member_that_published_nothing_by_name_and_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet.storage, "list_keys", lambda cfg, prefix: [f"runs/{prefix}/logs/x/manifest.json"])
    started = fleet.Started("cpu-smoke-b/gpt-oss-120b", "cluster-b", "id-1", "gpt-oss-120b on cpu-smoke-b",
                            "fleet-smoke/parent/members/cpu-smoke-b--gpt-oss-120b")
    out = fleet.gather(started, State("Crashed", "no heartbeat for 90 s"), CFG, tmp_path)
    assert out["records"] == [] and out["engine_launches"] == 0
    assert out["failures"] == ["cpu-smoke-b/gpt-oss-120b: fleet member 'gpt-oss-120b on cpu-smoke-b' on work pool "
                               "cluster-b ended Crashed: no heartbeat for 90 s; nothing it measured was published "
                               "(a re-run reuses what it finished on its cluster)"]


def test_the_parent_gathers_what_a_member_published(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    member = tmp_path / "member"
    records = [_run(tmp_path, "Offline", "performance")]
    (member / fleet.MEMBER_FILE).parent.mkdir(parents=True)
    (member / fleet.MEMBER_FILE).write_text(json.dumps({
        "records": fleet.carry(records, member), "audits": [], "failures": ["cpu-smoke-b/x: one failed"],
        "engine_launches": 1, "systems": {"cpu-smoke-b": {"system_name": "cpu-smoke-b"}},
        "skipped": ["cpu-smoke-b/gpt-oss-120b/Server/performance"]}))
    monkeypatch.setattr(fleet.storage, "list_keys", lambda cfg, prefix: [f"runs/{prefix}/logs/manifest.json",
                                                                         f"runs/{prefix}/manifest.json"])
    monkeypatch.setattr(fleet.storage, "get_tree", lambda cfg, prefix, dest: shutil.copytree(member, dest))
    lines: list[str] = []
    monkeypatch.setattr(fleet.progress, "finished", lines.append)
    started = fleet.Started("cpu-smoke-b/gpt-oss-120b", "cluster-b", "id-1", "m", "p/members/cpu-smoke-b--gpt-oss")
    out = fleet.gather(started, State("Failed", "1 failed"), CFG, tmp_path / "parent")
    (row,) = out["records"]
    assert Path(row["run_dir"]).is_relative_to(tmp_path / "parent" / "members" / "cpu-smoke-b--gpt-oss")
    assert out["failures"] == ["cpu-smoke-b/x: one failed"]   # its own failures say it; no second line for its state
    assert out["systems"] == {"cpu-smoke-b": {"system_name": "cpu-smoke-b"}} and out["engine_launches"] == 1
    assert out["skipped"] == ["cpu-smoke-b/gpt-oss-120b/Server/performance"]   # what its --only left out
    assert lines[-1] == ("cpu-smoke-b/gpt-oss-120b/Server/performance: not run: not selected by --only and not in "
                         "the cache (on work pool cluster-b)")
    crashed_after = fleet.gather(started, State("Crashed", "lost"), CFG, tmp_path / "again")
    assert crashed_after["failures"][-1].endswith("ended Crashed: lost")


@pytest.mark.integration   # the session's Prefect server (tests/conftest.py)
def test_the_parents_only_selection_travels_to_each_member(prefect_server: None,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent's start on a real Prefect server: the member deployments registered, one flow run per pooled
    benchmark created through run_deployment, and each member's own flow run holds the parent's `--only` in its
    parameters as the member flow takes it; a start without `--only` gives none. No pool here has a worker: the runs
    stay Scheduled, then are cancelled."""
    import logging
    import uuid

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.states import Cancelled

    plan = plans.parse(fleet_data())
    pooled = [b.key for b in plan.benchmarks if b.system in plan.pools()]
    assert len(pooled) == 2
    selected = [f"{pooled[0]}/Offline"]
    with get_client(sync_client=True) as client:
        for pool in set(plan.pools().values()) - {p.name for p in client.read_work_pools()}:
            client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
    monkeypatch.setattr(fleet, "get_run_logger", lambda: logging.getLogger("test.fleet"))
    started = []
    try:
        started += (picked := fleet.start(plan, f"parent-only-{uuid.uuid4().hex[:8]}", tuple(selected)))
        started += (everything := fleet.start(plan, f"parent-all-{uuid.uuid4().hex[:8]}"))
        with get_client(sync_client=True) as client:
            runs = {s.flow_run_id: client.read_flow_run(s.flow_run_id) for s in started}
            deployment = client.read_deployment(runs[picked[0].flow_run_id].deployment_id)
        assert [runs[s.flow_run_id].parameters["key"] for s in picked] == pooled
        assert [runs[s.flow_run_id].parameters.get("only") for s in picked] == [selected, selected]
        assert [runs[s.flow_run_id].parameters.get("only") for s in everything] == [None, None]
        assert deployment.entrypoint == fleet.ENTRYPOINT and "only" in deployment.parameter_openapi_schema[
            "properties"]   # the member flow's own parameter
    finally:
        with get_client(sync_client=True) as client:
            for s in started:
                client.set_flow_run_state(s.flow_run_id, Cancelled(message="test"), force=True)


def test_the_members_parameters_carry_no_engine_env_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan a member gets shows each engine env value as `<set>`; the values go in a Secret block (here a dict:
    tests/integration/test_fleet.py saves and reads a real one on a Prefect server), and the member puts them back."""
    import logging
    from types import SimpleNamespace

    import prefect.deployments

    planted = "hf_plantedFleet0123456789"
    data = fleet_data()
    data["benchmarks"][1]["engine"] = {"name": "smoke", "options": {"env": {"HF_TOKEN": planted, "HF_HOME": "/h"}}}
    plan = plans.parse(data)
    calls: list[dict] = []
    blocks: dict[str, dict] = {}

    def run_deployment(name: str, **options: object) -> SimpleNamespace:
        calls.append(options["parameters"])   # type: ignore[arg-type]
        return SimpleNamespace(id="id", name="m")

    def save(plan: dict, run: str) -> str | None:   # what carry_env saves: env_values' values
        if not fleet.env_values(plan):
            return None
        blocks[fleet.ENV_BLOCK.format(run=run)] = fleet.env_values(plan)
        return fleet.ENV_BLOCK.format(run=run)

    monkeypatch.setattr(fleet.registration, "deploy_member", lambda pool, entrypoint, schema: f"member/{pool}")
    monkeypatch.setattr(prefect.deployments, "run_deployment", run_deployment)
    monkeypatch.setattr(fleet, "get_run_logger", lambda: logging.getLogger("test"))
    monkeypatch.setattr(fleet, "carry_env", save)
    monkeypatch.setattr(fleet, "carried_env", blocks.__getitem__)
    started = fleet.start(plan, "parent-1")
    assert len(calls) == 2 and planted not in json.dumps(calls)
    assert {c["env_block"] for c in calls} == {"podium-engine-env-parent-1"} == {s.env_block for s in started}
    shown = calls[1]["plan"]["benchmarks"][1]["engine"]["options"]["env"]
    assert shown == {"HF_TOKEN": "<set>", "HF_HOME": "<set>"}
    restored = fleet.with_env(calls[1]["plan"], fleet.carried_env(calls[1]["env_block"]))   # what member() parses
    assert restored == plan.model_dump(mode="json")
    assert plans.parse(restored).benchmarks[1].engine.config().env["HF_TOKEN"] == planted
    assert plans.parse(calls[1]["plan"]).fingerprint() == plan.fingerprint()   # the tag says the same plan
    calls.clear()
    fleet.start(plans.parse(fleet_data()), "parent-2")   # no engine env: no block
    assert calls and all("env_block" not in c for c in calls)


def test_engine_state_is_kept_per_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two pools on one host share a workspace; their engines' records must not (each run ends what it finds)."""
    ws = Workspace.at(tmp_path)
    monkeypatch.setenv("PODIUM_NODE", "box-cluster-a")
    a = ws.pids
    monkeypatch.setenv("PODIUM_NODE", "box-cluster-b")
    assert a == tmp_path / "pids" / "box-cluster-a" and ws.pids == tmp_path / "pids" / "box-cluster-b"


def test_the_members_job_variables_are_the_process_pools() -> None:
    variables = registration.template("process")["variables"]["properties"]
    assert set(registration.MEMBER_JOB) <= set(variables)
    assert variables["stream_output"]["type"] == "boolean" and isinstance(registration.MEMBER_JOB["stream_output"],
                                                                           bool)
    assert int(registration.MEMBER_JOB["env"]["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"]) * 2 < registration.MEMBER_WATCH_S


class Client:
    """What `fleet.wait` asks the Prefect API: a member's state, its pool's status; and the cancel it may send."""

    def __init__(self, state: str, pool: str) -> None:
        self.state, self.pool, self.cancelled = state, pool, []

    def read_flow_run(self, run_id: object) -> object:
        return type("Run", (), {"state": State(self.state.capitalize())})()

    def read_work_pool(self, name: str) -> object:
        from prefect.client.schemas.objects import WorkPoolStatus

        return type("Pool", (), {"status": WorkPoolStatus(self.pool)})()

    def set_flow_run_state(self, run_id: object, state: object, force: bool) -> None:
        self.cancelled.append((run_id, state.message, force))


def test_a_member_no_worker_can_start_is_cancelled_after_a_while_not_before(monkeypatch: pytest.MonkeyPatch) -> None:
    started = fleet.Started("cpu-smoke-b/gpt-oss-120b", "cluster-b", "id-1", "m", "p")
    clock = iter([100.0, 400.0, 701.0])
    monkeypatch.setattr(fleet.time, "monotonic", lambda: next(clock))
    unready: dict[str, float] = {}
    waiting = Client("scheduled", "NOT_READY")
    assert fleet._settled(waiting, started, unready, 600) is None        # its pool lost its worker at t=100
    assert fleet._settled(waiting, started, unready, 600) is None        # t=400: not long enough
    gone = fleet._settled(waiting, started, unready, 600)                # t=701: cancelled, saying why
    assert gone.type.value == "CANCELLED" and "no worker of work pool cluster-b was online for 600 s" in gone.message
    assert waiting.cancelled == [("id-1", gone.message, True)]
    for client in (Client("scheduled", "READY"), Client("running", "NOT_READY")):   # a worker will; or it started
        assert fleet._settled(client, started, {"cluster-b": 0.0}, 600) is None and not client.cancelled
    assert fleet._settled(Client("completed", "NOT_READY"), started, {}, 600).name == "Completed"


def test_a_pool_whose_status_lags_its_online_worker_can_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool still NOT_READY while its worker, just restarted, is ONLINE runs the system; without an online worker
    the problem names the pool and the fix."""
    import prefect.client.orchestration as orchestration
    from prefect.client.schemas.objects import WorkerStatus, WorkPoolStatus

    from tasks.ops.registration import pool_problems

    workers: list = []

    class Client:
        def __init__(self, **_: object) -> None:
            pass

        def __enter__(self) -> Client:
            return self

        def __exit__(self, *_: object) -> None:
            pass

        def read_work_pool(self, name: str) -> object:
            return type("Pool", (), {"is_paused": False, "status": WorkPoolStatus.NOT_READY})()

        def read_workers_for_work_pool(self, name: str) -> list:
            return workers

    monkeypatch.setattr(orchestration, "get_client", Client)
    assert pool_problems({"s": "cluster-b"}) == ["systems[s].work_pool: cluster-b: no worker of the pool is online; "
                                                 "start a worker on the cluster: `prefect worker start --pool "
                                                 "cluster-b --type process` (locally: `podium dev up --pool "
                                                 "cluster-b`)"]
    workers.append(type("Worker", (), {"status": WorkerStatus.ONLINE})())
    assert pool_problems({"s": "cluster-b"}) == []
