"""What every `podium` command shares: the workspace option, Prefect's settings set before it is imported, and the
one mapping of a PodiumError to its exit code (printed as `error: ...` with its fix, no traceback)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, ParamSpec, TypeVar

import typer

from submission.errors import PodiumError

Workspace = Annotated[Path, typer.Option("--workspace", "-w", help="where Podium keeps its state")]
P = ParamSpec("P")
R = TypeVar("R")


def prefect_env(workspace: Path) -> None:
    """Prefect reads its settings at import: set them first. An explicit PREFECT_API_URL (a server) wins."""
    home = Path(os.environ.setdefault("PREFECT_HOME", str((workspace / "prefect").resolve())))
    home.mkdir(parents=True, exist_ok=True)   # Prefect's SQLite file cannot be created in a missing folder
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "podium")


def fail(error: PodiumError) -> None:
    """Print the error and exit with its code."""
    typer.secho(f"error: {error}", fg=typer.colors.RED, err=True)
    raise typer.Exit(error.exit_code)


def exits_on_error(command: Callable[P, R]) -> Callable[P, R]:
    """A command whose PodiumError becomes its exit code (`fail`), under `@app.command()`."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except PodiumError as e:
            fail(e)
            raise   # unreachable: fail exits

    return wrapper
