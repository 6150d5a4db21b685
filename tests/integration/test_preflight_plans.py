"""`podium preflight` of the two shipped production plans on stand-ins for their clusters: gpt-oss-120b on
TensorRT-LLM under Kubernetes (the fake API server of fake_kube.py, as the `podium` account of rbac.yaml, its GPU
nodes arm64 as GB200's Grace; the engine image in the fake registry of fake_registry.py) and Qwen3-VL on Dynamo
under Slurm (the local 4-node cluster), in one plan with everything they need here (the `ready` plan of
tests/unit/test_preflight.py). Complete, it passes with `--nodes`. Then each of these planted in turn, and all at
once: no checkpoint, no LiveCodeBench tests, no endpoints client, no etcd on node 0 of the Slurm allocation, an
image without the nodes' architecture, a verb the Role does not grant. Each is named with its fix, all of them in
one report, exit 2; and no batch job was submitted, no Job, Deployment or other object created (the node checks'
allocation and describing pod given back)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from tests.integration.engines_support import engine_python, system_command
from tests.integration.fake_kube import FakeApiServer, grant, node
from tests.integration.fake_registry import FakeRegistry
from tests.integration.test_kubernetes import rbac
from tests.integration.test_preflight_slurm import ALLOCATED, _submitted
from tests.integration.test_slurm_quickstart import _jobs
from tests.unit.test_preflight import PLANTED, _children, _write, ready  # noqa: F401 (ready: a fixture)

pytestmark = [pytest.mark.integration, pytest.mark.slurm]
REPO = Path(__file__).parents[2]
SLURM_PLAN = REPO / "deployments" / "plans" / "qwen3-vl-dynamo-50-50.yaml"
IMAGE = "nvidia/tensorrt-llm/release"
GB200 = {"kubernetes.io/arch": "arm64", "nvidia.com/gpu.product": "NVIDIA-GB200"}


@pytest.fixture
def clusters(ready: dict[str, Any], slurm_conf: Path, tmp_path: Path) -> Iterator[dict[str, Any]]:   # noqa: F811
    """The `ready` plan with its engines on their own launchers: the Kubernetes engine's API server, nodes and
    registry; the Dynamo engine under Slurm with the shipped plan's settings, its interpreter and etcd this
    machine's."""
    python = engine_python(".venv-dynamo", "venv-dynamo")
    etcd = system_command("etcd", "etcd-server")
    with FakeApiServer() as api, FakeRegistry() as registry:
        token = grant(api.cluster, rbac())                         # the shipped Role, in namespace mlperf
        api.cluster.objects[("persistentvolumeclaims", "mlperf-models")] = {"metadata": {"name": "mlperf-models"}}
        gpus = {"nvidia.com/gpu": "4"}                              # NVIDIA's device plugin on the GPU nodes
        api.cluster.nodes = [node("gb200-1", "arm64", GB200, gpus), node("gb200-2", "arm64", GB200, gpus),
                             node("cpu-1", "amd64")]
        registry.registry.push_index(IMAGE, "1.2.0", ["linux/amd64", "linux/arm64"])
        registry.registry.push_index(IMAGE, "1.2.0-amd64", ["linux/amd64"])
        gpt, vlm = ready["benchmarks"]
        gpt["engine"]["kubernetes"] |= {"image": f"{registry.host}/{IMAGE}:1.2.0", "node_selector": GB200,
                                        "kubeconfig": str(api.kubeconfig(tmp_path / "kubeconfig", token))}
        # the describing pod's storage (the model volume, /mnt/mlperf) is not on this host, which runs it here
        ready["systems"][0]["description"] |= {"host_storage_capacity": "1 x 3.84 TB", "host_storage_type": "NVMe SSD"}
        shipped = yaml.safe_load(SLURM_PLAN.read_text())["benchmarks"][0]["engine"]
        vlm["engine"] = {**shipped, "slurm": {**shipped["slurm"], "slurm_conf": str(slurm_conf), "allocation": "new",
                                              "python": sys.executable, "grace_s": 3},
                         "options": {**shipped["options"], "python": str(python), "version": "1.6.1", "etcd": etcd}}
        yield {"plan": ready, "api": api, "registry": registry}


def _wrong_image_architecture(plan: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image = plan["benchmarks"][0]["engine"]["kubernetes"]["image"]
    plan["benchmarks"][0]["engine"]["kubernetes"]["image"] = image.replace(":1.2.0", ":1.2.0-amd64")


CLUSTER_PLANTS: dict[str, tuple[Callable[..., None], tuple[str, ...]]] = {
    "no-checkpoint": PLANTED["no-checkpoint"],
    "no-lcb-tests": PLANTED["no-lcb-tests"],
    "no-endpoints-client": PLANTED["no-endpoints-client"],
    "no-etcd-on-node-0": (PLANTED["no-etcd"][0], ("engine.options.etcd=", "bin/etcd: not found on node1, node 0 of "
                                                  "Slurm job", "where the engine starts it", "install etcd on node1")),
    "wrong-image-architecture": (_wrong_image_architecture, (
        "benchmarks.0.engine.kubernetes.image: image 127.0.0.1:", f"/{IMAGE}:1.2.0-amd64 has no linux/arm64 platform "
        "(it has linux/amd64), but gb200-1, gb200-2 are arm64", "docker buildx build --platform "
        "linux/arm64,linux/amd64 -t 127.0.0.1:")),
    "missing-rbac-verb": (lambda plan, tmp_path, monkeypatch: None, (
        "benchmarks.0.engine: gb200x4-k8s: the Kubernetes account may not delete pods in namespace mlperf",
        "kubectl apply -f deployments/kubernetes/rbac.yaml")),
}


def _preflight(plan: Path, workspace: Path, nodes: bool) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["preflight", str(plan), *(["--nodes"] if nodes else []),
                                      "--workspace", str(workspace)])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def _created_nothing(api: FakeApiServer, slurm_conf: Path, before: tuple[int, int], nodes: bool) -> None:
    """No batch job submitted, no allocation taken (with `nodes`: the node checks' given back); no object of the API
    server's created but preflight's describing pod, which is gone."""
    submitted, allocated = _submitted(slurm_conf), _submitted(slurm_conf, ALLOCATED)
    assert submitted == before[0] and (nodes or allocated == before[1]) and _jobs(slurm_conf) == []
    posts = {r["path"].rsplit("/", 1)[-1] for r in api.cluster.requests if r["method"] == "POST"}
    assert posts <= {"selfsubjectaccessreviews", "pods"}, posts
    assert list(api.cluster.objects) == [("persistentvolumeclaims", "mlperf-models")]


def test_the_complete_plans_pass_with_their_nodes(clusters: dict[str, Any], slurm_conf: Path, tmp_path: Path) -> None:
    before = _submitted(slurm_conf), _submitted(slurm_conf, ALLOCATED)
    code, out = _preflight(_write(clusters["plan"], tmp_path / "plan"), tmp_path / "ws", nodes=True)
    assert code == 0, out
    assert ("checked      the Kubernetes engines' account may make every call they need; their model claims exist; "
            "their images hold a platform for their nodes' architecture") in out
    assert "checked      Slurm would grant each Slurm engine's allocation" in out
    assert re.search(r"checked      gb200x16-slurm/qwen3-vl-235b-a22b: /\S+/etcd, \S+ -m dynamo.vllm, \S+ -m "
                     r"dynamo.frontend found on node1 \(node 0\)", out), out
    assert "gb200x4-k8s: described from node fake-node-0" in out and out.rstrip().endswith("preflight: OK")
    _created_nothing(clusters["api"], slurm_conf, before, nodes=True)
    assert _submitted(slurm_conf, ALLOCATED) == before[1] + 1   # the node checks' allocation
    nodes = [r for r in clusters["api"].cluster.requests if r["path"] == "/api/v1/nodes"]
    assert [r["query"]["labelSelector"] for r in nodes] == [["kubernetes.io/arch=arm64,nvidia.com/gpu.product="
                                                             "NVIDIA-GB200"]]


@pytest.mark.parametrize("name", list(CLUSTER_PLANTS))
def test_each_planted_piece_is_named_with_its_fix(name: str, clusters: dict[str, Any], slurm_conf: Path,
                                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plant, expected = CLUSTER_PLANTS[name]
    plant(clusters["plan"], tmp_path, monkeypatch)
    if name == "missing-rbac-verb":
        clusters["api"].cluster.denied = {("delete", "pods")}
    before = _submitted(slurm_conf), _submitted(slurm_conf, ALLOCATED)
    nodes = name == "no-etcd-on-node-0"   # found by the node checks; every other by plain preflight
    code, out = _preflight(_write(clusters["plan"], tmp_path / "plan"), tmp_path / "ws", nodes)
    assert code == 2, out
    text = " ".join(out.split())
    assert [e for e in expected if e not in text] == [], text
    assert "problems:" not in text, text   # the planted piece only
    _created_nothing(clusters["api"], slurm_conf, before, nodes)


def test_every_planted_piece_in_one_report_exit_2_and_nothing_created(clusters: dict[str, Any], slurm_conf: Path,
                                                                        tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for plant, _ in CLUSTER_PLANTS.values():
        plant(clusters["plan"], tmp_path, monkeypatch)
    clusters["api"].cluster.denied = {("delete", "pods")}
    plan = _write(clusters["plan"], tmp_path / "plan")
    before, children = (_submitted(slurm_conf), _submitted(slurm_conf, ALLOCATED)), _children()
    code, out = _preflight(plan, tmp_path / "ws", nodes=True)
    assert code == 2, out
    report = out[out.index("error: "):]
    assert report.startswith(f"error: {plan}: 6 problems:"), report
    text = " ".join(report.split())
    for name, (_, expected) in CLUSTER_PLANTS.items():
        assert [e for e in expected if e not in text] == [], (name, report)
    assert "not checked  the kubernetes engines' nodes: once what the cluster answered below is fixed" in out
    _created_nothing(clusters["api"], slurm_conf, before, nodes=True)
    assert _children() <= children
