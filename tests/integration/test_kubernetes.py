"""The kubernetes launcher against a fake API server (tests/integration/fake_kube.py) up to the API boundary: what it
creates and deletes, readiness through the Service (the API server's service proxy, forwarded to the real smoke
engine), fail-fast on a crashing pod, cleanup of what a killed run left, and preflight's pod that describes the
engine's node. Every test runs as the `podium` ServiceAccount of deployments/kubernetes/rbac.yaml, which the fake API
server holds to its Role (a call the Role does not grant answers 403 and fails the test); one test checks the Role
grants nothing the launcher and preflight never use, and one runs the real Prefect worker (prefect-kubernetes) and its
observer as the `prefect-worker` account and checks its Role the same way. No real cluster is involved."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client as k8s
from typer.testing import CliRunner

from flows.cli import app
from submission.base.errors import LaunchError
from submission.plan import model as plans
from submission.plan.engine_options import KubernetesSettings
from submission.tree import host_facts
from tasks.engines import Endpoint, backend
from tasks.engines.smoke.llm import ENGINE_ENV
from tasks.launchers import launched, launcher, start_ready
from tasks.launchers.kubernetes import ACCESS, GRAPH_ACCESS, KubernetesDeployment, KubernetesLauncher
from tasks.launchers.kubernetes_manifests import GRAPH_NAME_LABEL, GRAPH_SERVICE_LABEL
from tasks.ops.kube_checks import NODES, access_problems, describe_engine_node, node_architectures
from tasks.serving.telemetry import expand_dcgm
from tests.integration.fake_kube import (
    DISCOVERY,
    TOKEN,
    Attributes,
    FakeApiServer,
    FakeCluster,
    attributes,
    grant,
    node,
)
from tests.integration.fake_registry import FakeRegistry
from tests.secret_search import files_under, leaks

pytestmark = pytest.mark.integration
LOG = logging.getLogger("test.k8s")
NS = "podium-test"
RBAC = Path(__file__).parents[2] / "deployments" / "kubernetes" / "rbac.yaml"
K8S_PLAN = Path(__file__).parents[2] / "deployments" / "plans" / "gpt-oss-120b-trtllm-k8s.yaml"
SMOKE_PLAN = Path(__file__).parents[2] / "deployments" / "plans" / "smoke.yaml"
PLANTED = "hf_plantedK8sLaunch0123456789"


def rbac() -> list[dict]:
    return [d for d in yaml.safe_load_all(RBAC.read_text()) if d]


def granted(docs: list[dict], name: str = "podium-launcher", kind: str = "Role") -> set[tuple[str, str, str]]:
    """Every (verb, API group, resource) the shipped Role (or ClusterRole) `name` grants."""
    [role] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return {(v, g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


@pytest.fixture
def smoke_engine(smoke_server: Endpoint) -> tuple[str, int]:
    """The real smoke engine on 127.0.0.1: what the Service of the pod would reach in a cluster."""
    host, port = smoke_server.base_url.removeprefix("http://").split(":")
    return host, int(port)


def _launcher(api: FakeApiServer, tmp_path: Path, engine: str = "smoke", state: str = "state",
              owner: dict[str, str] | None = None, **settings: object) -> KubernetesLauncher:
    token = grant(api.cluster, rbac(), namespace=NS)   # the Role, bound in the test's namespace
    config = KubernetesSettings.model_validate({
        "image": "registry.example/podium-smoke:1", "namespace": NS, "name": f"podium-{engine}", "shm_gib": 0,
        "kubeconfig": str(api.kubeconfig(tmp_path / "kubeconfig", token)), **settings})
    return launcher("kubernetes", state_dir=tmp_path / state, settings=config, engine=engine,  # type: ignore
                    owner=owner)


def _calls(api: FakeApiServer, method: str | None = None) -> list[tuple[str, str]]:
    return [(r["method"], r["path"]) for r in api.cluster.requests if method in (None, r["method"])
            and "/proxy" not in r["path"] and not r["path"].endswith("/pods")]


def test_apply_ready_through_the_service_then_delete(api: FakeApiServer, tmp_path: Path, smoke_store: Path,
                                                     smoke_engine: tuple[str, int]) -> None:
    model = smoke_store / "models" / "tiny-llama"
    api.cluster.services["podium-smoke-smoke-server"] = smoke_engine
    api.cluster.unready_proxy_calls = 3   # the Service has no ready endpoint at first
    where = _launcher(api, tmp_path)
    with launched(backend("smoke"), {}, model, where, tmp_path / "logs", LOG, timeout_s=60) as endpoint:
        assert endpoint.base_url == f"http://podium-smoke-smoke-server.{NS}.svc.cluster.local:8000"
        assert endpoint.watched.nodes == ("fake-node-0",)   # the node its pod runs on: what a DCGM template takes
        created = dict(api.cluster.objects)
        assert json.loads((tmp_path / "state" / f"k8s-{NS}-podium-smoke.json").read_text()) == [
            ["Secret", "podium-smoke-env"], ["Deployment", "podium-smoke-smoke-server"],
            ["Service", "podium-smoke-smoke-server"]]
    assert _calls(api, "POST") == [("POST", f"/api/v1/namespaces/{NS}/secrets"),
                                   ("POST", f"/apis/apps/v1/namespaces/{NS}/deployments"),
                                   ("POST", f"/api/v1/namespaces/{NS}/services")]
    deployment = k8s.V1Deployment.from_dict(created[("deployments", "podium-smoke-smoke-server")])
    [c] = deployment.spec.template.spec.containers
    assert c.image == "registry.example/podium-smoke:1" and c.command[1:3] == ["serve", str(model)]
    assert c.command[c.command.index("--host") + 1] == "0.0.0.0" and c.ports[0].container_port == 8000
    proxied = [(r["method"], r["path"].split("/proxy", 1)[1]) for r in api.cluster.requests if "/proxy" in r["path"]]
    assert proxied[:3] == [("GET", "/health")] * 3   # 503 three times: it waited
    assert proxied[3:] == [("GET", "/health"), ("POST", "/v1/completions")]
    one_token = next(r for r in api.cluster.requests if r["path"].endswith("/proxy/v1/completions"))
    assert one_token["path"] == f"/api/v1/namespaces/{NS}/services/podium-smoke-smoke-server:8000/proxy/v1/completions"
    assert one_token["body"] == {"model": str(model), "prompt": "the", "max_tokens": 1}
    assert all(r["auth"] == f"Bearer {api.cluster.sa_token('mlperf', 'podium')}" for r in api.cluster.requests)
    assert _calls(api, "DELETE") == [("DELETE", f"/api/v1/namespaces/{NS}/services/podium-smoke-smoke-server"),
                                     ("DELETE", f"/apis/apps/v1/namespaces/{NS}/deployments/podium-smoke-smoke-server"),
                                     ("DELETE", f"/api/v1/namespaces/{NS}/secrets/podium-smoke-env")]
    assert api.cluster.objects == {} and not (tmp_path / "state" / f"k8s-{NS}-podium-smoke.json").exists()


def test_the_engines_env_values_go_in_a_secret_and_nowhere_else(api: FakeApiServer, tmp_path: Path,
                                                               smoke_store: Path, smoke_engine: tuple[str, int],
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """A planted HF_TOKEN in the engine's env: the pod spec names it and takes its value from the launch's Secret
    (labelled as the rest, deleted with them), which the container starts with; no other request, no log line, no
    manifests.json and no dry run holds the value."""
    model = smoke_store / "models" / "tiny-llama"
    api.cluster.services["podium-smoke-smoke-server"] = smoke_engine
    where, options = _launcher(api, tmp_path, owner=SMOKE), {"env": {"HF_TOKEN": PLANTED}}
    with caplog.at_level(logging.INFO), launched(backend("smoke"), options, model, where, tmp_path / "logs", LOG,
                                                 timeout_s=60):
        started_with = api.cluster.container_env("podium-smoke-smoke-server")   # what the kubelet would give it
        secret = api.cluster.objects[("secrets", "podium-smoke-env")]
        pod = api.cluster.objects[("deployments", "podium-smoke-smoke-server")]["spec"]["template"]["spec"]
    assert started_with == {**ENGINE_ENV, "HF_TOKEN": PLANTED}
    [container] = pod["containers"]
    assert all(set(e) == {"name", "valueFrom"} and e["valueFrom"]["secretKeyRef"]["name"] == "podium-smoke-env"
               for e in container["env"])
    assert secret["metadata"]["labels"]["podium.mlcommons.org/benchmark"] == "gpt-oss-120b"
    carrying = [(r["method"], r["path"]) for r in api.cluster.requests if PLANTED in json.dumps(r["body"])]
    assert carrying == [("POST", f"/api/v1/namespaces/{NS}/secrets")]
    written = json.loads((tmp_path / "logs" / "manifests.json").read_text())
    assert written[0]["stringData"]["smoke-server.HF_TOKEN"] == "<set>"
    specs = backend("smoke").processes(options, model, where.placement(1))
    review, _ = where.review(specs, backend("smoke").endpoint(options, model, specs))   # the dry run's objects
    assert [o["kind"] for o in review["kubernetes"]] == ["Secret", "Deployment", "Service"]
    outputs = [*files_under(tmp_path / "logs", tmp_path / "state"), ("log", caplog.text.encode()),
               ("review", json.dumps(review).encode())]
    assert leaks(outputs, PLANTED) == [] and leaks([("x", f"x{PLANTED}".encode())], PLANTED) == ["x"]
    assert "creating Secret podium-smoke-env in podium-test" in caplog.text
    assert api.cluster.objects == {}   # the Secret went with the rest


def test_a_crashing_pod_fails_at_once_with_its_log(api: FakeApiServer, tmp_path: Path, smoke_store: Path) -> None:
    where = _launcher(api, tmp_path)
    specs = backend("smoke").processes({}, smoke_store / "models" / "tiny-llama", where.placement(1))
    running = where.start(specs, tmp_path / "logs", LOG)
    assert where.alive(running)
    api.cluster.pod_waiting = "CrashLoopBackOff"
    assert not where.alive(running)   # an engine session relaunches it
    where.stop(running)
    api.cluster.pod_log = "Loading weights\nRuntimeError: CUDA out of memory on rank 0\n"
    with pytest.raises(LaunchError) as e:
        start_ready(backend("smoke"), {}, smoke_store / "models" / "tiny-llama", _launcher(api, tmp_path),
                    tmp_path / "logs", LOG, timeout_s=600)
    assert "smoke-server (pod podium-smoke-smoke-server-7d9f8-abcde) CrashLoopBackOff while starting" in str(e.value)
    assert "CUDA out of memory on rank 0" in str(e.value) and "kubectl describe pod" in str(e.value)
    assert api.cluster.objects == {}   # stopped: what it created is deleted


def test_a_later_run_deletes_what_a_killed_run_left(api: FakeApiServer, tmp_path: Path, smoke_store: Path) -> None:
    model = smoke_store / "models" / "tiny-llama"
    be = backend("smoke")
    first = _launcher(api, tmp_path)
    specs = be.processes({}, model, first.placement(1))
    first.start(specs, tmp_path / "logs", LOG)   # the run that did this is killed here
    second = _launcher(api, tmp_path)
    again = second.start(specs, tmp_path / "logs", LOG)
    methods = [m for m, _ in _calls(api) if m != "GET"]   # GET: the lists by label, empty once the record reaped
    assert methods == ["POST"] * 3 + ["DELETE"] * 3 + ["POST"] * 3   # Secret, Deployment, Service
    second.stop(again)
    assert api.cluster.objects == {}


SMOKE = {"plan": "smoke", "system": "cpu-smoke", "benchmark": "gpt-oss-120b"}


def test_a_rerun_after_a_killed_flow_pod_replaces_its_engine_by_label(api: FakeApiServer, tmp_path: Path) -> None:
    """The killed flow pod's workspace (and its record) died with it; its Deployment and Service carry the plan,
    system and benchmark. The rerun lists them by label, deletes them, waits until the API server no longer lists
    them (here two lists later: a foreground deletion), then creates its own: never a 409."""
    killed = _launcher(api, tmp_path, state="pod-1", owner=SMOKE)
    specs = backend("smoke").processes({}, Path("/models/m"), killed.placement(1))
    killed.start(specs, tmp_path / "logs", LOG)
    old = api.cluster.objects[("deployments", "podium-smoke-smoke-server")]
    assert old["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "podium",
                                         "podium.mlcommons.org/deployment": "podium-smoke",
                                         "podium.mlcommons.org/process": "smoke-server",
                                         "podium.mlcommons.org/plan": "smoke", "podium.mlcommons.org/system":
                                             "cpu-smoke", "podium.mlcommons.org/benchmark": "gpt-oss-120b"}
    api.cluster.requests.clear()
    api.cluster.linger_lists = 2
    rerun = _launcher(api, tmp_path, state="pod-2", owner=SMOKE)   # a fresh pod: no record of the first
    deployment = rerun.start(specs, tmp_path / "logs", LOG)
    calls = [(m, p.removeprefix(f"/apis/apps/v1/namespaces/{NS}/").removeprefix(f"/api/v1/namespaces/{NS}/"))
             for m, p in _calls(api)]
    deleted = calls.index(("DELETE", "deployments/podium-smoke-smoke-server"))
    created = calls.index(("POST", "deployments"))
    listed = [("GET", "secrets"), ("GET", "deployments"), ("GET", "services")]
    assert calls[:3] == listed and deleted < created and ("DELETE", "secrets/podium-smoke-env") in calls[:created]
    assert calls[created - 4:created - 1] == listed   # the list that came back empty, then the Secret created
    assert len([c for c in calls[deleted:created] if c[0] == "GET"]) >= 4                  # it waited while listed
    lists = [r for r in api.cluster.requests if r["method"] == "GET" and r["path"].endswith("/deployments")]
    assert lists[0]["query"]["labelSelector"] == ["app.kubernetes.io/managed-by=podium,"
                                                  "podium.mlcommons.org/deployment=podium-smoke"]
    new = api.cluster.objects[("deployments", "podium-smoke-smoke-server")]
    assert new is not old and "deletionTimestamp" not in new["metadata"] and not api.cluster.terminating
    rerun.stop(deployment)
    assert api.cluster.objects == {}


def test_another_benchmarks_engine_under_the_same_name_is_left_alone(api: FakeApiServer, tmp_path: Path) -> None:
    other = _launcher(api, tmp_path, state="other", owner={**SMOKE, "benchmark": "llama3.1-8b"})
    specs = backend("smoke").processes({}, Path("/models/m"), other.placement(1))
    other.start(specs, tmp_path / "logs", LOG)
    before = dict(api.cluster.objects)
    with pytest.raises(LaunchError) as e:
        _launcher(api, tmp_path, state="mine", owner=SMOKE).start(specs, tmp_path / "logs", LOG)
    assert ("Secret podium-smoke-env in namespace podium-test serves plan smoke, system cpu-smoke, "
            "benchmark llama3.1-8b, not plan smoke, system cpu-smoke, benchmark gpt-oss-120b") in str(e.value)
    assert "engine.kubernetes.name a prefix of its own" in e.value.fix
    assert api.cluster.objects == before and not [m for m, _ in _calls(api) if m == "DELETE"]


def test_an_object_this_workspace_did_not_create(api: FakeApiServer, tmp_path: Path, smoke_store: Path) -> None:
    where = _launcher(api, tmp_path)
    specs = backend("smoke").processes({}, smoke_store / "models" / "tiny-llama", where.placement(1))
    api.cluster.objects[("services", "podium-smoke-smoke-server")] = {"metadata": {"name": "x"}}
    with pytest.raises(LaunchError, match="Service podium-smoke-smoke-server already exists in namespace podium-test "
                                          "and this workspace did not create it"):
        where.start(specs, tmp_path / "logs", LOG)
    assert ("deployments", "podium-smoke-smoke-server") not in api.cluster.objects   # rolled back
    assert ("services", "podium-smoke-smoke-server") in api.cluster.objects          # not ours: left alone


def test_dynamo_applies_a_graph_deployment(api: FakeApiServer, tmp_path: Path) -> None:
    options = {"version": "1.6.1", "nodes": 4, "gpus_per_node": 4, "discovery": "kubernetes",
               "prefill": {"workers": 6, "tensor_parallel_size": 2}, "decode": {"workers": 4}}
    where = _launcher(api, tmp_path, engine="dynamo", model_claim="models")
    nodes, ports = backend("dynamo").demand(options)
    specs = backend("dynamo").processes(options, Path("/models/qwen3-vl"), where.placement(ports, nodes=nodes))
    deployment = where.start(specs, tmp_path / "logs", LOG)
    assert _calls(api, "POST") == [("POST", f"/api/v1/namespaces/{NS}/secrets"),
                                   ("POST", f"/apis/nvidia.com/v1alpha1/namespaces/{NS}/dynamographdeployments")]
    graph = api.cluster.objects[("dynamographdeployments", "podium-dynamo")]
    assert graph["spec"]["services"]["PrefillWorker"]["replicas"] == 6
    assert [o["kind"] for o in json.loads((tmp_path / "logs" / "manifests.json").read_text())] == [
        "Secret", "DynamoGraphDeployment"]
    where.stop(deployment)
    assert _calls(api, "DELETE") == [
        ("DELETE", f"/apis/nvidia.com/v1alpha1/namespaces/{NS}/dynamographdeployments/podium-dynamo"),
        ("DELETE", f"/api/v1/namespaces/{NS}/secrets/podium-dynamo-env")]


def _operator_pod(graph: str, service: str, name: str, node_name: str) -> dict:
    """A pod as the Dynamo operator makes one for a graph's service: its two labels (GRAPH_NAME_LABEL,
    GRAPH_SERVICE_LABEL), placed on a node."""
    return {"metadata": {"name": name, "labels": {GRAPH_NAME_LABEL: graph, GRAPH_SERVICE_LABEL: service}},
            "spec": {"nodeName": node_name, "containers": [{"name": "main", "image": "x"}]},
            "status": {"phase": "Running"}}


def test_a_graph_is_watched_on_the_nodes_the_operator_placed_its_pods(api: FakeApiServer, tmp_path: Path) -> None:
    """The operator's pods of the graph, on two nodes, name its nodes in Podium's order (node 0: the prefill workers'
    and the frontend's), and a DCGM template is filled with both; another graph's pod is not the engine's."""
    options = {"version": "1.6.1", "nodes": 2, "gpus_per_node": 2, "discovery": "kubernetes",
               "prefill": {"workers": 2}, "decode": {"workers": 2}}
    where = _launcher(api, tmp_path, engine="dynamo")
    nodes, ports = backend("dynamo").demand(options)
    deployment = where.start(backend("dynamo").processes(options, Path("/m"), where.placement(ports, nodes=nodes)),
                             tmp_path / "logs", LOG)
    for service, name, on in [("DecodeWorker", "podium-dynamo-decodeworker-a1", "gpu-a"),
                              ("DecodeWorker", "podium-dynamo-decodeworker-a2", "gpu-a"),
                              ("PrefillWorker", "podium-dynamo-prefillworker-b1", "gpu-b"),
                              ("PrefillWorker", "podium-dynamo-prefillworker-b2", "gpu-b"),
                              ("Frontend", "podium-dynamo-frontend-b3", "gpu-b")]:
        api.cluster.objects[("pods", name)] = _operator_pod("podium-dynamo", service, name, on)
    api.cluster.objects[("pods", "other-frontend-c1")] = _operator_pod("other", "Frontend", "other-frontend-c1",
                                                                       "gpu-c")
    seen = where.watched(deployment)
    assert seen.nodes == ("gpu-b", "gpu-a")
    assert expand_dcgm(("http://{node}:9400/metrics",), seen.nodes) == (
        ("gpu-b", "http://gpu-b:9400/metrics"), ("gpu-a", "http://gpu-a:9400/metrics"))
    where.stop(deployment)


def test_an_api_that_does_not_answer_costs_the_node_names_not_the_launch(tmp_path: Path) -> None:
    """A stopped API server: watched names no node, for a graph and for Podium's own pods, and raises nothing."""
    options = {"version": "1.6.1", "nodes": 1, "gpus_per_node": 2, "discovery": "kubernetes",
               "prefill": {"workers": 1}, "decode": {"workers": 1}}
    with FakeApiServer() as gone:
        where = _launcher(gone, tmp_path, engine="dynamo")
    nodes, ports = backend("dynamo").demand(options)
    specs = backend("dynamo").processes(options, Path("/m"), where.placement(ports, nodes=nodes))
    for graph in (True, False):
        assert where.watched(KubernetesDeployment(specs, "podium-dynamo", [], graph=graph)).nodes == ()


def test_bad_credentials_are_named(tmp_path: Path) -> None:
    settings = KubernetesSettings(image="x", kubeconfig=str(tmp_path / "missing"))
    where = KubernetesLauncher(tmp_path, settings, engine="smoke")
    with pytest.raises(LaunchError, match="no Kubernetes credentials"):
        _ = where.api


def test_the_role_grants_what_the_launcher_calls_and_nothing_more(api: FakeApiServer, tmp_path: Path,
                                                                   smoke_store: Path,
                                                                   smoke_engine: tuple[str, int]) -> None:
    """Every path the launcher takes (launch, readiness through the Service, stop; a crashing pod and its log; a
    Dynamo graph; the k8s plan's trtllm server with its ConfigMap; preflight's pod describing the engine's node) as
    the `podium` account: each call is one the Role grants in the plan's namespace, and each grant of the Role is
    used by some call."""
    model = smoke_store / "models" / "tiny-llama"
    api.cluster.services["podium-smoke-smoke-server"] = smoke_engine
    with launched(backend("smoke"), {}, model, _launcher(api, tmp_path), tmp_path / "logs", LOG, timeout_s=60):
        pass
    api.cluster.services.clear()
    api.cluster.pod_waiting, api.cluster.pod_log = "ImagePullBackOff", "no such image\n"
    with pytest.raises(LaunchError, match="no such image"):
        start_ready(backend("smoke"), {}, model, _launcher(api, tmp_path), tmp_path / "logs", LOG, timeout_s=60)
    options = {"version": "1.6.1", "nodes": 1, "gpus_per_node": 2, "discovery": "kubernetes",
               "prefill": {"workers": 1}, "decode": {"workers": 1}}
    graph = _launcher(api, tmp_path, engine="dynamo")
    nodes, ports = backend("dynamo").demand(options)
    graph.stop(graph.start(backend("dynamo").processes(options, Path("/models/m"), graph.placement(ports, nodes)),
                           tmp_path / "logs", LOG))
    trtllm = _launcher(api, tmp_path, engine="trtllm")   # the k8s plan's engine: its LLM-API YAML in a ConfigMap
    options = plans.load(K8S_PLAN).benchmarks[0].engine.config()
    trtllm.stop(trtllm.start(backend("trtllm").processes(options, Path("/models/m"), trtllm.placement(1)),
                             tmp_path / "logs", LOG))
    describe_engine_node(_k8s_bench(api, tmp_path), tmp_path / "state", LOG.info)   # preflight's pod
    api.cluster.objects[("persistentvolumeclaims", "mlperf-models")] = {"metadata": {"name": "mlperf-models"}}
    assert access_problems(_k8s_bench(api, tmp_path), tmp_path / "state") == []      # preflight's access check
    api.cluster.nodes = [node("gb200-1", "arm64", {"nvidia.com/gpu.product": "NVIDIA-GB200"}), node("cpu-1", "amd64")]
    assert node_architectures(_k8s_bench(api, tmp_path), tmp_path / "state") == {"gb200-1": "arm64"}   # the image's
    calls = [attributes(r["method"], r["path"], r["query"]) for r in api.cluster.requests
             if not r["path"].endswith("/selfsubjectaccessreviews")]   # every account's (system:basic-user)
    refused = [c for c in calls if not api.cluster.authorize(api.cluster.sa_token("mlperf", "podium"), c)]
    assert calls and refused == []
    assert {c.namespace for c in calls} == {NS, ""}
    used = {(c.verb, c.group, c.resource) for c in calls if c.namespace}
    grants = granted(rbac())
    assert used == grants, f"unused grants: {grants - used}; calls not granted: {used - grants}"
    assert used == set(ACCESS + GRAPH_ACCESS)   # what preflight asks the API server for
    cluster_wide = {(c.verb, c.group, c.resource) for c in calls if not c.namespace}
    assert cluster_wide == granted(rbac(), "podium-nodes", "ClusterRole") == {NODES}   # the nodes' architecture
    assert Attributes("create", "", "services/proxy", NS) in calls   # the one-token probe: a POST through the proxy


def _k8s_bench(api: FakeApiServer, tmp_path: Path, **settings: object) -> plans.BenchmarkSpec:
    """The k8s plan's benchmark, its engine in the test's namespace as the `podium` account."""
    token = grant(api.cluster, rbac(), namespace=NS)
    bench = plans.load(K8S_PLAN).benchmarks[0]
    k8s_settings = bench.engine.kubernetes.model_copy(update={  # type: ignore[union-attr]
        "namespace": NS, "kubeconfig": str(api.kubeconfig(tmp_path / "kubeconfig", token)), **settings})
    return bench.model_copy(update={"engine": bench.engine.model_copy(update={"kubernetes": k8s_settings})})


def test_preflight_describes_the_node_a_pod_like_the_engines_lands_on(api: FakeApiServer, tmp_path: Path) -> None:
    """The pod runs host_facts in the engine's image, with the engine's GPUs and node selector and no API token; its
    JSON line is read from its log (here the fake runs the command on this host), and the pod is gone after."""
    said: list[str] = []
    bench = _k8s_bench(api, tmp_path, node_selector={"kubernetes.io/hostname": "b200-node-1"})
    facts = describe_engine_node(bench, tmp_path / "state", said.append)
    assert facts["host_memory_capacity"].endswith("GB") and facts["operating_system"]
    assert facts["accelerators_per_node"] == host_facts.accelerators()["accelerators_per_node"]   # this host's
    [created] = [r["body"] for r in api.cluster.requests if r["method"] == "POST" and r["path"].endswith("/pods")]
    spec = created["spec"]
    [container] = spec["containers"]
    assert container["image"] == bench.engine.kubernetes.image and container["command"][:2] == ["python3", "-c"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"            # the trtllm server's GPUs
    assert container["command"][-1] == "/mnt/mlperf" == container["volumeMounts"][0]["mountPath"]
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": "b200-node-1"} and spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    assert not [k for k in api.cluster.objects if k[0] == "pods"]
    assert said == ["gb200x4-k8s: described from node fake-node-0, where pod podium-trtllm-describe (image "
                    "nvcr.io/nvidia/tensorrt-llm/release:1.2.0, 4 GPU(s)) ran"]


def test_a_describe_pod_that_cannot_be_scheduled_names_why(api: FakeApiServer, tmp_path: Path) -> None:
    api.cluster.schedulable = False
    bench = _k8s_bench(api, tmp_path)
    bench = bench.model_copy(update={"engine": bench.engine.model_copy(update={"ready_timeout_s": 0.5})})
    with pytest.raises(LaunchError, match=r"(?s)had not run after 0 s \(Pending: Unschedulable: 0/3 nodes are "
                                          r"available: 3 Insufficient nvidia.com/gpu.\).*free the GPUs"):
        describe_engine_node(bench, tmp_path / "state", LOG.info)
    assert not [k for k in api.cluster.objects if k[0] == "pods"]   # deleted all the same


def test_preflight_reports_a_refused_verb_and_a_missing_claim_at_once_and_creates_nothing(
        api: FakeApiServer, tmp_path: Path, smoke_store: Path) -> None:
    """`podium preflight PLAN --nodes` with a Kubernetes engine whose account may not delete pods and whose model
    claim is missing: one report naming both with their fixes, exit 2, and nothing created (no pod, no Deployment)."""
    token = grant(api.cluster, rbac(), namespace=NS)
    api.cluster.denied = {("delete", "pods")}
    api.cluster.nodes = [node("cpu-1", "amd64")]
    plan = yaml.safe_load(SMOKE_PLAN.read_text().replace(".podium/store", str(smoke_store)))
    with FakeRegistry() as registry:
        registry.registry.push_single("podium-smoke", "1", "linux/amd64")
        for bench in plan["benchmarks"]:
            bench["engine"] |= {"launcher": "kubernetes", "kubernetes": {
                "image": f"{registry.host}/podium-smoke:1", "namespace": NS, "model_claim": "mlperf-models",
                "kubeconfig": str(api.kubeconfig(tmp_path / "kubeconfig", token))}}
        (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
        result = CliRunner().invoke(app, ["preflight", str(tmp_path / "plan.yaml"), "--nodes",
                                          "--workspace", str(tmp_path / "ws")])
    assert result.exit_code == 2, result.output
    out = " ".join(result.output.split())
    assert "2 problems:" in out, out
    assert f"the Kubernetes account may not delete pods in namespace {NS}" in out
    assert "kubectl apply -f deployments/kubernetes/rbac.yaml" in out
    assert f"the model's PersistentVolumeClaim mlperf-models is not in namespace {NS}" in out
    assert "benchmarks.0.engine.kubernetes.model_claim" in out and f"kubectl -n {NS} apply -f" in out
    asked = [r["body"]["spec"]["resourceAttributes"] for r in api.cluster.requests
             if r["path"].endswith("/selfsubjectaccessreviews")]
    assert {(a["verb"], a["resource"] + (f"/{a['subresource']}" if a.get("subresource") else "")) for a in asked} \
        == {(v, r) for v, _, r in ACCESS}   # the smoke engine: no Dynamo graph
    assert [(r["method"], r["path"]) for r in api.cluster.requests
            if r["method"] != "GET" and not r["path"].endswith("/selfsubjectaccessreviews")] == []
    assert api.cluster.objects == {}


def test_the_fake_refuses_what_the_role_does_not_grant(api: FakeApiServer, tmp_path: Path) -> None:
    """The check above can fail: a call outside the Role (here: reading a Secret back, or a Deployment in another
    namespace) is refused with 403, and the launcher reports it as a LaunchError naming the fix."""
    token = grant(api.cluster, rbac(), namespace=NS)
    core = k8s.CoreV1Api(k8s.ApiClient(_client_config(api, token)))
    with pytest.raises(k8s.exceptions.ApiException) as e:
        core.read_namespaced_secret("podium-smoke-env", NS)
    assert e.value.status == 403
    elsewhere = _launcher(api, tmp_path, namespace="default")
    specs = backend("smoke").processes({}, Path("/models/m"), elsewhere.placement(1))
    with pytest.raises(LaunchError, match=r"(?s)403 Forbidden.*grant the service account rights"):
        elsewhere.start(specs, tmp_path / "logs", LOG)


def _client_config(api: FakeApiServer, token: str) -> k8s.Configuration:
    config = k8s.Configuration()
    config.host, config.api_key = api.url, {"authorization": f"Bearer {token}"}
    return config


# The Prefect worker of the podium-kubernetes pool: its work pool made from the shipped template and a deployment on it
# with run-k8s's job variables, under names of the test's own; the failed flow pod's output
WORKER_POOL = "podium-kubernetes-role-test"
WORKER_NS = "mlperf"   # the pool's namespace (deployments/prefect.yaml), where rbac.yaml's worker Role is
POD_OUTPUT = "Traceback (most recent call last): the flow pod failed\n"


def test_the_workers_role_grants_the_calls_of_a_real_worker_run_and_nothing_more(
        api: FakeApiServer, prefect_server: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """prefect-kubernetes's worker, with its observer, as `prefect worker start --type kubernetes` runs it, as the
    `prefect-worker` account of rbac.yaml against the fake API (the observer told to watch `mlperf` only, as the
    quickstart says), on the session's Prefect server: three flow runs of a deployment on the shipped pool template; the
    first one's pod fails (the observer reads the pod's log and marks the run Crashed), the second is cancelled while
    pending (the worker deletes its Job), the third's Job is deleted under the running flow (the observer reads it,
    finds it gone and marks the run Crashed). Every call the worker and its observer made is one the worker's Role
    grants in `mlperf`, and each rule of the Role is needed by some call (without it, the check refuses one: the check
    can fail); the two accounts stay apart."""
    import kubernetes.config.kube_config

    worker = grant(api.cluster, rbac(), account_name="prefect-worker")   # the Roles in mlperf, as shipped
    kubeconfig = str(api.kubeconfig(tmp_path / "kubeconfig", worker))   # the worker's, as its pod's would be
    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", kubeconfig)   # read at import
    monkeypatch.setenv("PREFECT_INTEGRATIONS_KUBERNETES_OBSERVER_NAMESPACES", f'["{WORKER_NS}"]')
    crashed, cancelled, deleted, jobs = asyncio.run(_worker_runs(api, monkeypatch))
    assert crashed.is_crashed() and cancelled.is_cancelled() and deleted.is_crashed(), (crashed, cancelled, deleted)
    assert [k for k in api.cluster.objects if k[0] == "jobs"] == [("jobs", jobs[0])]   # the other two deleted
    mine = [r for r in api.cluster.requests if r["auth"] == f"Bearer {worker}"]
    assert {r["method"] for r in mine if r["path"] in DISCOVERY} == {"GET"}   # discovery: every account's
    calls = [attributes(r["method"], r["path"], r["query"]) for r in mine if r["path"] not in DISCOVERY]
    assert [c for c in calls if not api.cluster.authorize(worker, c)] == []
    assert {c.namespace for c in calls} == {WORKER_NS}
    used = {(c.verb, c.group, c.resource) for c in calls}
    assert {("create", "batch", "jobs"), ("delete", "batch", "jobs"), ("watch", "batch", "jobs"),
            ("watch", "", "pods"), ("get", "", "pods/log")} <= used, used
    grants = granted(rbac(), "podium-worker")
    assert used == grants, f"unused grants: {grants - used}; calls not granted: {used - grants}"
    docs = rbac()
    [role] = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "podium-worker"]
    for rule in role["rules"]:   # the positive control: the Role less any one rule refuses some call it made
        less = [{**d, "rules": [r for r in d["rules"] if r is not rule]} if d is role else d for d in docs]
        smaller = FakeCluster()
        token = grant(smaller, less, account_name="prefect-worker")
        assert [c for c in calls if not smaller.authorize(token, c)], rule
    podium = api.cluster.sa_token("mlperf", "podium")
    assert not api.cluster.authorize(podium, Attributes("create", "batch", "jobs", WORKER_NS))
    assert not api.cluster.authorize(worker, Attributes("create", "apps", "deployments", WORKER_NS))
    assert not api.cluster.authorize(worker, Attributes("create", "batch", "jobs", "default"))   # mlperf's only
    [binding] = [d for d in rbac() if d["kind"] == "RoleBinding" and d["metadata"]["name"] == "podium-worker"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "prefect-worker", "namespace": WORKER_NS}]


async def _worker_runs(api: FakeApiServer, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, Any, list[str]]:
    """The worker's three flow runs (see the test); their final states and their Jobs' names."""
    import kubernetes_asyncio.config.kube_config
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.states import Cancelling, Running
    from prefect_kubernetes import observer
    from prefect_kubernetes.settings import KubernetesSettings
    from prefect_kubernetes.worker import KubernetesWorker

    from tasks.ops import registration

    monkeypatch.setattr(observer, "settings", KubernetesSettings())   # the namespaces above, read where it starts
    monkeypatch.setattr(kubernetes_asyncio.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", os.environ["KUBECONFIG"])
    run_k8s = next(d for d in registration.deployments() if d["name"] == "run-k8s")
    async with get_client() as client:
        await client.create_work_pool(WorkPoolCreate(name=WORKER_POOL, type="kubernetes",
                                                     base_job_template=registration.template("kubernetes")),
                                      overwrite=True)
        deployment = await client.create_deployment(
            flow_id=await client.create_flow_from_name("podium-submission"), name="run-k8s-role-test",
            work_pool_name=WORKER_POOL, entrypoint=run_k8s["entrypoint"], parameters=run_k8s["parameters"],
            job_variables={**run_k8s["work_pool"]["job_variables"], "image": "registry.example/podium-flow:1"})
        runs = [(await client.create_flow_run_from_deployment(deployment)).id for _ in range(3)]
        async with KubernetesWorker(work_pool_name=WORKER_POOL, name="role-test") as worker:
            await worker.sync_with_backend()
            await worker.get_and_submit_flow_runs()
            jobs = await _until("each flow run has its Job", lambda: _jobs_of(api, runs))
            api.cluster.finish_job(jobs[0], 1, POD_OUTPUT)
            crashed = await _until("the failed pod's run is Crashed", lambda: _final(client, runs[0]))
            # the worker's cancellation of a run whose pod never started (PREFECT_WORKER_ENABLE_CANCELLATION=true:
            # what it does when the run's Cancelling event reaches it): the Job deleted, the run Cancelled
            await client.set_flow_run_state(runs[1], Cancelling(message="test"), force=True)
            await worker._cancel_run(runs[1])
            cancelled = await _until("the pending run is Cancelled", lambda: _final(client, runs[1]))
            # a running flow's Job deleted by someone else (`kubectl delete job`): the observer finds it gone and
            # marks the run Crashed
            await client.set_flow_run_state(runs[2], Running(), force=True)
            gone = httpx.delete(f"{api.url}/apis/batch/v1/namespaces/{WORKER_NS}/jobs/{jobs[2]}",
                                headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
            assert gone.status_code == 200, gone.text
            deleted = await _until("the run whose Job was deleted is Crashed", lambda: _final(client, runs[2]))
    return crashed, cancelled, deleted, jobs


def _jobs_of(api: FakeApiServer, runs: list[Any]) -> list[str] | None:
    by_run = {o["metadata"]["labels"].get("prefect.io/flow-run-id"): name
              for (plural, name), o in list(api.cluster.objects.items()) if plural == "jobs"}
    return [by_run[str(r)] for r in runs] if all(str(r) in by_run for r in runs) else None


async def _final(client: Any, run: Any) -> Any:
    state = (await client.read_flow_run(run)).state
    return state if state.is_final() else None


async def _until(what: str, probe: Any, within_s: float = 120) -> Any:
    """`probe()`'s first truthy value (awaited when it is a coroutine), asked every 0.2 s; fails naming `what`."""
    import inspect

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        found = probe()
        found = await found if inspect.isawaitable(found) else found
        if found:
            return found
        await asyncio.sleep(0.2)
    raise AssertionError(f"not within {within_s:.0f} s: {what}")
