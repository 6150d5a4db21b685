"""The operations path, for real: `podium dev up` (a Prefect server with its UI, a process worker and the S3 server,
all on 127.0.0.1), `prefect deploy` of deployments/prefect.yaml,
`prefect deployment run 'podium-submission/bringup'` running a smoke plan and then the same plan on a system
described as 4 GB200 to completion through the worker (the verdict against the published v6.1 results in both
runs' lines, the published gate failing and calling the webhook), a webhook that hears about a broken plan and about
INVALID results, the gpu-<node> limit, schedules that start paused and stay as the user set
them across `dev up`, a `podium run` reusing what the deployment run measured (one cache per workspace), and
`podium dev down` stopping every process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import pytest
import yaml

from tasks.ops import registration
from tasks.storage import objects as storage
from tasks.storage import s3server
from tests.integration.conftest import write_plan
from tests.local_http import LocalServer

pytestmark = pytest.mark.integration

NODE = "ci-gpu-0"


class WebhookHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.fake.received.append(json.loads(body or b"{}"))   # type: ignore[attr-defined]
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


class Webhook(LocalServer):
    """A tiny HTTP server on 127.0.0.1 that keeps every JSON body POSTed to it."""

    def __init__(self) -> None:
        self.received: list[dict] = []
        super().__init__(WebhookHandler)

    def wait_for(self, match: Callable[[dict], bool], timeout_s: float = 90) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for body in list(self.received):
                if match(body):
                    return body
            time.sleep(0.5)
        raise AssertionError(f"no matching webhook call in {timeout_s} s; received {self.received}")


@dataclass
class Stack:
    ws: Path
    api: str
    env: dict[str, str]
    hook: Webhook
    plan: Path
    broken: Path
    sim: Path
    up_output: str


def podium(*args: str, timeout: float = 400, api: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | ({"PREFECT_API_URL": api} if api else {})
    return subprocess.run([str(Path(sys.executable).parent / "podium"), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)


def prefect(stack: Stack, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*registration.prefect_cli(), *args], capture_output=True, text=True, timeout=timeout,
                          env=stack.env, cwd=registration.REPO, check=False)


def gb200_plan(path: Path, store: Path) -> Path:
    """The lean plan with its system described as 4 NVIDIA GB200: the bring-up's full plan, whose result per GPU is
    far under the best published GB200 one, so the published gate (at 0.8) fails. It keeps the smoke engine: the
    simulated one answers no accuracy question right, and a tree without accuracy fails the checker."""
    lean_plan(path, store, name="gb200", gates={"server_offline_min_ratio": None, "published_min_fraction": 0.8})
    data = yaml.safe_load(path.read_text())
    data["systems"][0]["description"] = {**data["systems"][0].get("description", {}),
                                         "accelerator_model_name": "NVIDIA GB200", "accelerators_per_node": "4"}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def lean_plan(path: Path, store: Path, **changes: object) -> Path:
    """The smoke plan, Offline only, no audits: the whole path (stage, serve, loadgen, accuracy, assemble, check,
    validate, publish) at the least CPU time, so it stays VALID on a busy two-core machine."""
    write_plan(path, store, **changes)
    data = yaml.safe_load(path.read_text())
    bench = data["benchmarks"][0]
    bench["scenarios"] = {"Offline": bench["scenarios"]["Offline"]}
    if "compliance" in data:
        data["compliance"] = {"run": "never"}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def stack(smoke_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    base = tmp_path_factory.mktemp("ops")
    ws = base / "ws"
    plan = lean_plan(base / "offline.yaml", smoke_store)
    broken = lean_plan(base / "broken.yaml", smoke_store, name="broken")
    data = yaml.safe_load(broken.read_text())
    data["benchmarks"][0]["model"]["source"] = str(base / "no-such-model")
    broken.write_text(yaml.safe_dump(data, sort_keys=False))
    sim = gb200_plan(base / "gb200.yaml", smoke_store)
    hook = Webhook().start()
    try:
        up = podium("dev", "up", "--workspace", str(ws), "--port", "0", "--webhook", f"{hook.url}/hook", "--node", NODE)
        assert up.returncode == 0, up.stdout + up.stderr
        api = json.loads((ws / "dev" / "state.json").read_text())["api_url"]
        env = {**os.environ, "PREFECT_API_URL": api, "PREFECT_HOME": str(ws / "prefect"),
               "PREFECT_CLI_WRAP_LINES": "false"}   # `--watch` prints each log line whole
        yield Stack(ws, api, env, hook, plan, broken, sim, up.stdout)
    finally:
        podium("dev", "down", "--workspace", str(ws))
        hook.stop()


def get(stack: Stack, path: str) -> dict:
    response = httpx.get(f"{stack.api}{path}", timeout=30)
    response.raise_for_status()
    return response.json()


def post(stack: Stack, path: str, body: dict | None = None) -> list[dict]:
    response = httpx.post(f"{stack.api}{path}", json=body or {}, timeout=30)
    response.raise_for_status()
    return response.json()


def test_dev_up_registers_what_the_deployments_need(stack: Stack) -> None:
    assert "Prefect UI   http://127.0.0.1:" in stack.up_output and "deployed     bringup" in stack.up_output
    assert "schedule     nightly (schedule nightly): paused" in stack.up_output
    assert httpx.get(stack.api.removesuffix("/api") + "/", timeout=30).status_code == 200   # the UI
    bringup = get(stack, "/deployments/name/podium-submission/bringup")
    assert bringup["entrypoint"] == "flows.bringup:bringup" and bringup["work_pool_name"] == "podium-process"
    assert bringup["pull_steps"][0]["prefect.deployments.steps.set_working_directory"]["directory"] == \
        "{{ $PODIUM_REPO }}"
    nightly = get(stack, "/deployments/name/podium-submission/nightly")
    assert [s["schedule"]["cron"] for s in nightly["schedules"]] == ["0 2 * * *"]
    assert get(stack, "/deployments/name/podium-submission/run")["entrypoint"] == "flows.submission:submission"
    process = get(stack, "/work_pools/podium-process")["base_job_template"]
    assert process["variables"]["properties"]["env"]["default"]["PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK"] == \
        "s3-bucket/podium-results"
    k8s = get(stack, "/work_pools/podium-kubernetes")
    container = k8s["base_job_template"]["job_configuration"]["job_manifest"]["spec"]["template"]["spec"][
        "containers"][0]
    assert k8s["type"] == "kubernetes" and container["resources"]["limits"]["nvidia.com/gpu"] == "{{ gpus }}"
    assert get(stack, f"/v2/concurrency_limits/gpu-{NODE}")["limit"] == 1
    results = get(stack, "/block_types/slug/s3-bucket/block_documents/name/podium-results")
    assert results["data"]["bucket_name"] == "podium" and results["data"]["bucket_folder"] == "runs/prefect-results"
    names = {a["name"] for a in post(stack, "/automations/filter")}
    assert {"podium: flow run failed or crashed", "podium: INVALID result or failed audit"} <= names


def scheduled_runs(stack: Stack, deployment_id: str) -> list[dict]:
    return post(stack, "/flow_runs/filter", {"deployments": {"id": {"any_": [deployment_id]}},
                                             "flow_runs": {"state": {"type": {"any_": ["SCHEDULED"]}}}})


def test_dev_up_keeps_the_schedules_as_the_user_set_them(stack: Stack) -> None:
    """The local stack deploys its schedules paused (a laptop does not run the nightly plan unasked); one the user
    resumed or paused stays so, under the same id, when `podium dev up` runs again."""
    nightly = get(stack, "/deployments/name/podium-submission/nightly")
    (schedule,) = nightly["schedules"]
    assert schedule["active"] is False and not scheduled_runs(stack, nightly["id"])
    for action, active in (("resume", True), ("pause", False)):
        done = prefect(stack, "deployment", "schedule", action, "podium-submission/nightly", schedule["id"])
        assert done.returncode == 0, done.stdout + done.stderr
        began = time.monotonic()
        again = podium("dev", "up", "--workspace", str(stack.ws), "--port", "0", "--node", NODE)
        print(f"dev up again ({action}d): {time.monotonic() - began:.1f} s")
        assert again.returncode == 0, again.stdout + again.stderr
        (kept,) = get(stack, "/deployments/name/podium-submission/nightly")["schedules"]
        assert (kept["id"], kept["active"]) == (schedule["id"], active), kept
    assert not scheduled_runs(stack, nightly["id"])


def check_summaries(stack: Stack, artifacts: list[dict], line: str, gb200_folder: Path) -> dict:
    """Both runs' summaries on the bring-up run; the 4 x GB200 one holds the table against the published results,
    its published gate failed and called the webhook. Returns the smoke run's summary."""
    summaries = [a for a in artifacts if a["key"] == "summary"]
    assert all(a["description"] in line for a in summaries) and len(summaries) == 2
    summary = next(a for a in summaries if "smoke" in a["description"].split(":")[0])
    verdict = next(a for a in summaries if a is not summary)["data"]
    assert "## Against the published v6.1 results, per accelerator" in verdict and "not an MLPerf metric" in verdict
    assert "RedHat_Supermicro" in verdict and "| published | cpu-smoke/gpt-oss-120b/Offline |" in verdict
    gates = json.loads((gb200_folder / "gates.json").read_text())
    assert gates["failed"] == 1 and gates["published"][0]["matched"] == ["NVIDIA GB200"]
    hook = stack.hook.wait_for(lambda b: "published gate FAIL" in b.get("subject", ""))
    assert "cpu-smoke/gpt-oss-120b/Offline" in hook["text"] and "(bound >= 0.8)" in hook["text"]
    return summary


def test_bringup_deployment_runs_the_smoke_plan_then_the_full_plan(stack: Stack) -> None:
    began = time.monotonic()
    run = prefect(stack, "deployment", "run", "podium-submission/bringup", "--param", f"plan={stack.sim}",
                  "--param", f"smoke_plan={stack.plan}", "--param", "cluster=ci", "--param",
                  f"workspace={stack.ws}", "--watch", "--watch-timeout", "600")
    print(f"bring-up through the worker: {time.monotonic() - began:.1f} s")
    assert "Flow run finished successfully in 'Completed'" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]
    flow_run = post(stack, "/flow_runs/filter", {"flow_runs": {"name": {"any_": ["bringup-ci"]}}})[0]
    assert flow_run["state_type"] == "COMPLETED" and flow_run["parameters"]["cluster"] == "ci"
    sim_folder = (stack.ws / "runs" / "latest").resolve()
    (folder,) = [p for p in (stack.ws / "runs").iterdir() if not p.is_symlink() and p != sim_folder]   # the smoke's
    checks = json.loads((folder / "validation.json").read_text())
    assert checks["success"] and checks["evaluated"] >= 8 and checks["failed"] == 0
    plot = folder / "plots" / "latency-cpu-smoke-gpt-oss-120b-Offline.png"
    assert plot.read_bytes().startswith(b"\x89PNG")
    report = (folder / "report.md").read_text()
    assert "## Plots" in report and "## Data checks" in report and plot.name in report
    artifacts = post(stack, "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [flow_run["id"]]}}})
    assert any(a["key"] == "bringup-preflight" and "GPUs and driver" in a["data"] for a in artifacts)
    # what the bring-up run itself shows: its outcome line, the summaries, live progress, named subflows; the CPU
    # smoke run has no published result for its accelerator, the 4 x GB200 run (the smoke engine on a system described
    # as 4 GB200) is far under the best one
    line, tree = flow_run["state"]["message"], re.escape(str(folder / "submission"))
    sim_tree = re.escape(str(sim_folder / "submission"))
    assert re.fullmatch(rf"bring-up of ci: (\d+)/\1 preflight checks passed \| smoke plan smoke: 1/1 runs VALID, "
                        rf"1/1 accuracy PASS, checker 0 errors, \d+ deviations, no published closed v6.1 result for "
                        rf"accelerator 'N/A'; tree {tree}; s3://podium/runs/smoke/{folder.name}/ \| full plan gb200: "
                        rf"1/1 runs VALID, 1/1 accuracy PASS, checker 0 errors, \d+ deviations, 1 gate\(s\) failed, "
                        rf"gpt-oss-120b Offline: [\d.]+ % of the best published GB200 per GPU FAIL: under 80 %; "
                        rf"tree {sim_tree}; s3://podium/runs/gb200/{sim_folder.name}/", line), line
    assert line in run.stdout and "4 of 4 runs done; last: cpu-smoke/gpt-oss-120b/Offline/" in run.stdout
    summary = check_summaries(stack, artifacts, line, sim_folder)
    assert f"object storage: `s3://podium/runs/smoke/{folder.name}/`" in summary["data"] and \
        "`podium link --embedded " in summary["data"] and "X-Amz-" not in summary["data"]
    assert [(a["data"], a["description"]) for a in artifacts if a["type"] == "progress"] == [
        (100, "4 of 4 runs done: finished")]
    children = post(stack, "/flow_runs/filter", {"flow_runs": {"parent_flow_run_id": {"any_": [flow_run["id"]]}}})
    assert sorted(r["name"] for r in children) == ["gb200 on cpu-smoke", "smoke on cpu-smoke"]
    smoke_child = next(r for r in children if r["name"] == "smoke on cpu-smoke")
    grandchildren = post(stack, "/flow_runs/filter", {"flow_runs": {"parent_flow_run_id": {
        "any_": [smoke_child["id"]]}}})
    assert [r["name"] for r in grandchildren] == ["gpt-oss-120b on cpu-smoke"]
    everything = post(stack, "/artifacts/filter", {"limit": 200})
    assert any(a["type"] == "progress" and a["data"] == 100 and "staging" in a["description"] for a in everything)
    assert any(a["key"] == "validation" and "podium-results passed" in a["data"] for a in everything)
    assert any(a["key"] == "plots" and "](data:image/png;base64," in a["data"] for a in everything)
    assert not any("X-Amz-Credential" in json.dumps(a["data"]) for a in everything)   # no presigned link kept
    server = s3server.running(stack.ws / "s3")
    assert server is not None
    cfg = storage.StorageConfig(server.endpoint_url, "podium", "runs", "us-east-1", server.credentials.access_key,
                                server.credentials.secret_key)
    entries = sorted(p.name for p in (stack.ws / "work" / "cache").iterdir())
    assert sum(e.startswith("loadgen-") for e in entries) == 4, entries   # the cache: in the workspace, not in S3
    print("in s3://podium/runs/prefect-results/:", storage.list_keys(cfg, "prefect-results"))
    key = f"runs/smoke/{folder.name}/plots/{plot.name}"
    tags = {t["Key"]: t["Value"] for t in storage.client(cfg).get_object_tagging(Bucket="podium", Key=key)["TagSet"]}
    assert tags["flow-run-id"] == folder.name and len(tags["plan-sha256"]) == 64 and tags["git-commit"]


def test_a_cli_run_reuses_what_the_deployment_run_measured(stack: Stack) -> None:
    """`podium run` of the plan the bring-up deployment just ran, in the same workspace: every loadgen run comes from
    the cache the deployment run left, and no engine starts."""
    began = time.monotonic()
    run = podium("run", str(stack.plan), "--workspace", str(stack.ws), api=stack.api)
    print(f"podium run after the deployment run: {time.monotonic() - began:.1f} s")
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-3000:]
    assert "engine launched 0 time(s)" in output and output.count("Cached(type=COMPLETED)") == 2, output[-3000:]


def test_a_broken_plan_calls_the_webhook(stack: Stack) -> None:
    run = prefect(stack, "deployment", "run", "podium-submission/run", "--param", f"plan_path={stack.broken}",
                  "--param", f"workspace={stack.ws}", "--watch", "--watch-timeout", "300")
    assert "Failed" in run.stdout, run.stdout[-3000:]
    body = stack.hook.wait_for(lambda b: "no-such-model" in b.get("text", "") and "Failed" in b.get("subject", ""))
    assert body["subject"].startswith("Podium: podium-submission run ") and "does not exist" in body["text"]


def test_invalid_results_and_failed_audits_call_the_webhook(stack: Stack) -> None:
    code = """
from prefect import flow
from submission.results.runs import RunRecord
from tasks.ops.notifications import emit_audit_failed, emit_result_events

@flow(name="podium-event-check")
def check() -> None:
    bad = RunRecord(key="k1", system="cpu-smoke", benchmark="gpt-oss-120b", scenario="Server", mode="performance",
                    run_dir="/nowhere", valid=False, validity="INVALID", invalid_reasons=("TPOT constrain not met",))
    emit_result_events([bad], "run-123", "ci-plan")
    emit_audit_failed("TEST07", "cpu-smoke/gpt-oss-120b/Server/TEST07", "run-123", "ci-plan", "accuracy 41.0 < 60.7")

check()
"""
    done = subprocess.run([sys.executable, "-c", code], env=stack.env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    invalid = stack.hook.wait_for(lambda b: "INVALID result" in b.get("subject", ""))
    assert "cpu-smoke/gpt-oss-120b/Server/performance" in invalid["text"] and "TPOT constrain" in invalid["text"]
    audit = stack.hook.wait_for(lambda b: "TEST07 failed" in b.get("subject", ""))
    assert "accuracy 41.0 < 60.7" in audit["text"] and "ci-plan" in audit["text"]


def test_one_engine_per_gpu_node(stack: Stack) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from submission.base.errors import LaunchError
    from tasks.launchers.nodes import NodeSlot

    with temporary_settings(updates={PREFECT_API_URL: stack.api}):
        first = NodeSlot([NODE])
        first.acquire()
        try:
            assert get(stack, f"/v2/concurrency_limits/gpu-{NODE}")["active_slots"] == 1
            with pytest.raises(LaunchError, match=f"gpu-{NODE} stayed taken"):
                NodeSlot([NODE], timeout_s=3).acquire()
        finally:
            first.release()
        with NodeSlot([NODE], timeout_s=30) as second:
            assert second.held
        fresh = NodeSlot(["ci-gpu-new"])   # a node nobody registered: its limit is made on the fly
        with fresh:
            assert get(stack, "/v2/concurrency_limits/gpu-ci-gpu-new")["limit"] == 1
    assert get(stack, f"/v2/concurrency_limits/gpu-{NODE}")["active_slots"] == 0


def test_dev_down_stops_everything(stack: Stack) -> None:
    state = json.loads((stack.ws / "dev" / "state.json").read_text())
    pids = [state["server"]["pid"], state["worker"]["pid"]]
    down = podium("dev", "down", "--workspace", str(stack.ws))
    assert down.returncode == 0 and "worker" in down.stdout and "Prefect server" in down.stdout \
        and "S3 server" in down.stdout, down.stdout + down.stderr
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{stack.api}/health", timeout=3)
    assert podium("dev", "down", "--workspace", str(stack.ws)).stdout.strip() == "nothing running"
