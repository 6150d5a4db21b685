"""`podium assemble`: one submission tree curated from several runs (flows/cli.py registers it).

The choices and refusals are `submission.tree.curation`'s, the tree and curation.json `submission.tree.curated`'s, the
download of s3:// and plan-name sources `tasks.storage.sources`'; the check is `podium check`'s. Exit 0 when the
checker finds no error, 1 when it does, 2 when the sources cannot make one tree.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from flows.cli_common import Workspace, exits_on_error


@exits_on_error
def assemble(
        sources: Annotated[list[str], typer.Option(
            "--from", help="a run folder, an s3://bucket/prefix/<plan>/<run id>/ run prefix, or a plan name "
                           "(its runs in object storage); repeatable")],
        out: Annotated[Path, typer.Option(help="where the tree (out/submission/) and curation.json go")],
        pick: Annotated[str, typer.Option(help="best, latest, or a run id (a unique prefix will do)")] = "best",
        inference_src: Annotated[Path | None, typer.Option(
            "--inference-src", help="the folder `podium fetch-inference` prints: run its checker too")] = None,
        bucket: Annotated[str, typer.Option(help="bucket of plan-name sources")] = "podium",
        prefix: Annotated[str, typer.Option(help="key prefix of plan-name sources")] = "runs",
        workspace: Workspace = Path(".podium")) -> None:
    """Curate one submission tree from several runs: per system, benchmark and scenario the best (or latest, or
    named) complete run, with its own accuracy run and audits; then check it. `podium package OUT/submission` next."""
    from submission.checks.official import check_all
    from submission.tree import curated as curated_tree
    from submission.tree import curation
    from tasks.storage import sources as remote

    def warn(line: str) -> None:
        typer.secho(f"warning: {line}", fg=typer.colors.YELLOW, err=True)

    ws = workspace.resolve()
    found = remote.gather(sources, ws / "work" / "sources", lambda: remote.config(
        ws / "s3", os.environ.get("AWS_ENDPOINT_URL"), bucket, prefix), warn)
    result = curation.curate(found, pick)
    root = curated_tree.write(result, out)
    for line in result.warnings:
        warn(line)
    typer.echo("\n".join(curated_tree.table(result)))
    if result.left_out:
        typer.echo(f"{len(result.left_out)} other candidate(s) not chosen; each, and why, in curation.json")
    checked = check_all(root, result.round, csv_file=out / "summary.csv", inference_src=inference_src)
    typer.echo(checked.text(), nl=False)
    after = "; a dress rehearsal's tree: never packaged" if result.kind == "rehearsal" else (
        f"; next: podium package {root}" if checked.ok else "")
    typer.echo(f"tree {root}; choices in {out / curated_tree.CURATION_FILE}{after}")
    raise typer.Exit(0 if checked.ok else 1)
