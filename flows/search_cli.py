"""`podium search`, `podium sweep`, `podium scale` and `podium ladder`: the tuning commands (flows/cli.py registers
them).

Each validates the plan first, then runs its flow (flows/search.py, flows/scaling.py) and prints the trace or table,
the result and where the files went. Exit 0 when the search confirmed a rate, the sweep found a winner, the scaling
check passed its floor, every step of the ladder was linear.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from flows.cli_common import Workspace, exits_on_error, prefect_env
from submission.base.errors import PlanError, RunFailed

PlanArg = Annotated[Path, typer.Argument(help="the plan YAML")]
Bench = Annotated[str | None, typer.Option("--benchmark", "-b", help="system/benchmark key; default: the first")]
Precision = Annotated[float, typer.Option(help="stop bisecting when the bracket is this narrow (relative)")]
ProbeMs = Annotated[int, typer.Option("--probe-ms", help="a probe's min_duration (ms)")]
ProbeQueries = Annotated[int, typer.Option("--probe-queries", help="a probe's queries at least: loadgen's "
                                           "min_query_count; the endpoints client runs long enough to issue them "
                                           "(and 662 at least, for its early-stopping p99)")]
AsJson = Annotated[bool, typer.Option("--json", help="machine-readable output")]


def _table(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    def cell(v: object) -> str:
        return "-" if v is None else f"{v:g}" if isinstance(v, float) else str(v)

    cells = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def _counts(option: str, text: str) -> list[int]:
    """Node counts given as `1,2,4`."""
    try:
        return [int(n) for n in text.split(",") if n.strip()]
    except ValueError:
        raise PlanError(f"{option} {text!r} is not a list of numbers", fix=f"e.g. {option} 1,2,4") from None


def _load(plan: Path, workspace: Path) -> None:
    """Validate the plan before Prefect is set up and imported."""
    from submission.plan import model as plans

    plans.load(plan)
    prefect_env(workspace)


@exits_on_error
def search(plan: PlanArg, benchmark: Bench = None,
           scenario: Annotated[str, typer.Option(help="Server or Interactive")] = "Server",
           precision: Precision = 0.02, probe_ms: ProbeMs = 60_000, probe_queries: ProbeQueries = 640,
           start_fraction: Annotated[float, typer.Option(help="first probe at this x Offline throughput")] = 1.0,
           start_qps: Annotated[float | None, typer.Option(help="start here instead of at Offline")] = None,
           workspace: Workspace = Path(".podium"), as_json: AsJson = False) -> None:
    """Find the highest target QPS the benchmark's checker calls VALID (loadgen's verdict; for the endpoints client,
    the early-stopping p99 within the limit): short probes, then one full-length confirmation."""
    _load(plan, workspace)
    from flows.search import search_peak_qps

    settings = {"precision": precision, "probe_duration_ms": probe_ms, "probe_queries": probe_queries,
                "start_fraction": start_fraction}
    out = search_peak_qps(str(plan), benchmark, scenario, str(workspace), settings, start_qps=start_qps)
    if as_json:
        typer.echo(json.dumps(out, indent=2, default=str))
    else:
        typer.echo(_table(out["trace"], ("step", "stage", "target_qps", "verdict", "ttft_p99_ms", "tpot_p99_ms",
                                         "latency_p99_ms", "seconds", "cached")))
        typer.echo(out["summary"])
        if out["confirmed"]:
            typer.echo(f"plan: scenarios.{scenario}.target_qps: {out['qps']:g}")
        typer.echo(f"plot: {out['plot']}")
    if not out["confirmed"]:
        raise RunFailed(f"no rate was confirmed: {out['summary']}", fix="read the trace above")

@exits_on_error
def sweep(plan: PlanArg, gpus: Annotated[int, typer.Option(help="GPUs of the disaggregated deployment")],
          benchmark: Bench = None,
          scenario: Annotated[str, typer.Option(help="Server or Interactive")] = "Interactive",
          prefill_tp: Annotated[int, typer.Option(help="GPUs per prefill worker")] = 1,
          decode_tp: Annotated[int, typer.Option(help="GPUs per decode worker")] = 1,
          nodes: Annotated[int, typer.Option(help="nodes the GPUs are spread over")] = 1,
          gpus_per_node: Annotated[int | None, typer.Option(help="default: gpus / nodes")] = None,
          precision: Precision = 0.02, probe_ms: ProbeMs = 60_000, probe_queries: ProbeQueries = 640,
          out: Annotated[Path | None, typer.Option(help="write the winning plan fragment here")] = None,
          workspace: Workspace = Path(".podium"), as_json: AsJson = False) -> None:
    """Run the peak search for every prefill:decode split the GPUs allow; keep the best per GPU."""
    _load(plan, workspace)
    from flows.search import sweep_prefill_decode

    settings = {"precision": precision, "probe_duration_ms": probe_ms, "probe_queries": probe_queries}
    result = sweep_prefill_decode(str(plan), benchmark, scenario, str(workspace), gpus, prefill_tp, decode_tp,
                                  nodes, gpus_per_node, settings, str(out) if out else None)
    if as_json:
        typer.echo(json.dumps(result, indent=2, default=str))
    else:
        typer.echo(_table(result["rows"], ("label", "qps", "confirmed", "metric", "metric_per_gpu", "runs",
                                           "shared_nodes")))
        typer.echo(result["summary"])
    if result["best"] is None:
        raise RunFailed("no prefill:decode split confirmed a rate", fix="read the table above")

@exits_on_error
def scale(plan: PlanArg, benchmark: Bench = None,
          nodes: Annotated[str, typer.Option(help="node counts, comma-separated")] = "1,2",
          scenario: Annotated[str, typer.Option(help="Offline, or Server/Interactive (searched)")] = "Offline",
          floor: Annotated[float | None, typer.Option(help="default: the plan's gates.scaling_floor")] = None,
          gpus_per_node: Annotated[int | None, typer.Option(help="for per-GPU throughput")] = None,
          precision: Precision = 0.02, probe_ms: ProbeMs = 60_000, probe_queries: ProbeQueries = 640,
          workspace: Workspace = Path(".podium"), as_json: AsJson = False) -> None:
    """Run the benchmark at each node count; efficiency against linear; exit 6 under the floor."""
    _load(plan, workspace)
    from flows.scaling import scaling_check

    counts = _counts("--nodes", nodes)
    settings = {"precision": precision, "probe_duration_ms": probe_ms, "probe_queries": probe_queries}
    result = scaling_check(str(plan), benchmark, str(workspace), counts, scenario, floor, gpus_per_node,
                           settings)
    if as_json:
        typer.echo(json.dumps(result, indent=2, default=str))
    else:
        typer.echo(_table(result["rows"], ("nodes", "metric", "per_node", "per_gpu", "linear", "efficiency")))
        typer.echo(result["summary"])
    if not result["passed"]:
        raise RunFailed(result["summary"], fix="find what stops the larger deployment from scaling")


@exits_on_error
def ladder(plan: PlanArg, benchmark: Bench = None,
           steps: Annotated[str | None, typer.Option(help="node counts, comma-separated; default: 1, 8 and the "
                                                    "plan's nodes")] = None,
           floor: Annotated[float | None, typer.Option(help="the least share of the step before's rate a node that "
                                                       "counts as linear; default: the plan's gates.scaling_floor")]
           = None,
           probe_ms: Annotated[int, typer.Option("--probe-ms", help="a step's min_duration (ms), at most the plan's "
                                                 "own")] = 60_000,
           workspace: Workspace = Path(".podium"), as_json: AsJson = False) -> None:
    """Run the plan's Offline scenario at 1, 8 and all its N nodes (an engine of replicas: the plan's step at each),
    each as short as a search probe, and compare each step's rate a node with the step before's; exit 6 at the first
    sub-linear step, the larger ones not run, so the full-size run is spent only on a deployment that scales."""
    from submission.plan import model as plans
    from submission.plan.steps import ladder_steps, planned_nodes

    loaded = plans.load(plan)
    counts = ladder_steps(_counts("--steps", steps) if steps else None,
                          planned_nodes(loaded.benchmark(benchmark) if benchmark else loaded.benchmarks[0]))
    prefect_env(workspace)
    from flows.scaling import ladder as climb_ladder

    result = climb_ladder(str(plan), benchmark, str(workspace), counts, floor, {"probe_duration_ms": probe_ms})
    if as_json:
        typer.echo(json.dumps(result, indent=2, default=str))
    else:
        typer.echo(_table(result["rows"], ("nodes", "replicas", "metric", "per_node", "vs_previous", "linear",
                                           "valid", "engine_seconds", "cached")))
        typer.echo(result["summary"])
        typer.echo(f"plot: {result['plot']}")
    if not result["linear"]:
        raise RunFailed(f"ladder: {result['verdict']}", fix="find what stops the larger size from scaling (its "
                        "run's telemetry and the replicas' rows are in the workspace) before the full-size run")
