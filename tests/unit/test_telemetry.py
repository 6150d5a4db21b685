"""Telemetry beside each run (tasks.serving.telemetry): the Prometheus text parser, the series kept per engine, the
nvidia-smi rows, trtllm-serve's iteration stats and dcgm-exporter's page (real formats; AMD's exporter in
tests/unit/test_telemetry_amd.py), the "unavailable" path of an
absent endpoint or of a trtllm without iteration stats, and the plot of a telemetry.jsonl."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tasks.engines import Endpoint, Watched
from tasks.reporting.plots import plot_telemetry
from tasks.serving import metrics, telemetry
from tests.local_http import LocalServer

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


def _endpoint(url: str, watched: Watched | None = None) -> Endpoint:
    return Endpoint(url, "m", accepts_token_ids=False, returns_token_ids=False, watched=watched or Watched())


def test_parse_keeps_every_label_set_and_skips_comments_and_junk() -> None:
    parsed = metrics.parse(VLLM_TEXT)
    assert parsed["vllm:num_requests_running"] == [3.0, 2.0]
    assert parsed["vllm:num_preemptions_total"] == [1.0]   # a label value with braces and a timestamp
    assert "vllm:bad" not in parsed and "broken" not in parsed
    assert not any(name.startswith("#") for name in parsed)


def test_label_values_are_read_as_the_exposition_format_escapes_them() -> None:
    """prometheus_client's parser: `\\"` and `\\\\` in a label value are a quote and a backslash."""
    [(name, labels, value)] = metrics.samples('DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="rack \\"b\\" \\\\ 7"} 97\n')
    assert (name, labels, value) == ("DCGM_FI_DEV_GPU_UTIL", {"gpu": "0", "Hostname": 'rack "b" \\ 7'}, 97.0)


def test_pick_sums_counts_and_takes_the_fullest_kv_cache() -> None:
    picked = metrics.pick(metrics.parse(VLLM_TEXT), metrics.source_for('vllm 0.11 {"x": 1}'))
    assert picked == {"running": 5.0, "waiting": 7.0, "kv_cache": 0.5}


def test_an_older_vllm_kv_name_and_an_unknown_engine() -> None:
    old = metrics.parse("vllm:gpu_cache_usage_perc 0.75\n")
    assert metrics.pick(old, metrics.source_for("vllm")) == {"kv_cache": 0.75}
    dynamo = metrics.parse("dynamo_frontend_inflight_requests{model=\"m\"} 4\ndynamo_frontend_queued_requests 1\n")
    assert metrics.pick(dynamo, metrics.source_for("external")) == {"running": 4.0, "waiting": 1.0}
    assert (metrics.source_for("trtllm").path, metrics.source_for("trtllm").kind) == ("/metrics", "json")


def test_nvidia_smi_rows() -> None:
    rows = metrics.gpus("0, 97, 81234, 612.40\n1, 0, 3, [N/A]\n", "gpu-7")
    assert rows == [{"node": "gpu-7", "index": 0, "util_pct": 97, "memory_mib": 81234, "power_w": 612.4},
                    {"node": "gpu-7", "index": 1, "util_pct": 0, "memory_mib": 3}]


def test_an_absent_endpoint_is_recorded_once_and_never_raises(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry.shutil, "which", lambda name: None)   # no GPUs here, whatever the host has
    with socket.socket() as s:   # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with telemetry.sampling(tmp_path / "run", _endpoint(f"http://127.0.0.1:{port}"), "vllm", interval_s=0.05):
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


# trtllm-serve's GET /metrics: a JSON list of the executor's IterationStats since the last read, oldest first (the keys
# and nesting of IterationStats' JSON form; values made up). usedNumBlocks / maxNumBlocks is the KV-cache use.
TRTLLM_JSON = [
    {"iter": 4410, "iterLatencyMS": 21.7, "timestamp": "12-03-2026 08:10:39", "numActiveRequests": 512,
     "numQueuedRequests": 40, "numCompletedRequests": 3, "maxNumActiveRequests": 1024, "gpuMemUsage": 171798691840,
     "cpuMemUsage": 0, "pinnedMemUsage": 0,
     "kvCacheStats": {"maxNumBlocks": 20000, "freeNumBlocks": 6000, "usedNumBlocks": 14000, "tokensPerBlock": 32,
                      "allocTotalBlocks": 14000, "allocNewBlocks": 12, "reusedBlocks": 0, "missedBlocks": 12,
                      "cacheHitRate": 0.0},
     "inflightBatchingStats": {"numScheduledRequests": 512, "numContextRequests": 4, "numGenRequests": 508,
                               "numPausedRequests": 0, "numCtxTokens": 4096, "microBatchId": 0,
                               "avgNumDecodedTokensPerIter": 1.0}},
    {"iter": 4411, "numActiveRequests": 516, "numQueuedRequests": 36,
     "kvCacheStats": {"maxNumBlocks": 20000, "usedNumBlocks": 15000}},
]
# dcgm-exporter's page (its labels per GPU, some left out: pci_bus_id, the driver version, pod mapping)
DCGM_TEXT = """\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-c2f76b33",device="nvidia0",modelName="NVIDIA B200",Hostname="b200-node-1"} 97
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-8f1f4d06",device="nvidia1",modelName="NVIDIA B200",Hostname="b200-node-1"} 95
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-c2f76b33",device="nvidia0",modelName="NVIDIA B200",Hostname="b200-node-1"} 171234
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-8f1f4d06",device="nvidia1",modelName="NVIDIA B200",Hostname="b200-node-1"} 170001
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-c2f76b33",device="nvidia0",Hostname="b200-node-1"} 812.5
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-c2f76b33",Hostname="b200-node-1"} 61
"""


def test_trtllm_iteration_stats_from_the_newest_entry() -> None:
    source = metrics.source_for("trtllm 1.2.0")
    assert metrics.pick_json(TRTLLM_JSON, source) == {"running": 516.0, "waiting": 36.0, "kv_cache": 0.75}
    assert metrics.pick_json(TRTLLM_JSON[0], source)["kv_cache"] == 0.7   # one object, not a list
    assert metrics.pick_json([{"numActiveRequests": 1, "kvCacheStats": {"maxNumBlocks": 0}}], source) == \
        {"running": 1.0}   # no KV pool reported: no ratio


def test_dcgm_rows_per_gpu_with_their_host() -> None:
    assert metrics.exporter_gpus(DCGM_TEXT) == [
        {"node": "b200-node-1", "index": 0, "util_pct": 97, "memory_mib": 171234, "power_w": 812.5, "temp_c": 61},
        {"node": "b200-node-1", "index": 1, "util_pct": 95, "memory_mib": 170001}]
    assert metrics.exporter_gpus('DCGM_FI_DEV_GPU_UTIL{UUID="x"} 5\nother 1\n') == []   # no gpu label: no row


class _Pages(BaseHTTPRequestHandler):
    """/metrics: trtllm's iteration stats (an empty list first: nothing new yet), /dcgm: an exporter's page."""

    reads = 0

    def do_GET(self) -> None:
        if self.path == "/metrics":
            type(self).reads += 1
            body, kind = json.dumps([] if type(self).reads == 1 else TRTLLM_JSON).encode(), "application/json"
        else:
            body, kind = DCGM_TEXT.encode(), "text/plain"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def pages() -> Iterator[str]:
    with LocalServer(type("Pages", (_Pages,), {"reads": 0})) as server:
        yield server.url


def test_a_trtllm_run_sampled_with_dcgm_gpus(tmp_path: Path, pages: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The JSON source and a DCGM exporter together: an empty first read is no miss; the GPUs come from DCGM, and
    nvidia-smi is not asked even where it is on PATH."""
    monkeypatch.setattr(telemetry.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    endpoint = _endpoint(pages, Watched(dcgm=telemetry.expand_dcgm((f"{pages}/dcgm",), ("b200-node-1",))))
    with telemetry.sampling(tmp_path, endpoint, "trtllm", interval_s=0.05):
        time.sleep(0.3)
    lines = telemetry.load(tmp_path / telemetry.FILE)
    assert lines[0]["format"] == "json" and lines[0]["dcgm"] == [f"{pages}/dcgm"] and lines[0]["gpu_tool"] is None
    assert not [x for x in lines if x["kind"] in ("missed", "unavailable")]
    samples = [x for x in lines if x["kind"] == "sample"]
    assert "engine" not in samples[0] and samples[0]["gpus"][0]["node"] == "b200-node-1"
    assert samples[-1]["engine"] == {"running": 516.0, "waiting": 36.0, "kv_cache": 0.75}
    assert plot_telemetry(lines, tmp_path / "t.png", "trtllm") is not None


def test_trtllm_without_iteration_stats_says_why(tmp_path: Path, pages: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry.shutil, "which", lambda name: None)
    monkeypatch.setattr(_Pages, "do_GET", _empty)
    with telemetry.sampling(tmp_path, _endpoint(pages), "trtllm", interval_s=0.05):
        time.sleep(0.2)
    [gone] = [x for x in telemetry.load(tmp_path / telemetry.FILE) if x["kind"] == "unavailable"]
    assert "enable_iter_perf_stats false" in gone["why"]


def _empty(self: BaseHTTPRequestHandler) -> None:
    self.send_response(200)
    self.send_header("Content-Length", "2")
    self.end_headers()
    self.wfile.write(b"[]")


def test_exporter_urls_are_checked_when_the_plan_loads() -> None:
    from pydantic import ValidationError

    from submission.plan.engine_options import EngineTelemetry

    assert EngineTelemetry(exporter_urls=("http://gpu-node-1:9400/metrics",)).exporter_urls
    assert EngineTelemetry.model_validate({"dcgm_urls": ["http://a:9400/metrics"]}).exporter_urls == (
        "http://a:9400/metrics",)   # its other name
    with pytest.raises(ValidationError, match=r"'gpu-node-1:9400' is not an http\(s\) URL.*e\.g\. http://"):
        EngineTelemetry(exporter_urls=("gpu-node-1:9400",))
    template = EngineTelemetry(exporter_urls=("http://{node}:9400/metrics",)).exporter_urls   # filled per node
    assert telemetry.expand_dcgm(template, ("gpu-a", "gpu-b", "gpu-a", "")) == (
        ("gpu-a", "http://gpu-a:9400/metrics"), ("gpu-b", "http://gpu-b:9400/metrics"))
    with pytest.raises(ValidationError, match=r"\{host\} is not filled in; the one placeholder is \{node\}"):
        EngineTelemetry(exporter_urls=("http://{host}:9400/metrics",))


def test_the_dynamo_series_are_named_as_ai_dynamo_1_6_1_names_them() -> None:
    """Every Dynamo name telemetry reads is built from the installed ai-dynamo's own constants
    (dynamo/prometheus_names.py, pure Python), and its vLLM worker serves vLLM's `vllm:` series on its system port."""
    import importlib.util

    from tests.integration.engines_support import engine_python

    python = engine_python(".venv-dynamo", "venv-dynamo")
    [site] = python.parents[1].glob("lib/python3*/site-packages")
    spec = importlib.util.spec_from_file_location("dynamo_names", site / "dynamo" / "prometheus_names.py")
    assert spec is not None and spec.loader is not None
    names = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(names)

    def constant(path: str) -> str:
        value: object = names
        for part in path.split("."):
            value = getattr(value, part)
        return str(value)

    for name, parts in metrics.DYNAMO_NAMES.items():
        assert "_".join(constant(p) for p in parts) == name
    read = {n for key in ("dynamo", "dynamo-worker") for kind in ("series", "rates", "means")
            for names_ in getattr(metrics.SOURCES[key], kind).values() for n in names_}
    assert {n for n in read if not n.startswith("vllm:")} == set(metrics.DYNAMO_NAMES)   # each one checked above
    main = (site / "dynamo" / "vllm" / "main.py").read_text()
    assert 'engine_metric_prefixes = ["vllm:", "lmcache:"]' in main


def _split_run(prefill_util: float, decode_util: float) -> list[dict]:
    """The telemetry of a disaggregated run on two nodes: the prefill worker's GPU on node-a, the decode worker's on
    node-b; the measured phase from 1 s to 3 s."""
    header = {"kind": "header", "gpu_roles": {"node-a": {"0": "prefill"}, "node-b": {"0": "decode"}},
              "workers": [{"name": "prefill-0", "role": "prefill"}, {"name": "decode-0", "role": "decode"}]}
    samples = [{"kind": "sample", "elapsed_s": t, "engine": {"running": 4, "waiting": t, "tokens_per_s": 100 * t},
                "workers": {"prefill-0": {"waiting": 1}, "decode-0": {"kv_cache": 0.2 * t, "waiting": 2 * t}},
                "gpus": [{"node": "node-a", "index": 0, "util_pct": prefill_util, "memory_mib": 10, "power_w": 100},
                         {"node": "node-b", "index": 0, "util_pct": decode_util, "memory_mib": 20, "power_w": 600}]}
               for t in range(5)]
    return [header, *samples, {"kind": "phase", "name": "measured", "start_s": 1.0, "end_s": 3.0}]


def test_a_runs_plot_has_each_nodes_gpus_and_its_workers_queues(tmp_path: Path) -> None:
    from tasks.reporting.telemetry_plots import panels

    lines = _split_run(30, 95)
    found = {title: series for title, _, series in panels(lines)}
    assert list(found) == ["requests running", "requests waiting (queue depth)", "KV-cache use", "output tokens/s",
                           "GPU utilisation, node-a", "GPU memory used, node-a", "GPU power, node-a",
                           "GPU utilisation, node-b", "GPU memory used, node-b", "GPU power, node-b"]
    assert set(found["requests waiting (queue depth)"]) == {"engine", "prefill-0", "decode-0"}
    assert found["GPU utilisation, node-b"] == {"GPU 0 decode": ([0, 1, 2, 3, 4], [95] * 5)}
    assert plot_telemetry(lines, tmp_path / "t.png", "a disaggregated run") is not None
    # the run at a glance, over its measured phase (samples 1 to 3): what the results table and a probe carry
    assert telemetry.summary(lines) == {"gpu_util_pct": 62.5, "gpu_util_pct.prefill": 30, "gpu_util_pct.decode": 95,
                                        "kv_cache_peak": 0.6, "waiting_peak": 6, "tokens_per_s": 200}


def test_the_sweep_page_puts_each_splits_telemetry_side_by_side(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from tasks.reporting import telemetry_plots

    drawn: list = []
    monkeypatch.setattr(telemetry_plots, "save", lambda fig, path: drawn.append(fig) or path)
    path = telemetry_plots.plot_sweep_telemetry([("1P:3D", _split_run(95, 40)), ("3P:1D", _split_run(30, 97)),
                                                 ("2P:2D", [])], tmp_path / "sweep.png")
    assert path == tmp_path / "sweep.png"
    axes = drawn[0].axes
    assert len(axes) == 4 * 3   # four rows, one column per split
    assert [ax.get_title().split("\n")[0] for ax in axes[:3]] == ["1P:3D", "3P:1D", "2P:2D"]
    utilisation = {line.get_label(): list(line.get_ydata()) for line in axes[1].get_lines()}
    assert utilisation == {"prefill": [30] * 5, "decode": [97] * 5}   # the second split's GPUs, by role
    assert telemetry_plots.plot_sweep_telemetry([("1P:3D", [])], tmp_path / "none.png") is None


def test_the_results_row_carries_gpu_use_per_role_and_peak_kv_use(tmp_path: Path) -> None:
    """A decode-bound split at a glance: idle prefill GPUs beside busy decode ones, from the run's telemetry."""
    from submission.results.runs import RunRecord
    from tasks.reporting import artifacts

    (tmp_path / telemetry.FILE).write_text("".join(json.dumps(x) + "\n" for x in _split_run(30, 95)))
    run = RunRecord(system="s", benchmark="b", scenario="Interactive", key="k", mode="performance",
                    run_dir=str(tmp_path), valid=True, validity="VALID", metric=1.0, unit="Tokens/s")
    [row] = artifacts.table([run])
    assert (row["gpu_util"], row["kv_cache_peak"]) == ("prefill 30 %, decode 95 %", 0.6)
    [row] = artifacts.table([run.model_copy(update={"run_dir": str(tmp_path / "none")})])
    assert (row["gpu_util"], row["kv_cache_peak"]) == (None, None)   # no telemetry: empty cells


@pytest.fixture()
def far_from_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """The host's time zone at UTC+05:45 (a POSIX TZ rule: no zone files needed) for one test, restored after;
    yields the zone's offset in seconds."""
    monkeypatch.setenv("TZ", "NPT-05:45")
    time.tzset()
    try:
        yield 5 * 3600 + 45 * 60
    finally:
        monkeypatch.undo()
        time.tzset()


def test_loadgens_measured_phase_is_read_in_utc(tmp_path: Path, far_from_utc: int) -> None:
    """power_begin..power_end of the detail log, which loadgen writes in UTC whatever the host's time zone."""
    from datetime import UTC, datetime

    from submission.results.logs import DETAIL_FILE, POWER_FORMAT, measured_window

    begin = datetime(2026, 12, 6, 8, 52, 29, 164000, tzinfo=UTC).timestamp()
    end = datetime(2026, 12, 6, 8, 52, 33, 252000, tzinfo=UTC).timestamp()
    # in this zone the same text read as local time lands 5 h 45 min early: a local-time parse cannot pass
    assert begin - datetime.strptime("12-06-2026 08:52:29.164", POWER_FORMAT).timestamp() == far_from_utc
    meta = {"is_error": False, "is_warning": False, "file": "loadgen.cc", "line_no": 1, "pid": 1, "tid": 1}
    (tmp_path / DETAIL_FILE).write_text("".join(
        ":::MLLOG " + json.dumps({"key": key, "value": value, "time_ms": 1.0, "namespace": "mlperf::logging",
                                  "event_type": "POINT_IN_TIME", "metadata": meta}) + "\n"
        for key, value in (("power_begin", "12-06-2026 08:52:29.164"), ("power_end", "12-06-2026 08:52:33.252"))))
    assert measured_window(tmp_path) == (begin, end)
    assert measured_window(tmp_path / "none") is None
