"""The `podium` command. The edge of the program: it resolves the workspace and Prefect's settings, validates
input before anything starts, and maps each PodiumError to its exit code without a traceback.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from submission.errors import PodiumError, RunFailed

app = typer.Typer(add_completion=False, no_args_is_help=True, help="MLPerf Inference submissions as Prefect flows.")
dev = typer.Typer(no_args_is_help=True, help="Local services and assets for development and the smoke run.")
app.add_typer(dev, name="dev")

Workspace = Annotated[Path, typer.Option("--workspace", "-w", help="where Podium keeps its state")]


def _prefect_env(workspace: Path) -> None:
    """Prefect reads its settings at import: set them first. An explicit PREFECT_API_URL (a server) wins."""
    os.environ.setdefault("PREFECT_HOME", str((workspace / "prefect").resolve()))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "podium")


def _fail(error: PodiumError) -> None:
    typer.secho(f"error: {error}", fg=typer.colors.RED, err=True)
    raise typer.Exit(error.exit_code)


@app.command()
def run(plan: Annotated[Path, typer.Argument(help="the plan YAML")],
        workspace: Workspace = Path(".podium")) -> None:
    """Run a plan end to end: stage, serve, measure, score, assemble, check, publish."""
    from submission import plan as plans

    try:
        loaded = plans.load(plan)
    except PodiumError as e:
        _fail(e)
    _prefect_env(workspace)
    from flows.submission import submission

    if loaded.profile == "smoke":
        typer.secho("SMOKE RUN: a tiny model on the CPU with shortened durations; not a valid MLPerf submission.",
                    fg=typer.colors.YELLOW)
    state = submission(str(plan), str(workspace), return_state=True)
    latest = workspace / "runs" / "latest"
    report = latest / "report.md"
    if report.is_file():
        typer.echo(report.read_text())
        typer.echo(f"run folder: {latest.resolve()}")
    if not state.is_completed():
        error = state.result(raise_on_failure=False)
        _fail(error if isinstance(error, PodiumError) else RunFailed(state.message or str(error)))


@app.command()
def check(tree: Annotated[Path, typer.Argument(help="the folder holding closed/, open/ or network/")],
          round: Annotated[str, typer.Option("--round", help="rules round, e.g. v6.1")] = "v6.1",
          profile: Annotated[str | None, typer.Option(help="submission or smoke (default: from the tree)")] = None,
          as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False) -> None:
    """Check a submission tree; exit 1 when it has errors."""
    from submission.checker import check_tree

    try:
        report = check_tree(tree, round, profile=profile)
    except PodiumError as e:
        _fail(e)
    if as_json:
        typer.echo(json.dumps(report.model_dump(mode="json") | {"ok": report.ok}, indent=2))
    else:
        for finding in report.findings:
            typer.echo(finding.line())
        typer.echo(report.summary())
    raise typer.Exit(0 if report.ok else 1)


@dev.command("smoke-assets")
def smoke_assets(workspace: Workspace = Path(".podium")) -> None:
    """Build the tiny model and the smoke data set into <workspace>/store (deterministic; skipped when present)."""
    from tasks.engines import smoke_data, smoke_model

    store = workspace / "store"
    model = store / "models" / smoke_model.MODEL_NAME
    if not (model / "model.safetensors").is_file():
        files = smoke_model.build(model)
        typer.echo(f"built {model}: " + ", ".join(f"{k} {v[:12]}" for k, v in files.items()))
    data = store / "datasets" / "smoke"
    if not (data / smoke_data.ACC_FILE).is_file():
        smoke_data.build(model, data)
        typer.echo(f"built {data}")
    typer.echo(f"smoke assets ready in {store}")


@dev.command("up")
def dev_up(workspace: Workspace = Path(".podium")) -> None:
    """Start the embedded S3 server (SeaweedFS on 127.0.0.1) and leave it running."""
    from tasks import s3server

    try:
        server = s3server.running(workspace / "s3") or s3server.start(workspace / "s3")
    except PodiumError as e:
        _fail(e)
    typer.echo(f"S3 server at {server.endpoint_url} (pid {server.pid}); credentials in "
               f"{workspace / 's3' / 'credentials.json'}; stop it with `podium dev down`")


@dev.command("down")
def dev_down(workspace: Workspace = Path(".podium")) -> None:
    """Stop what `podium dev up` started."""
    from tasks import s3server

    server = s3server.running(workspace / "s3")
    if server is None:
        typer.echo("nothing running")
        return
    s3server.stop(server)
    typer.echo(f"stopped the S3 server (pid {server.pid})")


def main() -> None:
    try:
        app()
    except PodiumError as e:   # an expected failure outside a command's own handling
        typer.secho(f"error: {e}", fg=typer.colors.RED, err=True)
        sys.exit(e.exit_code)


if __name__ == "__main__":
    main()
