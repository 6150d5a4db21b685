"""Telemetry beside each measured run: the engine's own metrics (tasks/serving/metrics.py: Prometheus text, or
trtllm-serve's iteration stats as JSON), its workers' own metrics pages (each Dynamo worker's system port), and the
GPUs' utilisation, memory, power and temperature on every engine node, sampled in a background thread while the run
runs and written to `telemetry.jsonl` in its run folder, so a run that fell short shows why (a queue that grew, a
full KV cache, idle decode GPUs).

What is read comes with the endpoint (`Endpoint.watched`, filled by the launcher): the workers' pages, which role
holds which GPU of which node, and one source of GPU facts: the GPU exporters of the plan (`engine.telemetry.
exporter_urls`: dcgm-exporter on NVIDIA, AMD's device metrics exporter on AMD, each page read by the series it has;
a `{node}` template filled with the engine's nodes), else the per-node GPU samplers the Slurm launcher starts beside
the engine (their lines in a file each), else `nvidia-smi` or `amd-smi` on this host (the engine's GPUs under the
local launcher). Every GPU row carries its `node`.

Plain functions, free of Prefect: every measured run (both clients' runs, search probes, audits) is wrapped in
`sampling(...)`. Sampling never fails a run: a page that is absent or errors, or an nvidia-smi that fails, is recorded
as a `{"kind": "missed", "source": ..., "why": ...}` line, and after MAX_MISSES failures in a row as one
`unavailable` line, after which it is not asked again.

An engine of replicas (`Endpoint.replicas`: those that serve, each with its node) is read replica by replica: each
one's own metrics page, as the engine's would be, tagged by its name and node; the `engine` values of a sample are
theirs together (each role's sum, the KV cache's fullest: tasks/serving/metrics.py COMBINE), so a run's summary is
the whole system's.

`telemetry.jsonl`, one JSON object a line: a `header` (engine, its metrics URL and series, the workers' pages, the
replicas' pages with their nodes, the nodes, the GPU roles, the GPU sources (`dcgm`: the exporter pages, of either
platform), `started` and `started_unix`), then a `sample` per interval (`t` ISO 8601 UTC, `elapsed_s`, `engine`:
role -> value, `workers`: name -> role -> value, `replicas`: name -> role -> value, `gpus`: one object per GPU:
`node`, `index`, `util_pct`, `memory_mib`, `power_w`, and `temp_c` where an exporter gives it), any `missed` and
`unavailable` lines, and a `phase` line: the run's measured phase (`start_s`, `end_s` on the `elapsed_s` axis) as its
client says (tasks/clients.py `window`).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path

from submission.base.files import replace_atomic, temporary
from tasks.engines import Endpoint, Watched
from tasks.launchers.gpu_sampler import QUERIES
from tasks.measuring import utc_now
from tasks.serving.metrics import COMBINE, SOURCES, Reader, exporter_gpus, source_for, tool_gpus

FILE = "telemetry.jsonl"
INTERVAL_S = 1.0        # seconds between samples; read at call time so tests can shorten it
MAX_MISSES = 3          # failed reads in a row before a source counts as unavailable
FETCH_TIMEOUT_S = 5.0   # one scrape or nvidia-smi call (a busy engine answers late); a slower one is missed
NODE = "{node}"         # the placeholder of a GPU exporter URL template


def expand_dcgm(urls: tuple[str, ...], nodes: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """The plan's GPU exporter URLs as (node, URL): a template (`http://{node}:9400/metrics`) once per engine node;
    a plain URL once, its node "" (its rows take the exporter's Hostname label)."""
    out: list[tuple[str, str]] = []
    for url in urls:
        out += [(n, url.replace(NODE, n)) for n in dict.fromkeys(nodes) if n] if NODE in url else [("", url)]
    return tuple(out)


class GpuFeed:
    """The lines one per-node GPU sampler writes (tasks/launchers/gpu_sampler.py: `{"t": ..., "out": nvidia-smi's CSV
    or amd-smi's JSON}`,
    or `{"t": ..., "error": ...}`), read from where the file ended when the run started."""

    def __init__(self, node: str, path: Path) -> None:
        self.node, self.path = node, Path(path)
        self.offset = self.path.stat().st_size if self.path.exists() else 0
        self.lines = 0

    def read(self) -> tuple[list[dict], str | None]:
        """(the newest rows, the newest error) written since the last read."""
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError as e:
            return [], f"{type(e).__name__}: {e}"
        complete = data[:data.rfind(b"\n") + 1]
        self.offset += len(complete)
        rows: list[dict] = []
        error = None
        for raw in complete.decode("utf-8", "replace").splitlines():
            with contextlib.suppress(ValueError):
                line = json.loads(raw)
                self.lines += 1
                if "out" in line:
                    rows, error = tool_gpus(line["out"], self.node), None
                elif "error" in line:
                    error = str(line["error"])
        return rows, error


class Sampler:
    """Samples what `endpoint` says to (its metrics, its workers' pages, its GPUs) every `interval_s` in a daemon
    thread between `start` and `stop`; `stop` marks the measured phase, writes the lines to `path` and never
    raises."""

    def __init__(self, path: Path, endpoint: Endpoint, engine: str, harness: str | None = None,
                 interval_s: float | None = None) -> None:
        self.path, self.source, self.harness = Path(path), source_for(engine), harness
        self.url = endpoint.base_url.rstrip("/") + self.source.path
        self.interval_s = interval_s or INTERVAL_S
        w: Watched = endpoint.watched
        self.readers = {"engine": Reader(self.source)}
        self.pages = {p.name: (p.base_url.rstrip("/") + SOURCES[p.source].path) for p in w.pages}
        self.readers |= {f"worker {p.name}": Reader(SOURCES[p.source]) for p in w.pages}
        self.replicas = {r.name: (r.node, r.base_url.rstrip("/") + self.source.path) for r in endpoint.replicas}
        self.readers |= {f"replica {name}": Reader(self.source) for name in self.replicas}
        self.dcgm = w.dcgm
        self.feeds = [] if self.dcgm else [GpuFeed(node, Path(file)) for node, file in w.gpu_logs]
        # one source of GPU facts; the last, this host's nvidia-smi or amd-smi, as the sampler asks them
        self.smi = None if (self.dcgm or self.feeds) else next(
            ((path, *query[1:]) for query in QUERIES.values() if (path := shutil.which(query[0]))), None)
        self.host = socket.gethostname()
        roles: dict[str, dict[str, str]] = {}
        for node, index, role in w.gpu_roles:
            roles.setdefault(node, {})[str(index)] = role
        self.lines: list[dict] = [{
            "kind": "header", "engine": engine.split(" ", 1)[0], "url": self.url, "format": self.source.kind,
            "series": self.source.roles(), "interval_s": self.interval_s, "nodes": list(w.nodes),
            "workers": [{"name": p.name, "role": p.role, "node": p.node, "url": self.pages[p.name],
                         "series": SOURCES[p.source].roles()} for p in w.pages],
            "replicas": [{"name": name, "node": node, "url": url} for name, (node, url) in self.replicas.items()],
            "gpu_roles": roles, "gpu_tool": self.smi and self.smi[0], "dcgm": [url for _, url in self.dcgm],
            "gpu_samplers": {f.node: str(f.path) for f in self.feeds}}]
        self.unavailable: set[str] = set()
        self.misses: dict[str, int] = {}   # failed reads in a row, per source
        self.engine_values = 0             # samples with any engine value
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="telemetry", daemon=True)
        self._t0 = time.monotonic()
        self._t0_unix = time.time()

    def start(self) -> Sampler:
        self._t0, self._t0_unix = time.monotonic(), time.time()
        self.lines[0] |= {"started": utc_now(), "started_unix": self._t0_unix}
        self._thread.start()
        return self

    def stop(self, run_dir: Path | None = None) -> None:
        self._stop.set()
        self._thread.join(timeout=FETCH_TIMEOUT_S * (3 + len(self.dcgm) + len(self.pages) + len(self.replicas)))
        if self.source.why_empty and not self.engine_values and "engine" not in self.unavailable:
            self.lines.append({"kind": "unavailable", "source": "engine", "why": f"{self.url}: "
                               f"{self.source.why_empty}", "t": utc_now()})
        for feed in self.feeds:
            if not feed.lines and f"gpus {feed.node}" not in self.unavailable:
                self.lines.append({"kind": "unavailable", "source": f"gpus {feed.node}", "t": utc_now(), "why":
                                   f"the GPU sampler of {feed.node} wrote nothing to {feed.path} during the run"})
        if run_dir is not None and self.harness:
            self.mark_phase(run_dir)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = temporary(self.path)
            tmp.write_text("".join(json.dumps(line) + "\n" for line in list(self.lines)))
            replace_atomic(tmp, self.path)
        except OSError:
            pass   # telemetry never fails a run

    def mark_phase(self, run_dir: Path) -> None:
        """The run's measured phase, as its client's `window` reads it from the run folder, on the elapsed axis."""
        from tasks.clients import CLIENTS

        try:
            window = CLIENTS[str(self.harness)].part("window")(run_dir)
        except Exception:   # telemetry never fails a run: no phase line, the plot shades nothing
            return
        if window is not None:
            self.lines.append({"kind": "phase", "name": "measured", "start_s": round(window[0] - self._t0_unix, 3),
                               "end_s": round(window[1] - self._t0_unix, 3)})

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

    def _page(self, source: str, url: str) -> dict[str, float] | None:
        """The values of one page now (None: a `json` page with nothing new), or None after a failed read."""
        if source in self.unavailable:
            return None
        try:
            with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as response:
                body = response.read().decode("utf-8", "replace")
            picked = self.readers[source].read(body, time.monotonic())
        except Exception as e:
            self._mark(source, f"{url}: {type(e).__name__}: {e}")
            return None
        if picked:
            self.misses[source] = 0
        elif picked is not None and (source == "engine" or source.startswith("replica ")):
            self._mark(source, f"{url} has none of {sorted(self.lines[0]['series'])}'s series")
        return picked

    def _gpus(self) -> list[dict] | None:
        """Each GPU's row, tagged by node, from every GPU exporter still answering, else from the per-node
        samplers, else from nvidia-smi or amd-smi here; None: nothing read."""
        rows: list[dict] | None = None
        for node, url in self.dcgm:
            source = f"dcgm {url}"
            if source in self.unavailable:
                continue
            try:
                with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as response:
                    found = exporter_gpus(response.read().decode("utf-8", "replace"), node)
                if not found:
                    raise ValueError("no GPU series of dcgm-exporter (DCGM_FI_DEV_GPU_UTIL, ... with a `gpu` label) or "
                                     "of AMD's device metrics exporter (gpu_gfx_activity, ... with a `gpu_id` label)")
                rows = (rows or []) + found
                self.misses[source] = 0
            except Exception as e:
                self._mark(source, f"{type(e).__name__}: {e}")
        for feed in self.feeds:
            source = f"gpus {feed.node}"
            if source in self.unavailable:
                continue
            found, error = feed.read()
            if found:
                rows = (rows or []) + found
                self.misses[source] = 0
            elif error:
                self._mark(source, error)
        tool = Path(self.smi[0]).name if self.smi else ""
        if self.smi and tool not in self.unavailable:
            try:
                done = subprocess.run(self.smi, capture_output=True, text=True,  # noqa: S603 the sampler's argv
                                      timeout=FETCH_TIMEOUT_S, check=True)
                rows = tool_gpus(done.stdout, self.host)
                self.misses[tool] = 0
            except (OSError, subprocess.SubprocessError, ValueError) as e:
                self._mark(tool, f"{type(e).__name__}: {e}")
        return rows

    def sample(self) -> None:
        """One sample line of whatever is still available."""
        line: dict = {"kind": "sample", "t": utc_now(), "elapsed_s": round(time.monotonic() - self._t0, 3)}
        if self.replicas:   # the engine is its replicas: each one's page, the engine's values theirs together
            found = {name: values for name, (_, url) in self.replicas.items()
                     if (values := self._page(f"replica {name}", url))}
            if found:
                line["replicas"] = found
            engine = together(found.values())
        else:
            engine = self._page("engine", self.url)
        if engine:
            line["engine"] = engine
            self.engine_values += 1
        workers = {name: found for name, url in self.pages.items() if (found := self._page(f"worker {name}", url))}
        if workers:
            line["workers"] = workers
        rows = self._gpus()
        if rows is not None:
            line["gpus"] = rows
        if len(line) > 3:
            self.lines.append(line)


def together(values: Iterable[dict[str, float]]) -> dict[str, float]:
    """Several replicas' values as one engine's: each role's sum, the KV cache's fullest (metrics.py COMBINE)."""
    roles: dict[str, list[float]] = {}
    for found in values:
        for role, value in found.items():
            roles.setdefault(role, []).append(value)
    return {role: COMBINE.get(role, sum)(found) for role, found in roles.items()}


@contextlib.contextmanager
def sampling(run_dir: Path, endpoint: Endpoint, engine: str, harness: str | None = None,
             interval_s: float | None = None) -> Iterator[Sampler]:
    """Sample the engine behind `endpoint` (its workers, its GPUs: `endpoint.watched`) while the block runs;
    `run_dir/telemetry.jsonl` is written when it ends, however it ends, with the measured phase as the client named
    `harness` (the run spec's) reads it from `run_dir`."""
    sampler = Sampler(Path(run_dir) / FILE, endpoint, engine, harness, interval_s).start()
    try:
        yield sampler
    finally:
        sampler.stop(Path(run_dir))


def load(path: Path) -> list[dict]:
    """The lines of a telemetry.jsonl (none when it is absent or unreadable)."""
    try:
        return [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
    except (OSError, ValueError):
        return []


def gpu_role(row: dict, roles: dict[str, dict[str, str]]) -> str | None:
    """The role of the process that holds the GPU of a sample's row, by the header's `gpu_roles`."""
    return roles.get(str(row.get("node", "")), {}).get(str(int(row.get("index", -1))))


def phase(lines: list[dict]) -> tuple[float, float] | None:
    """The run's measured phase on the `elapsed_s` axis, when its telemetry marks one."""
    found = next((x for x in lines if x.get("kind") == "phase" and x.get("name") == "measured"), None)
    return None if found is None else (float(found["start_s"]), float(found["end_s"]))


def summary(lines: list[dict]) -> dict[str, float]:
    """A run's telemetry at a glance, over its measured phase where it has one (else every sample): the mean GPU
    utilisation of every GPU (`gpu_util_pct`) and of each role's (`gpu_util_pct.prefill`, `.decode`, ...; the header's
    GPU roles), the peak KV-cache use and the peak of waiting requests of the engine and every worker
    (`kv_cache_peak`, `waiting_peak`), and the mean output tokens/s (`tokens_per_s`). Empty without samples."""
    header = next((x for x in lines if x.get("kind") == "header"), {})
    roles = header.get("gpu_roles") or {}
    measured = phase(lines)
    taken = [x for x in lines if x.get("kind") == "sample"
             and (measured is None or measured[0] <= float(x.get("elapsed_s", 0)) <= measured[1])]
    util: dict[str, list[float]] = {}
    peaks: dict[str, float] = {}
    tokens: list[float] = []
    for s in taken:
        for g in s.get("gpus", []):
            if g.get("util_pct") is not None:
                util.setdefault("", []).append(float(g["util_pct"]))
                role = gpu_role(g, roles)
                if role:
                    util.setdefault(role, []).append(float(g["util_pct"]))
        for values in [s.get("engine", {}), *s.get("workers", {}).values()]:
            for role in ("kv_cache", "waiting"):
                if values.get(role) is not None:
                    peaks[role] = max(peaks.get(role, 0.0), float(values[role]))
        if s.get("engine", {}).get("tokens_per_s") is not None:
            tokens.append(float(s["engine"]["tokens_per_s"]))
    out = {("gpu_util_pct" + (f".{role}" if role else "")): round(sum(v) / len(v), 1) for role, v in util.items()}
    out |= {f"{role}_peak": round(value, 4) for role, value in peaks.items()}
    if tokens:
        out["tokens_per_s"] = round(sum(tokens) / len(tokens), 1)
    return out


def of_run(run_dir: Path | str) -> dict[str, float]:
    """`summary` of the telemetry in a run folder (empty when it has none)."""
    return summary(load(Path(run_dir) / FILE))
