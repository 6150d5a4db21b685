"""`podium published`: the round's published results of a benchmark, per accelerator, from
`submission/rules/published-<round>.csv`; with `--rebuild summary.csv` it writes that file from a round's summary.csv
(flows/cli.py registers it; the data and the comparison are submission/results/published.py's).

A listing per accelerator of reviewed results, not an MLPerf metric.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.cli_common import exits_on_error


@exits_on_error
def published(
        benchmark: Annotated[str | None, typer.Argument(help="e.g. gpt-oss-120b (not with --rebuild)")] = None,
        scenario: Annotated[str | None, typer.Option(help="Offline, Server or Interactive (default: all)")] = None,
        accelerator: Annotated[str | None, typer.Option(
            help="an accelerator name, matched by its key (vendor, memory size and form factor left out)")] = None,
        division: Annotated[str, typer.Option(help="closed, open, or all")] = "closed",
        round: Annotated[str, typer.Option("--round", help="the rules round")] = "v6.1",
        rebuild: Annotated[Path | None, typer.Option(
            help="a round's summary.csv (root of mlcommons/inference_results_<round>): rewrite the data file from it")]
        = None,
        commit: Annotated[str | None, typer.Option(help="with --rebuild: the commit the summary.csv is from")] = None,
        plan: Annotated[Path | None, typer.Option(
            help="a plan (a fleet's too): each of its systems' scenarios beside the published results on the same "
                 "accelerator and count")] = None,
) -> None:
    """List the published results of BENCHMARK, best per accelerator first; or those matching each system of a plan;
    or rebuild the data file."""
    from submission.base import markdown as md
    from submission.base.errors import PlanError
    from submission.base.files import write_atomic
    from submission.results import published as pub

    if rebuild is not None:
        if not commit:
            raise PlanError("--rebuild needs --commit", fix="pass the summary.csv's commit, e.g. --commit 7bf15fd...")
        text, counts = pub.rebuild(rebuild.read_text(), round, commit)
        write_atomic(pub.data_file(round), text)
        typer.echo(f"{pub.data_file(round)}: {sum(counts.values())} rows ("
                   + ", ".join(f"{name} {n}" for name, n in sorted(counts.items())) + ")")
        return
    if plan is not None:
        _against_plan(plan, round, None if division == "all" else division)
        return
    if not benchmark:
        raise PlanError("no benchmark given", fix="e.g. `podium published gpt-oss-120b --scenario Offline`")
    data = pub.load(round)
    rows = data.select(benchmark, scenario, accelerator, None if division == "all" else division)
    if not rows:
        known = sorted({r.benchmark for r in data.results})
        raise PlanError(f"no published {division} {round} result of {benchmark} {scenario or ''} "
                        f"{accelerator or ''}".rstrip(), fix=f"benchmarks with published results: {', '.join(known)}")
    rows.sort(key=lambda r: (r.scenario, -(r.per_accelerator or 0.0)))
    typer.echo(f"Published {round} results ({data.source} @ {data.commit[:12]}), per accelerator: a listing of "
               "reviewed results, not an MLPerf metric.\n")
    cells = [(r.scenario, f"{r.per_accelerator:,.2f}" if r.per_accelerator else None, f"{r.value:,.2f} {r.unit}",
              r.accelerators, pub.accelerator_key(r.accelerator) + (" (mixed)" if pub.mixed(r.accelerator) else ""),
              r.accelerator, f"{r.submitter} {r.system}", r.division, r.availability) for r in rows]
    typer.echo("\n".join(md.table(("scenario", "per accelerator", "result", "accelerators", "key", "accelerator",
                                   "system", "division", "availability"), cells)))
    bound = {s: v for s in sorted({r.scenario for r in rows})
             if (v := pub.target_bound(data.select(benchmark, s, division=None if division == "all" else division)))}
    for s, v in bound.items():
        typer.echo(f"\n{s}: several systems on different hardware report {v:.4g} {rows[0].unit if rows else ''}: "
                   "bound by a target, not by the hardware; a ratio per accelerator means little there.")


def _against_plan(path: Path, round: str, division: str | None) -> None:
    """`--plan`: a row per (system, benchmark, scenario) of the plan with the published results of its accelerator
    and count, best first; a scenario without one says so."""
    from submission.base import markdown as md
    from submission.plan import model as plans
    from submission.results import published as pub

    data = pub.load(round)
    rows = pub.against_plan(data, plans.load(path), division)
    typer.echo(f"The systems of {path} beside the published {round} results ({data.source} @ {data.commit[:12]}) of "
               "the same benchmark, scenario, accelerator and count, best first: the plan's targets are not results.\n")
    cells = [(r.system, r.benchmark, r.scenario, f"{r.accelerators} x {r.accelerator or '?'}",
              f"{r.target:g}" if r.target else None,
              "; ".join(f"{p.value:,.2f} {p.unit} ({p.submitter} {p.system})" for p in r.published) or
              "none published") for r in rows]
    typer.echo("\n".join(md.table(("system", "benchmark", "scenario", "accelerators", "plan target_qps",
                                   "published"), cells)))
