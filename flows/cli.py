"""The `podium` command. The edge of the program: it resolves the workspace and Prefect's settings, validates
input before anything starts, and maps each PodiumError to its exit code without a traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from flows import curation_cli, fetch_cli, inference_cli, link_cli, published_cli, rehearsal_cli, search_cli, submit_cli
from flows.cli_common import Workspace, end_with, exits_on_error, prefect_env, prefect_server
from submission.base.errors import PodiumError, RunFailed, StorageError
from tasks.ops.registration import MEMBER_WATCH_S

app = typer.Typer(add_completion=False, no_args_is_help=True, help="MLPerf Inference submissions as Prefect flows.")
dev = typer.Typer(no_args_is_help=True, help="Local services and assets for development and the smoke run.")
app.add_typer(dev, name="dev")

@app.command()
@exits_on_error
def run(plan: Annotated[Path, typer.Argument(help="the plan YAML")],
        only: Annotated[list[str] | None, typer.Option(
            "--only", metavar="SYSTEM/BENCHMARK[/SCENARIO]",
            help="measure this scenario (or all of a benchmark's) afresh: its performance, accuracy and audit runs, "
                 "cached or not; every other run only from the cache, not run when it is not there (repeatable; a "
                 "scenario is the smallest selection; docs/runs.md, \"When a run is INVALID\")")] = None,
        workspace: Workspace = Path(".podium")) -> None:
    """Run a plan end to end: stage, serve, measure, score, assemble, check, publish."""
    from submission.plan import model as plans
    from submission.plan import selection
    from tasks.ops.prerequisites import host_checks

    loaded = plans.load(plan)
    chosen = selection.resolve(loaded, only or (), where=str(plan))   # a name the plan lacks: exit 2, nothing ran
    host_checks(loaded.local(), str(plan)).require()   # `podium preflight`'s checks on this host, every problem in
                                                       # one report before anything starts (a pooled system's
                                                       # member checks its own on its cluster)
    prefect_env(workspace)
    if loaded.pools():                # the fleet: a server whose workers run the pooled systems, each online
        from tasks.ops.preflight import require_pools

        with prefect_server():
            require_pools(loaded)
    from flows.submission import submission

    if loaded.profile == "smoke":
        typer.secho("SMOKE RUN: a tiny model on the CPU with shortened durations; not a valid MLPerf submission.",
                    fg=typer.colors.YELLOW)
    state = submission(str(plan), str(workspace), list(chosen) or None, return_state=True)
    latest = workspace / "runs" / "latest"
    report = latest / "report.md"
    if report.is_file():
        typer.echo(report.read_text())
        typer.echo(f"run folder: {latest.resolve()}")
    end_with(state)   # the run in one line, as its final state says it, or its error


@app.command()
@exits_on_error
def preflight(plan: Annotated[Path, typer.Argument(help="the plan YAML")],
              nodes: Annotated[bool, typer.Option(
                  "--nodes", help="also check the engines' nodes: a Slurm engine's take an allocation for seconds "
                                  "(or steps in the job this runs in), a Kubernetes engine's a short-lived pod; "
                                  "without it, this host and what the clusters' Slurm controller, Kubernetes API "
                                  "and image registry answer")] = False,
              workspace: Workspace = Path(".podium")) -> None:
    """Check everything the plan needs before anything starts, every problem in one report (each with its fix):
    sources, credentials, engines, evaluators, LiveCodeBench tests, the endpoints client, inference_src, etcd and
    NATS; the Slurm allocation (sbatch --test-only), the Kubernetes account's rights and model claim, the engine
    image's platforms against the nodes'. Exit 0 when ready, 2 with the report. Starts no engine, submits no job."""
    from submission.plan import model as plans
    from tasks.ops.prerequisites import cluster_checks, host_checks, on_nodes

    loaded = plans.load(plan)
    here = loaded.local()
    found = host_checks(here, str(plan), capacity=not nodes)
    cluster_checks(here, workspace.resolve() / "pids" if nodes else None, found=found)
    for line in found.checked:
        typer.echo(f"checked      {line}")
    for line in found.elsewhere:
        typer.echo(f"elsewhere    {line}")
    for system, pool in loaded.pools().items():
        typer.echo(f"elsewhere    system {system}: on work pool {pool}, checked there by its fleet member")
    remote = sorted({f"{b.key} ({b.engine.launcher})" for b in here.benchmarks if b.engine.launcher != "local"})
    if remote and not nodes:
        typer.echo(f"not checked  the engines' nodes of {', '.join(remote)}: `podium preflight PLAN --nodes` "
                   "checks them as `podium run` does (Slurm: steps on the allocation's nodes; Kubernetes: a pod "
                   "like the engine's)")
    for launcher in sorted(found.refused if nodes else ()):
        typer.echo(f"not checked  the {launcher} engines' nodes: once what the cluster answered below is fixed")
    if nodes:
        on_nodes(here, workspace.resolve(), lambda line: typer.echo(f"checked      {line}"), found)
    found.require()
    typer.echo("preflight: OK")


@app.command()
@exits_on_error
def check(tree: Annotated[Path, typer.Argument(help="the folder holding closed/, open/ or network/")],
          round: Annotated[str, typer.Option("--round", help="rules round, e.g. v6.1")] = "v6.1",
          profile: Annotated[str | None, typer.Option(help="submission or smoke (default: from the tree)")] = None,
          as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
          csv_file: Annotated[Path | None, typer.Option("--csv", help="write the summary CSV (official columns)")]
          = None,
          inference_src: Annotated[Path | None, typer.Option(
              "--inference-src", help="the folder `podium fetch-inference` prints: run its checker too")] = None,
          ) -> None:
    """Check a submission tree. Exit 0 clean, 1 errors (Podium's or the official checker's), 2 could not run."""
    from submission.checks.official import check_all

    checked = check_all(tree, round, profile=profile, csv_file=csv_file, inference_src=inference_src)
    typer.echo(json.dumps(checked.to_json(), indent=2) if as_json else checked.text(), nl=as_json)
    raise typer.Exit(0 if checked.ok else 1)


@app.command()
@exits_on_error
def package(tree: Annotated[Path, typer.Argument(help="the submission tree to pack")],
            out: Annotated[Path | None, typer.Option(help="an empty folder for the three files "
                                                          "(default: <tree>.package beside the tree)")] = None,
            name: Annotated[str | None, typer.Option(help="the tarball's name (default: the tree folder's)")] = None,
            round: Annotated[str, typer.Option("--round", help="rules round the tree is checked against")] = "v6.1",
            run_check: Annotated[bool, typer.Option("--check/--no-check", help="refuse a tree with errors")] = True,
            bucket: Annotated[str | None, typer.Option(help="upload to this S3 bucket (credentials: boto3's chain)")]
            = None,
            endpoint_url: Annotated[str | None, typer.Option(help="S3 endpoint (default: AWS)")] = None,
            prefix: Annotated[str, typer.Option(help="key prefix in the bucket")] = "packages",
            region: Annotated[str, typer.Option(help="S3 region")] = "us-east-1",
            embedded: Annotated[bool, typer.Option(help="upload to the local S3 server of `podium dev up`")] = False,
            workspace: Workspace = Path(".podium")) -> None:
    """Pack a submission tree: tarball, its sha256 and a manifest of every file; upload them when asked."""
    from submission.checks.checker import check_tree
    from submission.tree.package import package as make_package
    from submission.tree.rehearsal_marker import refuse

    refuse(tree)   # a dress rehearsal's tree is never packaged, checked or not
    if run_check:
        report = check_tree(tree, round)
        if not report.ok:
            typer.echo(report.text(), nl=False, err=True)
            raise RunFailed(f"{tree} has {len(report.errors)} error(s); nothing was packed",
                            fix="fix them (podium check), or pass --no-check to pack it anyway")
    pkg = make_package(tree, out, name=name)
    typer.echo(f"{pkg.tarball}\nsha256 {pkg.sha256}\nmanifest {pkg.manifest_file} ({pkg.files} files, "
               f"{pkg.bytes} bytes)")
    if bucket or embedded:
        from tasks.storage import objects as storage
        from tasks.storage import s3server
        from tasks.storage import uploads as packaging

        if embedded:
            server = s3server.running(workspace / "s3")
            if server is None:
                raise StorageError("the local S3 server is not running", fix="start it with `podium dev up`")
            cfg = server.storage(bucket or "podium", prefix, region)
        else:
            cfg = storage.StorageConfig(endpoint_url, str(bucket), prefix, region)
        storage.ensure_bucket(cfg)
        keys = packaging.upload(cfg, pkg, f"{pkg.name}/{pkg.sha256[:16]}")
        typer.echo("uploaded " + ", ".join(f"s3://{cfg.bucket}/{key}" for key in keys))


@app.command()
@exits_on_error
def score(benchmark: Annotated[str, typer.Argument(help="the benchmark whose targets apply, e.g. gpt-oss-120b")],
          accuracy_log: Annotated[Path, typer.Option("--accuracy-log", help="a loadgen mlperf_log_accuracy.json")],
          dataset: Annotated[Path, typer.Option("--dataset", help="the accuracy data set the run served")],
          tokenizer: Annotated[Path | None, typer.Option(help="the model folder or its tokenizer.json")] = None,
          scenario: Annotated[str, typer.Option(help="whose targets: Offline, Server or Interactive")] = "Offline",
          round: Annotated[str, typer.Option("--round", help="rules round, e.g. v6.1")] = "v6.1",
          evaluator: Annotated[str | None, typer.Option(help="default: the benchmark's reference one")] = None,
          lcb_tests: Annotated[Path | None, typer.Option(help="LiveCodeBench tests (JSON lines)")] = None,
          math_grader: Annotated[Path | None, typer.Option(
              help="deepseek-r1: openai/prm800k as `podium fetch-grader` prints it (its MATH-500 grader)")] = None,
          output: Annotated[Path | None, typer.Option(help="also write accuracy.txt here")] = None,
          as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False) -> None:
    """Re-score an accuracy log offline: the metric line, the targets and the verdict; exit 1 under a target."""
    from tasks.accuracy import evaluate_log

    result, text = evaluate_log(evaluator or benchmark, accuracy_log, dataset, tokenizer, benchmark=benchmark,
                                scenario=scenario, round=round, lcb_tests=lcb_tests, math_grader=math_grader)
    if output is not None:
        output.write_text(text)
    verdict = result.verdict
    if as_json:
        typer.echo(json.dumps({"benchmark": benchmark, "scenario": scenario, "round": round,
                               "metrics": result.metrics, "samples": result.samples, "notes": list(result.notes),
                               "verdict": [m.__dict__ for m in verdict.metrics], "passed": verdict.passed}, indent=2))
    else:
        typer.echo(text.rstrip())
        for line in verdict.lines():
            typer.echo(line)
        typer.echo(f"{benchmark} {scenario} ({round}): {'PASS' if verdict.passed else 'FAIL'}")
    raise typer.Exit(0 if verdict.passed else 1)


@dev.command("smoke-assets")
@exits_on_error
def smoke_assets(workspace: Workspace = Path(".podium")) -> None:
    """Build the tiny models and the smoke data sets (smoke.yaml's, smoke-vlm.yaml's) into <workspace>/store
    (deterministic; skipped when present)."""
    from tasks.engines.smoke import build_assets, build_vlm_assets

    for line in build_assets(workspace / "store") + build_vlm_assets(workspace / "store"):
        typer.echo(line)


@dev.command("rehearsal-data")
@exits_on_error
def rehearsal_data(benchmark: Annotated[str, typer.Option(help="gpt-oss-120b or qwen3-vl-235b-a22b")],
                   out: Annotated[Path, typer.Option(help="the folder to build into (laid out like the download)")],
                   scale: Annotated[float, typer.Option(help="1: the reference's row counts; less: fewer rows")] = 1.0
                   ) -> None:
    """Build synthetic full-size data sets with known answers for a dress rehearsal (seeded; prompt text and image
    bytes are not real). Prints what was built, its size, build time and peak memory, as JSON."""
    import json

    from tasks.rehearsal.data import measured_build

    typer.echo(json.dumps(measured_build(benchmark, out, scale=scale), indent=2))


@dev.command("up")
@exits_on_error
def dev_up(workspace: Workspace = Path(".podium"),
           port: Annotated[int, typer.Option(help="the Prefect server's port on 127.0.0.1 (0: any free one)")] = 4200,
           webhook: Annotated[str | None, typer.Option(help="URL the notification automations POST to")] = None,
           node: Annotated[list[str] | None, typer.Option(help="GPU node to create a gpu-<node> limit for "
                                                                "(repeatable; default: this host)")] = None,
           deploy: Annotated[bool, typer.Option(help="deploy deployments/prefect.yaml")] = True,
           schedules: Annotated[bool | None, typer.Option(
               "--schedules/--no-schedules", help="turn every deployment schedule (the nightly run) on or off; "
               "default: each stays as it is on the server, a new one paused")] = None,
           pool: Annotated[list[str] | None, typer.Option(
               help="a work pool standing for a cluster of its own, with its own process worker (repeatable; "
                    "a plan's systems[].work_pool names it: docs/fleet.md)")] = None,
           member_watch: Annotated[float, typer.Option(
               min=45, help="seconds a fleet member may send no heartbeat (every 30 s) before it is marked "
                            "Crashed")] = MEMBER_WATCH_S,
           s3_only: Annotated[bool, typer.Option("--s3-only", help="start only the S3 server")] = False) -> None:
    """Start a local Prefect server with its UI, a process worker and the S3 server (all on 127.0.0.1); register
    the work pools, the S3 result storage, the gpu-<node> limits and the notifications; deploy the deployments."""
    from tasks.ops import devstack
    from tasks.storage import s3server
    from tasks.workspace import Workspace as Ws

    if s3_only:
        server = s3server.running(workspace / "s3") or s3server.start(workspace / "s3")
        typer.echo(f"S3 server at {server.endpoint_url} (pid {server.pid}); credentials in "
                   f"{workspace / 's3' / 'credentials.json'}; stop it with `podium dev down`")
        return
    stack = devstack.up(Ws.at(workspace), port=port, webhook=webhook, nodes=node or (), deploy=deploy,
                        schedules=schedules, pools=pool or (), member_watch_s=member_watch)
    typer.echo(f"Prefect UI   {stack.ui_url}  (export PREFECT_API_URL={stack.api_url})")
    typer.echo(f"worker       pid {stack.worker_pid} on pool {devstack.POOL}; S3 at {stack.s3_endpoint}")
    for name, pid in stack.pool_workers.items():
        typer.echo(f"worker       pid {pid} on pool {name}")
    for name in stack.deployed:
        typer.echo(f"deployed     {name}")
    for reason in stack.skipped:
        typer.echo(f"not deployed {reason}")
    for schedule in stack.schedules:
        typer.echo(f"schedule     {schedule}" + ("  (on: podium dev up --schedules)" if schedule.endswith("paused")
                                                  else ""))
    typer.echo(f"logs in {workspace / 'dev'}; stop everything with `podium dev down`")


@dev.command("down")
@exits_on_error
def dev_down(workspace: Workspace = Path(".podium")) -> None:
    """Stop what `podium dev up` started (the worker, the Prefect server, the S3 server) and any engine a killed run
    left in the workspace."""
    from tasks.ops import devstack
    from tasks.workspace import Workspace as Ws

    stopped = devstack.down(Ws.at(workspace))
    typer.echo("stopped " + ", ".join(stopped) if stopped else "nothing running")


@app.command()
@exits_on_error
def setup(webhook: Annotated[str | None, typer.Option(help="URL the notification automations POST to")] = None,
          node: Annotated[list[str] | None, typer.Option(help="a GPU node's name (repeatable)")] = None,
          bucket: Annotated[str, typer.Option(help="bucket for Prefect's task results")] = "podium",
          endpoint_url: Annotated[str | None, typer.Option(help="S3 endpoint (default: AWS)")] = None,
          region: Annotated[str, typer.Option(help="S3 region")] = "us-east-1",
          pool: Annotated[list[str] | None, typer.Option(
              help="a cluster's process work pool to create (repeatable; docs/fleet.md)")] = None,
          member_watch: Annotated[float, typer.Option(
              min=45, help="seconds a fleet member may send no heartbeat (every 30 s) before it is marked "
                           "Crashed")] = MEMBER_WATCH_S) -> None:
    """Register on the Prefect server at PREFECT_API_URL what the deployments need: work pools, S3 result
    storage (credentials from the workers' own AWS chain), gpu-<node> limits, the notification automations and the
    watch that marks a fleet member Crashed when its cluster stops sending heartbeats."""
    from tasks.launchers import nodes
    from tasks.ops import notifications, registration
    from tasks.storage import objects as storage

    cfg = storage.StorageConfig(endpoint_url, bucket, "", region)
    with prefect_server():
        pools = registration.create_pools() + registration.create_pools({p: "process" for p in pool or ()})
        registration.watch_members(member_watch)
        slug = registration.save_result_storage(cfg)
        limits = nodes.ensure_limits(node or [])
        if webhook:
            notifications.register(webhook)
    typer.echo(f"work pools {', '.join(pools)}; result storage {slug}; limits {', '.join(limits) or 'none'}; "
               f"notifications {'to ' + webhook if webhook else 'not set (pass --webhook)'}")


@app.command()
@exits_on_error
def stage(source: Annotated[str, typer.Argument(help="a local file or folder, or s3://bucket/prefix")],
          to: Annotated[Path | None, typer.Option(help="stage root (default: <workspace>/stage)")] = None,
          endpoint_url: Annotated[str | None, typer.Option(help="S3 endpoint for s3:// sources")] = None,
          workspace: Workspace = Path(".podium")) -> None:
    """Stage a model or dataset onto this node's disk, verified by sha256, with a progress bar."""
    from tasks.staging.stage import S3Access
    from tasks.staging.stage import stage as stage_source
    from tasks.storage import s3server

    embedded = endpoint_url is None and s3server.running(workspace / "s3") is not None
    access = S3Access(endpoint_url=endpoint_url, embedded_dir=str((workspace / "s3").resolve()) if embedded else None)
    with typer.progressbar(length=1, label=f"staging {source}", show_pos=False) as bar:
        def advance(done: int, total: int) -> None:
            bar.length = max(total, 1)
            bar.update(done - bar.pos)

        staged = stage_source(source, to or workspace / "stage", access=access, progress=advance)
    verb = "reused" if staged.reused else f"fetched {staged.fetched:,} bytes, resumed {staged.resumed:,}"
    typer.echo(f"{staged.path}: {staged.files} file(s), {staged.bytes:,} bytes, sha256 {staged.sha256[:12]} ({verb})")


@app.command()
@exits_on_error
def launch(plan: Annotated[Path, typer.Argument(help="the plan YAML")],
           benchmark: Annotated[str | None, typer.Option("--benchmark", "-b", help="system/benchmark key "
                                                         "(required when the plan has several)")] = None,
           dry_run: Annotated[bool, typer.Option("--dry-run", help="print every process spec; start nothing")] = False,
           as_json: Annotated[bool, typer.Option("--json", help="machine-readable output (with --dry-run)")] = False,
           hold: Annotated[float | None, typer.Option(help="seconds to keep it serving; default: until Ctrl-C")] = None,
           nodes: Annotated[int | None, typer.Option("--nodes", help="the plan's N-node step: its replicated systems "
                                                     "on N nodes (submission/plan/steps.py)")] = None,
           workspace: Workspace = Path(".podium")) -> None:
    """Launch a benchmark's engine as the plan says (stage, build, start, wait until it generates), or review it."""
    import logging
    import time

    from submission.plan import model as plans
    from submission.plan.steps import at_nodes
    from tasks.serving import launch as engine_launch

    loaded = plans.load(plan) if nodes is None else plans.parse(at_nodes(plans.read(plan), nodes), str(plan))
    if dry_run:
        items = engine_launch.reviews(loaded, workspace.resolve(), benchmark)
        typer.echo(json.dumps(items, indent=2) if as_json else engine_launch.render(items))
        engine_launch.require_capacity(items)
        return
    bench = engine_launch.pick(loaded, benchmark)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with engine_launch.serving(loaded, bench, workspace.resolve(), logging.getLogger("podium.launch")) as endpoint:
        typer.echo(f"serving {endpoint.model!r} at {endpoint.base_url}; stop with Ctrl-C")
        try:
            while hold is None:
                time.sleep(3600)
            time.sleep(hold)
        except KeyboardInterrupt:
            typer.echo("stopping")


for command in (search_cli.search, search_cli.sweep, search_cli.scale, search_cli.ladder,   # the tuning commands
                curation_cli.assemble,                                   # curation
                fetch_cli.fetch,                                         # a plan's inputs, at their pins
                inference_cli.fetch_inference,                           # the official tools' sources
                inference_cli.fetch_grader,                              # deepseek-r1's MATH-500 grader
                link_cli.link,                                           # download links
                published_cli.published,                                 # the round's published results
                rehearsal_cli.rehearse,                                  # the dress rehearsal
                submit_cli.submit):                                      # and submission day
    app.command()(command)


def main() -> None:
    try:
        app()
    except PodiumError as e:   # an expected failure outside a command's own handling
        typer.secho(f"error: {e}", fg=typer.colors.RED, err=True)
        sys.exit(e.exit_code)


if __name__ == "__main__":
    main()
