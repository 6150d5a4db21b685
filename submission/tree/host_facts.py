"""What a node tells about itself, by system-description field: processors, memory, storage, OS, NICs, GPUs.

Standard library only, so that the same source runs on an engine's node without Podium installed there (`script()`:
`python3 -c <this file + a main>`, as a Slurm step, tasks/ops/slurm_checks.py, or in a short-lived pod of the engine's
image, tasks/ops/kube_checks.py), its output read back by `parse_facts`: the description then describes the node that
runs the engine, not the host that runs the flow. Best effort: a probe that cannot read a fact leaves it out and
never raises. Sizes are written as MLPerf system descriptions write them: "GB"/"TB" counted in powers of two.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

NVIDIA_SMI = "nvidia-smi"
NVIDIA_SMI_QUERY = ("--query-gpu=name,memory.total,driver_version", "--format=csv,noheader")
# AMD's amd-smi (ROCm): `static` per GPU and `version`, as JSON. The shapes read, from the amd-smi CLI's source: a
# list of one object per GPU (ROCm/amdsmi amdsmi_cli/amdsmi_logger.py `_print_json_output`, at
# 0ceca28f4139dced5e9b5739a3f393780d7add48) or {"gpu_data": [...]} (ROCm/rocm-systems
# projects/amdsmi/amdsmi_cli/amdsmi_logger.py `combine_arrays_to_json`, 04076a2478c94616bfb3f61d0049369cadcf8121);
# each GPU's `asic.market_name`, `vram.type` ("HBM3E": the enum's name), `vram.size` {"value", "unit": "MB"} (MiB:
# bytes // 1024**2), `bus.pcie_interface_version` ("Gen 5"), `bus.max_pcie_width`, `driver.name` and
# `driver.version`, `board.product_name`; `version`'s `rocm_version` (projects/amdsmi/amdsmi_cli/amdsmi_commands.py
# `static_gpu` and `version`, at 009cc490d1459f46c7ce35dd3aed89e2a4ca115b).
AMD_SMI = "amd-smi"
AMD_SMI_STATIC = ("static", "--asic", "--bus", "--vram", "--driver", "--board", "--json")
AMD_SMI_VERSION = ("version", "--json")
ACCELERATOR_TOOLS = (NVIDIA_SMI, AMD_SMI)   # the first on PATH tells the node's GPUs (submission/plan/platforms.py)
SMI_TIMEOUT_S = 15
NOT_APPLICABLE = "N/A"  # the field does not apply to this system (no accelerators, a single node)
UNKNOWN = "unknown"  # the field applies but cannot be detected: the plan's system overrides should give it
_GIB = 1024**3
_MIB = 1024**2
_CPU = Path("/sys/devices/system/cpu/cpu0")
_MAIN = "\nimport json, sys\nprint(json.dumps(detect_host(storage_path=sys.argv[1])))\n"


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


def _run(argv: list[str]) -> str | None:
    """What a GPU tool printed, or None when it failed or did not answer in time."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=SMI_TIMEOUT_S,  # noqa: S603 fixed argv
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _nvidia(nvidia_smi: str) -> dict[str, str] | None:
    out = _run([nvidia_smi, *NVIDIA_SMI_QUERY])
    gpus = [[cell.strip() for cell in line.split(",")] for line in (out or "").splitlines() if line.count(",") >= 2]
    if not gpus:
        return None
    names = list(dict.fromkeys(gpu[0] for gpu in gpus))
    memory = re.match(r"(\d+)\s*MiB", gpus[0][1])
    return {"accelerators_per_node": str(len(gpus)), "accelerator_model_name": ", ".join(names),
            "accelerator_memory_capacity": _size(int(memory.group(1)) * _MIB) if memory else UNKNOWN,
            "other_software_stack": f"NVIDIA driver {gpus[0][2]}"}


def _known(value: object) -> str:
    """An amd-smi field as text: "" for its "N/A" (or anything missing)."""
    value = value.get("value") if isinstance(value, dict) else value
    return "" if value is None or isinstance(value, (dict, list)) or str(value).strip() in ("", "N/A") \
        else str(value).strip()


def _section(gpu: dict, name: str) -> dict:
    return gpu.get(name) if isinstance(gpu.get(name), dict) else {}


def _memory_type(vram_type: str) -> str:
    """amd-smi's memory type as published results write it: "HBM3E" -> "HBM3e"."""
    return re.sub(r"^(HBM\d)E$", r"\1e", vram_type)


def _amd_model(gpu: dict) -> str:
    """A GPU's name as MLPerf results publish AMD's: "AMD Instinct MI355X 288GB HBM3e" (market name, memory, type)."""
    name = _known(_section(gpu, "asic").get("market_name")) or _known(_section(gpu, "board").get("product_name"))
    vram = _section(gpu, "vram")
    size, kind = _known(vram.get("size")), _memory_type(_known(vram.get("type")))
    if name and size.isdigit() and not re.search(r"\d\s*GB", name):
        name += f" {round(int(size) / 1024)}GB" + (f" {kind}" if kind else "")
    return name


def amd_facts(static: object, version: object = None) -> dict[str, str]:
    """The description's accelerator fields from `amd-smi static ... --json` and `amd-smi version --json` (parsed):
    count, model name, memory capacity and type, the host link, and the ROCm and driver versions. Empty when
    `static` lists no GPU."""
    listed = static.get("gpu_data") if isinstance(static, dict) else static
    gpus = [gpu for gpu in listed if isinstance(gpu, dict)] if isinstance(listed, list) else []
    if not gpus:
        return {}
    first, versions = gpus[0], version[0] if isinstance(version, list) and version else version
    size = _known(_section(first, "vram").get("size"))
    facts = {"accelerators_per_node": str(len(gpus)),
             "accelerator_model_name": ", ".join(dict.fromkeys(_amd_model(g) for g in gpus)) or UNKNOWN,
             "accelerator_memory_capacity": _size(int(size) * _MIB) if size.isdigit() else UNKNOWN}
    if kind := _memory_type(_known(_section(first, "vram").get("type"))):
        facts["accelerator_memory_configuration"] = kind
    bus = _section(first, "bus")
    gen, width = _known(bus.get("pcie_interface_version")).replace(" ", ""), _known(bus.get("max_pcie_width"))
    if gen and width:
        facts["accelerator_host_interconnect"] = f"PCIe {gen} x{width}"
    rocm = _known(versions.get("rocm_version")) if isinstance(versions, dict) else ""
    driver = _section(first, "driver")
    software = [f"ROCm {rocm}" if rocm else "",
                f"{_known(driver.get('name')) or 'amdgpu'} driver {_known(driver.get('version'))}"
                if _known(driver.get("version")) else ""]
    if any(software):
        facts["other_software_stack"] = ", ".join(filter(None, software))
    return facts


def _amd(amd_smi: str) -> dict[str, str] | None:
    try:
        static = json.loads(_run([amd_smi, *AMD_SMI_STATIC]) or "null")
        version = json.loads(_run([amd_smi, *AMD_SMI_VERSION]) or "null")
    except ValueError:
        return None
    return amd_facts(static, version) or None


def accelerators() -> dict[str, str]:
    """This host's GPUs as the first of nvidia-smi and amd-smi on PATH tells them (none without either); "unknown"
    where the tool is there but gives nothing."""
    for tool, read in ((NVIDIA_SMI, _nvidia), (AMD_SMI, _amd)):
        path = shutil.which(tool)
        if path is not None:
            return read(path) or dict.fromkeys(
                ("accelerators_per_node", "accelerator_model_name", "accelerator_memory_capacity"), UNKNOWN)
    return {"accelerators_per_node": "0", "accelerator_model_name": NOT_APPLICABLE,
            "accelerator_memory_capacity": NOT_APPLICABLE}


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


def script() -> str:
    """This file's source with a main that prints `detect_host(storage_path=argv[1])` as one JSON line: what
    `python3 -c` runs on an engine's node."""
    return Path(__file__).read_text(encoding="utf-8") + _MAIN


def parse_facts(output: str) -> dict[str, str]:
    """The facts a run of `script()` printed: the last line of `output` that is a JSON object (a container's banner,
    or a warning on stderr merged into a pod's log, may come before it), every value a string. ValueError, with
    the output's tail, when there is none."""
    for line in reversed(output.strip().splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            facts = json.loads(line)
        except ValueError:
            continue
        if isinstance(facts, dict):
            return {str(key): str(value) for key, value in facts.items()}
    raise ValueError(f"no JSON object of host facts in the output; its last lines: {output.strip()[-500:]!r}")
