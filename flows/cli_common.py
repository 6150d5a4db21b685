"""What every `podium` command shares: the workspace option, Prefect's settings set before it is imported, and the
one mapping of a PodiumError to its exit code (printed as `error: ...` with its fix, no traceback)."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, ParamSpec, TypeVar

import typer

from submission.base.errors import PodiumError, RunFailed
from tasks.launchers import nodes

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
    for name, value in nodes.LEASE_STORAGE.items():   # a killed flow's node slot outlives its temporary server
        os.environ.setdefault(name, value)


@contextlib.contextmanager
def prefect_server() -> Iterator[str]:
    """For a command that registers on a Prefect server: PREFECT_API_URL (from the environment or the Prefect
    profile), checked to answer, and set for the block. Without one, a PodiumError in one line with its fix, instead
    of Prefect's temporary server (a `database is locked` traceback, `~/.prefect/prefect.db`) or a connect traceback."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, Settings, temporary_settings

    url = Settings().api.url   # read now: the settings Prefect took at import may predate the environment
    fix = "export PREFECT_API_URL=http://<server>:4200/api (locally: `podium dev up` prints it)"
    if not url:
        raise PodiumError("PREFECT_API_URL is not set: there is no Prefect server to register on", fix=fix)
    with temporary_settings(updates={PREFECT_API_URL: url}):
        with get_client(sync_client=True) as client:
            failure = client.api_healthcheck()
        if failure is not None:
            raise PodiumError(f"no Prefect server answers at {url} ({failure})", fix=f"start it, or {fix}")
        yield url


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


def end_with(state) -> None:
    """The end of a command that ran the submission flow: its one-line outcome when it completed, else its error
    (a PodiumError keeps its exit code; anything else is a failed run)."""
    if state.is_completed():
        typer.echo(state.message)
        return
    error = state.result(raise_on_failure=False)
    raise error if isinstance(error, PodiumError) else RunFailed(state.message or str(error))
