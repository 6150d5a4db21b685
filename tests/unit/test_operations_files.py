"""The operations files and checks that need no server: deployments, work-pool templates, cluster preflight."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from submission.plan import model as plans
from tasks.ops import cluster, registration

REPO = Path(__file__).parents[2]
SMOKE = REPO / "deployments" / "plans" / "smoke.yaml"


def test_every_deployment_names_a_flow_and_a_pool() -> None:
    deployments = {d["name"]: d for d in registration.deployments()}
    assert {"bringup", "run", "nightly", "search", "sweep", "bringup-k8s", "run-k8s"} <= set(deployments)
    for d in deployments.values():
        assert d["work_pool"]["name"] in registration.POOLS
        assert re.fullmatch(r"flows\.\w+:\w+", d["entrypoint"]), "module entrypoints only (see prefect.yaml)"
    assert deployments["nightly"]["schedules"][0]["cron"] == "0 2 * * *"
    assert set(deployments["bringup"]["parameters"]) == {"plan", "cluster", "smoke_plan"}
    ready, skipped = registration.deployable()
    assert {"bringup", "run", "nightly"} <= set(ready) and set(ready) | set(skipped) == set(deployments)


def test_the_manual_exports_the_api_url_beside_the_bringup_command() -> None:
    """Without PREFECT_API_URL, `prefect deployment run` starts a temporary server that knows no deployment: every
    page that shows the bring-up command sets it on the line before."""
    shown = 0
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        lines = [line.strip() for line in page.read_text().splitlines()]
        for i, line in enumerate(lines):
            if line.startswith("prefect deployment run 'podium-submission/bringup'"):
                shown += 1
                assert lines[i - 1].startswith("export PREFECT_API_URL=http://127.0.0.1:4200/api"), (page, lines[i - 1])
    assert shown >= 1


def test_schedules_are_deployed_as_the_user_set_them(tmp_path: Path) -> None:
    """Each schedule has a slug (a redeploy updates it in place: same id) and no `active:` of its own; the local
    stack's copy says paused for a new one, keeps what the server has, and obeys --schedules / --no-schedules."""
    schedules = [(d["name"], s) for d in registration.deployments() for s in d.get("schedules") or []]
    assert schedules and all(s.get("slug") and "active" not in s for _, s in schedules)
    out = tmp_path / "prefect.yaml"
    for states, flag, expected in [({}, None, False), ({("nightly", "nightly"): True}, None, True),
                                   ({("nightly", "nightly"): False}, None, False),
                                   ({("nightly", "nightly"): False}, True, True), ({}, False, False)]:
        chosen = registration.with_schedules(out, states, flag)
        assert chosen == {("nightly", "nightly"): expected}
        nightly = next(d for d in registration.deployments(out) if d["name"] == "nightly")
        assert nightly["schedules"] == [{"cron": "0 2 * * *", "timezone": "UTC", "slug": "nightly",
                                         "active": expected}]
    assert registration.deployments(out) != registration.deployments()   # the checkout's own file is untouched


def test_the_cached_steps_keep_their_entries_in_the_workspace(tmp_path: Path) -> None:
    """Wherever the flow runs (`podium run`, a deployment run through a worker whose default result storage is S3),
    the loadgen runs and audits keep their cache entries beside their run folders: one cache per workspace."""
    from tasks.compliance.step import audit_task
    from tasks.run_step import TASKS
    from tasks.steps import cached_in

    for step in (*TASKS.values(), audit_task):
        placed = cached_in(step, tmp_path / "work")
        assert placed.result_storage == tmp_path / "work" / "cache"
        assert (placed.name, placed.cache_key_fn, placed.persist_result, placed.retries) == \
            (step.name, step.cache_key_fn, True, 1)


def test_a_deployment_whose_flow_is_missing_is_left_out(tmp_path: Path) -> None:
    spec = {"deployments": [{"name": "ok", "entrypoint": "flows.bringup:bringup"},
                            {"name": "later", "entrypoint": "flows.nothing_yet:flow"},
                            {"name": "renamed", "entrypoint": "flows.bringup:no_such_flow"}]}
    (tmp_path / "prefect.yaml").write_text(yaml.safe_dump(spec))
    ready, skipped = registration.deployable(tmp_path / "prefect.yaml")
    assert ready == ["ok"]
    assert skipped == {"later": "flows/nothing_yet.py does not exist",
                       "renamed": "flows/bringup.py has no flow no_such_flow()"}


@pytest.mark.parametrize("kind", ["process", "kubernetes"])
def test_job_templates_declare_every_placeholder(kind: str) -> None:
    template = registration.template(kind)
    used = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", json.dumps(template["job_configuration"])))
    assert used <= set(template["variables"]["properties"]), used - set(template["variables"]["properties"])
    env = template["variables"]["properties"]["env"]["default"]
    assert env["PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK"] == f"s3-bucket/{registration.RESULTS_BLOCK}"


def fake_nvidia_smi(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An `nvidia-smi` that prints what the real one prints for these queries (its documented CSV format)."""
    script = folder / "nvidia-smi"
    script.write_text("#!/bin/sh\n"
                      'case "$1" in\n'
                      "  --query-gpu=*) printf '0, NVIDIA H200, 570.124.06, 143771 MiB\\n"
                      "1, NVIDIA H200, 570.124.06, 143771 MiB\\n' ;;\n"
                      "  *) echo '| NVIDIA-SMI 570.124.06   Driver Version: 570.124.06   CUDA Version: 12.8 |' ;;\n"
                      "esac\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


def test_gpu_checks_with_and_without_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert cluster.gpus(required=False).ok and not cluster.gpus(required=True).ok
    assert "install the NVIDIA driver" in cluster.gpus(required=True).fix
    fake_nvidia_smi(tmp_path, monkeypatch)
    gpus = cluster.gpus(required=True)
    assert gpus.ok and gpus.detail == "2 x NVIDIA H200; driver 570.124.06"
    assert cluster.cuda(required=True).detail == "CUDA 12.8 (driver API, nvidia-smi)"


def test_disk_check_counts_what_is_not_staged_yet(tmp_path: Path) -> None:
    from tasks.staging.stage import stage

    store = tmp_path / "store"
    (store / "model").mkdir(parents=True)
    (store / "model" / "weights.bin").write_bytes(b"w" * 4096)
    (store / "perf.parquet").write_bytes(b"p" * 100)
    (store / "acc.parquet").write_bytes(b"a" * 10)
    data = yaml.safe_load(SMOKE.read_text())
    bench = data["benchmarks"][0]
    bench["model"]["source"] = str(store / "model")
    bench["dataset"] = {"performance": str(store / "perf.parquet"), "accuracy": str(store / "acc.parquet")}
    if "compliance" in data:
        data["compliance"] = {"run": "never"}
    plan = plans.parse(data)
    check = cluster.disk(plan, tmp_path / "stage", None)
    assert check.ok and check.detail.startswith("0.00 GiB to stage")
    stage(store / "model", tmp_path / "stage" / "models")
    assert cluster.disk(plan, tmp_path / "stage", None).ok
    bench["model"]["source"] = str(store / "missing")
    bad = cluster.disk(plans.parse(data), tmp_path / "stage", None)
    assert not bad.ok and "missing" in bad.detail and "does not exist" in bad.detail


def test_which_plans_need_gpus() -> None:
    plans_dir = REPO / "deployments" / "plans"
    assert not cluster.needs_gpus(plans.load(plans_dir / "smoke.yaml"))
    k8s = yaml.safe_load((plans_dir / "gpt-oss-120b-trtllm-k8s.yaml").read_text())
    assert not cluster.needs_gpus(plans.parse(k8s))   # the engine's pods hold the GPUs, not the flow's
    engine = k8s["benchmarks"][0]["engine"]
    engine["launcher"] = "local"
    del engine["kubernetes"]
    assert cluster.needs_gpus(plans.parse(k8s))       # the same engine launched inside the flow's own pod


def test_bringup_runs_the_systems_it_is_given(tmp_path: Path) -> None:
    from flows.bringup import cluster_plan
    from submission.base.errors import PlanError
    from tasks.workspace import Workspace

    ws = Workspace.at(tmp_path / "ws")
    assert cluster_plan(str(SMOKE), None, "c1", ws) == str(SMOKE)
    only = Path(cluster_plan(str(SMOKE), ["cpu-smoke"], "c1", ws))
    assert only == ws.root / "bringup" / "c1" / "smoke.yaml"
    assert [s.name for s in plans.load(only).systems] == ["cpu-smoke"]
    with pytest.raises(PlanError, match="not in"):
        cluster_plan(str(SMOKE), ["gpu-rack-9"], "c1", ws)
