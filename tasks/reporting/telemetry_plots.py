"""Telemetry as PNG plots (a run's telemetry.jsonl, tasks/serving/telemetry.py), with the run's measured phase
shaded on every panel:

- one run: the engine's and each worker's requests running and waiting (queue depth), KV-cache use, output tokens/s
  and KV-transfer time, then for each node its GPUs' utilisation, memory, power and temperature (NVIDIA's and AMD's
  alike: the rows of either exporter carry the same fields), each GPU labelled with the role of the process that
  holds it;
- a prefill:decode sweep: one column per split, side by side on shared scales, each row one question: GPU
  utilisation per role, KV-cache use, waiting requests, output tokens/s.

Each panel is drawn only when it has data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tasks.reporting.figures import INVALID, LIMIT, VALID, figure, save
from tasks.serving.telemetry import gpu_role, phase

Series = dict[str, tuple[list[float], list[float]]]   # label -> (seconds into the run, values)
Panel = tuple[str, str, Series]                       # title, unit, its series

# (title, unit, role) of the engine-level panels: the engine's (`engine`) and each worker's (`workers`) values
ENGINE_PANELS = (("requests running", "requests", "running"), ("requests waiting (queue depth)", "requests", "waiting"),
                 ("KV-cache use", "fraction", "kv_cache"), ("output tokens/s", "tokens/s", "tokens_per_s"),
                 ("KV transfer (mean)", "s", "kv_transfer_s"))
ROLE_COLOURS = {"engine": LIMIT, "prefill": INVALID, "decode": VALID}   # the same in every column of a sweep
# (title, unit, field) of each node's GPU panels
GPU_PANELS = (("GPU utilisation", "%", "util_pct"), ("GPU memory used", "MiB", "memory_mib"),
              ("GPU power", "W", "power_w"), ("GPU temperature", "°C", "temp_c"))


def _series(samples: Sequence[Mapping[str, Any]], read: Callable[[Mapping[str, Any]], dict[str, Any]]) -> Series:
    """label -> (elapsed s, values) of what `read` gives each sample as label -> value."""
    out: Series = {}
    for s in samples:
        for label, value in read(s).items():
            if value is not None:
                xs, ys = out.setdefault(label, ([], []))
                xs.append(float(s["elapsed_s"]))
                ys.append(float(value))
    return out


def _roles(lines: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    header = next((x for x in lines if x.get("kind") == "header"), {})
    return header.get("gpu_roles") or {}


def panels(lines: Sequence[Mapping[str, Any]]) -> list[Panel]:
    """The panels of one run's telemetry that have data: the engine's and its workers', then each node's GPUs."""
    samples = [x for x in lines if x.get("kind") == "sample"]
    roles = _roles(lines)
    out: list[Panel] = []
    for title, unit, role in ENGINE_PANELS:
        out.append((title, unit, _series(samples, lambda s, role=role: {
            "engine": s.get("engine", {}).get(role),
            **{name: values.get(role) for name, values in s.get("workers", {}).items()}})))
    nodes = sorted({str(g.get("node", "")) for s in samples for g in s.get("gpus", [])})
    for node in nodes:
        for title, unit, field in GPU_PANELS:
            def read(s: Mapping[str, Any], node: str = node, field: str = field) -> dict[str, Any]:
                return {_gpu_label(g, roles): g.get(field) for g in s.get("gpus", []) if str(g.get("node", "")) == node}
            out.append((f"{title}, {node}" if node else title, unit, _series(samples, read)))
    return [p for p in out if p[2]]


def _gpu_label(gpu: Mapping[str, Any], roles: Mapping[str, Mapping[str, str]]) -> str:
    role = gpu_role(gpu, roles)
    return f"GPU {int(gpu.get('index', -1))}" + (f" {role}" if role else "")


def _draw(ax: Any, panel: Panel, measured: tuple[float, float] | None, xlabel: bool = True) -> None:
    title, unit, series = panel
    if measured is not None:
        ax.axvspan(*measured, color=LIMIT, alpha=0.12, label="measured")
    for label, (xs, ys) in series.items():
        ax.plot(xs, ys, marker=".", label=label, **({"color": ROLE_COLOURS[label]} if label in ROLE_COLOURS else {}))
    ax.set_title(title, fontsize="medium")
    if xlabel:
        ax.set_xlabel("s into the run")
    ax.set_ylabel(unit)
    ax.grid(alpha=0.3)
    if series:
        ax.legend(loc="upper left", fontsize="x-small")
    else:
        ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes)


def plot_telemetry(lines: Sequence[Mapping[str, Any]], path: Path, title: str) -> Path | None:
    """One run's telemetry (`panels`), the measured phase shaded; None when it has no sample with data."""
    found = panels(lines)
    if not found:
        return None
    cols = min(3, len(found))
    rows = math.ceil(len(found) / cols)
    fig, axes = figure(4.2 * cols, 3.0 * rows, rows, cols)
    flat = [ax for row in axes for ax in row]
    measured = phase(lines)
    for ax, panel in zip(flat, found, strict=False):
        _draw(ax, panel, measured)
    for ax in flat[len(found):]:
        ax.set_visible(False)
    gone = [f"{x['source']} unavailable" for x in lines if x.get("kind") == "unavailable"]
    fig.suptitle(title + (f" ({'; '.join(gone)})" if gone else ""))
    return save(fig, path)


def _by_role(lines: Sequence[Mapping[str, Any]]) -> list[Panel]:
    """A split's rows for the sweep page: mean GPU utilisation per role, KV-cache use (the engine's and each role's
    fullest worker), waiting requests (the engine's and each role's workers' together), output tokens/s."""
    samples = [x for x in lines if x.get("kind") == "sample"]
    roles = _roles(lines)
    header = next((x for x in lines if x.get("kind") == "header"), {})
    worker_role = {w["name"]: w["role"] for w in header.get("workers", [])}

    def util(s: Mapping[str, Any]) -> dict[str, Any]:
        seen: dict[str, list[float]] = {}
        for g in s.get("gpus", []):
            role = gpu_role(g, roles) or "all GPUs"
            if g.get("util_pct") is not None:
                seen.setdefault(role, []).append(float(g["util_pct"]))
        return {role: sum(v) / len(v) for role, v in seen.items()}

    def per_role(key: str, combine: Callable[[list[float]], float]) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
        def read(s: Mapping[str, Any]) -> dict[str, Any]:
            seen: dict[str, list[float]] = {}
            for name, values in s.get("workers", {}).items():
                if values.get(key) is not None:
                    seen.setdefault(worker_role.get(name, name), []).append(float(values[key]))
            return {"engine": s.get("engine", {}).get(key), **{r: combine(v) for r, v in seen.items()}}
        return read

    return [("GPU utilisation per role", "%", _series(samples, util)),
            ("KV-cache use", "fraction", _series(samples, per_role("kv_cache", max))),
            ("requests waiting", "requests", _series(samples, per_role("waiting", sum))),
            ("output tokens/s", "tokens/s", _series(samples, lambda s: {"engine": s.get("engine", {})
                                                                       .get("tokens_per_s")}))]


def plot_sweep_telemetry(columns: Sequence[tuple[str, Sequence[Mapping[str, Any]]]], path: Path) -> Path | None:
    """A prefill:decode sweep's page: one column per split (label, the telemetry of the run that stands for it), its
    rows on shared scales so the splits compare at a glance; None when no split has telemetry."""
    drawn = [(label, _by_role(lines), phase(lines)) for label, lines in columns]
    rows = [i for i in range(4) if any(found[i][2] for _, found, _ in drawn)]
    if not rows or not drawn:
        return None
    fig, axes = figure(4.2 * len(drawn), 2.8 * len(rows), len(rows), len(drawn), sharey="row")
    for col, (label, found, measured) in enumerate(drawn):
        for row, i in enumerate(rows):
            ax = axes[row][col]
            _draw(ax, found[i], measured, xlabel=row == len(rows) - 1)
            if row == 0:
                ax.set_title(f"{label}\n{found[i][0]}", fontsize="medium")
    fig.suptitle("prefill:decode sweep: each split's telemetry side by side")
    return save(fig, path)
