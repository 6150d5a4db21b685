"""Plots: PNG files drawn from real loadgen detail logs (a fake SUT behind the real loadgen) and from plain rows, judged
by what each figure draws (titles, axis labels, series and their data, colours, legends), read from the Figure the
plot function saves."""

from __future__ import annotations

from pathlib import Path

import pytest

from submission.results.runs import RunRecord
from tasks.reporting import artifacts as reporting
from tests.loadgen_fake import run_fake

PNG = b"\x89PNG\r\n\x1a\n"
SERVER = ["gpt-oss-120b.*.performance_sample_count_override = 16", "*.Server.target_qps = 2000",
          "*.Server.min_duration = 100", "*.Server.min_query_count = 480"]


@pytest.fixture(scope="module")
def server_run(tmp_path_factory: pytest.TempPathFactory) -> RunRecord:
    folder = run_fake(tmp_path_factory.mktemp("lg") / "srv", scenario="Server", user_conf_lines=SERVER)
    return RunRecord(key="k", system="cpu-smoke", benchmark="gpt-oss-120b", scenario="Server", mode="performance",
                     run_dir=str(folder), valid=True, validity="VALID")


def test_latency_plots_per_scenario(server_run: RunRecord, tmp_path: Path, drawn: dict) -> None:
    from submission.results.logs import load_run
    from submission.rules import load_rules
    from tasks.reporting.plots import _quantiles

    accuracy = server_run.model_copy(update={"mode": "accuracy", "key": "a"})
    written = reporting.plot_run([server_run, accuracy], tmp_path / "plots", "v6.1")
    assert [p.name for p in written] == ["latency-cpu-smoke-gpt-oss-120b-Server.png"] == list(drawn)
    assert written[0].read_bytes().startswith(PNG)
    fig, run = drawn[written[0].name], load_run(Path(server_run.run_dir))
    assert fig.get_suptitle() == "gpt-oss-120b Server on cpu-smoke: VALID"
    limits = load_rules("v6.1").benchmark("gpt-oss-120b").scenario("Server")
    drawn_series = {ax.get_title().split(" (")[0]: ax for ax in fig.axes}
    assert list(drawn_series) == ["TTFT", "TPOT", "latency"]
    for name, stats, limit in (("TTFT", run.ttft_ns, limits.ttft_ms), ("TPOT", run.tpot_ns, limits.tpot_ms)):
        ax = drawn_series[name]   # the log's percentiles, and the round's limit across them
        curve, *limit_lines = ax.get_lines()
        assert list(curve.get_ydata()) == _quantiles(stats)[1] and ax.get_ylabel() == "ms"
        assert [line.get_label() for line in limit_lines] == [f"limit {limit:g} ms"]
        assert list(limit_lines[0].get_ydata()) == [limit, limit]


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


@pytest.fixture()
def drawn(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """Each Figure a plot function hands to `save`, by the file's name, then saved as ever (the PNG users get)."""
    from tasks.reporting import plots

    figures: dict[str, object] = {}

    def keep(fig: object, path: Path) -> Path:
        figures[Path(path).name] = fig
        return save(fig, path)

    save = plots.save
    monkeypatch.setattr(plots, "save", keep)
    return figures


def _lines(ax) -> dict[str, tuple[list, list]]:
    return {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()}


def test_hooks_for_search_sweep_and_scaling(tmp_path: Path, drawn: dict) -> None:
    from matplotlib.colors import to_hex

    from tasks.reporting.figures import INVALID, LIMIT, VALID

    trace = [{"target_qps": 10, "valid": True, "metric": 900.0}, {"target_qps": 20, "valid": False, "metric": 1500.0},
             {"target_qps": 15, "valid": True, "metric": 1300.0}]
    sweep = [{"label": "1P:1D", "metric": 800.0}, {"label": "2P:1D", "metric": 1200.0, "valid": False}]
    scaling = [{"nodes": 2, "metric": 1900.0}, {"nodes": 1, "metric": 1000.0}, {"nodes": 4, "metric": 3500.0}]
    paths = [reporting.plot_search_trace(trace, tmp_path / "search.png", confirmed_qps=15),
             reporting.plot_sweep(sweep, tmp_path / "sweep.png"),
             reporting.plot_scaling(scaling, tmp_path / "scaling.png")]
    assert [p.name for p in paths] == ["search.png", "sweep.png", "scaling.png"] == list(drawn)
    assert all(p.read_bytes().startswith(PNG) for p in paths) and not list(tmp_path.glob(".*.tmp"))

    # the search: target QPS per trial, each point coloured by its verdict, the metric on a second axis
    ax, twin = drawn["search.png"].axes
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == ("peak-QPS search: confirmed 15 QPS", "trial",
                                                                  "target QPS")
    [tried] = _lines(ax).values()
    assert tried == ([1, 2, 3], [10.0, 20.0, 15.0])
    [points] = ax.collections
    assert points.get_offsets().tolist() == [[1, 10], [2, 20], [3, 15]]
    assert [to_hex(c) for c in points.get_facecolors()] == [VALID, INVALID, VALID]
    assert twin.get_ylabel() == "measured metric" and [v for _, v in _lines(twin).values()] == [[900, 1500, 1300]]

    # the sweep: one bar per configuration, its metric written on it, the invalid one in the warning colour
    [ax] = drawn["sweep.png"].axes
    assert (ax.get_title(), ax.get_ylabel()) == ("sweep", "metric")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1P:1D", "2P:1D"]
    assert [b.get_height() for b in ax.patches] == [800.0, 1200.0]
    assert [to_hex(b.get_facecolor()) for b in ax.patches] == [VALID, INVALID]
    assert [t.get_text() for t in ax.texts] == ["800", "1,200"]

    # the scaling: measured throughput by node count (sorted) beside linear from the smallest run, efficiency labels
    [ax] = drawn["scaling.png"].axes
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("nodes", "metric") and ax.get_title().startswith("scaling")
    assert _lines(ax) == {"linear": ([1, 2, 4], [1000.0, 2000.0, 4000.0]),
                          "measured": ([1, 2, 4], [1000.0, 1900.0, 3500.0])}
    assert [to_hex(line.get_color()) for line in ax.get_lines()] == [LIMIT, VALID]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["linear", "measured"]
    assert [t.get_text() for t in ax.texts] == ["100 %", "95 %", "88 %"]
