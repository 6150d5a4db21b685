"""AMD GPUs in each run's telemetry: the page of AMD's device metrics exporter (tests/amd_gpus.py: its series and
labels as ROCm/device-metrics-exporter v1.4.2 serves them) read into the same GPU rows as dcgm-exporter's, a run
sampled from stand-in exporters on two MI355X nodes through the plan's `{node}` template, and its plot: per node, each
GPU's utilisation, memory, power and temperature, read from the Figure the plot draws. Without an exporter: the
per-node GPU sampler (tasks/launchers/gpu_sampler.py, the Slurm launcher's) running `amd-smi metric` on a node, and
amd-smi on the flow's host (the local launcher's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from submission.plan.engine_options import EngineTelemetry
from submission.plan.platforms import AMD
from tasks.engines import Endpoint, Watched
from tasks.launchers import gpu_sampler
from tasks.reporting import telemetry_plots
from tasks.serving import metrics, telemetry
from tests.amd_gpus import GPUS, exporter_page, fake_amd_smi, metric_gpu, metric_json
from tests.local_http import LocalServer

NODES = ("mi355x-0", "mi355x-1")
ENGINE = ("simulated:num_requests_running 12\nsimulated:num_requests_waiting 3\n"
          "simulated:kv_cache_usage_perc 0.5\nsimulated:generation_tokens_total 1000\n")


def test_the_exporters_page_as_one_row_per_gpu() -> None:
    """MI3xx: package power and the junction (hotspot) temperature; the node from `hostname` unless given."""
    rows = metrics.exporter_gpus(exporter_page("mi355x-0", util=50))
    assert len(rows) == GPUS
    assert rows[3] == {"node": "mi355x-0", "index": 3, "util_pct": 53, "memory_mib": 250003, "power_w": 1103.5,
                       "temp_c": 73}
    assert {r["node"] for r in metrics.exporter_gpus(exporter_page("mi355x-0"), "node-a")} == {"node-a"}


def test_a_page_without_the_preferred_series_falls_back() -> None:
    """An MI2xx's page: gpu_power_usage and gpu_edge_temperature instead; the order of lines does not matter."""
    page = ('gpu_edge_temperature{gpu_id="1",hostname="mi250"} 44\n'
            'gpu_power_usage{gpu_id="1",hostname="mi250"} 320\n'
            'gpu_gfx_activity{gpu_id="1",hostname="mi250"} 99\n'
            'gpu_package_power{gpu_id="0",hostname="mi250"} 500\ngpu_power_usage{gpu_id="0",hostname="mi250"} 480\n'
            'gpu_nodes_total{hostname="mi250"} 2\ngpu_gfx_activity{hostname="mi250"} 7\n')   # no gpu_id: no row
    assert metrics.exporter_gpus(page) == [
        {"node": "mi250", "index": 1, "temp_c": 44, "power_w": 320, "util_pct": 99},
        {"node": "mi250", "index": 0, "power_w": 500}]


class _Exporters(BaseHTTPRequestHandler):
    """/metrics: the engine's page; /<node>/metrics: that node's exporter, its GPUs busy at 40 % + 20 % per node."""

    def do_GET(self) -> None:
        node = self.path.strip("/").removesuffix("/metrics")
        body = (ENGINE if self.path == "/metrics" else
                exporter_page(node, util=40 + 20 * NODES.index(node)) if node in NODES else "").encode()
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def exporters() -> Iterator[str]:
    with LocalServer(_Exporters) as server:
        yield server.url


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """Each Figure the telemetry plot hands to `save`, by the file's name, then saved as ever."""
    figures: dict[str, object] = {}
    save = telemetry_plots.save

    def keep(fig: object, path: Path) -> Path:
        figures[Path(path).name] = fig
        return save(fig, path)

    monkeypatch.setattr(telemetry_plots, "save", keep)
    return figures


def _sample_until(sampler: telemetry.Sampler, samples: int) -> None:
    deadline = time.monotonic() + 60   # a wait for the sampler thread, not a measurement
    while sum(1 for x in list(sampler.lines) if x.get("kind") == "sample" and x.get("gpus")) < samples:
        assert time.monotonic() < deadline, sampler.lines
        time.sleep(0.05)


def test_an_amd_run_is_sampled_per_node_and_plotted_like_nvidias(exporters: str, tmp_path: Path,
                                                                 drawn: dict) -> None:
    """The plan's template on AMD's port, as a plan writes it (here on the stand-in's address), filled with the
    engine's two nodes: every sample holds 8 GPUs of each node, tagged by node, and the plot has each node's four GPU
    panels with one line per GPU."""
    assert AMD.exporter.template() == "http://{node}:5000/metrics"
    [template] = EngineTelemetry(exporter_urls=(f"{exporters}/{telemetry.NODE}/metrics",)).exporter_urls
    watched = Watched(nodes=NODES, dcgm=telemetry.expand_dcgm((template,), NODES),
                      gpu_roles=tuple((n, i, "replica") for n in NODES for i in range(GPUS)))
    endpoint = Endpoint(exporters, "m", accepts_token_ids=False, returns_token_ids=False, watched=watched)
    with telemetry.sampling(tmp_path, endpoint, "simulated", interval_s=0.05) as sampler:
        _sample_until(sampler, 3)
    lines = telemetry.load(tmp_path / telemetry.FILE)
    assert lines[0]["dcgm"] == [f"{exporters}/{n}/metrics" for n in NODES] and lines[0]["gpu_tool"] is None
    assert not [x for x in lines if x["kind"] in ("missed", "unavailable")], lines
    samples = [x for x in lines if x["kind"] == "sample"]
    for sample in samples:
        assert sorted((g["node"], g["index"]) for g in sample["gpus"]) == [(n, i) for n in NODES for i in range(8)]
    assert samples[-1]["engine"]["running"] == 12
    assert telemetry.summary(lines)["gpu_util_pct"] == 53.5   # (40..47 and 60..67) / 16

    png = telemetry_plots.plot_telemetry(lines, tmp_path / "telemetry.png", "gpt-oss-120b on 2x8 MI355X")
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    axes = {ax.get_title(): ax for ax in drawn["telemetry.png"].axes if ax.get_visible()}
    for k, node in enumerate(NODES):
        for title, unit, base in (("GPU utilisation", "%", 40 + 20 * k), ("GPU memory used", "MiB", 250000),
                                  ("GPU power", "W", 1100.5), ("GPU temperature", "°C", 70)):
            ax = axes[f"{title}, {node}"]
            lines_drawn = {line.get_label(): set(line.get_ydata()) for line in ax.get_lines()}
            assert lines_drawn == {f"GPU {i} replica": {base + i} for i in range(GPUS)}, (title, node)
            assert ax.get_ylabel() == unit
    assert "requests running" in axes


def test_amd_smi_metrics_as_one_row_per_gpu() -> None:
    """ROCm 7's {"gpu_data": [...]} and the earlier list; the edge temperature where a GPU has no hotspot; "N/A" left
    out; nvidia-smi's CSV still read as CSV."""
    rows = metrics.amd_smi_gpus(metric_json(util=90), "mi355x-0")
    assert len(rows) == GPUS and rows[2] == {"node": "mi355x-0", "index": 2, "util_pct": 92, "memory_mib": 260002,
                                             "power_w": 1202, "temp_c": 77}
    gpu = metric_gpu(0, util=10)
    gpu["temperature"] = {"edge": {"value": 51, "unit": "C"}, "hotspot": "N/A"}
    gpu["power"] = "N/A"
    assert metrics.tool_gpus(json.dumps([gpu]), "n") == [{"node": "n", "index": 0, "util_pct": 10,
                                                          "memory_mib": 260000, "temp_c": 51}]
    assert metrics.tool_gpus("0, 97, 81234, 612.40\n", "n") == [{"node": "n", "index": 0, "util_pct": 97,
                                                                  "memory_mib": 81234, "power_w": 612.4}]


def test_the_per_node_sampler_runs_amd_smi_and_a_run_reads_it(tmp_path: Path, exporters: str) -> None:
    """The Slurm launcher's sampler command for an AMD node (`gpu_sampler.argv(python, "amd")`), run here as a node
    would run it with the node's amd-smi on PATH, its lines in a file; a run's telemetry reads them as that node's."""
    tools = tmp_path / "bin"
    fake_amd_smi(tools)
    log = tmp_path / "gpus-mi355x-0.jsonl"
    env = {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}
    with log.open("w") as out:
        sampler_process = subprocess.Popen(gpu_sampler.argv(sys.executable, "amd"), stdout=out, env=env)
    try:
        endpoint = Endpoint(exporters, "m", accepts_token_ids=False, returns_token_ids=False,
                            watched=Watched(nodes=("mi355x-0",), gpu_logs=(("mi355x-0", str(log)),)))
        with telemetry.sampling(tmp_path / "run", endpoint, "simulated", interval_s=0.05) as sampler:
            _sample_until(sampler, 1)
    finally:
        sampler_process.terminate()
        sampler_process.wait(timeout=30)
    lines = telemetry.load(tmp_path / "run" / telemetry.FILE)
    assert lines[0]["gpu_samplers"] == {"mi355x-0": str(log)} and lines[0]["gpu_tool"] is None
    rows = next(x["gpus"] for x in lines if x["kind"] == "sample" and x.get("gpus"))
    assert sorted((g["node"], g["index"], g["util_pct"], g["temp_c"]) for g in rows) == \
        [("mi355x-0", i, 90 + i, 75 + i) for i in range(GPUS)]


def test_amd_smi_on_the_flows_host_when_nothing_else_reads_the_gpus(tmp_path: Path, exporters: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The local launcher's engine on this host: amd-smi here, as the sampler asks it, when there is no nvidia-smi."""
    tools = tmp_path / "bin"
    fake_amd_smi(tools)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}/usr/bin{os.pathsep}/bin")
    endpoint = Endpoint(exporters, "m", accepts_token_ids=False, returns_token_ids=False)
    with telemetry.sampling(tmp_path, endpoint, "simulated", interval_s=0.05) as sampler:
        _sample_until(sampler, 1)
    lines = telemetry.load(tmp_path / telemetry.FILE)
    assert lines[0]["gpu_tool"] == str(tools / "amd-smi")
    rows = next(x["gpus"] for x in lines if x["kind"] == "sample" and x.get("gpus"))
    assert len(rows) == GPUS and rows[0]["power_w"] == 1200 and rows[0]["memory_mib"] == 260000
