"""The system description `systems/<system>.json`: host detection, documented defaults and the checker's field rules.

Which fields must exist, which must be non-empty and which values are allowed come from the round's rules
(`system_fields` in `rules/<round>.yaml`, i.e. checker constants.py and checks/system_check.py). Detection is best
effort: a probe that cannot read a fact leaves the field to the defaults and never raises. Every value is a string.
Sizes are written as MLPerf system descriptions write them: "GB"/"TB" counted in powers of two.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path

from submission.errors import PlanError
from submission.rules import load_rules

NVIDIA_SMI_QUERY = ("--query-gpu=name,memory.total,driver_version", "--format=csv,noheader")
NVIDIA_SMI_TIMEOUT_S = 15
NOT_APPLICABLE = "N/A"  # the field does not apply to this system (no accelerators, a single node)
UNKNOWN = "unknown"  # the field applies but cannot be detected: the plan's system overrides should give it
_GIB = 1024**3
_MIB = 1024**2
_CPU = Path("/sys/devices/system/cpu/cpu0")
_NETWORK_DIVISION = "network"


def _size(n_bytes: float) -> str:
    gib = n_bytes / _GIB
    if gib >= 1024:
        return f"{gib / 1024:.1f} TB"
    return f"{gib:.0f} GB" if gib >= 10 else f"{gib:.1f} GB"


def _fields(text: str) -> dict[str, list[str]]:
    """`key : value` lines (/proc/cpuinfo, /proc/meminfo) -> every value of each key, in order."""
    values: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            values.setdefault(key.strip(), []).append(value.strip())
    return values


def _cpu() -> dict[str, str]:
    info = _fields(Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace"))
    sockets = max(1, len(set(info.get("physical id", []))))
    cores = info.get("cpu cores", [""])[0] or str(max(1, (os.cpu_count() or 1) // sockets))
    host = {"host_processor_model_name": info.get("model name", [""])[0] or platform.processor() or platform.machine(),
            "host_processors_per_node": str(sockets), "host_processor_core_count": cores}
    max_khz = _CPU / "cpufreq" / "cpuinfo_max_freq"
    if max_khz.is_file():
        host["host_processor_frequency"] = f"{int(max_khz.read_text().strip()) / 1000:.0f} MHz"
    elif info.get("cpu MHz"):
        host["host_processor_frequency"] = f"{float(info['cpu MHz'][0]):.0f} MHz"
    caches = []
    for index in sorted((_CPU / "cache").glob("index*")):
        kind = {"Data": "d", "Instruction": "i"}.get((index / "type").read_text().strip(), "")
        caches.append(f"L{(index / 'level').read_text().strip()}{kind} {(index / 'size').read_text().strip()}")
    if caches:
        host["host_processor_caches"] = ", ".join(caches)
    return {key: value for key, value in host.items() if value}


def _memory() -> dict[str, str]:
    total_kb = _fields(Path("/proc/meminfo").read_text(encoding="utf-8"))["MemTotal"][0].split()[0]
    return {"host_memory_capacity": _size(int(total_kb) * 1024)}


def _storage(path: Path) -> dict[str, str]:
    host = {"host_storage_capacity": _size(shutil.disk_usage(path).total)}
    dev = os.stat(path).st_dev
    block = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}").resolve()
    if (block / "partition").exists():
        block = block.parent
    rotational = (block / "queue" / "rotational").read_text().strip()
    if block.name.startswith("nvme"):
        host["host_storage_type"] = "NVMe SSD"
    elif block.name.startswith(("vd", "xvd")):
        host["host_storage_type"] = "virtual disk"
    else:
        host["host_storage_type"] = "SSD" if rotational == "0" else "HDD"
    return host


def _operating_system() -> dict[str, str]:
    release = dict(re.findall(r'^(\w+)="?(.*?)"?$', Path("/etc/os-release").read_text(encoding="utf-8"), re.M))
    name = release.get("PRETTY_NAME") or platform.system()
    return {"operating_system": f"{name}, kernel {platform.release()}"}


def _network_cards() -> dict[str, str]:
    cards = [nic for nic in Path("/sys/class/net").iterdir() if (nic / "device").exists()]  # physical NICs only
    return {"host_network_card_count": str(len(cards))}


def accelerators() -> dict[str, str]:
    """This host's GPUs as nvidia-smi tells them (none without it)."""
    nvidia_smi = shutil.which("nvidia-smi")
    if nvidia_smi is None:
        return {"accelerators_per_node": "0", "accelerator_model_name": NOT_APPLICABLE,
                "accelerator_memory_capacity": NOT_APPLICABLE}
    unknown = dict.fromkeys(("accelerators_per_node", "accelerator_model_name", "accelerator_memory_capacity"), UNKNOWN)
    try:
        done = subprocess.run([nvidia_smi, *NVIDIA_SMI_QUERY], capture_output=True, text=True,  # noqa: S603 fixed argv
                              timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return unknown
    gpus = [[cell.strip() for cell in line.split(",")] for line in done.stdout.splitlines() if line.count(",") >= 2]
    if done.returncode != 0 or not gpus:
        return unknown
    names = list(dict.fromkeys(gpu[0] for gpu in gpus))
    memory = re.match(r"(\d+)\s*MiB", gpus[0][1])
    return {"accelerators_per_node": str(len(gpus)), "accelerator_model_name": ", ".join(names),
            "accelerator_memory_capacity": _size(int(memory.group(1)) * _MIB) if memory else UNKNOWN,
            "other_software_stack": f"NVIDIA driver {gpus[0][2]}"}


def _probe(probe: Callable[[], dict[str, str]]) -> dict[str, str]:
    try:
        return probe()
    except Exception:  # best effort by design: a host that hides a fact leaves the field to the defaults
        return {}


def detect_host(*, storage_path: str | Path = "/") -> dict[str, str]:
    """What this host tells about itself, by required field name. Never raises; missing facts are left out."""
    host: dict[str, str] = {}
    probes = (_cpu, _memory, _operating_system, _network_cards, accelerators, lambda: _storage(Path(storage_path)))
    for probe in probes:
        host.update(_probe(probe))
    software = [f"Python {platform.python_version()}"]
    with contextlib.suppress(metadata.PackageNotFoundError):
        software.append(f"mlcommons-loadgen {metadata.version('mlcommons-loadgen')}")
    host["other_software_stack"] = ", ".join([*software, *filter(None, [host.get("other_software_stack")])])
    return host


def _defaults(number_of_nodes: int, accelerators: str) -> dict[str, str]:
    """Documented defaults for what cannot be detected: "N/A" where the field cannot apply, else "unknown"."""
    has_accelerators = accelerators != "0"
    accel = UNKNOWN if has_accelerators else NOT_APPLICABLE
    accel_optional = "" if has_accelerators else NOT_APPLICABLE
    network = NOT_APPLICABLE if number_of_nodes == 1 else UNKNOWN
    return {"host_processors_per_node": "1", "host_processor_core_count": str(os.cpu_count() or 1),
            "operating_system": platform.platform(), "other_software_stack": f"Python {platform.python_version()}",
            "accelerators_per_node": "0", "accelerator_model_name": NOT_APPLICABLE,
            "accelerator_memory_capacity": NOT_APPLICABLE, "host_memory_configuration": UNKNOWN,
            "host_processor_interconnect": NOT_APPLICABLE, "host_networking": network,
            "host_networking_topology": network, "host_network_card_count": UNKNOWN,
            "accelerator_frequency": accel_optional, "accelerator_host_interconnect": accel,
            "accelerator_interconnect": accel, "accelerator_interconnect_topology": accel_optional,
            "accelerator_memory_configuration": accel, "accelerator_on-chip_memories": accel_optional,
            "cooling": "air", "hw_notes": "", "sw_notes": "", "system_type_detail": NOT_APPLICABLE}


def describe(*, division: str, submitter: str, system_name: str, status: str, system_type: str, number_of_nodes: int,
             framework: str, overrides: Mapping[str, str], host: Mapping[str, str] | None = None,
             round: str = "v6.1") -> dict[str, str]:
    """Every required field of the round, in the rules' order: overrides > host detection > documented defaults.

    A must-be-non-empty field never takes an empty value from overrides or the host; fields in `overrides` that the
    round does not require (is_network, power fields) follow the required ones.
    """
    if number_of_nodes < 1:
        raise PlanError(f"number_of_nodes is {number_of_nodes}", fix="give the number of nodes, at least 1")
    fields = load_rules(round).system_fields
    given = {"division": division, "submitter": submitter, "system_name": system_name, "status": status,
             "system_type": system_type, "number_of_nodes": str(number_of_nodes), "framework": framework}
    clashes = [f"{key}={overrides[key]!r} (argument {value!r})" for key, value in given.items()
               if key in overrides and overrides[key] != value]
    if clashes:
        raise PlanError(f"system overrides contradict the system's settings: {', '.join(clashes)}",
                        fix="remove these fields from the overrides; they come from the plan's system entry")
    found = dict(detect_host() if host is None else host)
    accelerators = overrides.get("accelerators_per_node") or found.get("accelerators_per_node", "0")
    defaults = _defaults(number_of_nodes, accelerators)
    desc: dict[str, str] = {}
    for field in fields.required:
        if field in given:  # the plan's own values, kept even when empty so that validate reports them
            desc[field] = given[field]
            continue
        needs_value = field in fields.non_empty
        candidates = [tier[field] for tier in (overrides, found, defaults)
                      if field in tier and (tier[field] or not needs_value)]
        desc[field] = candidates[0] if candidates else (UNKNOWN if needs_value else "")
    desc.update({key: value for key, value in overrides.items() if key not in desc})
    return desc


def validate(desc: Mapping[str, object], *, division: str, submitter: str, round: str = "v6.1") -> list[str]:
    """Every problem the MLPerf checker (and then some) would find, one line each: the field, then the fix."""
    fields = load_rules(round).system_fields
    problems = [f"{field}: missing; add it (every required field must exist, \"\" where the rules allow)"
                for field in fields.required if field not in desc]
    for field in fields.non_empty:
        value = desc.get(field)
        if field in desc and (not value or (isinstance(value, str) and not value.strip())):
            problems.append(f"{field}: empty; give a meaningful value (\"{NOT_APPLICABLE}\" where it does not apply)")
    for field, allowed in fields.allowed.items():
        value = desc.get(field)
        if not value:
            continue  # already reported as missing or empty
        fold = field in fields.case_insensitive
        if (str(value).lower() if fold else value) not in allowed:
            case = " (any case)" if fold else " (exact string)"
            problems.append(f"{field}: {value!r} is not allowed; use one of {', '.join(allowed)}{case}")
    for field, folder in (("division", division), ("submitter", submitter)):
        value = desc.get(field)
        if value and str(value).lower() != folder.lower():
            problems.append(f"{field}: {value!r} differs from the {field} folder {folder!r}; set it to {folder!r}")
    if "is_network" in desc:
        expected = "true" if division.lower() == _NETWORK_DIVISION else "false"
        value = desc["is_network"]
        if not isinstance(value, str) or value.lower() != expected:
            problems.append(f"is_network: {value!r} in the {division} division; set it to the string "
                            f"{expected!r}" + ("" if expected == "true" else " or remove it"))
    return problems


def require_complete(desc: Mapping[str, object], *, division: str, submitter: str, round: str = "v6.1") -> None:
    """Raise one PlanError listing every problem `validate` finds (preflight runs this before any GPU time)."""
    problems = validate(desc, division=division, submitter=submitter, round=round)
    if problems:
        name = desc.get("system_name") or "?"
        lines = "\n".join(f"  - {problem}" for problem in problems)
        raise PlanError(f"system description {name!r} has {len(problems)} problem(s):\n{lines}",
                        fix="correct each field listed above in the plan's system entry or its overrides")
