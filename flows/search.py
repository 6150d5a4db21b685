"""Peak-QPS search and the prefill:decode sweep, as Prefect flows over `tasks.tuning.bisection` and
`tasks.tuning.probes`.

`search_peak_qps`: stage -> Offline throughput (the plan's Offline run, cached like `podium run`'s) -> bracket and
bisect with short probes -> one full-length confirmation (stepping down if it fails). Every verdict is kept in the
probe cache, so a re-run repeats no probe and, when everything is cached, does not even start the engine.

`sweep_prefill_decode`: one search per prefill:decode split the GPUs allow (each its own deployment), then the
split with the best scenario metric per GPU, written back as a plan fragment; each split's row carries the telemetry
of the run that stands for it (mean GPU utilisation per role, peak KV-cache use), and a page puts those runs'
telemetry side by side.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.states import Completed, State

from submission.base import markdown as md
from submission.base.errors import PlanError, RunFailed
from submission.budget import cost
from submission.plan import model as plans
from submission.plan.engine_options import EngineOptions, OptionsLike, parse_options
from submission.plan.secret_env import shown_options, with_values
from submission.results.runs import RunSpec, plan_runs
from submission.rules import load_rules
from tasks.engines import engine_identity
from tasks.reporting import plots, progress
from tasks.reporting.telemetry_plots import plot_sweep_telemetry
from tasks.serving import telemetry, warmup
from tasks.serving.build import build_engine
from tasks.serving.launch import model_dir_for, owner, read_in_place, where
from tasks.serving.session import EngineSession
from tasks.staging.stage import S3Access, stage_task
from tasks.tuning import spend, splits
from tasks.tuning.bisection import Probe, SearchResult, SearchSettings, full_run_seconds, search
from tasks.tuning.forecast import highest_within
from tasks.tuning.probes import ProbeCache, Prober, deployment_key
from tasks.workspace import Workspace


def prepare(plan: plans.Plan, bench: plans.BenchmarkSpec, ws: Workspace, options: OptionsLike) -> tuple[
        list[RunSpec], dict[str, Any], str]:
    """Stage the model and the performance data sets (the plan's, and a scenario's own where it has one) and build
    the engine, as the benchmark flow does; the performance run specs for the engine `options`, the EngineSession
    arguments of that deployment, and the staged model's tokenizer.json (what the endpoints client reads)."""
    access = asdict(S3Access.for_plan(plan.storage, ws.s3))
    model = stage_task(bench.model.source, str(ws.stage / "models"), access,   # not copied when the engine
                       in_place=read_in_place(bench.engine, bench.model.source))   # reads it from its volume
    sources = sorted({bench.dataset.performance, *bench.dataset.scenarios.values()})
    staged = {p: stage_task(p, str(ws.stage / "datasets"), access) for p in sources}
    specs = plan_runs(plan, bench.model_copy(update={"accuracy": False}), load_rules(plan.round),
                      model_sha256=model["sha256"], dataset_sha256={p: d["sha256"] for p, d in staged.items()},
                      engine=engine_identity(bench.engine.name, options, bench.engine.replica_layout()))
    built = build_engine(bench.engine.name, options, model["path"], model["sha256"], str(ws.builds))
    specs = [s.model_copy(update={"dataset": staged[s.dataset]["path"]}) for s in specs]
    session = {"engine_name": bench.engine.name, "options": options, "state_dir": str(ws.pids),
               "model_dir": str(model_dir_for(bench.engine, Path(model["path"]))),
               "timeout_s": bench.engine.ready_timeout_s, "where": where(bench.engine, owner(plan, bench)),
               "build_dir": built["path"],
               "stall_s": bench.engine.stall_timeout_s, "warmup": warmup.planned(bench.engine, specs),
               "exporter_urls": bench.engine.telemetry.exporter_urls}
    return specs, session, str(Path(model["path"]) / "tokenizer.json")


def scenario_spec(specs: list[RunSpec], scenario: str) -> RunSpec | None:
    return next((s for s in specs if s.scenario == scenario and s.mode == "performance"), None)


def trace_rows(result: SearchResult) -> list[dict[str, Any]]:
    """One row per run: its verdict, p99s and margin, what predicted it (served against offered, the p99 trend from
    the first part of the run to the last, the queue fitted to it, the margin a full-length run would have by its
    queue's growth; for a full-length run the rate its own record puts at the limits), what it cost (wall seconds;
    samples issued and seconds measured as its client's report says; samples planned) and why it passed or
    failed."""
    return [{"step": i, "stage": p.stage, "target_qps": p.qps, "verdict": p.verdict, "valid": p.valid,
             "ttft_p99_ms": p.ttft_p99_ms, "tpot_p99_ms": p.tpot_p99_ms, "latency_p99_ms": p.latency_p99_ms,
             "margin": p.margin, "metric": p.metric,
             "served_qps": p.signals.served_qps if p.signals else None,
             "served_pct": round(100 * p.signals.served_qps / p.qps, 1) if p.signals else None,
             "p99_trend": p.signals.p99_trend() if p.signals else None,
             "queue": p.signals.describe_queues() if p.signals else None,
             "full_margin": p.full_margin, "forecast_qps": forecast_at(p),
             "backlog": p.signals.backlog if p.signals else None,
             "seconds": p.duration_s, "samples": p.samples, "measured_s": p.measured_s,
             "planned_samples": p.planned_samples, "cached": p.cached, "reason": "; ".join(p.reasons)[:160],
             "why": p.why}
            for i, p in enumerate(result.trace, 1)]


def forecast_at(run: Probe) -> float | None:
    """The rate a full-length run's own record puts at its limits (None for a probe, or with no forecast)."""
    at = highest_within(run.outlook, 1.0) if run.stage == "confirm" else None
    return None if at is None else round(at, 4)


def engine_time(result: SearchResult, full_run_s: float | None, gpu_count: int) -> dict[str, Any]:
    """What the search measured now (cached runs cost nothing): its probes, its full-length runs, and the Offline
    run when it made one, in seconds and GPU-hours (submission.budget.cost)."""
    made = [p for p in result.trace if not p.cached]
    full = [p for p in made if p.stage == "confirm"]
    short = [p for p in made if p.stage != "confirm"]
    return cost.engine_time(sum(p.duration_s for p in short), len(short), sum(p.duration_s for p in full), len(full),
                            gpu_count, full_run_s)


def record_artifacts(name: str, rows: list[dict[str, Any]], summary: str, png: Path | None) -> None:
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    key = "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")[:100]
    create_table_artifact(key=key, table=[{k: v if isinstance(v, int | float) else md.cell(v) for k, v in r.items()}
                                            for r in rows],
                          description=summary.splitlines()[0])
    create_markdown_artifact(key=f"{key}-summary", markdown=summary + (f"\n\nPlot: `{png}`\n" if png else ""))


def _search_run_name() -> str:
    from prefect.runtime import flow_run

    p = flow_run.parameters
    label = f"/{p['label']}" if p.get("label") else ""
    return f"search[{p.get('key') or 'first benchmark'}/{p.get('scenario')}{label}]"


@flow(name="search-peak-qps", flow_run_name=_search_run_name)
def search_peak_qps(plan_path: str, key: str | None = None, scenario: str = "Server", workspace: str = ".podium",
                    settings: dict[str, Any] | None = None, engine_options: OptionsLike | None = None,
                    start_qps: float | None = None, label: str | None = None) -> State:
    plan = plans.load(plan_path)
    bench = plan.benchmark(key) if key else plan.benchmarks[0]
    ws = Workspace.at(workspace)
    cfg = SearchSettings(**(settings or {}))
    # engine_options: a split's or a scale's options, their env values as `<set>` (a subflow's parameters are kept by
    # Prefect), the plan's values put back here
    given = engine_options.as_plan() if isinstance(engine_options, EngineOptions) else engine_options
    options = bench.engine.config() if given is None else \
        parse_options(bench.engine.name, with_values(given, getattr(bench.engine.config(), "env", {})))
    specs, session, tokenizer = prepare(plan, bench, ws, options)
    base = scenario_spec(specs, scenario)
    if base is None or base.loadgen_scenario != "Server":
        raise PlanError(f"the search needs a Server-type scenario of {bench.key} in the plan; {scenario!r} is not one",
                        where=plan_path, fix="add scenarios.Server (or Interactive) with a starting target_qps")
    offline = scenario_spec(specs, "Offline")
    if offline is None and start_qps is None:
        raise PlanError(f"{bench.key} has no Offline scenario to start the bracket from", where=plan_path,
                        fix="add scenarios.Offline to the plan, or pass --start-qps")
    folder = ws.root / "search"
    tag = f"{bench.key.replace('/', '-')}-{scenario}-{deployment_key(base)}"
    log_dir = ws.root / "logs" / "search" / tag
    with progress.tracking(runs_at_most(cfg, start_qps), bounded=True), \
            EngineSession(**session, log_dir=str(log_dir)) as engine:
        prober = Prober(base, cfg, ProbeCache(folder, base), engine, str(ws.work), tokenizer=tokenizer)
        first: Probe | None = None
        if start_qps is None:
            first = prober.offline(offline)
            start_qps = first.completed_qps
            if not start_qps:
                raise PlanError(f"the Offline run of {bench.key} measured no throughput: {'; '.join(first.reasons)}",
                                where=plan_path, fix="fix the Offline run (podium run) or pass --start-qps")
        result = search(prober, start_qps * cfg.start_fraction, cfg)
        launches = engine.launches
    if first is not None:
        result = result.model_copy(update={"trace": (first, *result.trace)})
    full_run_s = full_run_seconds(prober, result.trace, result.qps or result.start_qps)
    gpus = cost.deployment_gpus(options, bench.engine.replica_layout())
    out = summarize(result, plan, bench, scenario, cfg, offline_probe=first, label=label, launches=launches,
                    ran=prober.ran, options=options, used=engine_time(result, full_run_s, gpus))
    stands = standing(result)
    out |= {"telemetry_run": stands.run_dir if stands else None, "telemetry": dict(stands.telemetry) if stands else {}}
    rows = trace_rows(result)
    png = plots.plot_search_trace([r for r in rows if r["stage"] != "offline"], folder / f"{tag}.png",
                                   result.qps if result.confirmed else None)
    (folder / f"{tag}.result.json").write_text(json.dumps(out | {"trace": rows}, indent=2))
    record_artifacts(f"search-{tag}", rows, out["summary"], png)
    get_run_logger().info(out["summary"])
    return Completed(message=out["summary"].splitlines()[0], data=out | {"trace": rows, "plot": str(png)})


def standing(result: SearchResult) -> Probe | None:
    """The run whose telemetry stands for a search: its confirmation, else its fastest passing probe, else its last
    run."""
    runs = [p for p in result.trace if p.run_dir and p.stage != "offline"]
    passed = [p for p in runs if p.valid]
    return result.confirmation or max(passed, key=lambda p: p.qps, default=None) or (runs[-1] if runs else None)


def runs_at_most(cfg: SearchSettings, start_qps: float | None) -> int:
    """The most runs one search makes: its probes, its confirmations, and the Offline run when it starts there."""
    return cfg.max_probes + cfg.max_confirmations + (start_qps is None)


def summarize(result: SearchResult, plan: plans.Plan, bench: plans.BenchmarkSpec, scenario: str,
              cfg: SearchSettings, *, offline_probe: Probe | None, label: str | None, launches: int, ran: int,
              options: EngineOptions, used: dict[str, Any] | None = None) -> dict[str, Any]:
    confirmed = result.confirmation
    ratio = None
    if confirmed and offline_probe and confirmed.metric and offline_probe.metric:
        ratio = round(confirmed.metric / offline_probe.metric, 4)
    what = f"{bench.key} {scenario}" + (f" [{label}]" if label else "")
    if result.confirmed:
        unit = load_rules(plan.round).benchmark(bench.benchmark).scenario(scenario).unit
        line = (f"peak {what}: {result.qps:g} q/s confirmed by a full-length run "
                f"({confirmed.metric if confirmed else '-'} {unit})")
    else:
        line = f"peak {what}: not confirmed ({result.message})"
    spent = spend.spend(result.trace, cfg)
    summary = "\n".join([line, f"start {result.start_qps:g} q/s, bracket {result.bracket}, "
                         f"precision {cfg.precision:g}; {result.runs} run(s) made now ({result.run_seconds:g} s), "
                         f"{len(result.trace) - result.runs} recalled from the probe cache; engine launched "
                         f"{launches} time(s)", spend.describe(spent), cost.describe(used) if used else "",
                         result.message])
    return {"benchmark": bench.key, "scenario": scenario, "label": label, "qps": result.qps,
            "confirmed": result.confirmed, "metric": confirmed.metric if confirmed else None,
            "offline_qps": offline_probe.completed_qps if offline_probe else None,
            "offline_metric": offline_probe.metric if offline_probe else None, "server_offline_ratio": ratio,
            "bracket": list(result.bracket), "runs": ran, "run_seconds": result.run_seconds,
            "engine_launches": launches, "engine": bench.engine.name,
            "options": shown_options(options.as_plan()),
            "engine_time": used, "spend": spent,
            "summary": "\n".join(line for line in summary.splitlines() if line).strip()}


@flow(name="sweep-prefill-decode", flow_run_name="sweep[{scenario} on {gpus} GPUs]")
def sweep_prefill_decode(plan_path: str, key: str | None = None, scenario: str = "Interactive",
                         workspace: str = ".podium", gpus: int | None = None, prefill_tp: int = 1,
                         decode_tp: int = 1, nodes: int = 1, gpus_per_node: int | None = None,
                         settings: dict[str, Any] | None = None, fragment_path: str | None = None) -> State:
    plan = plans.load(plan_path)
    bench = plan.benchmark(key) if key else plan.benchmarks[0]
    if gpus is None:
        raise PlanError("the sweep needs the deployment's GPU count", fix="pass --gpus, e.g. --gpus 16")
    candidates = splits.splits(gpus, prefill_tp=prefill_tp, decode_tp=decode_tp, nodes=nodes,
                               gpus_per_node=gpus_per_node)
    bound = len(candidates) * runs_at_most(SearchSettings(**(settings or {})), None)
    with progress.tracking(bound, bounded=True):
        rows = [split_row(split, plan_path, bench, scenario, workspace, settings) for split in candidates]
    winner = splits.best(rows)
    ws = Workspace.at(workspace)
    tag = f"sweep-{bench.key.replace('/', '-')}-{scenario}-{gpus}gpu"
    png = plots.plot_sweep([{**r, "metric": r["metric_per_gpu"]} for r in rows], ws.root / "search" / f"{tag}.png")
    unit = load_rules(plan.round).benchmark(bench.benchmark).scenario(scenario).unit
    lines = [f"prefill:decode sweep of {bench.key} {scenario} on {gpus} GPUs: " +
             (f"best {winner['label']} at {winner['qps']:g} q/s, {winner['metric_per_gpu']:g} {unit} per GPU"
              if winner else "no split confirmed a rate")]
    lines += [note for note in (splits.sharing_note(rows),) if note]
    lines.append(total_time(rows))
    side_by_side = plot_sweep_telemetry([(r["label"], telemetry.load(Path(r["telemetry_run"]) / telemetry.FILE)
                                          if r["telemetry_run"] else []) for r in rows],
                                        ws.root / "search" / f"{tag}-telemetry.png")
    if side_by_side:
        lines.append(f"each split's telemetry side by side: {side_by_side}")
    fragment_file = None
    if winner:
        note = (f"podium sweep: the best prefill:decode split of {bench.key} {scenario} on {gpus} GPUs\n"
                f"{winner['label']}: {winner['qps']:g} q/s, {winner['metric_per_gpu']:g} {unit} per GPU")
        text = splits.fragment(bench.system, bench.benchmark, scenario, bench.engine.name, winner["options"],
                               winner["qps"], note)
        fragment_file = Path(fragment_path) if fragment_path else ws.root / "search" / f"{tag}.plan.yaml"
        fragment_file.parent.mkdir(parents=True, exist_ok=True)
        fragment_file.write_text(text)
        lines.append(f"plan fragment: {fragment_file}")
    table = [{k: v for k, v in r.items() if k != "options"} for r in rows]
    record_artifacts(tag, table, "\n".join(lines), png)
    get_run_logger().info("\n".join(lines))
    return Completed(message=lines[0], data={"rows": rows, "best": winner, "plot": str(png),
                                             "telemetry_plot": str(side_by_side) if side_by_side else None,
                                             "summary": "\n".join(lines),
                                             "fragment": str(fragment_file) if fragment_file else None})


def total_time(rows: list[dict[str, Any]]) -> str:
    """The engine time of every search of a sweep or scaling check together (submission.budget.cost)."""
    seconds = sum(r.get("engine_seconds") or 0 for r in rows)
    hours = sum(r.get("gpu_hours") or 0 for r in rows)
    return f"engine time: {seconds:g} s in all ({round(hours, 3):g} GPU-hours on the deployments' GPUs)"


def split_row(split: splits.Split, plan_path: str, bench: plans.BenchmarkSpec, scenario: str, workspace: str,
              settings: dict[str, Any] | None) -> dict[str, Any]:
    """The peak search of one prefill:decode split, as a row of the sweep (without a result when no rate passed)."""
    options = split.apply(bench.engine.config())
    try:
        out = search_peak_qps(plan_path, bench.key, scenario, workspace, settings,
                              engine_options=shown_options(options.as_plan()), label=split.ratio)
    except RunFailed as e:   # no rate passed on this split: a row without a result, the sweep goes on
        get_run_logger().warning("%s: %s", split.label, e)
        out = {"qps": None, "confirmed": False, "metric": None, "runs": None, "engine_time": None,
               "telemetry_run": None, "telemetry": {}}
    metric = out["metric"]
    return {"label": split.label, "ratio": split.ratio, "prefill": split.prefill, "decode": split.decode,
            "gpus": split.gpus, "qps": out["qps"], "confirmed": out["confirmed"], "metric": metric,
            "metric_per_gpu": None if metric is None else round(metric / split.gpus, 4),
            "valid": out["confirmed"], "runs": out["runs"], "shared_nodes": list(split.shared_nodes),
            "engine_seconds": (out.get("engine_time") or {}).get("seconds"),
            "gpu_hours": (out.get("engine_time") or {}).get("gpu_hours"),
            "gpu_util_prefill_pct": out["telemetry"].get("gpu_util_pct.prefill"),
            "gpu_util_decode_pct": out["telemetry"].get("gpu_util_pct.decode"),
            "kv_cache_peak": out["telemetry"].get("kv_cache_peak"), "telemetry_run": out["telemetry_run"],
            "options": shown_options(options.as_plan())}
