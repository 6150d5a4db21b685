"""The GPU acceptance script's ROCm checks (deployments/gpu/rocm_checks.py) without an AMD GPU: amd-smi's recorded
output of an MI355X node (tests/amd_gpus.py) read by the same host facts a run uses, the device files in a folder
laid out as /dev is, the device plugin's resource from a stand-in kubectl, and the engine's ROCm torch from a
stand-in module where this host's torch is a CPU build; each failure names what is wrong, and the fix."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from submission.plan.platforms import AMD
from tests.amd_gpus import VERSION_JSON, fake_amd_smi

GPU = Path(__file__).parents[2] / "deployments" / "gpu"
sys.path.insert(0, str(GPU))
try:
    import rocm_checks
finally:
    sys.path.remove(str(GPU))


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder first on PATH holding the node's amd-smi (recorded), and nothing of NVIDIA's."""
    folder = tmp_path / "bin"
    fake_amd_smi(folder)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}/usr/bin{os.pathsep}/bin")
    return folder


def test_gpu_reads_the_node_through_amd_smi(tools: Path) -> None:
    assert rocm_checks.check_gpu() == ("8 x AMD Instinct MI355X 288GB HBM3e (288 GB), ROCm 7.2.0, amdgpu driver "
                                       "6.16.6")


def test_gpu_refuses_an_old_rocm_no_gpu_and_no_amd_smi(tools: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tools / "version.json").write_text(VERSION_JSON.replace('"7.2.0"', '"6.4.1"'))
    with pytest.raises(rocm_checks.Failed, match=r"ROCm 6\.4\.1 is older than 7\.0, the first with the MI350 series"):
        rocm_checks.check_gpu()
    (tools / "static.json").write_text('{"gpu_data": []}')
    with pytest.raises(rocm_checks.Failed, match="amd-smi lists no GPU") as caught:
        rocm_checks.check_gpu()
    assert "modprobe amdgpu" in caught.value.fix
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    with pytest.raises(rocm_checks.Failed, match="no amd-smi on PATH"):
        rocm_checks.check_gpu()


def _dev(root: Path, renders: int = 8) -> Path:
    (root / "dri").mkdir(parents=True)
    (root / "kfd").write_text("")
    for i in range(renders):
        (root / "dri" / f"renderD{128 + i}").write_text("")
        (root / "dri" / f"card{i}").write_text("")
    return root


def test_devices_finds_kfd_and_each_render_node(tmp_path: Path) -> None:
    assert rocm_checks.check_devices(_dev(tmp_path / "dev")).startswith(
        f"{tmp_path / 'dev' / 'kfd'} and 8 render node(s) usable (groups: ")


def test_devices_missing_names_the_docker_options_and_groups(tmp_path: Path) -> None:
    dev = _dev(tmp_path / "dev")
    (dev / "kfd").unlink()
    with pytest.raises(rocm_checks.Failed, match=r"/dev/kfd is missing$") as caught:
        rocm_checks.check_devices(dev)
    assert "docker run --device /dev/kfd --device /dev/dri --group-add video --group-add render" in caught.value.fix
    assert f"request {AMD.resource}" in caught.value.fix
    empty = _dev(tmp_path / "empty", renders=0)
    with pytest.raises(rocm_checks.Failed, match=r"dri/renderD\* is missing"):
        rocm_checks.check_devices(empty)


def _kubectl(folder: Path, allocatable: str | None, rc: int = 0) -> None:
    status = {"capacity": {"cpu": "256"}, "allocatable": {"cpu": "254"}}
    if allocatable is not None:
        status["capacity"][AMD.resource] = status["allocatable"][AMD.resource] = allocatable
    node = json.dumps({"kind": "Node", "metadata": {"name": "mi355x-0"}, "status": status})
    script = folder / "kubectl"
    script.write_text("#!/bin/sh\n"
                      f'[ "$*" = "get node mi355x-0 -o json" ] || {{ echo "Error from server (NotFound): nodes '
                      f'\\"$3\\" not found" >&2; exit 1; }}\n'
                      f"[ {rc} = 0 ] || {{ echo 'Unable to connect to the server' >&2; exit {rc}; }}\n"
                      f"echo '{node}'\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_plugin_reads_the_nodes_allocatable_amd_gpus(tools: Path) -> None:
    _kubectl(tools, "8")
    assert rocm_checks.check_plugin("mi355x-0") == "node mi355x-0: 8 amd.com/gpu allocatable"
    _kubectl(tools, None)
    with pytest.raises(rocm_checks.Failed, match=r"node mi355x-0 offers no amd\.com/gpu") as caught:
        rocm_checks.check_plugin("mi355x-0")
    assert "ROCm/k8s-device-plugin" in caught.value.fix
    with pytest.raises(rocm_checks.Failed, match=r"kubectl get node gpu-9 exited 1: .*not found"):
        rocm_checks.check_plugin("gpu-9")


def _stand_in_engine(folder: Path, hip: str, gpus: int) -> None:
    """A ROCm image's torch and vllm as modules: what this host (a CPU build of torch) cannot be."""
    (folder / "torch").mkdir(parents=True)
    (folder / "torch" / "__init__.py").write_text(
        "import types\n__version__ = '2.9.0+rocm7.2'\n"
        f"version = types.SimpleNamespace(hip={hip!r})\n"
        f"cuda = types.SimpleNamespace(device_count=lambda: {gpus})\n")
    (folder / "vllm.py").write_text("__version__ = '0.22.1+rocm722'\n")


def test_engine_wants_a_rocm_torch_that_sees_gpus_and_the_engine(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(rocm_checks.Failed, match=r"is not a ROCm build \(torch\.version\.hip is empty\)"):
        rocm_checks.check_engine("vllm")   # this host's torch
    _stand_in_engine(tmp_path / "image", hip="7.2.53211", gpus=8)
    monkeypatch.syspath_prepend(str(tmp_path / "image"))
    for name in ("torch", "vllm"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert rocm_checks.check_engine("vllm") == ("vllm 0.22.1+rocm722 on torch 2.9.0+rocm7.2 (HIP 7.2.53211), "
                                                "8 GPU(s)")
    with pytest.raises(rocm_checks.Failed, match=r"sglang does not import"):
        rocm_checks.check_engine("sglang")
    with pytest.raises(rocm_checks.Failed, match="engine 'trtllm' is not one the ROCm path checks"):
        rocm_checks.check_engine("trtllm")


def test_the_command_line_prints_the_fix_then_the_reason(tools: Path) -> None:
    """The script's step reads the last line (the table) and keeps the rest in the step's log."""
    (tools / "version.json").write_text(VERSION_JSON.replace('"7.2.0"', '"6.4.1"'))
    done = subprocess.run([sys.executable, str(GPU / "rocm_checks.py"), "gpu"], capture_output=True, text=True,
                          check=False, timeout=60, env={**os.environ, "PYTHONPATH": ""})
    assert done.returncode == 1
    *_, fix, reason = done.stdout.strip().splitlines()
    assert (fix, reason) == ("fix: upgrade ROCm to 7.0 or newer",
                             "ROCm 6.4.1 is older than 7.0, the first with the MI350 series")
    what = subprocess.run([sys.executable, str(GPU / "rocm_checks.py"), "--what", "plugin"], capture_output=True,
                          text=True, check=True, timeout=60)
    assert what.stdout.strip() == "the Kubernetes node offers amd.com/gpu (AMD's device plugin) to pods"
