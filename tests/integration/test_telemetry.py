"""Telemetry of a real measured run: a short loadgen Server run (tasks.harness.measure.run_once) against the simulated
engine writes telemetry.jsonl with samples of its running, waiting and KV-use gauges, and the report's plots include
the run's telemetry plot."""

from __future__ import annotations

from pathlib import Path

import pytest

from submission.results.runs import RunRecord
from tasks.engines import Endpoint
from tasks.harness.measure import run_once
from tasks.measuring import RunRejected
from tasks.reporting.plots import plot_run
from tasks.serving import telemetry
from tests.integration.engines_support import server_spec, simulated_engine

pytestmark = pytest.mark.integration


class Running:
    """An engine someone else started (tasks.measuring.Engine): here the simulated server of the test."""

    stall_s = None

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint

    def endpoint(self) -> Endpoint:
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
    assert all(set(s) == {"running", "waiting", "kv_cache"} for s in samples), samples
    assert max(s["running"] for s in samples) > 0 and max(s["waiting"] for s in samples) > 0, samples
    assert 0 < max(s["kv_cache"] for s in samples) <= 1, samples
    pngs = plot_run([rec], tmp_path / "plots", "v6.1")
    assert tmp_path / "plots" / f"telemetry-{rec.system}-{rec.benchmark}-{rec.scenario}.png" in pngs
