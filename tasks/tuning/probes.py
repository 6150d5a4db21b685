"""Probe runs of the peak-QPS search: the run spec of a probe, the probe task (the run measured and judged by the
plan's client, tasks.clients: loadgen's verdict, or the endpoints client's early-stopping p99 against the limit), and
the probe cache that keeps every verdict so a re-run never repeats a probe.

The cache is a JSON file per deployment config (`<workspace>/search/<config hash>.json`): the engine with its
version and options, the model and data set hashes, the benchmark, scenario, measuring client and request settings.
Inside it each probe is keyed by the content key of its run spec, which adds the rate and the probe length
(target_qps, min_duration, min_query_count), so a probe is reused exactly when the client would be asked the same
question. A JSON file rather than Prefect's task cache: the search reads earlier verdicts as data to choose its next
rate, the file is readable (`podium search` prints where it is), survives a reset Prefect database, and the sweep and
the benchmark share it.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from submission.base.files import write_atomic
from submission.budget import cost, run_length
from submission.results.runs import RunSpec
from submission.rules import load_rules
from tasks.clients import client
from tasks.reporting import progress
from tasks.serving.session import EngineSession
from tasks.steps import retry_transient, run_logger
from tasks.tuning import overload
from tasks.tuning.bisection import Probe, SearchSettings, Stage, round_qps

IDENTITY_FIELDS = ("round", "system", "benchmark", "scenario", "loadgen_model", "loadgen_scenario", "dataset_sha256",
                   "model_sha256", "engine", "max_tokens", "temperature", "max_concurrency", "harness_workers")


def deployment_identity(spec: RunSpec) -> dict:
    """What a probe's verdict depends on besides its rate and length (the measuring client where it is not loadgen:
    loadgen's deployments keep the keys they had before the endpoints client)."""
    identity = {name: getattr(spec, name) for name in IDENTITY_FIELDS}
    return identity if spec.harness == "loadgen" else identity | {"harness": spec.harness}


def deployment_key(spec: RunSpec) -> str:
    blob = json.dumps(deployment_identity(spec), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def with_rate(spec: RunSpec, qps: float, *, min_duration_ms: int | None, min_query_count: int | None) -> RunSpec:
    """`spec` with its user.conf target_qps set to `qps` and, when given, its run length replaced."""
    prefix = f"{spec.loadgen_model}.{spec.loadgen_scenario}."
    replace = {f"{prefix}target_qps": f"{round_qps(qps):g}"}
    if min_duration_ms is not None:
        replace[f"{prefix}min_duration"] = str(min_duration_ms)
    if min_query_count is not None:
        replace[f"{prefix}min_query_count"] = str(min_query_count)
    lines = [(k, v) for k, v in spec.user_conf if k not in replace] + sorted(replace.items())
    return spec.model_copy(update={"user_conf": tuple(lines)})


def stage_spec(base: RunSpec, qps: float, stage: Stage, settings: SearchSettings) -> RunSpec:
    """A probe is short (the search's length, in the terms of the client that measures it: `probe_length`); a
    confirmation keeps the plan's own length."""
    if stage == "probe":
        duration_ms, queries = client(base).part("probe_length")(round_qps(qps), settings, base)
        return with_rate(base, qps, min_duration_ms=duration_ms, min_query_count=queries)
    return with_rate(base, qps, min_duration_ms=None, min_query_count=None)


class ProbeCache:
    """Verdicts by run-spec key, for one deployment config; every write is atomic (temp file, then rename)."""

    def __init__(self, root: Path, base: RunSpec) -> None:
        self.identity = deployment_identity(base)
        self.path = Path(root) / f"{deployment_key(base)}.json"
        self.entries: dict[str, dict] = {}
        if self.path.is_file():
            data = json.loads(self.path.read_text())
            if data.get("identity") == self.identity:
                self.entries = data.get("probes", {})

    def get(self, spec: RunSpec) -> Probe | None:
        entry = self.entries.get(spec.key())
        return None if entry is None else Probe.model_validate(entry).model_copy(update={"cached": True})

    def put(self, spec: RunSpec, probe: Probe) -> None:
        self.entries[spec.key()] = probe.model_dump(mode="json") | {"cached": False}
        write_atomic(self.path, json.dumps({"identity": self.identity, "probes": self.entries}, indent=2,
                                           sort_keys=True))

    def __len__(self) -> int:
        return len(self.entries)


def target_qps(spec: RunSpec) -> float:
    """The rate the spec's user.conf asks for (0 when it sets none)."""
    return float(dict(spec.user_conf).get(f"{spec.loadgen_model}.{spec.loadgen_scenario}.target_qps", 0))


@task(name="probe", task_run_name="{stage}[{spec.scenario}@{qps}]", cache_policy=NO_CACHE, retries=1,
      retry_delay_seconds=2, retry_condition_fn=retry_transient)
def probe_task(spec: RunSpec, stage: Stage, qps: float, engine: EngineSession, work_dir: str,
               tokenizer: str | None = None) -> Probe:
    """One probe on the (lazily launched, relaunched when dead) engine, measured and judged by the spec's client
    (tasks.clients; its p99s are those its checker judges: the endpoints client's are early-stopping estimates); a
    client crash or a dead engine is retried once."""
    probe = client(spec).part("probe")(spec, stage, qps, engine, work_dir, tokenizer)
    p99s = ", ".join(f"{name} p99 {value:g} ms" for name, value in (
        ("TTFT", probe.ttft_p99_ms), ("TPOT", probe.tpot_p99_ms), ("latency", probe.latency_p99_ms))
        if value is not None)
    run_logger("probes").info("%s %s q/s: the checker's %s (%s) in %.1f s%s", stage, qps, probe.checked,
                              p99s or "no p99", probe.duration_s,
                              f": {'; '.join(probe.reasons)}" if probe.reasons else "")
    return probe


class Prober:
    """The search's judge for one deployment: a cached verdict when there is one, else a probe run now."""

    def __init__(self, base: RunSpec, settings: SearchSettings, cache: ProbeCache, engine: EngineSession | None,
                 work_dir: str, run: Callable[..., Probe] | None = None, tokenizer: str | None = None) -> None:
        self.base, self.settings, self.cache = base, settings, cache
        self.engine, self.work_dir = engine, work_dir
        # run(spec, stage, qps, engine, work_dir) -> Probe: the probe task, given the staged model's tokenizer.json
        # (the endpoints client reads it), unless a test brings its own
        self.run = run or functools.partial(probe_task, tokenizer=tokenizer)
        self.ran = 0
        self.capacity = overload.Capacity(settings.overload_tolerance)
        self.limits = overload.limits(load_rules(base.round).benchmark(base.benchmark).scenario(base.scenario))

    @functools.cached_property
    def rows(self) -> int | None:
        """The staged data set's rows (a file, or a folder of parquet shards): a pass of the endpoints client (None:
        loadgen, or no local data set)."""
        path = Path(self.base.dataset)
        if self.base.harness != "endpoints" or not path.exists():
            return None
        import pyarrow.parquet as pq

        files = [path] if path.is_file() else sorted(path.rglob("*.parquet"))
        return sum(pq.ParquetFile(f).metadata.num_rows for f in files) or None

    def full_seconds(self, qps: float) -> float:
        """How long a full-length run (the plan's own length, performance only) lasts at `qps`
        (submission.budget.run_length, through cost)."""
        return cost.spec_seconds(self.base, qps, rows=self.rows)

    def full_issue_seconds(self, qps: float) -> float:
        """How long a full-length run at `qps` keeps issuing: what a queue over capacity grows for, without the drain
        that its wall time (`full_seconds`) adds after the last issue."""
        return cost.spec_length(self.base, qps, rows=self.rows).issue_seconds

    def planned_samples(self, spec: RunSpec) -> int | None:
        """The samples a run of `spec` issues by the one model of a run's length (submission.budget.run_length), for
        the endpoints client, which issues exactly its count; None for loadgen, whose count follows its schedule."""
        if spec.harness != "endpoints":
            return None
        return run_length.run_length(spec, load_rules(spec.round), rows=self.rows).samples

    def __call__(self, qps: float, stage: Stage) -> Probe:
        """The verdict at `qps`: the checker's, and for a short probe also its overload signals' (a probe whose
        backlog would push a full-length run over a limit fails)."""
        probe = self._run(stage_spec(self.base, qps, stage, self.settings), stage)
        probe = overload.judged(probe, self.limits, self.full_issue_seconds(qps), self.capacity)
        run_logger("probes").info("search, %s %g q/s: %s", stage, qps, probe.why)   # `why` leads with the verdict
        return probe

    def offline(self, spec: RunSpec) -> Probe:
        """The plan's own Offline run: its samples/s (`completed_qps`) start the bracket."""
        return self._run(spec, "offline")

    def _run(self, spec: RunSpec, stage: Stage) -> Probe:
        """The verdict on `spec` in the role `stage` (a probe as long as the plan's runs is also its confirmation)."""
        probe = self.cache.get(spec)
        if probe is not None:
            probe = probe.model_copy(update={"stage": stage})
        else:
            probe = self.run(spec, stage, target_qps(spec), self.engine, self.work_dir)
            probe = probe.model_copy(update={"planned_samples": self.planned_samples(spec)})
            self.cache.put(spec, probe)
            self.ran += 1
        progress.finished(f"{spec.label} {stage} at {target_qps(spec):g} q/s: the checker's {probe.checked}"
                          + (" (cached)" if probe.cached else ""))
        return probe
