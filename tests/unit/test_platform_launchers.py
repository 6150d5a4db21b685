"""The GPU platform plugged into the launchers (docs/amd.md): chosen when the plan loads from its system's description,
it pins each process (`gpu_env`, the replicas' blocks), names the Kubernetes resource a pod asks for and the variables
a pod drops, the variable a Slurm step's supervisor reads and the pins it gives each replica, and the per-node GPU
sampler's tool. The shipped MI355X plans dry-run on both launchers asking `amd.com/gpu`, never `nvidia.com/gpu`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s
from typer.testing import CliRunner

from flows.cli import app
from submission.base.errors import LaunchError, PlanError
from submission.plan import model as plans
from submission.plan.engine_options import KubernetesSettings
from submission.plan.platforms import AMD, NVIDIA
from submission.plan.replicas import Layout
from submission.plan.slurm_options import SlurmSettings
from submission.plan.steps import at_nodes
from tasks.engines import Node, Placement, backend
from tasks.engines.common import gpu_env
from tasks.engines.replicas import replicated
from tasks.launchers import kubernetes_manifests as manifests
from tasks.launchers import slurm_cli, slurm_replicas
from tasks.launchers.kubernetes import KubernetesLauncher

REPO = Path(__file__).parents[2]
PLANS = REPO / "deployments" / "plans"
GPT_K8S, GPT_SLURM = PLANS / "gpt-oss-120b-vllm-512.yaml", PLANS / "gpt-oss-120b-vllm-512-slurm.yaml"
DS_K8S = PLANS / "deepseek-r1-sglang-512.yaml"
ROCM_NUMBERING = set(AMD.visibility_env())   # ROCR_, HIP_, CUDA_VISIBLE_DEVICES and GPU_DEVICE_ORDINAL
runner = CliRunner()


def _plan(accelerator: str, engine: str = "vllm") -> dict:
    options = {"version": "1.2.0" if engine == "trtllm" else "0.22.1", "gpus_per_node": 8}
    return {"name": "p", "round": "v6.1", "division": "open", "profile": "smoke", "submitter": "Podium",
            "systems": [{"name": "s", "description": {"accelerator_model_name": accelerator}}],
            "benchmarks": [{"benchmark": "gpt-oss-120b", "system": "s",
                            "engine": {"name": engine, "options": options},
                            "model": {"name": "gpt-oss-120b", "source": "/m"},
                            "dataset": {"performance": "/d.parquet", "accuracy": "/d.parquet"},
                            "generation": {"max_tokens": 16}, "scenarios": {"Offline": {"target_qps": 1}}}],
            "storage": {"bucket": "b"}}


# --- chosen when the plan loads -----------------------------------------------------------------------------------
def test_the_plan_gives_each_engine_its_systems_platform_and_refuses_a_name_it_cannot_place() -> None:
    assert plans.parse(_plan("AMD Instinct MI355X 288GB HBM3e")).benchmarks[0].engine.platform() is AMD
    assert plans.parse(_plan("NVIDIA H200")).benchmarks[0].engine.platform() is NVIDIA
    assert plans.parse(_plan("")).benchmarks[0].engine.platform() is NVIDIA   # GPUs left to detection
    with pytest.raises(PlanError, match=r"systems\.0\.description\.accelerator_model_name: accelerator_model_name "
                                        r"'Intel\(R\) Arc\(TM\) Pro B70' names no GPU platform Podium runs engines on "
                                        r"\(NVIDIA, AMD\); name the vendor"):
        plans.parse(_plan("Intel(R) Arc(TM) Pro B70"))
    with pytest.raises(PlanError, match=r"systems\.0\.description\.accelerator_model_name: .* names GPUs of NVIDIA "
                                        r"and AMD"):
        plans.parse(_plan("NVIDIA H200-SXM-141GB + AMD Instinct MI350X 288GB HBM3e"))
    with pytest.raises(PlanError, match=r"benchmarks\.0\.engine\.name: trtllm runs on NVIDIA GPUs only, but system "
                                        r"'s' has AMD's; serve it with vllm or sglang"):
        plans.parse(_plan("AMD Instinct MI355X 288GB HBM3e", engine="trtllm"))
    for path in (GPT_K8S, GPT_SLURM, DS_K8S):
        assert plans.load(path).benchmarks[0].engine.platform() is AMD, path.name


# --- what the backends pin ----------------------------------------------------------------------------------------
def test_a_backend_pins_its_gpus_with_the_placements_platform() -> None:
    assert gpu_env((4, 5), AMD) == {"ROCR_VISIBLE_DEVICES": "4,5", "HIP_VISIBLE_DEVICES": "0,1",
                                    "CUDA_VISIBLE_DEVICES": "0,1", "GPU_DEVICE_ORDINAL": "0,1"}
    assert gpu_env((4, 5), NVIDIA) == {"CUDA_VISIBLE_DEVICES": "4,5"}
    on_amd = Placement("10.0.0.1", (8000,), platform=AMD)
    [sglang] = backend("sglang").processes({"version": "0.5.15.post1", "gpus_per_node": 8, "tensor_parallel_size": 8,
                                            "data_parallel_size": 8, "enable_dp_attention": True},
                                           Path("/m"), on_amd)
    assert {k: sglang.env[k] for k in ROCM_NUMBERING} == {k: "0,1,2,3,4,5,6,7" for k in ROCM_NUMBERING}
    [vllm] = backend("vllm").processes({"version": "0.22.1", "gpus_per_node": 8, "tensor_parallel_size": 2,
                                        "env": {"VLLM_ROCM_USE_AITER": "1"}}, Path("/m"), on_amd)
    assert vllm.env["ROCR_VISIBLE_DEVICES"] == "0,1" and vllm.env["VLLM_ROCM_USE_AITER"] == "1"


def test_each_replica_gets_its_block_on_rocm_and_nothing_of_another_numbering() -> None:
    """Replica i on node i // K holds the (i % K)-th block: ROCR_VISIBLE_DEVICES names it by the node's numbering,
    HIP/CUDA/GPU_DEVICE_ORDINAL count it from 0 (what the backend pinned for one instance is replaced whole)."""
    lay = Layout(per_node=4, nodes=2, gpus=2, min_ready=8, performance_min_ready=8, max_lost=0, head="beside")
    nodes = tuple(Node(f"10.0.0.{n}", tuple(range(8000, 8004))) for n in (1, 2))
    placement = Placement("10.0.0.1", nodes[0].ports, nodes=nodes, platform=AMD)
    specs = replicated(backend("vllm"), lay).processes({"version": "0.22.1", "gpus_per_node": 8,
                                                        "tensor_parallel_size": 2}, Path("/m"), placement)
    assert [(s.name, s.node_index, s.env["ROCR_VISIBLE_DEVICES"], s.env["HIP_VISIBLE_DEVICES"]) for s in specs] == [
        (f"replica-{i}", i // 4, f"{2 * (i % 4)},{2 * (i % 4) + 1}", "0,1") for i in range(8)]
    assert all(s.env["CUDA_VISIBLE_DEVICES"] == s.env["GPU_DEVICE_ORDINAL"] == "0,1" for s in specs)


# --- Kubernetes ---------------------------------------------------------------------------------------------------
def _objects(path: Path, tmp_path: Path) -> list[dict]:
    [review] = json.loads(_dry_run(path, tmp_path, "--json"))
    return review["kubernetes"]


def _dry_run(path: Path, tmp_path: Path, *more: str) -> str:
    done = runner.invoke(app, ["launch", str(path), "--dry-run", *more, "--workspace", str(tmp_path / "ws")])
    assert done.exit_code == 0, done.output
    return done.output


@pytest.mark.parametrize("path, gpus", [(GPT_K8S, "1"), (DS_K8S, "8")])
def test_the_mi355x_plans_pods_ask_amds_device_plugin_and_carry_no_pin(path: Path, gpus: str, tmp_path: Path) -> None:
    """Every replica's pod asks `amd.com/gpu` (its block's size: the device plugin picks the GPUs and gives the
    container /dev/kfd and their /dev/dri nodes itself), never `nvidia.com/gpu`; no ROCm or CUDA numbering variable is
    in a container or the Secret, no device file is mounted and nothing runs privileged."""
    objects = _objects(path, tmp_path)
    assert "nvidia.com/gpu" not in json.dumps(objects)
    pods = [k8s.V1Deployment.from_dict(o).spec.template.spec for o in objects if o["kind"] == "Deployment"]
    assert len(pods) == 512 // int(gpus)
    for pod in pods:
        [c] = pod.containers
        assert c.resources.limits == {"amd.com/gpu": gpus}
        assert not ({e.name for e in c.env} & ROCM_NUMBERING)
        assert c.security_context is None and not any(v.host_path and v.host_path.path.startswith("/dev")
                                                      for v in pod.volumes or ())
    [secret] = [o for o in objects if o["kind"] == "Secret"]
    assert not {key.split(".", 1)[1] for key in secret["stringData"]} & ROCM_NUMBERING
    text = _dry_run(path, tmp_path)
    assert "each process is a pod holding amd.com/gpu GPUs: ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, " \
           "CUDA_VISIBLE_DEVICES, GPU_DEVICE_ORDINAL dropped there" in text


def test_a_preflight_pod_asks_its_platforms_resource_and_a_graph_stays_nvidias(tmp_path: Path) -> None:
    settings = KubernetesSettings(image="vllm/vllm-openai-rocm:v0.22.1", namespace="mlperf")
    pod = manifests.describe_pod("podium-vllm", settings, 8, ["python3", "-c", "pass"], AMD)
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"amd.com/gpu": "8"}}
    assert manifests.describe_pod("p", settings, 0, ["true"], AMD)["spec"]["containers"][0].get("resources") is None
    launcher = KubernetesLauncher(tmp_path, settings, engine="dynamo", platform=AMD)
    options = {"version": "1.6.1", "gpus_per_node": 4, "discovery": "kubernetes", "decode": {"workers": 1}}
    specs = backend("dynamo").processes(options, Path("/m"), launcher.placement(backend("dynamo").demand(options)[1]))
    with pytest.raises(LaunchError, match="a DynamoGraphDeployment's GPUs are NVIDIA's, not AMD's"):
        launcher.objects(specs)


# --- Slurm --------------------------------------------------------------------------------------------------------
def test_the_slurm_supervisor_step_of_an_amd_node_carries_rocms_pins(tmp_path: Path) -> None:
    [review] = json.loads(_dry_run(GPT_SLURM, tmp_path, "--json"))
    srun = review["slurm"]["srun"]["replicas-node0"]
    assert json.loads(srun[-1]) == {"visible": "ROCR_VISIBLE_DEVICES", "pin": "ROCR_VISIBLE_DEVICES"}
    children = json.loads(srun[-2])
    assert [c["pin"] for c in children][5] == {"ROCR_VISIBLE_DEVICES": "5", "HIP_VISIBLE_DEVICES": "0",
                                               "CUDA_VISIBLE_DEVICES": "0", "GPU_DEVICE_ORDINAL": "0"}
    assert not any(set(c["env"]) & ROCM_NUMBERING for c in children)
    assert not any(a.startswith("--export=") and set(a.split(",")) & ROCM_NUMBERING for a in srun)
    samplers = review["slurm"]["samplers"]
    assert len(samplers) == 64 and all(argv[-7:] == ["amd-smi", "metric", "--usage", "--power", "--temperature",
                                                     "--mem-usage", "--json"] for argv in samplers.values())
    nvidia = slurm_cli.sampler_argv(SlurmSettings(), "7", "n0", 4, "s", NVIDIA)
    assert nvidia[-3] == "nvidia-smi" and "amd-smi" not in nvidia


def test_the_supervisor_pins_each_replica_to_its_block_of_what_slurm_gave_the_amd_step(tmp_path: Path) -> None:
    """A real supervisor on a step to which Slurm gave GPUs 4-7 of an AMD node, without gres flags (so it set
    CUDA_VISIBLE_DEVICES and GPU_DEVICE_ORDINAL to the same list as ROCR_VISIBLE_DEVICES): each replica sees its two
    in ROCR_VISIBLE_DEVICES, numbered 0,1 in every variable read after it."""
    lay = Layout(per_node=2, nodes=1, gpus=2, min_ready=2, performance_min_ready=2, max_lost=0, head="beside")
    specs = replicated(backend("vllm"), lay).processes({"version": "0.22.1", "gpus_per_node": 4,
                                                        "tensor_parallel_size": 2}, Path("/m"),
                                                       Placement("127.0.0.1", (8000, 8001, 8002, 8003), platform=AMD))
    [step] = slurm_replicas.node_steps(specs, sys.executable, AMD)
    child = ("import os, time; print('gpus', *(os.environ.get(k) for k in ('ROCR_VISIBLE_DEVICES', "
             "'HIP_VISIBLE_DEVICES', 'CUDA_VISIBLE_DEVICES', 'GPU_DEVICE_ORDINAL')), flush=True); time.sleep(600)")
    children = json.loads(step.argv[3])
    for c in children:
        c["argv"], c["cwd"] = [sys.executable, "-c", child], None
    slurm_sets = dict.fromkeys(("ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"), "4,5,6,7")
    log = tmp_path / "replicas-node0.log"
    with log.open("wb") as out:
        supervisor = subprocess.Popen([sys.executable, "-c", step.argv[2], json.dumps(children), step.argv[4]],
                                      env={**os.environ, **slurm_sets}, stdout=out, stderr=subprocess.STDOUT,
                                      start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while log.read_text().count("] gpus ") < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        os.killpg(supervisor.pid, signal.SIGTERM)
        supervisor.wait(timeout=60)
    text = log.read_text()
    assert "[replica-0] gpus 4,5 0,1 0,1 0,1" in text and "[replica-1] gpus 6,7 0,1 0,1 0,1" in text
    assert "podium-supervisor: replica-1 started, pid" in text and "GPUs 6,7" in text


# --- the steps (submission/plan/steps.py) -------------------------------------------------------------------------
def test_a_step_of_the_mi355x_plan_dry_runs_on_its_nodes(tmp_path: Path) -> None:
    text = _dry_run(GPT_K8S, tmp_path, "--nodes", "8")
    assert "mi355x-vllm-k8s-n8/gpt-oss-120b: engine vllm (vllm 0.22.1), launcher kubernetes" in text
    assert "64 replicas on 8 nodes (8 a node, 1 GPU(s) each, 64 in all)" in text
    assert "GPU-hours on 64 GPUs" in text and "Offline per replica (the plan's rates are the whole system's): " \
                                                 "target_qps 10.625" in text
    data = yaml.safe_load(GPT_K8S.read_text())
    with pytest.raises(PlanError, match=r"--nodes 65: a step is 1 to the replicas' nodes \(mi355x-vllm-k8s: 64\)"):
        at_nodes(data, 65)
    done = runner.invoke(app, ["launch", str(PLANS / "qwen3-vl-dynamo-gb200x4.yaml"), "--dry-run", "--nodes", "1",
                               "--workspace", str(tmp_path / "ws")])
    assert done.exit_code == 2 and "no system of the plan serves its benchmarks as engine.replicas" in done.output
