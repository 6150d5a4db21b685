"""The scaling check and the ladder: the same benchmark at several node counts, its throughput against linear.

`scaling_check` (`podium scale`): 1..N nodes, throughput, per-GPU throughput and efficiency against linear
extrapolation from the smallest run, gated by a floor (the plan's `gates.scaling_floor`, default 0.95). Offline
measures the plan's Offline run at each size (its expected rate scaled by the node count, so every run lasts its
min_duration); Server or Interactive runs the peak-QPS search at each size.

`ladder` (`podium ladder`): the Offline throughput at a few sizes on the way to the plan's full one (1, 8 and N nodes
by default), each a run as short as a search probe, each size's rate a node against the size before's, climbing only
while each is linear within the floor, so a deployment that stops scaling is found before its full-size run is spent.

A size of an engine of replicas is the plan's own step at that many nodes (submission/plan/steps.py: K replicas a
node, the rates and the concurrency scaled with the nodes), written to `<workspace>/steps/<plan>-n<N>.yaml`, a plan
`podium run` takes as it is; a one-instance engine is grown by its own `scaled` (submission/plan/engine_options.py).
Every size runs through the search's probes and their cache (tasks/tuning/probes.py), so a repeated one is not
measured again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import yaml
from prefect import flow, get_run_logger
from prefect.states import Completed, State

from flows.search import prepare, record_artifacts, runs_at_most, scenario_spec, search_peak_qps, total_time
from submission.base.errors import PlanError
from submission.base.files import write_atomic
from submission.budget import cost
from submission.checks import gates
from submission.plan import model as plans
from submission.plan.engine_options import OptionsLike
from submission.plan.secret_env import shown_options
from submission.plan.steps import at_nodes, ladder_steps, planned_nodes
from submission.rules import load_rules
from tasks.endpoints.config import min_duration_ms
from tasks.reporting import plots, progress
from tasks.serving.session import EngineSession
from tasks.tuning.bisection import SearchSettings
from tasks.tuning.probes import ProbeCache, Prober, target_qps, with_rate
from tasks.workspace import Workspace

Measure = Callable[[int], tuple[float | None, dict[str, Any]]]


def stepped(plan_path: str, plan: plans.Plan, bench: plans.BenchmarkSpec, ws: Workspace,
            nodes: int) -> tuple[str, plans.Plan, plans.BenchmarkSpec]:
    """The plan's `nodes`-node step (submission/plan/steps.py), written to `<workspace>/steps/` and loaded, and the
    benchmark in it: one size of an engine of replicas."""
    data = at_nodes(plans.read(plan_path), nodes)
    step = plans.parse(data, plan_path)
    path = write_atomic(ws.root / "steps" / f"{step.name}.yaml", yaml.safe_dump(data, sort_keys=False))
    return str(path), step, step.benchmarks[[b.key for b in plan.benchmarks].index(bench.key)]


def offline_metric(plan: plans.Plan, bench: plans.BenchmarkSpec, ws: Workspace, options: OptionsLike,
                   nodes: int, probe_ms: int | None = None) -> tuple[float | None, dict[str, Any]]:
    """The Offline result of the deployment `options` on `nodes` nodes, its rate the plan's scaled from the plan's
    nodes to these; as long as the plan's Offline run or, with `probe_ms`, a probe at most that long (cached in the
    probe cache like every search run)."""
    specs, session, tokenizer = prepare(plan, bench, ws, options)
    base = scenario_spec(specs, "Offline")
    if base is None:
        raise PlanError(f"{bench.key} has no Offline scenario to measure", fix="add scenarios.Offline to the plan")
    length = None if probe_ms is None else min(probe_ms, min_duration_ms(base, load_rules(base.round)))
    rate = target_qps(base) * nodes / planned_nodes(bench)
    spec = with_rate(base, rate, min_duration_ms=length, min_query_count=None) if rate else base
    log_dir = ws.root / "logs" / "scaling" / f"{bench.key.replace('/', '-')}-{nodes}"
    with EngineSession(**session, log_dir=str(log_dir)) as engine:
        prober = Prober(spec, SearchSettings(), ProbeCache(ws.root / "search", spec), engine, str(ws.work),
                        tokenizer=tokenizer)
        probe = prober.offline(spec)
    seconds = 0.0 if probe.cached else probe.duration_s
    layout = bench.engine.replica_layout()
    return probe.metric, {"replicas": layout.count if layout else None, "valid": probe.valid,
                          "samples_per_s": probe.completed_qps, "cached": probe.cached, "reasons": list(probe.reasons),
                          "engine_seconds": seconds,
                          "gpu_hours": cost.gpu_hours(seconds, cost.deployment_gpus(options, layout))}


def measure(plan_path: str, plan: plans.Plan, bench: plans.BenchmarkSpec, ws: Workspace, scenario: str,
            settings: dict[str, Any] | None, nodes: int, probe_ms: int | None = None) -> tuple[float | None,
                                                                                             dict[str, Any]]:
    """The scenario's result at `nodes` nodes (an engine of replicas: the plan's step): the Offline run (a probe's
    length with `probe_ms`), or the peak search of a Server-type scenario."""
    replicas = bench.engine.replica_layout() is not None
    if replicas:
        plan_path, plan, bench = stepped(plan_path, plan, bench, ws, nodes)
    options = bench.engine.config() if replicas else bench.engine.config().scaled(nodes)
    if scenario == "Offline":
        return offline_metric(plan, bench, ws, options, nodes, probe_ms)
    out = search_peak_qps(plan_path, bench.key, scenario, str(ws.root), settings,
                          engine_options=None if replicas else shown_options(options.as_plan()),
                          label=f"{nodes} node(s)")
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
            points.append((n, measured(metric, detail, scenario, n)))
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


def measured(metric: float | None, detail: dict[str, Any], scenario: str, nodes: int) -> float:
    """`metric`, or a PlanError when the run at `nodes` nodes measured none."""
    if metric is None:
        raise PlanError(f"the {scenario} run at {nodes} node(s) measured no result: {detail}",
                        fix="fix the run at that size (its logs are in the workspace) and run the check again")
    return metric


# --- the ladder ---------------------------------------------------------------------------------------------------
def climb(counts: list[int], measure_at: Measure, floor: float) -> tuple[list[dict[str, Any]], list[int]]:
    """Measure each size in turn, its rate a node against the size before's (`vs_previous`), and stop after the
    first whose rate a node is under `floor` x the one before (sub-linear): the rows measured and the sizes left."""
    rows: list[dict[str, Any]] = []
    for n in counts:
        metric, detail = measure_at(n)
        per_node = measured(metric, detail, "Offline", n) / n
        vs = per_node / rows[-1]["per_node"] if rows else None
        rows.append({"nodes": n, "replicas": detail.get("replicas"), "metric": metric, "per_node": per_node,
                     "vs_previous": vs, "linear": vs is None or vs >= floor, **detail})
        if not rows[-1]["linear"]:
            break
    return rows, counts[len(rows):]


def verdict(rows: list[dict[str, Any]], left: list[int], floor: float, full: int) -> str:
    """The ladder's verdict in one line."""
    bad = next((r for r in rows if not r["linear"]), None)
    if bad is None:
        return (f"LINEAR within {1 - floor:.0%}: each step's rate a node is at least {floor:g} of the step before's; "
                f"the full {full}-node run may be spent")
    before = rows[rows.index(bad) - 1]
    return (f"SUB-LINEAR at {bad['nodes']} nodes: {bad['vs_previous']:.3f} of the rate a node at {before['nodes']} "
            f"node(s), under the floor {floor:g}" + (f"; not run: {', '.join(map(str, left))} nodes" if left else ""))


@flow(name="scaling-ladder", flow_run_name="ladder[{key}]")
def ladder(plan_path: str, key: str | None = None, workspace: str = ".podium", steps: list[int] | None = None,
           floor: float | None = None, settings: dict[str, Any] | None = None) -> State:
    plan = plans.load(plan_path)
    bench = plan.benchmark(key) if key else plan.benchmarks[0]
    ws = Workspace.at(workspace)
    full = planned_nodes(bench)
    counts = ladder_steps(steps, full)
    floor = plan.gates.scaling_floor if floor is None else floor
    probe_ms = SearchSettings(**(settings or {})).probe_duration_ms
    with progress.tracking(len(counts), bounded=True):
        rows, left = climb(counts, lambda n: measure(plan_path, plan, bench, ws, "Offline", settings, n, probe_ms),
                           floor)
    said = verdict(rows, left, floor, full)
    unit = load_rules(plan.round).benchmark(bench.benchmark).scenario("Offline").unit
    lines = [f"ladder of {bench.key} Offline over {', '.join(map(str, counts))} of its {full} node(s), "
             f"{unit} a node:"]
    lines += [f"  {r['nodes']} node(s): {r['per_node']:.6g} a node" + (
        f", {r['vs_previous']:.3f} of the rate a node at {prev['nodes']} node(s)" if prev else "")
        for prev, r in zip([None, *rows], rows, strict=False)]
    lines += [f"verdict: {said}", total_time(rows)]
    table = [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()} for r in rows]
    tag = f"ladder-{bench.key.replace('/', '-')}"
    png = plots.plot_scaling(rows, ws.root / "search" / f"{tag}.png")
    out = {"rows": table, "not_run": left, "linear": not left and all(r["linear"] for r in rows), "floor": floor,
           "full_nodes": full, "verdict": said, "plot": str(png), "summary": "\n".join(lines)}
    (ws.root / "search" / f"{tag}.json").write_text(json.dumps(out, indent=2))
    record_artifacts(tag, table, out["summary"], png)
    get_run_logger().info(out["summary"])
    return Completed(message=said, data=out)
