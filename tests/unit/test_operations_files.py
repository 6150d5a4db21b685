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


# ----- the shipped Kubernetes files and plans, against what the code does -----------------------------------------
KUBERNETES = REPO / "deployments" / "kubernetes"
PLANS = REPO / "deployments" / "plans"
K8S_PLAN = PLANS / "gpt-oss-120b-trtllm-k8s.yaml"
TIME = re.compile(r"\b\d\d:\d\d:\d\d\b")   # a Slurm time as the dry run prints it (submission/budget/slurm_time.py)


def _dry_run(plan: Path, workspace: Path) -> str:
    from typer.testing import CliRunner

    from flows.cli import app

    done = CliRunner().invoke(app, ["launch", str(plan), "--dry-run", "--workspace", str(workspace)])
    assert done.exit_code == 0, done.output
    return done.output


def test_the_claims_parse_and_are_the_ones_the_plan_and_the_pool_name() -> None:
    """Each claim file is one PersistentVolumeClaim that survives the kubernetes client's model unchanged, in the
    plan's namespace: the models claim is the plan's `model_claim`, which every deployment on the Kubernetes pool
    mounts at the plan's `volume_mount`, read-write for the fetch alone; the workspace claim is the pool's
    `workspace_claim`."""
    from kubernetes import client as k8s

    settings = plans.load(K8S_PLAN).benchmarks[0].engine.kubernetes
    claims = {}
    for path in (KUBERNETES / "models-claim.yaml", KUBERNETES / "workspace-claim.yaml"):
        [doc] = [d for d in yaml.safe_load_all(path.read_text()) if d]
        claim = k8s.V1PersistentVolumeClaim.from_dict(doc)
        assert k8s.ApiClient().sanitize_for_serialization(claim) == doc, path   # no key the client drops
        assert claim.kind == "PersistentVolumeClaim" and claim.metadata.namespace == settings.namespace, path
        assert claim.spec.resources.requests["storage"], path
        claims[path.name] = claim
    models = claims["models-claim.yaml"]
    assert models.metadata.name == settings.model_claim
    assert "ReadWriteMany" in models.spec.access_modes   # the fetch writes it while other pods read it, on any node
    pool = registration.template("kubernetes")["variables"]["properties"]
    assert claims["workspace-claim.yaml"].metadata.name == pool["workspace_claim"]["default"]

    mounted = {}
    for d in registration.deployments():
        if d["work_pool"]["name"] != "podium-kubernetes":
            continue
        variables = d["work_pool"]["job_variables"]
        volume, mount = variables["data_volume"], variables["data_volume_mount"]
        assert volume["persistentVolumeClaim"]["claimName"] == settings.model_claim, d["name"]
        assert mount["mountPath"] == settings.volume_mount and mount["name"] == volume["name"], d["name"]
        assert variables["namespace"] == settings.namespace and variables["gpus"] == 0, d["name"]
        mounted[d["name"]] = bool(mount.get("readOnly")) and bool(volume["persistentVolumeClaim"].get("readOnly"))
    assert mounted == {"bringup-k8s": True, "run-k8s": True, "fetch-k8s": False, "search-k8s": True,
                       "sweep-k8s": True}
    fetch = next(d for d in registration.deployments() if d["name"] == "fetch-k8s")
    assert fetch["entrypoint"] == "flows.fetch:fetch" and fetch["parameters"]["plan"] == str(K8S_PLAN.relative_to(REPO))
    assert all(item.dest.startswith(settings.volume_mount + "/") for item in plans.load(K8S_PLAN).fetches())


@pytest.mark.parametrize("plan", sorted(p.name for p in PLANS.glob("*.yaml") if TIME.search(p.read_text())))
def test_the_slurm_times_a_plan_states_are_the_ones_its_dry_run_prints(plan: str, tmp_path: Path) -> None:
    """A figure in a plan's comments (the time its Slurm allocation and job need) is one the dry run prints, so a
    change of the run-length model shows in the plans that quote it."""
    text = (PLANS / plan).read_text()
    stated, printed = set(TIME.findall(text)), set(TIME.findall(_dry_run(PLANS / plan, tmp_path)))
    assert stated and stated <= printed, f"{plan} states {sorted(stated - printed)}; the dry run prints {printed}"


@pytest.mark.parametrize("plan", sorted(p.name for p in PLANS.glob("*.yaml") if "# host_networking:" in p.read_text()))
def test_what_a_plan_says_of_its_network_fields_is_what_preflight_and_the_dry_run_do(plan: str,
                                                                                    tmp_path: Path) -> None:
    """The comment over a plan's commented-out `host_networking` says either that preflight refuses the closed plan
    until they are given (several nodes: no node can tell) or that Podium writes N/A (one node); the dry run's
    forecast, preflight's check before the flow starts and the checker's rule for N/A agree with it."""
    from submission.base.errors import PlanError
    from submission.tree import systems
    from tasks.ops.prerequisites import require_description_sources

    text = (PLANS / plan).read_text()
    comment = re.search(r"((?:^ *#.*\n)+?)(?:^ *# host_networking:)", text, re.MULTILINE).group(1)
    loaded = plans.load(PLANS / plan)
    [system] = loaded.systems
    printed = _dry_run(PLANS / plan, tmp_path)
    fields = ("host_networking", "host_networking_topology")
    if "N/A" in comment and "refuse" not in comment:
        assert system.nodes == 1
        assert re.search(r"N/A \(does not apply\): .*host_networking, host_networking_topology", printed), printed
        require_description_sources(loaded)   # nothing missing: preflight and `podium run` go on
        desc = systems.describe(division="closed", submitter="x", system_name=system.name, status="available",
                                system_type="datacenter", number_of_nodes=1, framework="x",
                                overrides=dict(system.description), host={})
        assert [desc[f] for f in fields] == ["N/A", "N/A"]
        assert not [p for p in systems.validate(desc, division="closed", submitter="x") if p.startswith(fields)]
    else:
        assert "refuse" in comment, f"{plan}: say what happens without host_networking"
        assert system.nodes > 1
        assert re.search(r"nowhere: give systems\.0\.description\.<field>.*: host_networking, "
                         r"host_networking_topology", printed), printed
        with pytest.raises(PlanError) as refused:
            require_description_sources(loaded)
        assert all(f"systems.0.description.{f}\n" in str(refused.value) + "\n" for f in fields), refused.value
