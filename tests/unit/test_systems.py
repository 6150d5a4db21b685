"""The system description: real host detection, precedence of values, and every validation problem at once."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from submission.base.errors import PlanError
from submission.rules import load_rules
from submission.tree import host_facts
from submission.tree.systems import describe, detect_host, require_complete, validate

FOLDERS = {"division": "closed", "submitter": "Podium"}
GPU_CSV = "NVIDIA H200, 143771 MiB, 570.124.06"


def _describe(**changes: object) -> dict[str, str]:
    settings: dict = {"division": "closed", "submitter": "Podium", "system_name": "1xH200", "status": "available",
                      "system_type": "datacenter", "number_of_nodes": 1, "framework": "vLLM 0.31", "overrides": {}}
    settings.update(changes)
    return describe(**settings)


@pytest.fixture(scope="module")
def host() -> dict[str, str]:
    return detect_host()


@pytest.fixture
def fake_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An `nvidia-smi` first on PATH that answers only the query Podium sends (exit 3 on any other argv)."""
    script = tmp_path / "nvidia-smi"
    script.write_text("#!/bin/sh\n"
                      '[ "$1" = "--query-gpu=name,memory.total,driver_version" ] && [ "$2" = "--format=csv,noheader" ]'
                      " || exit 3\n"
                      f"echo '{GPU_CSV}'\necho '{GPU_CSV}'\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return script


# --- describe on this host -----------------------------------------------------------------------------------------

def test_describe_on_this_host_passes_validate_with_exactly_the_required_fields(host: dict[str, str]) -> None:
    desc = _describe(host=host)
    assert validate(desc, **FOLDERS) == []
    require_complete(desc, **FOLDERS)
    assert list(desc) == list(load_rules("v6.1").system_fields.required)
    assert len(desc) == 35
    assert all(isinstance(value, str) for value in desc.values())
    assert desc["number_of_nodes"] == "1"


def test_detection_reads_this_host(host: dict[str, str]) -> None:
    assert host["host_processor_model_name"]
    assert int(host["host_processors_per_node"]) >= 1
    assert int(host["host_processor_core_count"]) >= 1
    assert host["host_memory_capacity"].endswith(("GB", "TB"))
    assert host["host_storage_capacity"].endswith(("GB", "TB"))
    assert host["operating_system"]
    assert host["other_software_stack"].startswith("Python 3.")


def test_describe_detects_the_host_when_none_is_given() -> None:
    assert validate(_describe(), **FOLDERS) == []


def test_overrides_win_over_the_host_which_wins_over_defaults() -> None:
    desc = _describe(host={"cooling": "liquid", "host_memory_capacity": "2 TB"},
                     overrides={"cooling": "immersion", "hw_notes": "BIOS: performance profile"})
    assert desc["cooling"] == "immersion"
    assert desc["host_memory_capacity"] == "2 TB"
    assert desc["hw_notes"] == "BIOS: performance profile"
    assert desc["sw_notes"] == ""
    assert desc["host_networking"] == "N/A"  # one node: no host network
    assert desc["accelerators_per_node"] == "0"


def test_non_empty_fields_never_take_an_empty_value() -> None:
    desc = _describe(host={"host_processor_model_name": ""}, overrides={"host_networking": "", "hw_notes": ""})
    non_empty = load_rules("v6.1").system_fields.non_empty
    assert all(desc[field] for field in non_empty)
    assert desc["host_networking"] == "N/A"
    assert desc["host_processor_model_name"] == "unknown"
    assert desc["hw_notes"] == ""


def test_accelerator_details_default_to_unknown_when_accelerators_exist() -> None:
    desc = _describe(host={"accelerators_per_node": "8", "accelerator_model_name": "NVIDIA H200"}, number_of_nodes=2)
    assert desc["accelerator_interconnect"] == "unknown"
    assert desc["host_networking"] == "unknown"
    assert validate(desc, **FOLDERS) == []


def test_extra_override_fields_follow_the_required_ones() -> None:
    desc = _describe(overrides={"is_network": "false"})
    assert list(desc)[-1] == "is_network"
    assert validate(desc, **FOLDERS) == []


def test_overrides_that_contradict_the_arguments_are_refused() -> None:
    with pytest.raises(PlanError, match="submitter='Other'"):
        _describe(overrides={"submitter": "Other"})


def test_number_of_nodes_must_be_positive() -> None:
    with pytest.raises(PlanError, match="number_of_nodes"):
        _describe(number_of_nodes=0)


# --- validate --------------------------------------------------------------------------------------------------------

@pytest.fixture
def good() -> dict[str, str]:
    return _describe(host={})


def test_missing_field_is_reported(good: dict[str, str]) -> None:
    del good["cooling"]
    assert [p for p in validate(good, **FOLDERS) if p.startswith("cooling:")] == [
        'cooling: missing; add it (every required field must exist, "" where the rules allow)']


def test_empty_non_empty_field_is_reported(good: dict[str, str]) -> None:
    good["host_networking"] = " "
    good["hw_notes"] = ""  # may be empty
    problems = validate(good, **FOLDERS)
    assert len(problems) == 1 and problems[0].startswith("host_networking: empty")


def test_status_is_case_insensitive_but_must_be_allowed(good: dict[str, str]) -> None:
    good["status"] = "Available"
    assert validate(good, **FOLDERS) == []
    good["status"] = "ready"
    assert validate(good, **FOLDERS) == [
        "status: 'ready' is not allowed; use one of available, preview, rdi (any case)"]


@pytest.mark.parametrize("system_type", ["cloud", "Datacenter", "datacenter, edge"])
def test_system_type_must_be_an_exact_allowed_string(good: dict[str, str], system_type: str) -> None:
    good["system_type"] = system_type
    assert [p.split(":")[0] for p in validate(good, **FOLDERS)] == ["system_type"]


def test_submitter_and_division_must_match_the_folders(good: dict[str, str]) -> None:
    assert validate(good, division="CLOSED", submitter="podium") == []
    problems = validate(good, division="open", submitter="Acme")
    assert [p.split(":")[0] for p in problems] == ["division", "submitter"]
    assert "set it to 'Acme'" in problems[1]


@pytest.mark.parametrize(("division", "value", "ok"), [
    ("closed", "true", False), ("closed", "false", True), ("closed", "FALSE", True), ("open", "false", True),
    ("network", "true", True), ("network", "false", False), ("closed", False, False),
])
def test_is_network_must_match_the_division(good: dict[str, str], division: str, value: object, ok: bool) -> None:
    good["division"] = division
    good["is_network"] = value  # type: ignore[assignment]
    fields = [p.split(":")[0] for p in validate(good, division=division, submitter="Podium")]
    assert fields == ([] if ok else ["is_network"])


def test_every_problem_is_listed_in_one_plan_error(good: dict[str, str]) -> None:
    del good["cooling"]
    good["host_storage_type"] = ""
    good["status"] = "ready"
    good["system_type"] = "cloud"
    good["submitter"] = "Other"
    good["is_network"] = "true"
    with pytest.raises(PlanError) as caught:
        require_complete(good, **FOLDERS)
    text = str(caught.value)
    assert "has 6 problem(s)" in text
    for field in ("cooling", "host_storage_type", "status", "system_type", "submitter", "is_network"):
        assert f"  - {field}: " in text
    assert "fix:" in text


# --- accelerators --------------------------------------------------------------------------------------------------

def test_without_nvidia_smi_there_are_no_accelerators(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_facts.shutil, "which", lambda name, *args, **kwargs: None)
    host = detect_host()
    assert host["accelerators_per_node"] == "0"
    assert host["accelerator_model_name"] == "N/A"
    assert host["accelerator_memory_capacity"] == "N/A"
    desc = _describe(host=host)
    assert desc["accelerator_interconnect"] == "N/A"
    assert validate(desc, **FOLDERS) == []


def test_nvidia_smi_fills_the_accelerators(fake_nvidia_smi: Path) -> None:
    assert shutil.which("nvidia-smi") == str(fake_nvidia_smi)
    host = detect_host()
    assert host["accelerators_per_node"] == "2"
    assert host["accelerator_model_name"] == "NVIDIA H200"
    assert host["accelerator_memory_capacity"] == "140 GB"  # 143771 MiB
    assert host["other_software_stack"].endswith("NVIDIA driver 570.124.06")
    assert validate(_describe(host=host), **FOLDERS) == []


def test_a_failing_nvidia_smi_never_raises(fake_nvidia_smi: Path) -> None:
    fake_nvidia_smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    host = detect_host()
    assert host["accelerators_per_node"] == "unknown"
    assert "NVIDIA driver" not in host["other_software_stack"]


def test_probes_never_raise(tmp_path: Path) -> None:
    host = detect_host(storage_path=tmp_path / "does-not-exist")
    assert "host_storage_capacity" not in host
    assert validate(_describe(host=host), **FOLDERS) == []


def test_host_facts_read_back_from_a_pod_log_or_a_step() -> None:
    """`parse_facts` takes the last JSON object line of what `python3 -c host_facts.script()` printed: a container
    banner and a warning on stderr (a pod's log merges both) before it are skipped; output without one is a
    ValueError naming its tail."""
    from submission.tree import host_facts

    log = ("\n=============\n== TensorRT-LLM ==\n=============\n"
           "/usr/lib/python3/warnings.py: UserWarning: {not json}\n"
           '{"host_memory_capacity": "2.0 TB", "host_processors_per_node": 2, "accelerators_per_node": "4"}\n')
    assert host_facts.parse_facts(log) == {"host_memory_capacity": "2.0 TB", "host_processors_per_node": "2",
                                           "accelerators_per_node": "4"}
    with pytest.raises(ValueError, match=r"no JSON object of host facts.*Traceback"):
        host_facts.parse_facts("Traceback (most recent call last):\n  ...\nModuleNotFoundError: x\n[1, 2]\n")
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", host_facts.script(), "/"], capture_output=True, text=True,
                         check=True, timeout=60).stdout   # the very script a pod or a Slurm step runs
    assert host_facts.parse_facts(out)["host_memory_capacity"].endswith(("GB", "TB"))
