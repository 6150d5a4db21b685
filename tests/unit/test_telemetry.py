"""Telemetry beside each run (tasks.serving.telemetry): the Prometheus text parser, the series kept per engine, the
nvidia-smi rows, the "unavailable" path of an absent endpoint, and the plot of a telemetry.jsonl."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tasks.reporting.plots import plot_telemetry
from tasks.serving import telemetry

VLLM_TEXT = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
vllm:num_requests_waiting{engine="0",model_name="m"} 7.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
vllm:num_preemptions_total{engine="0",model_name="a b, {c}"} 1 1700000000000
broken line without value
vllm:bad{x="1"} notanumber
"""


def test_parse_keeps_every_label_set_and_skips_comments_and_junk() -> None:
    parsed = telemetry.parse(VLLM_TEXT)
    assert parsed["vllm:num_requests_running"] == [3.0, 2.0]
    assert parsed["vllm:num_preemptions_total"] == [1.0]   # a label value with braces and a timestamp
    assert "vllm:bad" not in parsed and "broken" not in parsed
    assert not any(name.startswith("#") for name in parsed)


def test_pick_sums_counts_and_takes_the_fullest_kv_cache() -> None:
    picked = telemetry.pick(telemetry.parse(VLLM_TEXT), telemetry.source_for('vllm 0.11 {"x": 1}'))
    assert picked == {"running": 5.0, "waiting": 7.0, "kv_cache": 0.5}


def test_an_older_vllm_kv_name_and_an_unknown_engine() -> None:
    old = telemetry.parse("vllm:gpu_cache_usage_perc 0.75\n")
    assert telemetry.pick(old, telemetry.source_for("vllm")) == {"kv_cache": 0.75}
    dynamo = telemetry.parse("dynamo_frontend_inflight_requests{model=\"m\"} 4\ndynamo_frontend_queued_requests 1\n")
    assert telemetry.pick(dynamo, telemetry.source_for("external")) == {"running": 4.0, "waiting": 1.0}
    assert telemetry.source_for("trtllm").path == "/prometheus/metrics"


def test_nvidia_smi_rows() -> None:
    rows = telemetry.gpus("0, 97, 81234, 612.40\n1, 0, 3, [N/A]\n")
    assert rows == [{"index": 0, "util_pct": 97, "memory_mib": 81234, "power_w": 612.4},
                    {"index": 1, "util_pct": 0, "memory_mib": 3}]


def test_an_absent_endpoint_is_recorded_once_and_never_raises(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry.shutil, "which", lambda name: None)   # no GPUs here, whatever the host has
    with socket.socket() as s:   # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with telemetry.sampling(tmp_path / "run", f"http://127.0.0.1:{port}", "vllm", interval_s=0.05):
        import time
        time.sleep(0.3)
    lines = [json.loads(x) for x in (tmp_path / "run" / telemetry.FILE).read_text().splitlines()]
    assert lines[0]["kind"] == "header" and lines[0]["url"] == f"http://127.0.0.1:{port}/metrics"
    gone = [x for x in lines if x["kind"] == "unavailable"]
    assert len(gone) == 1 and gone[0]["source"] == "engine" and "Connection refused" in gone[0]["why"]
    assert not [x for x in lines if x["kind"] == "sample"]
    assert plot_telemetry(lines, tmp_path / "t.png", "nothing") is None


def test_the_plot_draws_each_kind_with_data(tmp_path: Path) -> None:
    lines = [{"kind": "header"}] + [
        {"kind": "sample", "elapsed_s": i, "engine": {"running": i, "waiting": 4 - i, "kv_cache": i / 4},
         "gpus": [{"index": 0, "util_pct": 20 * i, "memory_mib": 1000, "power_w": 300 + i}]} for i in range(5)]
    png = plot_telemetry(lines, tmp_path / "plots" / "telemetry.png", "a run")
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
