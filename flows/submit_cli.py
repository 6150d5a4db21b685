"""`podium submit TREE`: submission day, to the upload (flows/cli.py registers it; the flow is flows/submit.py).

Everything it is asked is checked before Prefect starts (exit 2 with the fix); then the flow runs, the summary is
printed, and the command ends with the flow's one line, or its error and exit code (7: the server refused or did not
answer; the tarball stays).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from flows.cli_common import Workspace, end_with, exits_on_error, prefect_env
from tasks.submit.identity import DEFAULT_BLOCK, DEFAULT_ENV
from tasks.submit.record import RECORD, Record
from tasks.submit.server import DEFAULT_URL
from tasks.submit.settings import SubmitSettings


@exits_on_error
def submit(
        tree: Annotated[Path, typer.Argument(help="the submission tree (the folder holding closed/, open/ ...)")],
        inference_src: Annotated[Path | None, typer.Option(
            "--inference-src", help="the folder `podium fetch-inference` prints: preprocess_submission.py and the "
                                    "official checker run from it (required, except with --test-upload)")] = None,
        out: Annotated[Path | None, typer.Option(help="where the preprocessed tree, the checker's CSV, the tarball "
                                                      "and submit.json go (default: <tree>.submit beside the tree)")]
        = None,
        server: Annotated[str, typer.Option(help="the submission server (the MLCommons automation's default)")]
        = DEFAULT_URL,
        round: Annotated[str, typer.Option("--round", help="rules round: the --version of the official tools")]
        = "v6.1",
        dry_run: Annotated[bool, typer.Option("--dry-run", help="do everything up to the tarball; upload nothing")]
        = False,
        test_upload: Annotated[bool, typer.Option(
            "--test-upload", help="this upload is a test (a local or staging server): a smoke or rehearsal tree may "
                                  "go, and without --inference-src the official steps are skipped, as the summary "
                                  "says")] = False,
        preprocess: Annotated[bool, typer.Option(
            "--preprocess/--no-preprocess", help="also run the round's preprocess_submission.py on a copy first "
                                                 "(optional in the submission guide; at the v6.1 pin it stops on "
                                                 "gpt-oss-120b trees with TEST07 and drops endpoints-layout results: "
                                                 "docs/submission.md)")] = False,
        submitter: Annotated[str | None, typer.Option(
            help="the organisation the id must belong to, as the server names it; checked before the upload")]
        = None,
        id_env: Annotated[str, typer.Option(help="the environment variable holding the submitter id")] = DEFAULT_ENV,
        id_block: Annotated[str, typer.Option(help="the Prefect Secret block holding it, when that variable is unset")]
        = DEFAULT_BLOCK,
        workspace: Workspace = Path(".podium")) -> None:
    """Submission day: Podium's checker, with --preprocess the round's preprocess_submission.py on a copy of the tree
    (what it changed, file by file), the official checker (its summary lines), the final tarball in the Submission
    UI's layout, then the upload as MLCommons' automation does it (a signed URL for the submitter id, the PUT, the
    server's checker started). The submitter id comes from --id-env or --id-block, never from the command line. The
    closing line says which steps ran and which did not."""
    settings = SubmitSettings.make(tree, out, inference_src=inference_src.resolve() if inference_src else None,
                                   server=server.rstrip("/"), round=round, dry_run=dry_run, test_upload=test_upload,
                                   preprocess=preprocess, submitter=submitter, id_env=id_env, id_block=id_block)
    settings.require()   # exit 2 before Prefect starts
    prefect_env(workspace)
    from flows.submit import submit_tree

    state = submit_tree(settings, return_state=True)
    record = settings.out / RECORD
    if record.is_file():
        typer.echo("\n".join(Record.model_validate(json.loads(record.read_text())).lines()[:-1]))
    end_with(state)
