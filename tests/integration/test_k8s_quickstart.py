"""docs/operations.md "Production quickstart: Kubernetes", followed as far as the recording fake API server allows
(tests/integration/fake_kube.py: it keeps objects and authorises as RBAC does; nothing schedules or runs): the
namespace and deployments/kubernetes/rbac.yaml applied as the admin, the work pool registered from its JSON on a real
Prefect server and the run-k8s deployment's Job rendered from it, the plan reviewed, then, as the `podium` account,
preflight's pod describing the engine's node and the plan's trtllm server launched and stopped, every call one the
Role grants."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import utils as k8s_utils

from submission.plan import model as plans
from tasks.engines import backend
from tasks.launchers import launched, placement_for
from tasks.ops import registration
from tasks.ops.kube_checks import describe_engine_node
from tasks.serving.launch import make_launcher, model_dir_for
from tests.integration.fake_kube import TOKEN, FakeApiServer, attributes
from tests.unit.test_kubernetes_deploy import pod, render

pytestmark = pytest.mark.integration
REPO = Path(__file__).parents[2]
RBAC = REPO / "deployments" / "kubernetes" / "rbac.yaml"
PLAN = REPO / "deployments" / "plans" / "gpt-oss-120b-trtllm-k8s.yaml"
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
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Bound", (Engine,), {"model": "gpt-oss-120b"}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "127.0.0.1", server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def section() -> str:
    text = (REPO / "docs" / "operations.md").read_text()
    start = text.index("## Production quickstart: Kubernetes")
    return text[start:text.index("\n## ", start + 1)]


def test_the_quickstart_names_real_files_and_commands() -> None:
    doc = section()
    for path in ("deployments/kubernetes/rbac.yaml", "deployments/kubernetes/Dockerfile", str(PLAN.relative_to(REPO)),
                 "deployments/kubernetes/workspace-claim.yaml",
                 "deployments/prefect.yaml", "deployments/work-pools/kubernetes.json"):
        assert path in doc and (REPO / path).is_file(), path
    steps = ["kubectl create namespace mlperf", "kubectl apply -f deployments/kubernetes/rbac.yaml",
             "create secret generic podium-s3", "podium fetch-inference",
             f"podium launch {PLAN.relative_to(REPO)} --dry-run", f"podium preflight {PLAN.relative_to(REPO)}",
             "docker buildx build --platform linux/amd64,linux/arm64 -f deployments/kubernetes/Dockerfile",
             "podium setup", "--pool podium-kubernetes",
             "--name run-k8s", "prefect deployment run 'podium-submission/run-k8s'"]
    at = [doc.index(s) for s in steps]
    assert at == sorted(at), "the quickstart's steps are in this order"
    names = {d["name"] for d in registration.deployments()}
    assert {"run-k8s", "bringup-k8s"} <= names


def test_the_quickstart_against_the_fake_api(tmp_path: Path, prefect_server: None,
                                             stand_in: tuple[str, int]) -> None:
    docs = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    plan = plans.load(PLAN)
    bench = plan.benchmarks[0]
    settings = bench.engine.kubernetes
    with FakeApiServer() as api:
        # 1. namespace and rights, as the cluster's admin
        admin = k8s.ApiClient(_config(api.url, TOKEN))
        k8s.CoreV1Api(admin).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=settings.namespace)))
        k8s_utils.create_from_yaml(admin, yaml_objects=docs)
        assert {("serviceaccounts", "podium"), ("roles", "podium-launcher"), ("rolebindings", "podium-launcher"),
                ("serviceaccounts", "prefect-worker"), ("roles", "podium-worker"),
                ("rolebindings", "podium-worker"), ("clusterroles", "podium-nodes"),
                ("clusterrolebindings", "podium-nodes")} <= set(api.cluster.objects)
        [account] = [d for d in docs if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == "podium"]
        # 2. the flow pod's workspace claim (the models' claim is the storage's own)
        k8s_utils.create_from_yaml(admin, str(REPO / "deployments" / "kubernetes" / "workspace-claim.yaml"))
        assert ("persistentvolumeclaims", "podium-workspace") in api.cluster.objects
        token = api.cluster.sa_token(account["metadata"]["namespace"], account["metadata"]["name"])

        _check_flow_job(settings, bench, account)
        _launch_as_podium(api, token, plan, tmp_path, stand_in)


def _check_flow_job(settings: Any, bench: Any, account: dict) -> None:
    """Steps 6-7: the pool from its JSON on a real server; the run-k8s deployment's Job rendered from what it
    stored: no GPU, the `podium` account in the plan's namespace, the data claim, the storage Secret."""
    from prefect.client.orchestration import get_client

    assert registration.create_pools({"podium-kubernetes": "kubernetes"}) == ["podium-kubernetes"]
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
    """Steps 4 and 8: the review, then preflight's description of the engine's node and the launch and stop the flow
    pod makes, every call granted by the Role."""
    bench = plan.benchmarks[0]
    settings = bench.engine.kubernetes
    # 4. the review
    from tasks.serving.launch import review

    reviewed = review(plan, bench, tmp_path / "ws")
    assert [o["kind"] for o in reviewed["kubernetes"]] == ["ConfigMap", "Deployment", "Service"]

    # 8. preflight in the flow pod describes the engine's node from a pod like the engine's, then the launch, as the
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
    assert not [k for k in api.cluster.objects if k[0] in ("deployments", "services", "configmaps")]
    calls = [attributes(r["method"], r["path"], r["query"]) for r in api.cluster.requests
             if r["auth"] == f"Bearer {token}"]
    assert calls and all(api.cluster.authorize(token, c) for c in calls)
    assert {c.namespace for c in calls} == {settings.namespace}


def _config(url: str, token: str) -> k8s.Configuration:
    config = k8s.Configuration()
    config.host, config.api_key = url, {"authorization": f"Bearer {token}"}
    return config
