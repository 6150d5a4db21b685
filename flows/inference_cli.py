"""`podium fetch-inference`: the mlcommons/inference sources the official checks run from, at the commit the round's
rules pin, into the workspace (flows/cli.py registers it; the fetch is tasks/ops/inference_sources.py's); `podium
fetch-grader`: openai/prm800k, the MATH-500 grader deepseek-r1's accuracy score runs, likewise
(tasks/ops/grader_source.py).

The folder goes to stdout alone (`SRC=$(podium fetch-inference)`), what happened to stderr.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.cli_common import Workspace, exits_on_error


@exits_on_error
def fetch_inference(
        round: Annotated[str, typer.Option(help="the round whose pinned commit to fetch")] = "v6.1",
        repository: Annotated[str | None, typer.Option(
            help="a git URL or path of mlcommons/inference or a mirror of it (default: the round's rules name it)")]
        = None,
        archive: Annotated[Path | None, typer.Option(
            help="a `git archive` (tar or tar.gz) of mlcommons/inference at the pinned commit, unpacked instead of "
                 "fetching with git (where GitHub is out of reach)")] = None,
        workspace: Workspace = Path(".podium")) -> None:
    """Fetch the parts of mlcommons/inference that the official checks use (the checker, the audits' scripts, the
    references' accuracy scripts) at the round's pinned commit into <workspace>/inference/<commit>, or unpack them
    there from --archive, or check the copy already there; print that folder, for `podium check --inference-src` or
    a plan's `inference_src`."""
    from submission.base.errors import PlanError
    from submission.rules import load_rules
    from tasks.ops.inference_sources import fetch, unpack_archive
    from tasks.workspace import Workspace as Ws

    if archive is not None and repository is not None:
        raise PlanError("--archive and --repository name two sources", fix="pass one of them")
    pin = load_rules(round).inference_sources
    root = Ws.at(workspace).inference
    if archive is not None:
        fetched = unpack_archive(pin, archive, root)
        how = f"unpacked from {archive}"
    else:
        fetched = fetch(pin, root, repository=repository)
        how = f"fetched from {repository or pin.repository}"
    what = "already there, checked" if fetched.reused else how
    typer.echo(f"mlcommons/inference at {fetched.commit[:12]} (the {round} pin): {what}", err=True)
    typer.echo(f"next: podium check TREE --inference-src {fetched.path}, or `inference_src: {fetched.path}` in a plan",
               err=True)
    typer.echo(str(fetched.path))


@exits_on_error
def fetch_grader(
        round: Annotated[str, typer.Option(help="the round whose pinned commit to fetch")] = "v6.1",
        archive: Annotated[Path | None, typer.Option(
            help="a `git archive` (tar or tar.gz) of openai/prm800k at the pinned commit, unpacked instead of "
                 "fetching GitHub's archive of it")] = None,
        workspace: Workspace = Path(".podium")) -> None:
    """Fetch openai/prm800k, whose PRM800K grader deepseek-r1's reference scores MATH-500 with, at the round's pinned
    commit into <workspace>/prm800k/<commit> (or unpack it there from --archive, or check the copy already there);
    print that folder, for `podium score --math-grader` or a plan's `dataset.math_grader`."""
    from submission.rules import load_rules
    from tasks.ops.grader_source import fetch
    from tasks.workspace import Workspace as Ws

    fetched = fetch(load_rules(round), Ws.at(workspace).root / "prm800k", archive=archive)
    how = f"unpacked from {archive}" if archive is not None else "fetched from GitHub"
    typer.echo(f"openai/prm800k at {fetched.commit[:12]} (the {round} pin): "
               f"{'already there, checked' if fetched.reused else how}", err=True)
    typer.echo(f"next: podium score deepseek-r1 ... --math-grader {fetched.path}, or `dataset.math_grader: "
               f"{fetched.path}` in a plan", err=True)
    typer.echo(str(fetched.path))
