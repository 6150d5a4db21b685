"""The GPU platforms an engine runs on, as data: NVIDIA's (CUDA) and AMD's (ROCm), each with what a launcher,
preflight, the host facts and telemetry need to know of it, each fact citing its source; and the platform of a
system, chosen by its description (`accelerator_model_name`), never by the engine.

    platform_of(system.description)          -> PLATFORMS["amd"] for "AMD Instinct MI355X 288GB HBM3e"
    PLATFORMS["amd"].pin((4, 5))             -> the variables that give a process GPUs 4 and 5 of its node
    PLATFORMS["amd"].visibility_env()        -> every variable that numbers GPUs (a pod's device plugin does that)
    PLATFORMS["amd"].exporter.template()     -> "http://{node}:5000/metrics" (engine.telemetry.exporter_urls)

Sources, read at these commits:
- Kubernetes resources: NVIDIA's device plugin `nvidia.com/gpu` (NVIDIA/k8s-device-plugin README); AMD's `amd.com/gpu`
  (ROCm/k8s-device-plugin v1.31.0.9, bf3c516e6f339aea954dd225ce6b094bc74d0ef0: internal/pkg/plugin/plugin.go
  `GetResourceNamespace` "amd.com", cmd/k8s-device-plugin/main.go resource "gpu"; its `Allocate` gives each container
  /dev/kfd and the /dev/dri/card<N> and renderD<N> of its GPUs, so a pod needs no device mounts of its own).
- What Slurm sets for a step's GPUs: gres.conf(5) `Flags=nvidia_gpu_env` (CUDA_VISIBLE_DEVICES) and `amd_gpu_env`
  (ROCR_VISIBLE_DEVICES), `AutoDetect=rsmi` implying amd_gpu_env, and with no flag all of CUDA_VISIBLE_DEVICES,
  ROCR_VISIBLE_DEVICES, ZE_AFFINITY_MASK and GPU_DEVICE_ORDINAL at once (SchedMD/slurm slurm-25-11-7-1,
  f56e676bbd3e7cccbdd7c505c030c62bb983ebee: doc/man/man5/gres.conf.5, src/plugins/gres/common/gres_common.c).
- ROCm's GPU isolation (rocm.docs.amd.com, reference/env-variables, "GPU isolation variables"): ROCR_VISIBLE_DEVICES
  selects devices for the whole ROCm runtime (recommended on Linux); HIP_VISIBLE_DEVICES or CUDA_VISIBLE_DEVICES, and
  GPU_DEVICE_ORDINAL (ROCclr), then select among the devices ROCR left visible, numbered from 0 (the gres.conf page's
  note: ROCR_VISIBLE_DEVICES is applied first, then CUDA_VISIBLE_DEVICES). vLLM's ROCm platform refuses a
  HIP_VISIBLE_DEVICES that differs from CUDA_VISIBLE_DEVICES (vllm/platforms/rocm.py `_sync_hip_cuda_env_vars`).
- Containers outside Kubernetes: ROCm's "Running ROCm Docker containers" (rocm.docs.amd.com, install-on-linux) runs
  them with `--device /dev/kfd --device /dev/dri`; a process that is not root reaches those devices through the
  `render` and `video` groups that own them (ROCm's Linux install guide adds users to both).
- Host facts tools: nvidia-smi; AMD's amd-smi (submission/tree/host_facts.py cites its JSON).
- Telemetry exporters: NVIDIA/dcgm-exporter on port 9400; AMD's device metrics exporter on port 5000
  (ROCm/device-metrics-exporter v1.4.2, 779265ed4f4423af9f0c52de11c5e92d51d8cd00: pkg/exporter/globals/constants.go
  `AMDListenPort = 5000`, served at /metrics); their series in tasks/serving/metrics.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from submission.base.errors import PlanError

MODEL_FIELD = "accelerator_model_name"


@dataclass(frozen=True)
class Exporter:
    """A node's GPU metrics exporter: its name, default port and page."""

    name: str
    port: int
    path: str = "/metrics"

    def template(self) -> str:
        """Its page on every engine node, as engine.telemetry.exporter_urls writes it."""
        return f"http://{{node}}:{self.port}{self.path}"


@dataclass(frozen=True)
class Platform:
    """One GPU platform's facts (the module's docstring cites each)."""

    name: str                        # "nvidia" or "amd"
    vendor: str                      # as accelerator names spell it
    runtime: str                     # the software stack its engines are built for
    markers: tuple[str, ...]         # patterns in an accelerator_model_name that mean this platform
    resource: str                    # the Kubernetes extended resource a pod requests its GPUs by
    slurm_env: str                   # what Slurm sets to a step's GPUs (numbered as the step sees them)
    pin_env: str                     # gives a process GPUs of its node, by the node's numbering
    relative_env: tuple[str, ...]    # number the pinned GPUs from 0 again, after pin_env
    devices: tuple[str, ...]         # device files a container needs outside Kubernetes (docker --device)
    groups: tuple[str, ...]          # the groups that own them (docker --group-add)
    facts_tool: str                  # what tells a node's GPUs (submission/tree/host_facts.py)
    exporter: Exporter               # each node's GPU metrics page (tasks/serving/metrics.py reads it)

    def pin(self, gpus: Iterable[int | str]) -> dict[str, str]:
        """The environment that gives a process `gpus` of its node (none: {}). On ROCm the GPUs go in
        ROCR_VISIBLE_DEVICES and every variable read after it numbers them 0..n-1, so that no value inherited from
        Slurm (which sets CUDA_VISIBLE_DEVICES and GPU_DEVICE_ORDINAL to the same list without flags) selects
        among them a second time."""
        ids = [str(g) for g in gpus]
        if not ids:
            return {}
        relative = ",".join(str(i) for i in range(len(ids)))
        return {self.pin_env: ",".join(ids), **dict.fromkeys(self.relative_env, relative)}

    def visibility_env(self) -> tuple[str, ...]:
        """Every variable that chooses or numbers this platform's GPUs: what a pod drops, since its device plugin
        gives it its GPUs numbered from 0."""
        return tuple(dict.fromkeys((self.pin_env, *self.relative_env, self.slurm_env)))


NVIDIA = Platform(
    name="nvidia", vendor="NVIDIA", runtime="CUDA", markers=(r"\bnvidia\b",), resource="nvidia.com/gpu",
    slurm_env="CUDA_VISIBLE_DEVICES", pin_env="CUDA_VISIBLE_DEVICES", relative_env=(), devices=(), groups=(),
    facts_tool="nvidia-smi", exporter=Exporter("dcgm-exporter", 9400))
AMD = Platform(
    name="amd", vendor="AMD", runtime="ROCm",
    markers=(r"\bamd\b", r"\binstinct\b", r"\bradeon\b", r"\bmi\d{3}[a-z]*\b"),
    resource="amd.com/gpu", slurm_env="ROCR_VISIBLE_DEVICES", pin_env="ROCR_VISIBLE_DEVICES",
    relative_env=("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"),
    devices=("/dev/kfd", "/dev/dri"), groups=("video", "render"), facts_tool="amd-smi",
    exporter=Exporter("AMD device metrics exporter", 5000))
PLATFORMS: dict[str, Platform] = {p.name: p for p in (NVIDIA, AMD)}
DEFAULT = NVIDIA   # a description that names no accelerator (a CPU system, or one whose GPUs are left to detection)
NO_ACCELERATOR = ("", "n/a", "na", "none", "0", "unknown")


def matches(model_name: str) -> list[Platform]:
    """The platforms an accelerator name means (two for a mixed system, none for one Podium does not know)."""
    return [p for p in PLATFORMS.values() if any(re.search(m, model_name, re.IGNORECASE) for m in p.markers)]


def platform_of(description: Mapping[str, str] | None) -> Platform:
    """The platform of a system by its description's accelerator_model_name (a plan's `systems[].description`, or
    a whole system description): NVIDIA's where it names no accelerator. PlanError for a name that means two
    platforms or none that Podium knows."""
    name = str((description or {}).get(MODEL_FIELD, "")).strip()
    if name.lower() in NO_ACCELERATOR:
        return DEFAULT
    found = matches(name)
    if len(found) > 1:
        raise PlanError(f"{MODEL_FIELD} {name!r} names GPUs of {' and '.join(p.vendor for p in found)}: a system runs "
                        "its engines on one platform",
                        fix="describe each platform's GPUs as a system of its own, each with its benchmarks")
    if not found:
        raise PlanError(f"{MODEL_FIELD} {name!r} names no GPU platform Podium runs engines on (NVIDIA, AMD)",
                        fix="name the vendor as published results do, e.g. 'NVIDIA H200-SXM-141GB' or "
                            "'AMD Instinct MI355X 288GB HBM3e'")
    return found[0]
