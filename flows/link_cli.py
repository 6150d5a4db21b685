"""`podium link`: a presigned download URL to an object of a run, minted now from the caller's own credentials
(flows/cli.py registers it). The run's report prints the command for its objects; it keeps no URL itself
(tasks/storage/links.py says why)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.cli_common import Workspace, exits_on_error
from submission.plan.model import LINK_EXPIRY_S, MAX_LINK_EXPIRY_S


@exits_on_error
def link(objects: Annotated[list[str], typer.Argument(
             help="s3://<bucket>/<key> of each object, as the run's report lists them", show_default=False)],
         expires: Annotated[int, typer.Option(
             min=1, max=MAX_LINK_EXPIRY_S, help="seconds the URL stays valid (at most 7 days, SigV4's limit; the "
                                                "report's command passes the plan's storage.link_expiry_s)")]
         = LINK_EXPIRY_S,
         endpoint_url: Annotated[str | None, typer.Option(help="S3 endpoint (default: AWS)")] = None,
         region: Annotated[str, typer.Option(help="S3 region")] = "us-east-1",
         embedded: Annotated[bool, typer.Option(help="the workspace's local S3 server (`podium dev up`)")] = False,
         workspace: Workspace = Path(".podium")) -> None:
    """Print a presigned download URL for each object (one a line), signed with your S3 credentials: anyone
    holding a URL can download that one object until it expires, and the URL shows your access key id, never the
    secret."""
    from tasks.storage import links

    minted = []
    for url in objects:
        bucket, key = links.parse(url)
        cfg = links.storage_config(bucket, endpoint_url=endpoint_url, region=region, embedded=embedded,
                                   s3_dir=workspace / "s3")
        minted.append(links.mint(cfg, key, expires))
    for made in minted:
        typer.echo(made.url)
    until = minted[-1].expires_at.isoformat().replace("+00:00", "Z")
    typer.echo(f"valid {links.lifetime(expires)}, until {until}: anyone holding a URL can download its object "
               "until then; it carries your access key id (X-Amz-Credential), not your secret", err=True)
