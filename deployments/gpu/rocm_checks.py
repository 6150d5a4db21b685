"""The GPU acceptance script's checks of an AMD (ROCm) node before a round, one per step of its ROCm path. Each prints
what it found and, last, one line for the table; it exits 1 naming what is wrong and the fix.

    python3 deployments/gpu/rocm_checks.py gpu                  # amd-smi lists the GPUs; ROCm new enough
    python3 deployments/gpu/rocm_checks.py devices              # /dev/kfd and the GPUs' /dev/dri render nodes usable
    python3 deployments/gpu/rocm_checks.py plugin NODE          # the node offers AMD's device plugin resource
    python3 deployments/gpu/rocm_checks.py engine vllm|sglang   # the ROCm build of torch and the engine import
    python3 deployments/gpu/rocm_checks.py --what CHECK         # what CHECK checks, in one line

The platform's facts (device files, groups, the Kubernetes resource, the facts tool) come from
submission/plan/platforms.py and the GPUs from submission/tree/host_facts.py, the same code a run uses; both are
standard library only, as this file is, so it runs on the node's own Python before anything is installed.
"""

from __future__ import annotations

import argparse
import grp
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:   # run as a script from anywhere: Podium's packages are at the repository root
    sys.path.insert(0, str(ROOT))

from submission.plan.platforms import AMD  # noqa: E402
from submission.tree.host_facts import UNKNOWN, accelerators  # noqa: E402

# The MI350 series (CDNA 4, gfx950: MI350X, MI355X) came with ROCm 7.0, the first release that supports it
MIN_ROCM = "7.0"
KUBECTL_TIMEOUT_S = 20
ENGINES = ("vllm", "sglang")
WHAT = {
    "gpu": f"{AMD.facts_tool} lists the node's GPUs (model, memory, count) and ROCm is {MIN_ROCM} or newer",
    "devices": f"{' and '.join(AMD.devices)} (each GPU's render node) exist and this user can open them "
               f"(root, or the {' and '.join(AMD.groups)} groups)",
    "plugin": f"the Kubernetes node offers {AMD.resource} (AMD's device plugin) to pods",
    "engine": "the ROCm image's Python imports a ROCm (HIP) build of torch that sees the GPUs, and the engine",
}


class Failed(Exception):
    """A check's finding: what is wrong (`reason`, the table's line) and what fixes it."""

    def __init__(self, reason: str, fix: str = "") -> None:
        super().__init__(reason)
        self.reason, self.fix = reason, fix


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def check_gpu() -> str:
    if not shutil.which(AMD.facts_tool):
        raise Failed(f"no {AMD.facts_tool} on PATH: this node has no ROCm",
                     fix=f"install ROCm {MIN_ROCM} or newer, or run in a ROCm image")
    facts = accelerators()
    print(json.dumps(facts, indent=2))
    count = facts.get("accelerators_per_node", "0")
    if not count.isdigit() or int(count) == 0 or facts.get("accelerator_model_name") in (UNKNOWN, None):
        raise Failed(f"{AMD.facts_tool} lists no GPU", fix="load the amdgpu driver (`sudo modprobe amdgpu`)")
    rocm = re.search(r"ROCm (\d+(?:\.\d+)*)", facts.get("other_software_stack", ""))
    if rocm is None:
        raise Failed(f"{AMD.facts_tool} names no ROCm version (`amd-smi version`)",
                     fix=f"install ROCm {MIN_ROCM} or newer")
    if _version(rocm.group(1)) < _version(MIN_ROCM):
        raise Failed(f"ROCm {rocm.group(1)} is older than {MIN_ROCM}, the first with the MI350 series",
                     fix=f"upgrade ROCm to {MIN_ROCM} or newer")
    return (f"{count} x {facts['accelerator_model_name']} ({facts.get('accelerator_memory_capacity', UNKNOWN)}), "
            f"{facts['other_software_stack']}")


def _usable(path: Path) -> bool:
    return os.access(path, os.R_OK | os.W_OK)


def check_devices(dev: Path = Path("/dev")) -> str:
    kfd, dri = (dev / Path(d).relative_to("/dev") for d in AMD.devices)
    renders = sorted(dri.glob("renderD*")) if dri.is_dir() else []
    groups = ", ".join(g for g in AMD.groups if _member(g)) or "none of " + " and ".join(AMD.groups)
    print(f"{kfd}: {'present' if kfd.exists() else 'missing'}; render nodes: {[r.name for r in renders]}; "
          f"uid {os.getuid()}, groups {groups}")
    fix = (f"on the host: the amdgpu driver loaded and this user in the {' and '.join(AMD.groups)} groups; in a "
           f"container: `docker run {' '.join('--device ' + d for d in AMD.devices)} "
           f"{' '.join('--group-add ' + g for g in AMD.groups)}`; on Kubernetes: request {AMD.resource}")
    if not kfd.exists() or not renders:
        raise Failed(f"{kfd if not kfd.exists() else dri / 'renderD*'} is missing", fix=fix)
    closed = [str(p) for p in (kfd, *renders) if not _usable(p)]
    if closed:
        raise Failed(f"this user cannot open {', '.join(closed)}", fix=fix)
    return f"{kfd} and {len(renders)} render node(s) usable (groups: {groups})"


def _member(group: str) -> bool:
    try:
        return grp.getgrnam(group).gr_gid in os.getgroups()
    except KeyError:
        return False


def check_plugin(node: str) -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise Failed("no kubectl on PATH", fix="install kubectl, or leave PODIUM_GPU_K8S_NODE unset off Kubernetes")
    try:
        done = subprocess.run([kubectl, "get", "node", node, "-o", "json"], capture_output=True,  # noqa: S603
                              text=True, timeout=KUBECTL_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise Failed(f"kubectl get node {node} did not answer in {KUBECTL_TIMEOUT_S} s",
                     fix="check the kubeconfig's API server from this node") from None
    if done.returncode != 0:
        raise Failed(f"kubectl get node {node} exited {done.returncode}: {done.stderr.strip()[-200:]}",
                     fix="name this node as `kubectl get nodes` lists it, with a kubeconfig that may read nodes")
    status = json.loads(done.stdout).get("status", {})
    offered = {kind: status.get(kind, {}).get(AMD.resource, "0") for kind in ("capacity", "allocatable")}
    print(f"node {node}: {AMD.resource} capacity {offered['capacity']}, allocatable {offered['allocatable']}")
    if not str(offered["allocatable"]).isdigit() or int(offered["allocatable"]) == 0:
        raise Failed(f"node {node} offers no {AMD.resource}",
                     fix="deploy AMD's device plugin (ROCm/k8s-device-plugin, or the AMD GPU operator) on it")
    return f"node {node}: {offered['allocatable']} {AMD.resource} allocatable"


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise Failed(f"engine {engine!r} is not one the ROCm path checks",
                     fix=f"set PODIUM_GPU_ENGINE to one of {', '.join(ENGINES)}")
    try:
        torch = importlib.import_module("torch")
    except ImportError as e:
        raise Failed(f"torch does not import here ({e})",
                     fix="run this in the engine's ROCm image, or set PODIUM_GPU_ENGINE_PYTHON to its Python") from None
    hip = getattr(torch.version, "hip", None)
    print(f"torch {torch.__version__}, HIP {hip}")
    if not hip:
        raise Failed(f"torch {torch.__version__} is not a ROCm build (torch.version.hip is empty)",
                     fix="use the engine's ROCm image or ROCm wheels (PODIUM_GPU_ENGINE_PYTHON)")
    gpus = torch.cuda.device_count()
    if gpus == 0:
        raise Failed(f"torch {torch.__version__} (HIP {hip}) sees no GPU",
                     fix=f"see the devices step, and unset or correct {', '.join(AMD.visibility_env())}")
    try:
        module = importlib.import_module(engine)
    except ImportError as e:
        raise Failed(f"{engine} does not import ({e})", fix=f"use a ROCm image that holds the plan's {engine}") \
            from None
    return f"{engine} {getattr(module, '__version__', '?')} on torch {torch.__version__} (HIP {hip}), {gpus} GPU(s)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--what", action="store_true", help="print what the check checks, and do nothing")
    parser.add_argument("check", choices=sorted(WHAT))
    parser.add_argument("arg", nargs="?", default="", help="plugin: the node's name; engine: vllm or sglang")
    args = parser.parse_args(argv)
    if args.what:
        print(WHAT[args.check])
        return 0
    run = {"gpu": check_gpu, "devices": check_devices, "plugin": lambda: check_plugin(args.arg),
           "engine": lambda: check_engine(args.arg or "vllm")}[args.check]
    try:
        print(run())
    except Failed as e:
        if e.fix:
            print(f"fix: {e.fix}")
        print(e.reason)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
