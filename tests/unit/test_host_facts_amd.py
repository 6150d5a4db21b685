"""An AMD node's accelerator facts from amd-smi (submission/tree/host_facts.py), on recorded `amd-smi static --json`
and `amd-smi version --json` output (tests/amd_gpus.py: the shapes of the amd-smi CLI's source, cited there): parsed
in both shapes amd-smi prints, read through a fake `amd-smi` on PATH by the very script an engine's node runs, and the
MI355X system description built from them passing Podium's checker and the round's official one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from submission.checks import official
from submission.checks.checker import check_tree
from submission.tree import host_facts
from submission.tree.systems import describe, describe_sourced, forecast, gaps, validate
from tests.amd_gpus import GPUS, VERSION_JSON, fake_amd_smi, static_gpu, static_json

FOLDERS = {"division": "closed", "submitter": "Podium"}
MI355X = {"accelerators_per_node": "8", "accelerator_model_name": "AMD Instinct MI355X 288GB HBM3e",
          "accelerator_memory_capacity": "288 GB", "accelerator_memory_configuration": "HBM3e",
          "accelerator_host_interconnect": "PCIe Gen5 x16", "other_software_stack": "ROCm 7.2.0, amdgpu driver 6.16.6"}
# What the plan gives of an MI355X node (no tool reads these): as AMD's own MI3xx descriptions write them
PLAN = {"host_memory_configuration": "24x 128GB DDR5-6400", "host_networking": "Ethernet 400 Gb/s RoCE",
        "host_networking_topology": "rail-optimized leaf-spine", "accelerator_interconnect": "XGMI",
        "accelerator_interconnect_topology": "fully connected", "host_processor_interconnect": "xGMI",
        "cooling": "liquid", "host_network_card_count": "8"}


def test_both_shapes_of_amd_smi_give_the_description_fields() -> None:
    """ROCm 7's {"gpu_data": [...]} and the earlier bare list; amd-smi version's list."""
    version = json.loads(VERSION_JSON)
    assert host_facts.amd_facts(json.loads(static_json()), version) == MI355X
    assert host_facts.amd_facts(json.loads(static_json(wrapped=False)), version) == MI355X


def test_what_amd_smi_leaves_out_stays_out() -> None:
    """"N/A" fields, a board name for a missing market name, no version output, no GPU at all."""
    gpu = static_gpu(0)
    gpu["asic"]["market_name"] = "N/A"
    gpu["bus"]["pcie_interface_version"] = "N/A"
    gpu["driver"] = "N/A"
    facts = host_facts.amd_facts({"gpu_data": [gpu]}, None)
    assert facts == {"accelerators_per_node": "1", "accelerator_model_name": "AMD Instinct MI355X OAM 288GB HBM3e",
                     "accelerator_memory_capacity": "288 GB", "accelerator_memory_configuration": "HBM3e"}
    gpu["vram"] = {"type": "N/A", "size": "N/A"}
    assert host_facts.amd_facts([gpu])["accelerator_memory_capacity"] == "unknown"
    assert host_facts.amd_facts({"gpu_data": []}, None) == host_facts.amd_facts(None) == {}


@pytest.fixture
def amd_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This host as an MI355X node: the recorded amd-smi first on PATH, and no nvidia-smi (a folder of its own)."""
    tools = tmp_path / "bin"
    fake_amd_smi(tools)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}/usr/bin{os.pathsep}/bin")
    assert not any(Path(d, "nvidia-smi").exists() for d in os.environ["PATH"].split(os.pathsep))
    return tools


def test_the_node_script_reads_amd_smi(amd_node: Path) -> None:
    """What a pod or a Slurm step runs on the engine's node (`python3 -c host_facts.script()`), with amd-smi there."""
    out = subprocess.run([sys.executable, "-c", host_facts.script(), "/"], capture_output=True, text=True, check=True,
                         timeout=60, env={**os.environ}).stdout
    facts = host_facts.parse_facts(out)
    assert {k: facts[k] for k in MI355X if k != "other_software_stack"} == \
        {k: v for k, v in MI355X.items() if k != "other_software_stack"}
    assert facts["other_software_stack"].startswith("Python 3.")
    assert facts["other_software_stack"].endswith(", ROCm 7.2.0, amdgpu driver 6.16.6")


def test_an_amd_smi_that_fails_gives_unknown_never_an_error(amd_node: Path) -> None:
    (amd_node / "static.json").write_text("amd-smi: ERROR: driver not initialized\n")
    assert host_facts.accelerators()["accelerators_per_node"] == "unknown"
    (amd_node / "amd-smi").write_text("#!/bin/sh\nexit 1\n")
    assert host_facts.accelerators() == dict.fromkeys(
        ("accelerators_per_node", "accelerator_model_name", "accelerator_memory_capacity"), "unknown")


def _mi355x_description(host: dict[str, str]) -> dict[str, str]:
    return describe(division="closed", submitter="Podium", system_name="8xMI355X (Podium)", status="available",
                    system_type="datacenter", number_of_nodes=1, framework="vLLM 0.22.1, ROCm 7.2.2", overrides=PLAN,
                    host=host)


def test_the_mi355x_description_passes_podiums_checks(amd_node: Path) -> None:
    """detect_host on the node, the plan's fields beside it: nothing missing, nothing a guess for a closed
    submission; and the dry run's forecast of an AMD system counts on amd-smi for what it detects."""
    desc, sources = describe_sourced(division="closed", submitter="Podium", system_name="8xMI355X (Podium)",
                                     status="available", system_type="datacenter", number_of_nodes=1,
                                     framework="vLLM 0.22.1, ROCm 7.2.2", overrides=PLAN,
                                     host=host_facts.detect_host())
    assert validate(desc, **FOLDERS) == [] and gaps(desc, sources) == []
    for field, value in MI355X.items():
        assert desc[field] == value or (field == "other_software_stack" and desc[field].endswith(", " + value))
    assert sources["accelerator_memory_configuration"] == sources["accelerator_host_interconnect"] == "detected"
    amd = dict(forecast({"accelerator_model_name": "AMD Instinct MI355X 288GB HBM3e"}, 64))
    nvidia = dict(forecast({"accelerator_model_name": "NVIDIA H200"}, 64))
    assert amd["accelerator_memory_configuration"] == amd["accelerator_host_interconnect"] == "detected"
    assert nvidia["accelerator_memory_configuration"] == nvidia["accelerator_host_interconnect"] == "nowhere"


def test_the_mi355x_description_passes_the_official_checker(amd_node: Path, tmp_path: Path,
                                                            inference_src: Path) -> None:
    """A closed tree (qwen3-vl-235b-a22b's reports, tests/checker_corpus.py) whose system is the MI355X node: the
    round's own checker says "submission looks OK", and so does Podium's."""
    from tests.checker_corpus import SYSTEM
    from tests.unit.test_official import qwen_tree

    root = qwen_tree(tmp_path / "tree")
    system_json = root / "closed" / "Podium" / "systems" / f"{SYSTEM}.json"
    desc = _mi355x_description(host_facts.detect_host())
    system_json.write_text(json.dumps(desc, indent=2) + "\n")
    assert json.loads(system_json.read_text())["accelerator_model_name"] == "AMD Instinct MI355X 288GB HBM3e"
    theirs = official.run_official(root, inference_src, "v6.1", tmp_path / "summary.csv", submitter="Podium")
    assert theirs.ok and theirs.verdict() == "submission looks OK", theirs.output_tail
    assert len(theirs.rows) == 2
    assert {(r["accelerator_model_name"], r["accelerators_per_node"]) for r in theirs.rows} == \
        {("AMD Instinct MI355X 288GB HBM3e", str(GPUS))}
    ours = check_tree(root, "v6.1")
    assert ours.ok, ours.text()
