"""Plots: PNG files drawn from real loadgen detail logs (a fake SUT behind the real loadgen) and from plain rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from submission.results.runs import RunRecord
from tasks.reporting import artifacts as reporting
from tests.loadgen_fake import run_fake

PNG = b"\x89PNG\r\n\x1a\n"
SERVER = ["gpt-oss-120b.*.performance_sample_count_override = 16", "*.Server.target_qps = 2000",
          "*.Server.min_duration = 100", "*.Server.min_query_count = 480"]


def is_png(path: Path) -> bool:
    data = path.read_bytes()
    return data.startswith(PNG) and len(data) > 5000


@pytest.fixture(scope="module")
def server_run(tmp_path_factory: pytest.TempPathFactory) -> RunRecord:
    folder = run_fake(tmp_path_factory.mktemp("lg") / "srv", scenario="Server", user_conf_lines=SERVER)
    return RunRecord(key="k", system="cpu-smoke", benchmark="gpt-oss-120b", scenario="Server", mode="performance",
                     run_dir=str(folder), valid=True, validity="VALID")


def test_latency_plots_per_scenario(server_run: RunRecord, tmp_path: Path) -> None:
    accuracy = server_run.model_copy(update={"mode": "accuracy", "key": "a"})
    written = reporting.plot_run([server_run, accuracy], tmp_path / "plots", "v6.1")
    assert [p.name for p in written] == ["latency-cpu-smoke-gpt-oss-120b-Server.png"]
    assert is_png(written[0])


def test_a_missing_detail_log_is_skipped(server_run: RunRecord, tmp_path: Path) -> None:
    gone = server_run.model_copy(update={"run_dir": str(tmp_path / "nothing")})
    assert reporting.plot_run([gone], tmp_path / "plots", "v6.1") == []


def test_quantile_points_come_from_the_log(server_run: RunRecord) -> None:
    from submission.results.logs import load_run
    from tasks.reporting.plots import _quantiles

    stats = load_run(Path(server_run.run_dir)).ttft_ns
    pct, ms = _quantiles(stats)
    assert pct[0] == 0.0 and pct[-1] == 100.0 and 99.0 in pct
    assert ms == sorted(ms) and ms[pct.index(99.0)] == stats["99.00"] / 1e6


def test_hooks_for_search_sweep_and_scaling(tmp_path: Path) -> None:
    trace = [{"target_qps": 10, "valid": True, "metric": 900.0}, {"target_qps": 20, "valid": False, "metric": 1500.0},
             {"target_qps": 15, "valid": True, "metric": 1300.0}]
    sweep = [{"label": "1P:1D", "metric": 800.0}, {"label": "2P:1D", "metric": 1200.0, "valid": False}]
    scaling = [{"nodes": 2, "metric": 1900.0}, {"nodes": 1, "metric": 1000.0}, {"nodes": 4, "metric": 3500.0}]
    paths = [reporting.plot_search_trace(trace, tmp_path / "search.png"),
             reporting.plot_sweep(sweep, tmp_path / "sweep.png"),
             reporting.plot_scaling(scaling, tmp_path / "scaling.png")]
    assert all(is_png(p) for p in paths)
    assert not list(tmp_path.glob(".*.tmp"))
