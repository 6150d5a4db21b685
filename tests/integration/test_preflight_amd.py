"""Preflight of an MI355X plan's Kubernetes engine against stand-ins (the fake API server of fake_kube.py as the
`podium` account of rbac.yaml, the fake registry of fake_registry.py, and this host as the engine's node with the
recorded amd-smi of tests/amd_gpus.py first on PATH): AMD's device plugin resource on the nodes the pods may run on,
the ROCm image's platforms and GPU runtime in its registry, and ROCm's tool on the node the describing pod lands on.
Each missing piece is named with its fix."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from submission.plan import model as plans
from submission.plan.steps import at_nodes
from tasks.ops.kube_checks import describe_engine_node, image_problems
from tasks.ops.prerequisites import node_platform_problems
from tests.amd_gpus import fake_amd_smi
from tests.integration.fake_kube import FakeApiServer, grant, node
from tests.integration.fake_registry import FakeRegistry
from tests.integration.test_kubernetes import rbac

pytestmark = pytest.mark.integration
PLAN = Path(__file__).parents[2] / "deployments" / "plans" / "gpt-oss-120b-vllm-512.yaml"
NS = "mlperf"
LABELS = {"amd.com/gpu.product-name": "AMD_Instinct_MI355X"}   # the plan's node selector
ROCM = ("vllm/vllm-openai-rocm", "v0.22.1", ["PATH=/opt/rocm/bin:/usr/bin", "ROCM_PATH=/opt/rocm"])
CUDA = ("vllm/vllm-openai", "v0.22.1", ["PATH=/usr/local/cuda/bin:/usr/bin", "CUDA_VERSION=12.9.1",
                                        "NVIDIA_REQUIRE_CUDA=cuda>=12.9"])


@pytest.fixture
def cluster() -> Iterator[tuple[FakeApiServer, FakeRegistry]]:
    with FakeApiServer() as api, FakeRegistry() as registry:
        for name, tag, env in (ROCM, CUDA):
            registry.registry.push_index(name, tag, ["linux/amd64"], env=env)
        yield api, registry


def _bench(cluster: tuple[FakeApiServer, FakeRegistry], tmp_path: Path, image: tuple = ROCM) -> plans.BenchmarkSpec:
    """The shipped plan's N=1 step, its engine as the `podium` account of the fake cluster, its image in the fake
    registry."""
    api, registry = cluster
    token = grant(api.cluster, rbac(), namespace=NS)
    bench = plans.parse(at_nodes(yaml.safe_load(PLAN.read_text()), 1)).benchmarks[0]
    k8s = bench.engine.kubernetes.model_copy(update={   # type: ignore[union-attr]
        "kubeconfig": str(api.kubeconfig(tmp_path / "kubeconfig", token)),
        "image": f"{registry.host}/{image[0]}:{image[1]}"})
    return bench.model_copy(update={"engine": bench.engine.model_copy(update={"kubernetes": k8s})})


def test_nodes_with_amds_device_plugin_and_a_rocm_image_pass(cluster: tuple, tmp_path: Path) -> None:
    api, _ = cluster
    api.cluster.nodes = [node("mi355x-1", "amd64", LABELS, {"amd.com/gpu": "8", "cpu": "256"}),
                         node("mi355x-2", "amd64", LABELS, {"amd.com/gpu": "8"}), node("cpu-1", "amd64")]
    assert image_problems(_bench(cluster, tmp_path), tmp_path / "state", {}, "benchmarks.0.engine") == []


def test_nodes_without_amds_device_plugin_are_named_with_how_to_install_it(cluster: tuple, tmp_path: Path) -> None:
    api, _ = cluster
    api.cluster.nodes = [node("mi355x-1", "amd64", LABELS, {"nvidia.com/gpu": "8"}),
                         node("mi355x-2", "amd64", LABELS)]
    [problem] = image_problems(_bench(cluster, tmp_path), tmp_path / "state", {}, "benchmarks.0.engine")
    assert problem.message == ("mi355x-vllm-k8s-n1: no node its pods may run on (mi355x-1, mi355x-2) offers "
                               "amd.com/gpu, the resource AMD's device plugin advertises (the system's accelerator is "
                               "AMD's)")
    assert "kubectl create -f https://raw.githubusercontent.com/ROCm/k8s-device-plugin/master/k8s-ds-amdgpu-dp.yaml" \
        in str(problem.fix) and problem.where == "benchmarks.0.engine"


def test_a_cuda_image_on_amd_gpus_is_refused_naming_what_it_sets(cluster: tuple, tmp_path: Path) -> None:
    api, registry = cluster
    api.cluster.nodes = [node("mi355x-1", "amd64", LABELS, {"amd.com/gpu": "8"})]
    [problem] = image_problems(_bench(cluster, tmp_path, CUDA), tmp_path / "state", {}, "benchmarks.0.engine")
    assert problem.message == (f"image {registry.host}/vllm/vllm-openai:v0.22.1 is built for NVIDIA's CUDA (its "
                               "environment sets CUDA_VERSION, NVIDIA_REQUIRE_CUDA), but the system's GPUs are AMD's "
                               "(ROCm)")
    assert problem.where == "benchmarks.0.engine.kubernetes.image" and "ROCm image" in str(problem.fix)
    # the per-platform manifest and its config were read (the index alone does not say)
    assert any(r["path"].startswith("/v2/vllm/vllm-openai/blobs/") for r in registry.registry.requests)


def test_the_describing_pod_asks_amd_gpus_and_amd_smi_must_be_in_the_image(cluster: tuple, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The pod that describes the engine's node asks `amd.com/gpu` and runs host_facts there (the fake runs it on
    this host): with the recorded amd-smi on PATH the node shows the MI355X GPUs; without it preflight names the tool
    missing from the image."""
    api, _ = cluster
    bench = _bench(cluster, tmp_path)
    plan = plans.parse(at_nodes(yaml.safe_load(PLAN.read_text()), 1))
    tools = fake_amd_smi(tmp_path / "tools").parent
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}/usr/bin{os.pathsep}/bin")
    facts = describe_engine_node(bench, tmp_path / "state", lambda _: None)
    [created] = [r["body"] for r in api.cluster.requests if r["method"] == "POST" and r["path"].endswith("/pods")]
    assert created["spec"]["containers"][0]["resources"] == {"limits": {"amd.com/gpu": "1"}}
    assert (facts["accelerator_model_name"], facts["accelerators_per_node"]) == ("AMD Instinct MI355X 288GB HBM3e",
                                                                                  "8")
    assert node_platform_problems(plan, {bench.system: facts}) == []
    monkeypatch.setenv("PATH", f"/usr/bin{os.pathsep}/bin")   # this host: neither amd-smi nor nvidia-smi
    bare = describe_engine_node(bench, tmp_path / "state", lambda _: None)
    [problem] = node_platform_problems(plan, {bench.system: bare})
    assert problem.message == ("system 'mi355x-vllm-k8s-n1': amd-smi on its engine's node is not on its PATH (neither "
                               "is nvidia-smi), so the node shows none of the system's AMD GPUs")
    assert problem.where == "systems.0.description.accelerator_model_name"
    nvidia = {**facts, "accelerator_model_name": "NVIDIA H200"}
    [wrong] = node_platform_problems(plan, {bench.system: nvidia})
    assert wrong.message == ("system 'mi355x-vllm-k8s-n1': its engine's node has NVIDIA GPUs (NVIDIA H200), but its "
                             "description names AMD's")
