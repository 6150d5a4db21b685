"""Telemetry of real measured runs against the simulated engine: a short loadgen Server run (tasks.harness.measure.
run_once) writes telemetry.jsonl with samples of its running, waiting and KV-use gauges, its tokens/s and loadgen's
measured phase, and the report's plots include the run's telemetry plot; a search probe (tasks.harness.probe) is
sampled the same way and carries the summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from submission.results.runs import RunRecord
from tasks.engines import Endpoint
from tasks.harness.measure import run_once
from tasks.harness.probe import run_probe
from tasks.measuring import RunRejected
from tasks.reporting.plots import plot_run
from tasks.serving import telemetry
from tests.integration.engines_support import server_spec, simulated_engine

pytestmark = pytest.mark.integration


class Running:
    """An engine someone else started (tasks.measuring.Engine): here the simulated server of the test."""

    stall_s = None
    max_lost = None

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint

    def endpoint(self, performance: bool = True) -> Endpoint:
        return self._endpoint

    def alive(self) -> bool:
        return True

    def log_report(self, lines: int = 20) -> str:
        return ""

    def close(self) -> None:
        pass


def test_a_loadgen_run_writes_and_plots_its_telemetry(smoke_store: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry, "INTERVAL_S", 0.2)
    monkeypatch.setattr(telemetry.shutil, "which", lambda name: None)   # the engine's series only, GPUs or not
    # a decode pool of 4 slots at 20 ms a token (about 14 requests/s) offered 20 QPS: requests queue, every gauge moves
    options = {"decode_slots": 4, "tpot_ms": 20, "output_tokens": 8}
    with simulated_engine(options) as (_, endpoint):
        spec = server_spec(smoke_store / "datasets" / "smoke" / "perf_eval_ref.parquet", qps=20, duration_ms=1500,
                           workers=1, engine="simulated", min_queries=16)
        try:
            rec: RunRecord = run_once(spec, Running(endpoint), tmp_path, None, None)
        except RunRejected as rejected:   # INVALID under that load is fine: the telemetry is what is tested
            rec = rejected.record
    lines = telemetry.load(Path(rec.run_dir) / telemetry.FILE)
    assert lines[0]["kind"] == "header" and lines[0]["engine"] == "simulated"
    assert not [x for x in lines if x["kind"] == "unavailable"], lines
    samples = [x["engine"] for x in lines if x["kind"] == "sample"]
    assert len(samples) >= 5, samples
    assert all({"running", "waiting", "kv_cache"} <= set(s) for s in samples), samples
    assert max(s.get("tokens_per_s", 0) for s in samples) > 0, samples   # the token counter's rate
    assert max(s["running"] for s in samples) > 0 and max(s["waiting"] for s in samples) > 0, samples
    assert 0 < max(s["kv_cache"] for s in samples) <= 1, samples
    [phase] = [x for x in lines if x["kind"] == "phase"]   # loadgen's power_begin..power_end, inside the sampling
    assert 0 < phase["start_s"] < phase["end_s"] <= max(x["elapsed_s"] for x in lines if x["kind"] == "sample") + 1
    pngs = plot_run([rec], tmp_path / "plots", "v6.1")
    assert tmp_path / "plots" / f"telemetry-{rec.system}-{rec.benchmark}-{rec.scenario}.png" in pngs


def test_a_search_probe_is_sampled_and_carries_its_telemetry(smoke_store: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry, "INTERVAL_S", 0.2)
    monkeypatch.setattr(telemetry.shutil, "which", lambda name: None)
    with simulated_engine({"decode_slots": 4, "tpot_ms": 20, "output_tokens": 8}) as (_, endpoint):
        spec = server_spec(smoke_store / "datasets" / "smoke" / "perf_eval_ref.parquet", qps=20, duration_ms=1000,
                           workers=1, engine="simulated", min_queries=16)
        probe = run_probe(spec, "probe", 20, endpoint, tmp_path)
    lines = telemetry.load(Path(str(probe.run_dir)) / telemetry.FILE)
    assert [x["kind"] for x in lines].count("sample") >= 3 and [x["kind"] for x in lines].count("phase") == 1
    assert 0 < probe.telemetry["kv_cache_peak"] <= 1 and probe.telemetry["waiting_peak"] > 0, probe.telemetry
    assert probe.telemetry["tokens_per_s"] > 0, probe.telemetry
