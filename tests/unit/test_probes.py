"""Probe run specs and the probe cache: a re-run of a search makes no probe at all."""

from __future__ import annotations

import json
from pathlib import Path

from submission.results.runs import RunSpec
from tasks.engines.simulated.queueing import Protocol, SimConfig
from tasks.tuning.bisection import Probe, SearchSettings, search
from tasks.tuning.probes import ProbeCache, Prober, deployment_key, stage_spec, target_qps, with_rate
from tasks.tuning.simulated import judge

SEED = 16159082839903944936
M = "gpt-oss-120b"


def base_spec(engine: str = 'simulated podium-simulated 1 {"tpot_ms": 25}') -> RunSpec:
    return RunSpec(plan="p", profile="smoke", round="v6.1", system="s", benchmark=M, scenario="Server",
                   mode="performance", loadgen_model=M, loadgen_scenario="Server",
                   user_conf=((f"{M}.Server.target_qps", "10"), (f"{M}.Server.min_query_count", "1024"),
                              (f"{M}.*.performance_sample_count_override", "32")),
                   dataset="/d.parquet", dataset_sha256="d" * 8, model_sha256="m" * 8, engine=engine, max_tokens=8,
                   temperature=0.0, max_concurrency=256)


def test_with_rate_replaces_only_what_it_must() -> None:
    spec = with_rate(base_spec(), 12.34567, min_duration_ms=5000, min_query_count=640)
    conf = dict(spec.user_conf)
    assert conf[f"{M}.Server.target_qps"] == "12.35"
    assert conf[f"{M}.Server.min_duration"] == "5000" and conf[f"{M}.Server.min_query_count"] == "640"
    assert conf[f"{M}.*.performance_sample_count_override"] == "32"
    assert target_qps(spec) == 12.35
    full = stage_spec(base_spec(), 20, "confirm", SearchSettings())
    assert dict(full.user_conf)[f"{M}.Server.min_query_count"] == "1024"      # the plan's own length
    probe = stage_spec(base_spec(), 20, "probe", SearchSettings(probe_queries=700, probe_duration_ms=3000))
    assert dict(probe.user_conf)[f"{M}.Server.min_query_count"] == "700"
    assert probe.key() != full.key() and deployment_key(probe) == deployment_key(full)


def test_cache_is_per_deployment_and_survives_a_restart(tmp_path: Path) -> None:
    spec = with_rate(base_spec(), 20, min_duration_ms=None, min_query_count=None)
    cache = ProbeCache(tmp_path, spec)
    cache.put(spec, Probe(qps=20, stage="confirm", valid=True, duration_s=3.5))
    again = ProbeCache(tmp_path, spec).get(spec)
    assert again is not None and again.valid and again.cached and again.duration_s == 3.5
    other = base_spec(engine='simulated podium-simulated 1 {"tpot_ms": 30}')
    assert ProbeCache(tmp_path, other).get(with_rate(other, 20, min_duration_ms=None, min_query_count=None)) is None
    assert json.loads(cache.path.read_text())["identity"]["engine"].endswith('{"tpot_ms": 25}')
    assert not list(tmp_path.glob(".*.tmp"))                              # written atomically


def test_a_rerun_makes_no_probe(tmp_path: Path) -> None:
    """The search against the model, twice: the second time every verdict comes from the cache file."""
    cfg = SimConfig(prefill_workers=1, prefill_ms=3, decode_workers=2, decode_slots=16, tpot_ms=25)
    probe_protocol = Protocol(3000, 80, 1000, 640, 32, SEED, max_tokens=8)
    full_protocol = Protocol(3000, 80, 1000, 1024, 32, SEED, max_tokens=8)
    model = judge(cfg, probe_protocol, full_protocol)
    calls = []

    def run(spec: RunSpec, stage: str, qps: float, engine: object, work_dir: str) -> Probe:
        calls.append((stage, qps))
        return model(qps, stage)

    settings = SearchSettings(precision=0.03, probe_queries=640, probe_duration_ms=1000)
    first = Prober(base_spec(), settings, ProbeCache(tmp_path, base_spec()), None, str(tmp_path), run)
    result = search(first, 90.0, settings)
    assert first.ran == len(calls) == len(result.trace) > 3
    second = Prober(base_spec(), settings, ProbeCache(tmp_path, base_spec()), None, str(tmp_path), run)
    again = search(second, 90.0, settings)
    assert second.ran == 0 and len(calls) == first.ran                       # no probe repeated
    assert again.qps == result.qps and again.runs == 0
    assert [p.qps for p in again.trace] == [p.qps for p in result.trace]


def test_the_log_says_whose_verdict_each_line_gives(tmp_path: Path, caplog) -> None:
    """A probe INVALID by early stopping alone, its p99s within their limits, passes for the search: the log line of
    the run names the checker's INVALID, the search's line its PASS and why, never a bare PASS beside the INVALID."""
    def run(spec: RunSpec, stage: str, qps: float, engine: object, work_dir: str) -> Probe:
        return Probe(qps=qps, stage=stage, valid=False, margin=0.8, tpot_p99_ms=12.0,
                     reasons=("TPOT early stopping 99th percentile estimate not met",))

    prober = Prober(base_spec(), SearchSettings(), ProbeCache(tmp_path, base_spec()), None, str(tmp_path), run)
    with caplog.at_level("INFO", logger="podium.probes"):
        judged = prober(20.0, "probe")
    assert judged.valid
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("search, probe 20 q/s: PASS for the search: the checker's INVALID is early stopping alone")
