"""`podium fetch PLAN`: what the plan's `fetch` sections name, at its pins, verified (flows/cli.py registers it; the
fetch is tasks/staging/fetch.py's; flows/fetch.py is the same as a Prefect flow, for the UI).

What happens goes to stderr (a line per step, a byte bar per download and conversion, huggingface_hub's own bars for
hub files), one summary line per destination to stdout. Nothing Prefect is imported unless a token is read from a
Prefect Secret block: HF_TOKEN (or, for a data set on MLCommons' storage, every CF_ACCESS_*) unset and a Prefect
server configured.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from flows.cli_common import exits_on_error


class Bars:
    """A byte bar on stderr per download or conversion (huggingface_hub's tqdm, like its own file bars)."""

    def __init__(self) -> None:
        self.open: dict[str, Any] = {}

    def __call__(self, label: str, done: int, total: int) -> None:
        from huggingface_hub.utils import tqdm

        bar = self.open.get(label)
        if bar is None:
            bar = self.open[label] = tqdm(total=total or None, desc=label, unit="B", unit_scale=True,
                                          unit_divisor=1024)
        bar.total = total or None   # 0: the size is not known (a chunked download)
        bar.update(done - bar.n)
        if total and done >= total:
            bar.close()
            del self.open[label]

    def close(self) -> None:
        for bar in self.open.values():
            bar.close()
        self.open.clear()


def secret_to_read(named: str | None) -> str | None:
    """The Prefect Secret block to read the hub's token from when HF_TOKEN is unset: the one named, else the default
    where a Prefect server is configured (PREFECT_API_URL, or the Prefect profile's); None: none."""
    from submission.base.errors import PlanError
    from tasks.staging.fetch import SECRET

    if os.environ.get("HF_TOKEN"):
        return None
    if prefect_server():
        return named or SECRET
    if named:
        raise PlanError(f"--hf-token-secret {named}: no Prefect server is configured to read it from",
                        fix="export PREFECT_API_URL=http://<server>:4200/api, or export HF_TOKEN instead")
    return None


def prefect_server() -> bool:
    """Whether a Prefect server is configured (PREFECT_API_URL, or the Prefect profile's): Secret blocks are read."""
    from prefect.settings import Settings

    return bool(Settings().api.url)


@exits_on_error
def fetch(plan: Annotated[Path, typer.Argument(help="the plan YAML")],
          dest: Annotated[Path | None, typer.Option(
              help="fetch under this folder instead (an absolute destination keeps its whole path there)")] = None,
          hf_token_secret: Annotated[str | None, typer.Option(
              help="the Prefect Secret block holding the Hugging Face token, read when HF_TOKEN is unset (default: "
                   "hf-token, where a Prefect server is configured)")] = None,
          ) -> None:
    """Fetch what the plan's `fetch` sections name (checkpoints, data sets, the LiveCodeBench tests, source archives)
    to their destinations, each at its pinned commit or sha256 and verified; a second call verifies and fetches
    nothing (docs/inputs.md, "Fetching the inputs"). HF_TOKEN: the Hugging Face token; HF_ENDPOINT: another hub
    (a mirror); PODIUM_GITHUB_URL: another GitHub (a mirror of its archives); CF_ACCESS_TOKEN, or
    CF_ACCESS_CLIENT_ID and CF_ACCESS_CLIENT_SECRET: MLCommons' storage's Cloudflare Access credentials;
    PODIUM_MLCOMMONS_STORAGE_URL: a mirror of that storage."""
    from submission.base.errors import PlanError
    from submission.plan import model as plans
    from submission.rules import load_rules
    from tasks.staging.fetch import GITHUB, Progress, fetch_all, hub_from
    from tasks.staging.fetch_r2 import access_from

    loaded = plans.load(plan)
    items = loaded.fetches()
    if not items:
        raise PlanError("the plan names nothing to fetch", where=str(plan),
                        fix="add a fetch section to its benchmarks, e.g. fetch: {/mnt/mlperf/models/gpt-oss-120b: "
                            "{repo: openai/gpt-oss-120b}} (deployments/plans/gpt-oss-120b-trtllm-k8s.yaml)")
    hub = hub_from(os.environ, secret_to_read(hf_token_secret))
    access = access_from(os.environ, items, prefect_server)
    bars = Bars()
    try:
        done = fetch_all(items, root=dest, hub=hub, github=os.environ.get("PODIUM_GITHUB_URL") or GITHUB, access=access,
                         say=lambda line: typer.echo(line, err=True), progress=Progress(bytes=bars))
    finally:
        bars.close()
    client = load_rules(loaded.round).endpoints_client
    for item, got in zip(items, done, strict=True):
        pin = f"@{got.revision[:12]}" if got.revision else ""
        typer.echo(f"{got.dest}: {got.source}{pin}, {got.files} file(s), {got.bytes:,} bytes, "
                   f"{got.fetched} fetched, {got.kept} verified in place")
        if client is not None and item.source.github == client.github:
            typer.echo(f"next: make venv-endpoints ENDPOINTS_SRC={got.dest}.tar.gz (installs the endpoints client "
                       "from the fetched archive)", err=True)
