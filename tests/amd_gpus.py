"""An AMD Instinct MI355X node as its tools describe it, for the tests: `amd-smi static ... --json`, `amd-smi version
--json` and `amd-smi metric ... --json` (written in the shapes the amd-smi CLI prints, as submission/tree/host_facts.py
cites them: the keys, nesting and units of ROCm/rocm-systems projects/amdsmi/amdsmi_cli/amdsmi_commands.py
`static_gpu`, `version` and `metric_gpu` at 009cc490d1459f46c7ce35dd3aed89e2a4ca115b; the values are one plausible
node's), an `amd-smi` first on PATH that answers exactly the argv Podium sends, and the page of AMD's device metrics
exporter (the series and labels of ROCm/device-metrics-exporter v1.4.2 pkg/amdgpu/gpuagent/gpuagent_gpu_metrics.go, at
779265ed4f4423af9f0c52de11c5e92d51d8cd00: the mandatory label set with `gpu_id`, `card_model` and `hostname`, VRAM in
MB, power in W, temperatures in C)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from submission.tree.host_facts import AMD_SMI_STATIC, AMD_SMI_VERSION
from tasks.launchers.gpu_sampler import AMD_SMI as AMD_SMI_METRIC

GPUS = 8
VRAM_MB = 294912   # 288 GiB of HBM3E per MI355X


def static_gpu(index: int) -> dict:
    """One GPU of `amd-smi static --asic --bus --vram --driver --board --json`."""
    return {
        "gpu": index,
        "asic": {"market_name": "AMD Instinct MI355X", "vendor_id": "0x1002",
                 "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]", "subvendor_id": "0x1002",
                 "device_id": "0x75a3", "subsystem_id": "0x75a3", "rev_id": "0x00",
                 "asic_serial": f"0x5E7A1C{index:02X}D3B9F0", "oam_id": index, "num_compute_units": 256,
                 "target_graphics_version": "gfx950"},
        "bus": {"bdf": f"0000:{0x05 + 0x10 * index:02x}:00.0", "max_pcie_width": 16,
                "max_pcie_speed": {"value": 32, "unit": "GT/s"}, "pcie_levels": "N/A",
                "pcie_interface_version": "Gen 5", "slot_type": "OAM"},
        "driver": {"name": "amdgpu", "version": "6.16.6", "os_kernel_version": "6.8.0-79-generic"},
        "board": {"model_number": "102-G30211-00", "product_serial": f"692500{index:04d}", "fru_id": "N/A",
                  "product_name": "AMD Instinct MI355X OAM", "manufacturer_name": "AMD"},
        "vram": {"type": "HBM3E", "vendor": "N/A", "size": {"value": VRAM_MB, "unit": "MB"}, "bit_width": 8192,
                 "max_bandwidth": {"value": 8000, "unit": "GB/s"}},
    }


def static_json(wrapped: bool = True) -> str:
    """The whole node: {"gpu_data": [...]} as ROCm 7's amd-smi prints it, or the bare list of earlier ones."""
    gpus = [static_gpu(i) for i in range(GPUS)]
    return json.dumps({"gpu_data": gpus} if wrapped else gpus, indent=4)


def metric_gpu(index: int, util: float) -> dict:
    """One GPU of `amd-smi metric --usage --power --temperature --mem-usage --json`, busy at `util` + index %."""
    return {
        "gpu": index,
        "usage": {"gfx_activity": {"value": util + index, "unit": "%"}, "umc_activity": {"value": 35, "unit": "%"},
                  "mm_activity": "N/A", "vcn_activity": ["N/A"] * 4, "jpeg_activity": ["N/A"] * 32,
                  "gfx_busy_inst": "N/A", "jpeg_busy": "N/A", "vcn_busy": "N/A"},
        "power": {"socket_power": {"value": 1200 + index, "unit": "W"}, "gfx_voltage": "N/A", "soc_voltage": "N/A",
                  "mem_voltage": "N/A", "throttle_status": "UNTHROTTLED", "power_management": "ENABLED",
                  "ubb_power": "N/A"},
        "temperature": {"edge": "N/A", "hotspot": {"value": 75 + index, "unit": "C"},
                        "mem": {"value": 62, "unit": "C"}, "hbm_stacks": "N/A", "mid": "N/A", "aid": "N/A",
                        "xcd": "N/A"},
        "mem_usage": {"total_vram": {"value": VRAM_MB, "unit": "MB"},
                      "used_vram": {"value": 260000 + index, "unit": "MB"},
                      "free_vram": {"value": VRAM_MB - 260000 - index, "unit": "MB"}},
    }


def metric_json(util: float = 90) -> str:
    return json.dumps({"gpu_data": [metric_gpu(i, util) for i in range(GPUS)]}, indent=4)


VERSION_JSON = json.dumps([{"tool": "AMDSMI Tool", "version": "26.2.1+fc0010cf", "amdsmi_library_version": "26.2.1",
                            "rocm_version": "7.2.0", "amdgpu_version": "6.16.6", "amd_hsmp_driver_version": "N/A",
                            "nic_driver_version": "N/A"}], indent=4)


def fake_amd_smi(folder: Path, static: str | None = None, version: str = VERSION_JSON) -> Path:
    """`folder/amd-smi`: prints the recorded output for the three argv Podium sends (static, version, metric), exits 3
    on any other."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "static.json").write_text(static_json() if static is None else static)
    (folder / "version.json").write_text(version)
    (folder / "metric.json").write_text(metric_json())
    script = folder / "amd-smi"
    script.write_text("#!/bin/sh\n"
                      f'here="{folder}"\n'
                      f'[ "$*" = "{" ".join(AMD_SMI_STATIC)}" ] && exec cat "$here/static.json"\n'
                      f'[ "$*" = "{" ".join(AMD_SMI_VERSION)}" ] && exec cat "$here/version.json"\n'
                      f'[ "$*" = "{" ".join(AMD_SMI_METRIC[1:])}" ] && exec cat "$here/metric.json"\n'
                      "echo \"amd-smi: unexpected arguments: $*\" >&2\nexit 3\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def exporter_page(node: str, util: float = 0.0) -> str:
    """The device metrics exporter's page of one node's 8 GPUs: GPU i at `util` + i % utilisation."""
    labels = ('gpu_id="{i}",card_model="102-G30211-00",gpu_partition_id="0",gpu_compute_partition_type="spx",'
              'gpu_memory_partition_type="nps1",kfd_process_id="",deployment_mode="BAREMETAL",'
              'serial_number="692500{i:04d}",pod="",namespace="",container="",job_id="",job_user="",'
              'job_partition="",hostname="{node}"')
    series = (("gpu_gfx_activity", "Graphics engine usage in Percentage (0-100)", lambda i: util + i),
              ("gpu_used_vram", "Used VRAM memory of the GPU (in MB)", lambda i: 250000 + i),
              ("gpu_total_vram", "Total VRAM memory of the GPU (in MB)", lambda i: VRAM_MB),
              ("gpu_package_power", "Current socket power in Watts", lambda i: 1100.5 + i),
              ("gpu_power_usage", "GPU Power usage in Watts", lambda i: 1050 + i),
              ("gpu_junction_temperature", "Current junction/hotspot temperature in Celsius", lambda i: 70 + i),
              ("gpu_memory_temperature", "Current memory temperature in Celsius", lambda i: 60 + i))
    lines = [f"# HELP gpu_nodes_total Number of GPUs in the node\n# TYPE gpu_nodes_total gauge\n"
             f'gpu_nodes_total{{hostname="{node}"}} {GPUS}']
    for name, text, value in series:
        lines += [f"# HELP {name} {text}", f"# TYPE {name} gauge"]
        lines += [f"{name}{{{labels.format(i=i, node=node)}}} {value(i)}" for i in range(GPUS)]
    return "\n".join(lines) + "\n"
