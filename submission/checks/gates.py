"""Acceptance gates: the checks a person does before trusting a run, as plain functions over its results.

- Server/Offline ratio: a Server result far under the Offline one means the Server rate was not at its peak
  (the seed's submission had Server within 0.6 % of Offline); far over it means Offline was under-measured.
- Scaling efficiency: throughput at N nodes against N x the throughput of the smallest run (linear).
- Accuracy margin: how far each accuracy result sits above its target.
- Per-GPU normalisation: each result divided by the accelerators of its system.
- Regression: each result against the same row of the previous run of the plan.
- Published: each result per accelerator against the best published result of the same accelerator
  (submission/results/published.py); not gated where the published values are bound by a target.

A gate has a verdict (True / False) or None when it is reported but not gated (nothing to compare with).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from submission.base import markdown as md
from submission.base.schema import Strict


class Gate(Strict):
    gate: str                    # server/offline, scaling, accuracy margin, regression
    subject: str                 # e.g. cpu-smoke/gpt-oss-120b/Server
    value: float | None
    bound: str = ""              # e.g. ">= 0.9", ">= -5 %"
    passed: bool | None = None
    detail: str = ""

    @property
    def verdict(self) -> str:
        return {True: "PASS", False: "FAIL", None: md.NONE}[self.passed]


def _perf(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], Mapping[str, Any]]:
    return {(r["system"], r["benchmark"], r["scenario"]): r for r in rows if r.get("metric") is not None}


def server_offline(rows: Sequence[Mapping[str, Any]], min_ratio: float | None,
                   max_ratio: float = 1.02) -> list[Gate]:
    """Server (gated with `min_ratio`) and Interactive (reported) results over the Offline result of the same
    system and benchmark; above `max_ratio` fails too (an under-measured Offline run)."""
    perf = _perf(rows)
    gates = []
    for (system, bench, scenario), row in sorted(perf.items()):
        offline = perf.get((system, bench, "Offline"))
        if scenario == "Offline" or offline is None or not offline["metric"]:
            continue
        ratio = row["metric"] / offline["metric"]
        gated = scenario == "Server" and min_ratio is not None
        passed = (min_ratio <= ratio <= max_ratio) if gated else None
        fix = ""
        if passed is False:
            fix = ("run `podium search` to find the peak Server rate" if ratio < min_ratio else
                   "the Offline run looks under-measured: check its min_duration and target_qps")
        gates.append(Gate(gate="server/offline", subject=f"{system}/{bench}/{scenario}", value=round(ratio, 4),
                          bound=f"in [{min_ratio:g}, {max_ratio:g}]" if gated else "reported",
                          passed=passed, detail=fix or f"{row['metric']:.6g} / {offline['metric']:.6g} "
                                                           f"{row.get('unit') or ''}".rstrip()))
    return gates


def accuracy_margin(records: Iterable[Any], targets: Mapping[tuple[str, str], float | None],
                    min_margin: float = 0.0) -> list[Gate]:
    """Accuracy over its target, in percent of the target (`targets[(benchmark, scenario)]`); the gate passes at
    `min_margin` percent or more."""
    gates = []
    for r in records:
        if getattr(r, "mode", None) != "accuracy" or getattr(r, "accuracy", None) is None \
                or getattr(r, "accuracy_pass", None) is None:   # not judged: a smoke stand-in's score
            continue
        target = targets.get((r.benchmark, r.scenario))
        if not target:
            continue
        margin = 100 * (r.accuracy - target) / target
        gates.append(Gate(gate="accuracy margin", subject=f"{r.system}/{r.benchmark}/{r.scenario}",
                          value=round(margin, 3), bound=f">= {min_margin:g} %", passed=margin >= min_margin,
                          detail=f"{r.accuracy_metric} {r.accuracy:.6g} vs target {target:.6g}"))
    return gates


def per_gpu(rows: Sequence[Mapping[str, Any]], accelerators: Mapping[str, int]) -> list[dict[str, Any]]:
    """Each row with `per_gpu`: its metric over the accelerators of its system (None when the system has none)."""
    out = []
    for r in rows:
        gpus = accelerators.get(r["system"]) or 0
        value = r["metric"] / gpus if gpus and r.get("metric") is not None else None
        out.append({**r, "gpus": gpus or None, "per_gpu": None if value is None else round(value, 4)})
    return out


def regression(rows: Sequence[Mapping[str, Any]], previous: Sequence[Mapping[str, Any]] | None,
               tolerance: float, previous_run: str = "") -> list[Gate]:
    """Each result against the same (system, benchmark, scenario) of the previous run: a drop of more than
    `tolerance` (a fraction) fails."""
    if not previous:
        return []
    before = _perf(previous)
    gates = []
    for key, row in sorted(_perf(rows).items()):
        old = before.get(key)
        if old is None or not old["metric"]:
            continue
        change = row["metric"] / old["metric"] - 1
        gates.append(Gate(gate="regression", subject="/".join(key), value=round(100 * change, 3),
                          bound=f">= -{100 * tolerance:g} %", passed=change >= -tolerance,
                          detail=f"{old['metric']:.6g} -> {row['metric']:.6g} (previous run {previous_run})".rstrip()))
    return gates


def published(comparisons: Iterable[Any], min_fraction: float | None) -> list[Gate]:
    """One gate per comparison with a published result of the same accelerator
    (`submission.results.published.Comparison`,
    keyed by its run's `subject`): gated with `min_fraction`, reported only without one or when the published values
    are bound by a target."""
    gates = []
    for c in comparisons:
        if c.fraction is None:
            continue
        gated = min_fraction is not None and c.target_bound is None
        why = f"published values bound by a target ({c.target_bound:.4g} {c.unit})" if c.target_bound else ""
        gates.append(Gate(gate="published", subject=c.subject, value=round(c.fraction, 4),
                          bound=f">= {min_fraction:g}" if gated else "reported",
                          passed=c.fraction >= min_fraction if gated else None,
                          detail=why or f"{c.per_accelerator:.6g} vs {c.best.per_accelerator:.6g} {c.unit} per "
                                        f"{c.short}: {c.best.label}"))
    return gates


def scaling(points: Sequence[tuple[int, float]], gpus_per_node: int | None = None) -> list[dict[str, Any]]:
    """Rows (nodes, metric, per-node and per-GPU metric, efficiency) against linear scaling from the smallest
    node count: efficiency(n) = (metric(n) / n) / (metric(n0) / n0)."""
    ordered = sorted(points)
    if not ordered:
        return []
    n0, m0 = ordered[0]
    base = m0 / n0
    rows = []
    for nodes, metric in ordered:
        gpus = nodes * gpus_per_node if gpus_per_node else None
        rows.append({"nodes": nodes, "metric": metric, "per_node": metric / nodes,
                     "per_gpu": metric / gpus if gpus else None, "linear": base * nodes,
                     "efficiency": metric / (base * nodes) if base else None})
    return rows


def scaling_gates(rows: Sequence[Mapping[str, Any]], floor: float, subject: str) -> list[Gate]:
    return [Gate(gate="scaling", subject=f"{subject} @ {r['nodes']} node(s)", value=round(r["efficiency"], 4),
                 bound=f">= {floor:g}", passed=r["efficiency"] >= floor,
                 detail=f"{r['metric']:.6g} vs linear {r['linear']:.6g}")
            for r in rows[1:] if r["efficiency"] is not None]


def markdown(gates: Sequence[Gate]) -> str:
    if not gates:
        return ""
    lines = ["## Acceptance gates", "", *md.table(
        ("gate", "subject", "value", "bound", "verdict", "detail"),
        [(g.gate, g.subject, None if g.value is None else f"{g.value:g}", g.bound, g.verdict, g.detail)
         for g in gates])]
    failed = [g for g in gates if g.passed is False]
    lines += ["", f"{len(failed)} gate(s) failed." if failed else "Every gated value passed."]
    return "\n".join(lines) + "\n"
