"""`podium rehearse PLAN`: the dress rehearsal (flows/cli.py registers it).

It builds the synthetic data sets once into the workspace (`rehearsal-data/<benchmark>`), writes the rewritten plan
(tasks.rehearsal.plan) to `rehearsal/<plan>.yaml`, sets the measuring client's clock (tasks.clock) and runs the
normal submission flow on it. With `--nodes N` it rehearses the plan's N-node step (submission/plan/steps.py). Then
`rehearsal.md` in the run folder adds what the real round would cost on the plan's hardware (of the step rehearsed),
the runs that needed a slower clock than the rehearsal's (tasks.clock: the fall-back), the size of every artifact and
each step's wall time; it is printed with the flow's report.
"""

from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from flows.cli_common import Workspace, end_with, exits_on_error, prefect_env
from submission.base.errors import PlanError

Clock = Annotated[str, typer.Option("--clock", help="xN: the client and the engine run N times faster "
                                                     "(libfaketime); real: the honest full-duration rehearsal")]
DEFAULT_CLOCK = "x10"   # a 600 s run in about a minute


def prepare(plan: Path, workspace: Path, inference_src: Path | None = None, math_grader: Path | None = None,
            nodes: int | None = None, scale: float = 1.0) -> Path:
    """The rehearsal's plan file in `workspace` (of the plan's `nodes`-node step when given), its data sets built
    there first at `scale` of their rows (once; reused when present at that scale)."""
    from submission.plan import model as plans
    from submission.plan.steps import at_nodes
    from tasks.rehearsal import data
    from tasks.rehearsal.plan import rehearsal_plan

    original = plans.read(plan)
    if nodes is not None:
        original = at_nodes(original, nodes)
    plans.parse(original, str(plan))   # the plan as written loads (exit 2, one message) before data sets are built
    built = {}
    for bench in {b["benchmark"] for b in original["benchmarks"]}:
        folder = workspace / "rehearsal-data" / bench
        try:
            found = data.load(folder)
            built[bench] = found if found.scale == scale else data.build(bench, folder, scale=scale)
        except PlanError:
            typer.echo(f"building the synthetic {bench} data sets into {folder} (once)")
            built[bench] = data.build(bench, folder, scale=scale)
    rewritten = rehearsal_plan(original, built, inference_src=str(inference_src.resolve()) if inference_src else None,
                               math_grader=str(math_grader.resolve()) if math_grader else None)
    out = workspace / "rehearsal" / f"{rewritten['name']}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(rewritten, sort_keys=False))
    return out


def sizes(folder: Path) -> dict[str, int]:
    """Bytes of the run's artifacts: accuracy and detail logs before truncation (the full copies kept in the run
    folder) and after (in the tree), the tree, the tarball, and everything uploaded (the run folder)."""
    def total(paths: Any) -> int:
        return sum(p.stat().st_size for p in paths if p.is_file())

    tree = folder / "submission"
    return {"accuracy logs, full (every copy in the run folder)":
            total((folder / "logs").rglob("mlperf_log_accuracy.json")),
            "accuracy logs, in the tree": total(tree.rglob("mlperf_log_accuracy.json")),
            "detail logs": total(tree.rglob("mlperf_log_detail.txt")),
            "tree": total(tree.rglob("*")),
            "tarball": total([folder / "submission.tar.gz"]),
            "run folder (stored in object storage; a repeated log is copied there, not sent again)":
            total(folder.rglob("*"))}


def slower_clocks(folder: Path, speed: float) -> list[str]:
    """The runs and audits of the run folder (results.json, compliance.json) that the client measured on a slower
    clock than the rehearsal's `speed` because a faster one missed their latency limits, as `label | xN` rows."""
    from submission.results.runs import AuditRecord, RunRecord

    rows = []
    for name, model in (("results.json", RunRecord), ("compliance.json", AuditRecord)):
        path = folder / name
        for item in json.loads(path.read_text()) if path.is_file() else []:
            rec = model.model_validate(item)
            if rec.clock is not None and rec.clock < speed:
                rows.append(f"| {rec.label} | x{rec.clock:g} |")
    return rows


def report(original: Any, folder: Path, clock: str, wall_s: float, scale: float = 1.0) -> str:
    """rehearsal.md: what was replaced, the real round's cost (`original`: the plan rehearsed, loaded), the runs that
    needed a slower clock, artifact sizes, wall time and peak memory."""
    from submission.budget.cost import real_round
    from tasks.rehearsal.plan import changes

    speed = None if clock == "real" else float(clock.removeprefix("x"))
    cost = real_round(original)
    lines = ["# Dress rehearsal", "", *(f"- {c}" for c in changes(speed, scale)), "",
             "## What the real round would cost on the plan's hardware", "",
             "| run | seconds at the plan's target rate |", "|---|---|"]
    lines += [f"| {run} | {s:,.0f} |" for run, s in cost["runs"].items()]
    lines += ["", f"Total: {cost['hours']:.2f} h, {cost['gpu_hours']:.1f} GPU-hours on {cost['gpus']} GPUs "
              "(accuracy runs and audits included; engine start-up not counted).", ""]
    if speed is not None:
        slower = slower_clocks(folder, speed)
        lines += ["## Runs that needed a slower clock", ""]
        lines += [f"INVALID for their latency alone on the {clock} clock, these ran again with the client on a "
                  f"slower one (the engine kept {clock}):", "", "| run | the client's clock |", "|---|---|",
                  *slower, ""] if slower else [f"None: every run kept the {clock} clock.", ""]
    lines += ["## Artifact sizes", "", "| artifact | bytes |", "|---|---|"]
    lines += [f"| {name} | {size:,} |" for name, size in sizes(folder).items()]
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    lines += ["", f"Wall time {wall_s:.0f} s; peak resident memory of one child process {peak:.0f} MiB "
              "(each step's own timing: the Prefect UI's task runs).", ""]
    return "\n".join(lines)


@exits_on_error
def rehearse(plan: Annotated[Path, typer.Argument(help="the real plan YAML to rehearse")],
             clock: Clock = DEFAULT_CLOCK,
             only: Annotated[list[str] | None, typer.Option(
                 "--only", metavar="SYSTEM/BENCHMARK[/SCENARIO]", help="rehearse this scenario afresh (the "
                 "rehearsal's names: rehearsal-SYSTEM/...); the rest from the cache (repeatable)")] = None,
             inference_src: Annotated[Path | None, typer.Option(
                 "--inference-src", help="the folder `podium fetch-inference` prints: its checker judges the tree")]
             = None,
             math_grader: Annotated[Path | None, typer.Option(
                 "--math-grader", help="deepseek-r1: the folder `podium fetch-grader` prints (its MATH-500 grader)")]
             = None,
             nodes: Annotated[int | None, typer.Option(
                 "--nodes", help="rehearse the plan's N-node step: its replicated systems on N nodes, their rates "
                 "scaled (submission/plan/steps.py)")] = None,
             scale: Annotated[float, typer.Option(
                 "--scale", min=0.001, max=1.0, help="the synthetic data sets at this fraction of their rows: a quick "
                 "rehearsal whose runs are smaller than the rules ask, so the checkers name the counts short")] = 1.0,
             workspace: Workspace = Path(".podium")) -> None:
    """Dress rehearsal: run a real plan as written, with the simulated engine, synthetic full-size data and an
    accelerated clock in place of the plan's engine, data and time. Its tree can never be packaged."""
    from tasks import clock as clocks
    from tasks.rehearsal.plan import SCALE_ENV

    os.environ[clocks.ENV] = clock
    os.environ[SCALE_ENV] = str(scale)   # the flow's report says what the data sets hold
    clocks.speed()   # a bad --clock: exit 2 before anything starts
    if clock != "real":
        clocks.wrap([])   # faketime missing: exit 2 now, not at the first run
    from submission.plan import model as plans
    from submission.plan import selection
    from submission.plan.steps import at_nodes

    rewritten = prepare(plan, workspace, inference_src, math_grader, nodes, scale)
    loaded = plans.load(rewritten)
    chosen = selection.resolve(loaded, only or (), where=str(rewritten))
    prefect_env(workspace)
    from flows.submission import submission

    typer.secho(f"DRESS REHEARSAL of {plan} (plan {rewritten}): not a submission", fg=typer.colors.YELLOW)
    started = time.monotonic()
    state = submission(str(rewritten), str(workspace), list(chosen) or None, return_state=True)
    latest = (workspace / "runs" / "latest").resolve()
    original = plans.read(plan)
    text = report(plans.parse(original if nodes is None else at_nodes(original, nodes), str(plan)), latest, clock,
                  time.monotonic() - started, scale)
    (latest / "rehearsal.md").write_text(text)
    if (latest / "report.md").is_file():
        typer.echo((latest / "report.md").read_text())
    typer.echo(text)
    typer.echo(f"run folder: {latest}")
    summary = {"clock": clock, "run_folder": str(latest)}
    (latest / "rehearsal.json").write_text(json.dumps(summary, indent=2) + "\n")
    end_with(state)
