"""`podium fetch` as a Prefect flow, so the UI shows it: its lines in the run's log and its progress as a progress
artifact (each item of the plan an equal share). Run it through its deployment where the cluster's storage is
mounted:

    prefect deployment run 'fetch/fetch' --param plan=deployments/plans/<plan>.yaml --watch

The hub's token is HF_TOKEN's in the worker's environment, else the Prefect Secret block `hf_token_secret`
(default hf-token); MLCommons' storage's credentials CF_ACCESS_TOKEN, or CF_ACCESS_CLIENT_ID and
CF_ACCESS_CLIENT_SECRET, else the Secret blocks of those names in lower case with dashes (cf-access-token, ...);
HF_ENDPOINT, PODIUM_GITHUB_URL and PODIUM_MLCOMMONS_STORAGE_URL name mirrors, as for `podium fetch`
(flows/fetch_cli.py).
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

from prefect import flow

from submission.base.errors import PlanError
from submission.plan import model as plans
from tasks.staging.fetch import GITHUB, SECRET, Progress, fetch_all, hub_from
from tasks.staging.fetch_r2 import access_from
from tasks.staging.stage import ProgressArtifact
from tasks.steps import run_logger


@flow(name="fetch", flow_run_name="fetch[{plan}]")
def fetch(plan: str, dest: str | None = None, hf_token_secret: str = SECRET) -> list[dict]:
    """Fetch what the plan's `fetch` sections name, verified; a second run verifies and fetches nothing."""
    items = plans.load(plan).fetches()
    if not items:
        raise PlanError("the plan names nothing to fetch", where=plan,
                        fix="add a fetch section to its benchmarks (docs/inputs.md, \"Fetching the inputs\")")
    log = run_logger("fetch")
    done = fetch_all(items, root=Path(dest) if dest else None, hub=hub_from(os.environ, hf_token_secret),
                     github=os.environ.get("PODIUM_GITHUB_URL") or GITHUB,
                     access=access_from(os.environ, items, lambda: True), say=log.info,
                     progress=Progress(share=ProgressArtifact(f"podium fetch {plan}")))
    return [asdict(d) for d in done]
