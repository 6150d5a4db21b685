"""The GPU platforms (submission/plan/platforms.py): chosen by the system's accelerator name, as published results
spell them, never by the engine; what each tells a launcher (resource, visibility variables, device files), and that
each fact another module acts on (the host facts tool, the exporter's series) is the one that module uses."""

from __future__ import annotations

import pytest

from submission.base.errors import PlanError
from submission.plan.platforms import AMD, DEFAULT, NVIDIA, PLATFORMS, platform_of
from submission.results import published
from submission.tree import host_facts
from tasks.serving.metrics import GPU_EXPORTERS


def test_every_published_accelerator_has_its_platform_or_a_clear_refusal() -> None:
    """Each accelerator name of the v6.1 results: NVIDIA's and AMD's by their vendor, a mixed system and Intel's
    refused with the fix, no accelerator at all NVIDIA's (the default)."""
    chosen: dict[str, str] = {}
    for name in sorted({r.accelerator for r in published.load("v6.1").results}):
        try:
            chosen[name] = platform_of({"accelerator_model_name": name}).name
        except PlanError as e:
            chosen[name] = "refused: " + e.message
    assert chosen["AMD Instinct MI355X 288GB HBM3e"] == chosen["AMD Instinct MI350P"] == "amd"
    assert chosen["NVIDIA GB200"] == chosen["Nvidia B300-SXM-270GB"] == chosen["NVIDIA RTX PRO 6000 Blackwell"] == \
        "nvidia"
    assert chosen["N/A"] == "nvidia"
    assert chosen["NVIDIA H200-SXM-141GB + AMD Instinct MI350X 288GB HBM3e"] == \
        ("refused: accelerator_model_name 'NVIDIA H200-SXM-141GB + AMD Instinct MI350X 288GB HBM3e' names GPUs of "
         "NVIDIA and AMD: a system runs its engines on one platform")
    assert chosen["Intel(R) Arc(TM) Pro B70"].startswith("refused: accelerator_model_name 'Intel(R) Arc(TM) Pro B70' "
                                                         "names no GPU platform Podium runs engines on")
    with pytest.raises(PlanError, match=r"fix: name the vendor as published results do, e\.g\. 'NVIDIA"):
        platform_of({"accelerator_model_name": "H100"})


def test_the_description_chooses_never_the_engine() -> None:
    assert platform_of({"accelerator_model_name": "MI355X", "framework": "TensorRT-LLM"}) is AMD   # AMD's model number
    assert platform_of({"accelerator_model_name": "NVIDIA H200", "framework": "vLLM 0.22.1 ROCm"}) is NVIDIA
    assert platform_of({}) is platform_of(None) is DEFAULT is NVIDIA   # a CPU system, or GPUs left to detection


def test_pinning_a_process_to_gpus_of_its_node() -> None:
    """NVIDIA: CUDA_VISIBLE_DEVICES. ROCm: the node's GPUs in ROCR_VISIBLE_DEVICES, and every variable ROCm reads
    after it (HIP's, CUDA's, ROCclr's) numbering them 0..n-1, so that Slurm's CUDA_VISIBLE_DEVICES and
    GPU_DEVICE_ORDINAL (set to the same list as ROCR's without gres flags) cannot select among them twice; vLLM's ROCm
    platform wants HIP_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES equal."""
    assert NVIDIA.pin((4, 5)) == {"CUDA_VISIBLE_DEVICES": "4,5"}
    pinned = AMD.pin((4, 5))
    assert pinned == {"ROCR_VISIBLE_DEVICES": "4,5", "HIP_VISIBLE_DEVICES": "0,1", "CUDA_VISIBLE_DEVICES": "0,1",
                      "GPU_DEVICE_ORDINAL": "0,1"}
    assert pinned["HIP_VISIBLE_DEVICES"] == pinned["CUDA_VISIBLE_DEVICES"]
    assert AMD.pin(["7"]) == {"ROCR_VISIBLE_DEVICES": "7", "HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "0",
                              "GPU_DEVICE_ORDINAL": "0"}
    assert AMD.pin(()) == NVIDIA.pin(()) == {}


def test_what_a_launcher_asks_of_each_platform() -> None:
    assert (NVIDIA.resource, AMD.resource) == ("nvidia.com/gpu", "amd.com/gpu")
    assert (NVIDIA.slurm_env, AMD.slurm_env) == ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
    assert NVIDIA.visibility_env() == ("CUDA_VISIBLE_DEVICES",)
    assert AMD.visibility_env() == ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES",
                                    "GPU_DEVICE_ORDINAL")
    assert set(AMD.pin((0,))) <= set(AMD.visibility_env())   # a pod drops every variable a pin sets
    assert (AMD.devices, AMD.groups) == (("/dev/kfd", "/dev/dri"), ("video", "render"))
    assert (NVIDIA.devices, NVIDIA.groups) == ((), ())
    assert NVIDIA.exporter.template() == "http://{node}:9400/metrics"
    assert AMD.exporter.template() == "http://{node}:5000/metrics"


def test_the_facts_other_modules_act_on_are_theirs() -> None:
    """The host facts tool of each platform is one host_facts asks (in the order it asks), and each platform's
    exporter has its series in tasks/serving/metrics.py."""
    assert tuple(p.facts_tool for p in PLATFORMS.values()) == host_facts.ACCELERATOR_TOOLS
    assert set(GPU_EXPORTERS) == set(PLATFORMS)
    assert GPU_EXPORTERS["amd"].gpu_label == "gpu_id" and GPU_EXPORTERS["nvidia"].gpu_label == "gpu"
