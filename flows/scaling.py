"""The scaling check: the same benchmark at 1..N nodes, its throughput, per-GPU throughput and efficiency against
linear extrapolation from the smallest run, gated by a floor (the plan's `gates.scaling_floor`, default 0.95).

Offline measures the plan's Offline run at each size (its expected rate scaled by the node count, so every run
lasts its min_duration); Server or Interactive runs the peak-QPS search at each size.
"""

from __future__ import annotations

import json
from typing import Any

from prefect import flow, get_run_logger
from prefect.states import Completed, State

from flows.search import prepare, record_artifacts, runs_at_most, scenario_spec, search_peak_qps, total_time
from submission.base.errors import PlanError
from submission.budget import cost
from submission.checks import gates
from submission.plan import model as plans
from submission.plan.engine_options import OptionsLike
from submission.plan.secret_env import shown_options
from tasks.reporting import plots, progress
from tasks.serving.session import EngineSession
from tasks.tuning.bisection import SearchSettings
from tasks.tuning.probes import ProbeCache, Prober, target_qps, with_rate
from tasks.workspace import Workspace


def offline_metric(plan: plans.Plan, bench: plans.BenchmarkSpec, ws: Workspace, options: OptionsLike,
                   nodes: int) -> tuple[float | None, dict[str, Any]]:
    """The Offline result of the deployment `options` (cached in the probe cache like every search run)."""
    specs, session, tokenizer = prepare(plan, bench, ws, options)
    base = scenario_spec(specs, "Offline")
    if base is None:
        raise PlanError(f"{bench.key} has no Offline scenario to measure", fix="add scenarios.Offline to the plan")
    spec = with_rate(base, target_qps(base) * nodes, min_duration_ms=None, min_query_count=None) \
        if target_qps(base) else base
    log_dir = ws.root / "logs" / "scaling" / f"{bench.key.replace('/', '-')}-{nodes}"
    with EngineSession(**session, log_dir=str(log_dir)) as engine:
        prober = Prober(spec, SearchSettings(), ProbeCache(ws.root / "search", spec), engine, str(ws.work),
                        tokenizer=tokenizer)
        probe = prober.offline(spec)
    seconds = 0.0 if probe.cached else probe.duration_s
    return probe.metric, {"valid": probe.valid, "samples_per_s": probe.completed_qps, "cached": probe.cached,
                          "reasons": list(probe.reasons), "engine_seconds": seconds,
                          "gpu_hours": cost.gpu_hours(seconds, cost.gpus(options))}


def measure(plan_path: str, plan: plans.Plan, bench: plans.BenchmarkSpec, ws: Workspace, scenario: str,
            settings: dict[str, Any] | None, nodes: int) -> tuple[float | None, dict[str, Any]]:
    """The scenario's result at `nodes` nodes: the Offline run, or the peak search of a Server-type scenario."""
    options = bench.engine.config().scaled(nodes)
    if scenario == "Offline":
        return offline_metric(plan, bench, ws, options, nodes)
    out = search_peak_qps(plan_path, bench.key, scenario, str(ws.root), settings,
                          engine_options=shown_options(options.as_plan()), label=f"{nodes} node(s)")
    used = out.get("engine_time") or {}
    return out["metric"], {"qps": out["qps"], "confirmed": out["confirmed"], "engine_seconds": used.get("seconds"),
                           "gpu_hours": used.get("gpu_hours")}


@flow(name="scaling-check", flow_run_name="scaling[{scenario}]")
def scaling_check(plan_path: str, key: str | None = None, workspace: str = ".podium",
                  nodes: list[int] | None = None, scenario: str = "Offline", floor: float | None = None,
                  gpus_per_node: int | None = None, settings: dict[str, Any] | None = None) -> State:
    plan = plans.load(plan_path)
    bench = plan.benchmark(key) if key else plan.benchmarks[0]
    ws = Workspace.at(workspace)
    counts = sorted(set(nodes or [1, 2]))
    if counts[0] < 1:
        raise PlanError(f"a deployment needs at least one node, got {counts[0]}", fix="pass node counts >= 1")
    floor = plan.gates.scaling_floor if floor is None else floor
    points, details = [], []
    per_size = 1 if scenario == "Offline" else runs_at_most(SearchSettings(**(settings or {})), None)
    with progress.tracking(len(counts) * per_size, bounded=scenario != "Offline"):
        for n in counts:
            metric, detail = measure(plan_path, plan, bench, ws, scenario, settings, n)
            if metric is None:
                raise PlanError(f"the {scenario} run at {n} node(s) measured no result: {detail}",
                                fix="fix the run at that size (its logs are in the workspace) and run the check again")
            points.append((n, metric))
            details.append({"nodes": n, **detail})
    rows = gates.scaling(points, gpus_per_node)
    verdicts = gates.scaling_gates(rows, floor, f"{bench.key} {scenario}")
    passed = all(g.passed for g in verdicts)
    tag = f"scaling-{bench.key.replace('/', '-')}-{scenario}"
    png = plots.plot_scaling(rows, ws.root / "search" / f"{tag}.png")
    table = [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()} for r in rows]
    summary = (f"scaling of {bench.key} {scenario} over {counts} node(s): "
               + ", ".join(f"{r['nodes']}: {r['efficiency']:.3f}" for r in rows)
               + f" of linear; floor {floor:g}: {'PASS' if passed else 'FAIL'}\n{total_time(details)}")
    out = {"rows": table, "details": details, "gates": [g.model_dump() for g in verdicts], "passed": passed,
           "floor": floor, "plot": str(png), "summary": summary}
    (ws.root / "search" / f"{tag}.json").write_text(json.dumps(out, indent=2))
    record_artifacts(tag, table, summary + "\n\n" + gates.markdown(verdicts), png)
    get_run_logger().info(summary)
    return Completed(message=summary, data=out)
