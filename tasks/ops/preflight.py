"""The preflight step of the `run`, `bringup` and `fleet` flows: tasks/ops/prerequisites.py's checks on this host
and what the clusters answer (every problem in one report, before anything is allocated), the bucket there, then the
engines' nodes checked and each system described from its engine's node (`on_nodes`). Returns the descriptions.

A system that runs on a work pool of its own (docs/fleet.md) is checked on its cluster, by its fleet member: here
only that its pool is there with a worker online."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from submission.base.errors import PlanError
from submission.plan.model import Plan
from tasks.ops.prerequisites import cluster_checks, host_checks, on_nodes
from tasks.steps import run_logger
from tasks.storage import objects as storage


@task(name="preflight")
def preflight(plan: Plan, cfg: storage.StorageConfig, workspace: str | None = None) -> dict[str, dict[str, str]]:
    """Everything that can be checked before an engine starts. Returns the descriptions of the systems that run
    here (a pooled system's member describes its own)."""
    require_pools(plan)
    here = plan.local()
    root = Path(workspace).resolve() if workspace else None
    found = host_checks(here, capacity=False)     # capacity: below, with the GPU memory the engines' nodes tell
    cluster_checks(here, root / "pids" if root else None, found=found)
    found.require()
    storage.ensure_bucket(cfg)
    return on_nodes(here, root, run_logger("preflight").info)


def require_pools(plan: Plan) -> None:
    """Each pooled system's work pool exists with a worker online (one PlanError naming every problem)."""
    from tasks.ops.registration import pool_problems

    problems = pool_problems(plan.pools()) if plan.pools() else []
    if problems:
        raise PlanError("a system's work pool cannot run it now:\n  - " + "\n  - ".join(problems),
                        fix="start the named workers, or remove work_pool to run the system here")
