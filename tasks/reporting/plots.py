"""Plots of a run as PNG files: latency distribution and telemetry per scenario (tasks/reporting/telemetry_plots.py),
search trace, sweep and scaling.

Plain functions over plain data, each writing one PNG and returning its path (tasks/reporting/figures.py);
`tasks.reporting.artifacts` re-exports them. The latency plot reads the loadgen detail log of each performance run:
loadgen records percentiles (50, 90, 95, 97, 99, 99.9 and min/mean/max), not every sample, so the "distribution" is
the quantile curve those percentiles trace, with the round's limit drawn across it.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from submission.results.logs import load_run
from submission.results.runs import RunRecord
from tasks.reporting.figures import INVALID, LIMIT, VALID, figure, save
from tasks.reporting.telemetry_plots import plot_telemetry

_PCT = re.compile(r"^\d+(\.\d+)?$")


def _quantiles(stats: dict[str, int]) -> tuple[list[float], list[float]]:
    """(percentile, ms) points in order; min is the 0th and max the 100th percentile."""
    points = {float(k): v for k, v in stats.items() if _PCT.match(k)}
    if "min" in stats:
        points[0.0] = stats["min"]
    if "max" in stats:
        points[100.0] = stats["max"]
    ordered = sorted(points.items())
    return [p for p, _ in ordered], [v / 1e6 for _, v in ordered]


def _nines(pct: float) -> float:
    """A tail-stretching position: 0 -> 0, 90 -> 1, 99 -> 2, 99.9 -> 3; the maximum sits at 4."""
    return 4.0 if pct >= 100.0 else -math.log10(1.0 - pct / 100.0)


def _label(pct: float) -> str:
    return "max" if pct >= 100.0 else "min" if pct <= 0.0 else f"p{pct:g}"


def plot_latency(record: RunRecord, path: Path, limits_ms: Mapping[str, float | None] | None = None) -> Path:
    """TTFT, TPOT and end-to-end latency percentiles of one performance run, from its detail log."""
    run = load_run(Path(record.run_dir))
    series = [("TTFT", run.ttft_ns), ("TPOT", run.tpot_ns), ("latency", run.latency_ns)]
    series = [(name, stats) for name, stats in series if any(_PCT.match(k) for k in stats)]
    fig, axes = figure(4.0 * max(1, len(series)), 3.6, 1, max(1, len(series)))
    for ax, (name, stats) in zip(axes[0], series, strict=False):
        pct, ms = _quantiles(stats)
        x = [_nines(p) for p in pct]
        ax.plot(x, ms, marker="o", color=VALID if record.valid else INVALID)
        ax.set_xticks(x, [_label(p) for p in pct], fontsize="small", rotation=45)
        limit = (limits_ms or {}).get(name)
        if limit is not None:
            ax.axhline(limit, color=LIMIT, linestyle="--", label=f"limit {limit:g} ms")
            ax.legend(loc="upper left", fontsize="small")
        ax.set_title(f"{name} ({'mean %.1f ms' % (stats['mean'] / 1e6) if 'mean' in stats else 'no mean'})")
        ax.set_xlabel("percentile (tail stretched)")
        ax.set_ylabel("ms")
        ax.grid(alpha=0.3)
    if not series:
        axes[0][0].text(0.5, 0.5, "no latency percentiles in the detail log", ha="center", va="center")
    fig.suptitle(f"{record.benchmark} {record.scenario} on {record.system}: {record.validity or 'no verdict'}")
    return save(fig, path)


def plot_search_trace(trace: Sequence[Mapping[str, Any]], path: Path, confirmed_qps: float | None = None) -> Path:
    """A peak-QPS search: each trial's `target_qps` in the order tried, coloured by `valid`; the measured
    `metric` (optional) on a second axis. Keys per trial: target_qps, valid, and optionally metric. The title
    names `confirmed_qps`, the rate a full-length run confirmed (a short probe's pass is not a result)."""
    fig, axes = figure()
    ax = axes[0][0]
    steps = list(range(1, len(trace) + 1))
    qps = [float(t["target_qps"]) for t in trace]
    ax.plot(steps, qps, color=LIMIT, linewidth=1)
    ax.scatter(steps, qps, c=[VALID if t.get("valid") else INVALID for t in trace], zorder=3)
    ax.set_xlabel("trial")
    ax.set_ylabel("target QPS")
    ax.grid(alpha=0.3)
    if any(t.get("metric") is not None for t in trace):
        twin = ax.twinx()
        twin.plot(steps, [t.get("metric") for t in trace], color=VALID, linestyle=":", marker="x")
        twin.set_ylabel("measured metric")
    ax.set_title("peak-QPS search: " + (f"confirmed {confirmed_qps:g} QPS" if confirmed_qps else "no rate confirmed"))
    return save(fig, path)


def plot_sweep(rows: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """A configuration sweep (e.g. prefill:decode ratios): one bar per row's `label` with its `metric`,
    invalid rows (`valid` False) in the warning colour. Keys per row: label, metric, and optionally valid."""
    fig, axes = figure()
    ax = axes[0][0]
    labels = [str(r["label"]) for r in rows]
    values = [float(r.get("metric") or 0.0) for r in rows]
    ax.bar(labels, values, color=[INVALID if r.get("valid") is False else VALID for r in rows])
    for i, v in enumerate(values):
        ax.annotate(f"{v:,.0f}", (i, v), ha="center", va="bottom", fontsize="small")
    ax.set_ylabel("metric")
    ax.set_title("sweep")
    ax.grid(axis="y", alpha=0.3)
    return save(fig, path)


def plot_scaling(rows: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Throughput against node count beside linear scaling from the smallest run. Keys per row: nodes, metric."""
    ordered = sorted(rows, key=lambda r: int(r["nodes"]))
    nodes = [int(r["nodes"]) for r in ordered]
    metric = [float(r["metric"]) for r in ordered]
    fig, axes = figure()
    ax = axes[0][0]
    if ordered:
        per_node = metric[0] / nodes[0]
        ax.plot(nodes, [n * per_node for n in nodes], color=LIMIT, linestyle="--", label="linear")
        ax.plot(nodes, metric, color=VALID, marker="o", label="measured")
        for n, m in zip(nodes, metric, strict=True):
            ax.annotate(f"{100 * m / (n * per_node):.0f} %", (n, m), textcoords="offset points", xytext=(0, 6),
                        ha="center", fontsize="small")
        ax.legend(loc="upper left")
    ax.set_xlabel("nodes")
    ax.set_ylabel("metric")
    ax.set_title("scaling (labels: efficiency against linear)")
    ax.grid(alpha=0.3)
    return save(fig, path)


def plot_run(records: Sequence[RunRecord], folder: Path, round: str) -> list[Path]:
    """One latency PNG per performance run of the results, named `latency-<system>-<benchmark>-<scenario>.png`,
    and one of its telemetry where it has samples (`telemetry-<...>.png`); a run whose detail log is unreadable is
    skipped (its failure is reported elsewhere)."""
    from submission.base.errors import PodiumError
    from submission.rules import load_rules
    from tasks.serving import telemetry

    rules = load_rules(round)
    written = []
    for r in records:
        if r.mode != "performance":
            continue
        try:
            sc = rules.benchmark(r.benchmark).scenario(r.scenario)
            limits = {"TTFT": sc.ttft_ms, "TPOT": sc.tpot_ms, "latency": sc.latency_ms}
        except PodiumError:
            limits = {}
        tag = f"{r.system}-{r.benchmark}-{r.scenario}"
        png = plot_telemetry(telemetry.load(Path(r.run_dir) / telemetry.FILE), Path(folder) / f"telemetry-{tag}.png",
                             f"{r.benchmark} {r.scenario} on {r.system}: engine and GPU telemetry")
        with contextlib.suppress(PodiumError):
            written.append(plot_latency(r, Path(folder) / f"latency-{tag}.png", limits))
        if png is not None:
            written.append(png)
    return written
