"""docs/quickstart-kubernetes.md, followed as far as a recording fake API server allows
(tests/integration/fake_kube.py, over TLS for kubectl: it keeps objects and authorises as RBAC does; nothing schedules
or runs): every command the page does not mark as not run, in its order, with bash: kubectl as the cluster's admin
(the namespace, deployments/kubernetes/rbac.yaml, the two claims, the storage Secret), `podium setup` and one pass of
the Prefect worker as rbac.yaml's `prefect-worker` account on a real Prefect server, `prefect deploy` of every
deployment on the Kubernetes pool (the run-k8s and fetch Jobs rendered from what the server stored), the dry run,
preflight on this host and, with `--nodes`, against the fake API as the `podium` account (its rights asked, the
model's claim read, the engine's node described from a pod); PLAN pinned to the plan with its /mnt/mlperf sources in a
temporary folder and the fake API's kubeconfig, PREFECT_API_URL to the session's server. Then, as the `podium`
account, the plan's trtllm server launched and stopped, every call one the Role grants."""

from __future__ import annotations

import json
import logging
import re
import shutil
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from submission.plan import model as plans
from tasks.engines import backend
from tasks.launchers import launched, placement_for
from tasks.ops import registration
from tasks.ops.kube_checks import describe_engine_node
from tasks.serving.launch import make_launcher, model_dir_for
from tests.integration.fake_kube import DISCOVERY, TOKEN, FakeApiServer, attributes, node
from tests.integration.fake_registry import FakeRegistry
from tests.local_http import LocalServer
from tests.manual import DOCS, Runner, bare, checkout, runnable, runner_env
from tests.unit.test_kubernetes_deploy import pod, render
from tests.unit.test_preflight import CLOSED_FIELDS

pytestmark = pytest.mark.integration
REPO = Path(__file__).parents[2]
RBAC = REPO / "deployments" / "kubernetes" / "rbac.yaml"
MODELS_CLAIM = REPO / "deployments" / "kubernetes" / "models-claim.yaml"
PLAN = REPO / "deployments" / "plans" / "gpt-oss-120b-trtllm-k8s.yaml"
PAGE = DOCS / "quickstart-kubernetes.md"
# the deployments on the Kubernetes pool (deployments/prefect.yaml), each by its flow's name
K8S_DEPLOYMENTS = {"run-k8s": "podium-submission", "bringup-k8s": "podium-submission", "fetch-k8s": "fetch",
                   "search-k8s": "search-peak-qps", "sweep-k8s": "sweep-prefill-decode"}
IMAGE = "nvidia/tensorrt-llm/release"   # the engine image's name in the test's registry
LOG = logging.getLogger("test.k8s-quickstart")


class Engine(BaseHTTPRequestHandler):
    """Stands in for the trtllm pod behind its Service (TensorRT-LLM cannot run here): 200 to every probe, the
    model listed."""

    model = ""

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"data": [{"id": self.model}], "choices": [{"text": " x"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def stand_in() -> Iterator[tuple[str, int]]:
    with LocalServer(type("Bound", (Engine,), {"model": "gpt-oss-120b"})) as server:
        yield "127.0.0.1", server.port


def test_the_quickstart_names_real_files_and_commands() -> None:
    doc = PAGE.read_text()
    for path in ("deployments/kubernetes/rbac.yaml", "deployments/kubernetes/Dockerfile", str(PLAN.relative_to(REPO)),
                 "deployments/kubernetes/models-claim.yaml", "deployments/kubernetes/workspace-claim.yaml",
                 "deployments/prefect.yaml"):
        assert path in doc and (REPO / path).is_file(), path
    assert "`deployments/work-pools/*.json`" in doc and (REPO / "deployments/work-pools/kubernetes.json").is_file()
    steps = ["kubectl create namespace mlperf", "kubectl apply -f deployments/kubernetes/rbac.yaml",
             "create -f deployments/kubernetes/models-claim.yaml", "create secret generic podium-s3",
             f"export PLAN={PLAN.relative_to(REPO)}",
             "docker buildx build --platform linux/amd64,linux/arm64 -f deployments/kubernetes/Dockerfile",
             "podium setup", "--pool podium-kubernetes", "--name run-k8s",
             "prefect deployment run 'fetch/fetch-k8s'", 'podium launch "$PLAN" --dry-run',
             'podium preflight "$PLAN"', "prefect deployment run 'podium-submission/run-k8s'",
             "podium assemble --from", "podium package round/submission", "podium submit round/submission"]
    at = [doc.index(s) for s in steps]
    assert at == sorted(at), "the quickstart's steps are in this order"
    on_the_pool = {d["name"] for d in registration.deployments() if d["work_pool"]["name"] == "podium-kubernetes"}
    assert on_the_pool == set(K8S_DEPLOYMENTS)


def test_the_quickstart_against_the_fake_api(tmp_path: Path, prefect_server: None,
                                             stand_in: tuple[str, int]) -> None:
    docs = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    plan = plans.load(PLAN)
    bench = plan.benchmarks[0]
    settings = bench.engine.kubernetes
    (tmp_path / "tls").mkdir()
    with FakeApiServer(tls_dir=tmp_path / "tls") as api, FakeRegistry() as registry:
        # the cluster's GPU node, as the plan's node_selector names it, and the engine image in a registry, built for
        # its architecture: what plain preflight asks of both
        api.cluster.nodes = [node("gb200-node-1", "arm64", dict(settings.node_selector), {"nvidia.com/gpu": "4"})]
        registry.registry.push_index(IMAGE, "1.2.0", ["linux/amd64", "linux/arm64"])
        [account] = [d for d in docs if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == "podium"]
        token = api.cluster.sa_token(account["metadata"]["namespace"], account["metadata"]["name"])
        _the_pages_commands(api, token, tmp_path, f"{registry.host}/{IMAGE}:1.2.0")
        # 1-3. what the page's kubectl commands made, as the cluster's admin: the namespace, rbac.yaml's objects, the
        # models' claim the plan names and the flow pod's workspace claim, the storage Secret
        made = {(d["kind"].lower() + "s", d["metadata"]["name"]) for d in docs}
        assert made <= set(api.cluster.objects), made - set(api.cluster.objects)
        assert {("namespaces", settings.namespace), ("persistentvolumeclaims", settings.model_claim),
                ("persistentvolumeclaims", "podium-workspace")} <= set(api.cluster.objects)
        assert api.cluster.objects[("persistentvolumeclaims", settings.model_claim)]["metadata"]["namespace"] == \
            settings.namespace
        secret = api.cluster.objects[("secrets", "podium-s3")]
        assert set(secret["data"]) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN"}
        _check_flow_job(settings, bench, account)   # 6: the pool the page's `podium setup` registered
        _launch_as_podium(api, token, plan, tmp_path, stand_in)


def _site_plan(folder: Path, kubeconfig: Path, image: str) -> Path:
    """The shipped plan as a site has it on a host that mounts the claim: its sources there (here: small files in the
    real schemas), the system described, the kubeconfig of the `podium` account; no fetch section (fetched)."""
    data = yaml.safe_load(PLAN.read_text())
    bench = data["benchmarks"][0]
    (folder / "models" / "gpt-oss-120b").mkdir(parents=True)
    prompts = folder / "prompts.parquet"
    pd.DataFrame({"input_tokens": [[1, 2, 3]], "ground_truth": ["x"], "dataset": ["gpqa"]}).to_parquet(prompts)
    (folder / "livecodebench_tests.jsonl").write_text("{}\n")
    bench["model"]["source"] = str(folder / "models" / "gpt-oss-120b")
    bench["dataset"] = {"performance": str(prompts), "accuracy": str(prompts), "compliance": {"TEST07": str(prompts)},
                        "lcb_tests": str(folder / "livecodebench_tests.jsonl")}
    bench.pop("fetch")
    bench["engine"]["kubernetes"] |= {"kubeconfig": str(kubeconfig), "image": image}   # the site's registry
    for system in data["systems"]:   # the storage too: the fake API runs the describing pod's command on this
        system["description"] = {   # host, where the claim's mount point /mnt/mlperf is not there to be measured
            **dict.fromkeys(CLOSED_FIELDS, "as described"), "host_storage_capacity": "7.7 TB",
            "host_storage_type": "NVMe SSD", **system["description"]}
    path = folder / "site.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _the_pages_commands(api: FakeApiServer, token: str, tmp_path: Path, image: str) -> None:
    """Every command the page does not mark as not run, in its order: kubectl as the cluster's admin, the worker of
    step 6 as rbac.yaml's `prefect-worker` account for one pass (`--run-once`: it starts, registers with the pool and
    starts its observer, then stops); then what the page's `podium setup` and `prefect deploy` stored on the
    server."""
    from prefect.client.orchestration import get_client

    assert shutil.which("kubectl"), "kubectl is not installed: the page's steps 1 to 3 run it (1.27 or later: the " \
                                    "server validates the fields)"
    root = checkout(tmp_path / "checkout")
    plan = _site_plan(tmp_path / "site", api.kubeconfig(tmp_path / "kubeconfig", token), image)
    worker = api.cluster.sa_token("mlperf", "prefect-worker")
    worker_config = api.kubeconfig(tmp_path / "worker-kubeconfig", worker)
    env = runner_env(PLAN=str(plan), KUBECONFIG=str(api.kubeconfig(tmp_path / "admin-kubeconfig", TOKEN)),
                     AWS_ACCESS_KEY_ID="AKIAQUICKSTART", AWS_SECRET_ACCESS_KEY="quickstart-secret")
    runner = Runner(root, env, pinned=frozenset({"PLAN", "PREFECT_API_URL"}))   # the session's Prefect server
    commands = runnable(PAGE)
    out = {}
    for command in commands:
        instead = None
        if "prefect worker start" in command:
            assert command.endswith("--type kubernetes"), command
            instead = command.replace("prefect worker start", f"KUBECONFIG={worker_config} prefect worker start") \
                + " --run-once"
        out[bare(command)] = runner.run(command, timeout_s=240, instead=instead).stdout
    assert runner.ran == commands
    assert [c.split()[:3] for c in commands if c.startswith("kubectl")] == [
        ["kubectl", "create", "namespace"], ["kubectl", "apply", "-f"], ["kubectl", "-n", "mlperf"],
        ["kubectl", "-n", "mlperf"], ["kubectl", "-n", "mlperf"]]
    assert re.fullmatch(r"REGISTRY/podium-flow:[0-9a-f]{7,}", runner.env["PODIUM_FLOW_IMAGE"])   # 5: the image's tag
    review = out['podium launch "$PLAN" --dry-run']                                  # 8: the objects, reviewed
    assert "ConfigMap" in review and "Deployment" in review and "Service" in review, review
    assert out['podium preflight "$PLAN"'].rstrip().endswith("preflight: OK")       # 9: this host, then the cluster
    nodes = out['podium preflight "$PLAN" --nodes']
    assert nodes.rstrip().endswith("preflight: OK") and "described from node fake-node-0" in nodes, nodes
    assert not [k for k in api.cluster.objects if k[0] in ("pods", "deployments", "services")]   # nothing left
    watched = [attributes(r["method"], r["path"], r["query"]) for r in api.cluster.requests
               if r["auth"] == f"Bearer {worker}" and r["path"] not in DISCOVERY]   # 6: the worker's observer
    assert {(c.verb, c.resource, c.namespace) for c in watched} >= {("watch", "pods", "mlperf"),
                                                                     ("watch", "jobs", "mlperf")}
    assert all(api.cluster.authorize(worker, c) for c in watched)
    with get_client(sync_client=True) as client:                     # 6: every deployment on the Kubernetes pool
        assert client.read_workers_for_work_pool("podium-kubernetes"), "the page's worker did not register"
        stored = {name: client.read_deployment_by_name(f"{flow}/{name}") for name, flow in K8S_DEPLOYMENTS.items()}
        template = client.read_work_pool("podium-kubernetes").base_job_template
    for deployment in stored.values():
        assert deployment.work_pool_name == "podium-kubernetes"
        assert deployment.job_variables["image"] == runner.env["PODIUM_FLOW_IMAGE"]
        assert deployment.job_variables["gpus"] == 0 and deployment.job_variables["namespace"] == "mlperf"
    _check_fetch_job(stored, template)


def _check_fetch_job(stored: dict[str, Any], template: dict) -> None:
    """Step 7's Job, rendered from what the server stored: the plan's models claim mounted read-write where every
    item of the plan's fetch sections lands, on any node; every other deployment's flow pod mounts it read-only."""
    plan = plans.load(PLAN)
    settings = plan.benchmarks[0].engine.kubernetes
    mounts = {}
    for name, deployment in stored.items():
        spec = pod(render(deployment.job_variables, template))
        [volume] = [v for v in spec.volumes if v.persistent_volume_claim
                    and v.persistent_volume_claim.claim_name == settings.model_claim]
        [mount] = [m for m in spec.containers[0].volume_mounts if m.name == volume.name]
        assert mount.mount_path == settings.volume_mount, name
        mounts[name] = (bool(volume.persistent_volume_claim.read_only), bool(mount.read_only), spec.node_selector)
    assert mounts.pop("fetch-k8s") == (False, False, {})
    assert all(m[:2] == (True, True) for m in mounts.values()), mounts   # the claim and its mount
    assert stored["fetch-k8s"].parameters["plan"] == str(PLAN.relative_to(REPO))
    fetched = [item.dest for item in plan.fetches()]
    assert fetched and all(str(dest).startswith(settings.volume_mount + "/") for dest in fetched), fetched


def _check_flow_job(settings: Any, bench: Any, account: dict) -> None:
    """Step 6: the pool `podium setup` registered from its JSON on a real server; the run-k8s deployment's Job
    rendered from what it stored: no GPU, the `podium` account in the plan's namespace, the data claim, the storage
    Secret."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        stored = client.read_work_pool("podium-kubernetes").base_job_template
    assert stored == registration.template("kubernetes")
    run_k8s = next(d for d in registration.deployments() if d["name"] == "run-k8s")
    assert run_k8s["parameters"]["plan_path"] == str(PLAN.relative_to(REPO))
    config = render({**run_k8s["work_pool"]["job_variables"], "image": "registry.example/podium-flow:1"}, stored)
    spec = pod(config)
    [container] = spec.containers
    assert config["job_manifest"]["metadata"]["namespace"] == settings.namespace == account["metadata"][
        "namespace"]
    assert spec.service_account_name == account["metadata"]["name"]
    assert container.resources.requests["nvidia.com/gpu"] == container.resources.limits["nvidia.com/gpu"] == "0"
    assert [v.persistent_volume_claim.claim_name for v in spec.volumes if v.persistent_volume_claim] == \
        ["podium-workspace", settings.model_claim]   # the workspace (step 2's claim), the models and data sets
    mount = next(m for m in container.volume_mounts if m.name == "mlperf")
    assert bench.dataset.performance.startswith(mount.mount_path + "/")
    assert container.env_from[0].secret_ref.name == "podium-s3"


def _launch_as_podium(api: FakeApiServer, token: str, plan: plans.Plan, tmp_path: Path,
                      stand_in: tuple[str, int]) -> None:
    """Steps 6 and 10 inside the flow pod: the review, then preflight's description of the engine's node and the
    launch and stop the flow pod makes, every call granted by the Role and in the plan's namespace."""
    bench = plan.benchmarks[0]
    settings = bench.engine.kubernetes
    before = len(api.cluster.requests)   # the page's preflight asked too (its access reviews are cluster-wide)
    engine_kinds = ("deployments", "services", "configmaps", "secrets")
    kept = [k for k in api.cluster.objects if k[0] in engine_kinds]   # the page's: the storage Secret
    # 6. the review
    from tasks.serving.launch import review

    reviewed = review(plan, bench, tmp_path / "ws")
    assert [o["kind"] for o in reviewed["kubernetes"]] == ["ConfigMap", "Secret", "Deployment", "Service"]

    # 10. preflight in the flow pod describes the engine's node from a pod like the engine's, then the launch, as the
    #    flow pod would make it (in the cluster the token is the pod's own)
    engine = bench.engine.model_copy(update={"kubernetes": settings.model_copy(
        update={"kubeconfig": str(api.kubeconfig(tmp_path / "kubeconfig", token))})})
    said: list[str] = []
    facts = describe_engine_node(bench.model_copy(update={"engine": engine}), tmp_path / "state", said.append)
    assert facts["operating_system"] and said[0].startswith(f"{bench.system}: described from node fake-node-0")
    where = make_launcher(engine, tmp_path / "state")
    be = backend(engine.name)
    options = engine.config()
    model = model_dir_for(engine, tmp_path / "staged")
    names = [s.name for s in be.processes(options, model, placement_for(be, options, where), tmp_path / "build")]
    for name in names:
        api.cluster.services[where.service_name(name)] = stand_in
    with launched(be, options, model, where, tmp_path / "logs", LOG, timeout_s=60,
                  build_dir=tmp_path / "build") as endpoint:
        assert endpoint.base_url == f"http://podium-trtllm-trtllm-server.{settings.namespace}.svc.cluster.local:8000"
        deployment = api.cluster.objects[("deployments", "podium-trtllm-trtllm-server")]
        [engine_container] = deployment["spec"]["template"]["spec"]["containers"]
        assert engine_container["image"] == settings.image
        assert engine_container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert [k for k in api.cluster.objects if k[0] in engine_kinds] == kept == [("secrets", "podium-s3")]
    calls = [attributes(r["method"], r["path"], r["query"]) for r in api.cluster.requests[before:]
             if r["auth"] == f"Bearer {token}"]
    assert calls and all(api.cluster.authorize(token, c) for c in calls)
    assert {c.namespace for c in calls} == {settings.namespace}
