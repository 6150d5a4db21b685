"""Probe runs of the peak-QPS search: the run spec of a probe, the run judged by loadgen's own verdict, and the
probe cache that keeps every verdict so a re-run never repeats a probe.

The cache is a JSON file per deployment config (`<workspace>/search/<config hash>.json`): the engine with its
version and options, the model and data set hashes, the benchmark, scenario and request settings. Inside it each
probe is keyed by the content key of its run spec, which adds the rate and the probe length (target_qps,
min_duration, min_query_count), so a probe is reused exactly when loadgen would be asked the same question. A
JSON file rather than Prefect's task cache: the search reads earlier verdicts as data to choose its next rate,
the file is readable (`podium search` prints where it is), survives a reset Prefect database, and the sweep and the
benchmark share it.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from submission.files import write_atomic
from submission.logs import load_run
from submission.rules import load_rules
from submission.runs import RunSpec
from tasks.harness import runner
from tasks.measuring import set_aside
from tasks.reporting import progress
from tasks.serving.session import EngineSession
from tasks.steps import retry_transient, run_logger
from tasks.tuning.bisection import Probe, SearchSettings, Stage, round_qps

IDENTITY_FIELDS = ("round", "system", "benchmark", "scenario", "loadgen_model", "loadgen_scenario", "dataset_sha256",
                   "model_sha256", "engine", "max_tokens", "temperature", "max_concurrency", "harness_workers")


def deployment_identity(spec: RunSpec) -> dict:
    """What a probe's verdict depends on besides its rate and length."""
    return {name: getattr(spec, name) for name in IDENTITY_FIELDS}


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
    """A probe is short (the search's length); a confirmation keeps the plan's own length."""
    if stage == "probe":
        return with_rate(base, qps, min_duration_ms=settings.probe_duration_ms,
                         min_query_count=settings.probe_queries)
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


def margin(scenario, ttft_ms: float | None, tpot_ms: float | None, latency_ms: float | None) -> float | None:
    """The worst p99 over its limit (`submission.rules.ScenarioRules`): TTFT and TPOT where the scenario limits
    them, else end-to-end latency; None for Offline."""
    pairs = [(ttft_ms, scenario.ttft_ms), (tpot_ms, scenario.tpot_ms)] if scenario.ttft_ms or scenario.tpot_ms \
        else [(latency_ms, scenario.latency_ms)]
    ratios = [value / limit for value, limit in pairs if value is not None and limit]
    return round(max(ratios), 4) if ratios else None


def run_probe(spec: RunSpec, stage: Stage, endpoint, work_dir: Path, stall_s: float | None = None) -> Probe:
    """Run one probe and judge it by loadgen's verdict (VALID, with no loadgen errors and no failed requests)."""
    qps = target_qps(spec)
    run_dir = Path(work_dir) / "search-runs" / spec.key()
    if run_dir.exists():   # a crashed attempt's partial logs: kept apart, never judged
        set_aside(run_dir)
    started = time.monotonic()
    stats = runner.run(spec, endpoint, run_dir, stall_s=stall_s)
    duration = time.monotonic() - started
    run = load_run(run_dir)
    scenario = load_rules(spec.round).benchmark(spec.benchmark).scenario(spec.scenario)
    reasons = list(run.invalid_reasons)
    if run.num_errors:
        reasons.append(f"{run.num_errors} loadgen error(s)")
    if stats.get("failed"):
        reasons.append(f"{stats['failed']} request(s) failed")

    def ms(ns: int | None) -> float | None:
        return None if ns is None else round(ns / 1e6, 3)

    ttft, tpot, latency = ms(run.ttft_p99_ns), ms(run.tpot_p99_ns), ms(run.latency_ns.get("99.00"))
    return Probe(qps=qps, stage=stage, valid=run.valid and not run.num_errors and not stats.get("failed"),
                 reasons=tuple(reasons), ttft_p99_ms=ttft, tpot_p99_ms=tpot, latency_p99_ms=latency,
                 margin=margin(scenario, ttft, tpot, latency), metric=run.result(scenario.result_field),
                 completed_qps=run.completed_samples_per_second or run.samples_per_second,
                 duration_s=round(duration, 3), run_dir=str(run_dir))


@task(name="probe", task_run_name="{stage}[{spec.scenario}@{qps}]", cache_policy=NO_CACHE, retries=1,
      retry_delay_seconds=2, retry_condition_fn=retry_transient)
def probe_task(spec: RunSpec, stage: Stage, qps: float, engine: EngineSession, work_dir: str) -> Probe:
    """One probe on the (lazily launched, relaunched when dead) engine; a harness crash is retried once. A hung
    engine (the harness's stall watchdog) is stopped first, so the retry gets a fresh one."""
    with engine.stopped_if_hung():
        probe = run_probe(spec, stage, engine.endpoint(), Path(work_dir), stall_s=engine.stall_s)
    run_logger("probes").info("%s %s q/s: %s (TTFT p99 %s ms, TPOT p99 %s ms) in %.1f s%s", stage, qps,
                              probe.verdict, probe.ttft_p99_ms, probe.tpot_p99_ms, probe.duration_s,
                              f": {'; '.join(probe.reasons)}" if probe.reasons else "")
    return probe


class Prober:
    """The search's judge for one deployment: a cached verdict when there is one, else a probe run now."""

    def __init__(self, base: RunSpec, settings: SearchSettings, cache: ProbeCache, engine: EngineSession | None,
                 work_dir: str, run: Callable[..., Probe] | None = None) -> None:
        self.base, self.settings, self.cache = base, settings, cache
        self.engine, self.work_dir = engine, work_dir
        self.run = run or probe_task        # (spec, stage, qps, engine, work_dir) -> Probe
        self.ran = 0

    def __call__(self, qps: float, stage: Stage) -> Probe:
        return self._run(stage_spec(self.base, qps, stage, self.settings), stage)

    def offline(self, spec: RunSpec) -> Probe:
        """The plan's own Offline run: its samples/s (`completed_qps`) start the bracket."""
        return self._run(spec, "offline")

    def _run(self, spec: RunSpec, stage: Stage) -> Probe:
        probe = self.cache.get(spec)
        if probe is None:
            probe = self.run(spec, stage, target_qps(spec), self.engine, self.work_dir)
            self.cache.put(spec, probe)
            self.ran += 1
        progress.finished(f"{spec.label} {stage} at {target_qps(spec):g} q/s: {probe.verdict}"
                          + (" (cached)" if probe.cached else ""))
        return probe
