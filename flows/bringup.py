"""New-cluster bring-up: preflight (GPUs and driver, CUDA, engine versions, free disk for the models, object
storage, the plan and its system descriptions), then the smoke plan on the new cluster, then the full plan.

Run ad hoc through its deployment when a cluster comes up:

    prefect deployment run 'podium-submission/bringup' --param plan=deployments/plans/<site>.yaml \
        --param cluster=<name> --watch

It runs under the flow name `podium-submission`, beside the plain submission runs, so the UI, the notifications
and the nightly history show a cluster's bring-up with the rest of its runs. Nothing that costs GPU time starts
before every preflight check passed, and the full plan starts only after the smoke run completed.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import yaml
from prefect import flow, get_run_logger
from prefect.states import Completed, Failed, State

from flows.submission import submission
from submission.base.errors import PlanError
from submission.plan import model as plans
from submission.plan.model import check_name
from submission.results.runs import planned
from tasks.ops.cluster import cluster_checks
from tasks.ops.preflight import preflight
from tasks.reporting import progress
from tasks.staging.stage import S3Access
from tasks.storage import s3server
from tasks.workspace import Workspace

SMOKE_PLAN = "deployments/plans/smoke.yaml"


def cluster_plan(plan_path: str, systems: list[str] | None, cluster: str, ws: Workspace) -> str:
    """The plan this cluster runs: all of it, or only `systems` (and their benchmarks), written beside its runs."""
    if not systems:
        return plan_path
    plan = plans.load(plan_path)
    data = plan.model_dump(mode="json", exclude_unset=True)
    data["systems"] = [s for s in data["systems"] if s["name"] in systems]
    data["benchmarks"] = [b for b in data["benchmarks"] if b["system"] in systems]
    unknown = sorted(set(systems) - {s.name for s in plan.systems})
    if unknown or not data["benchmarks"]:
        raise PlanError(f"systems {unknown or systems} are not in {plan_path} or run no benchmark",
                              where="bringup parameter `systems`",
                              fix=f"name systems of the plan: {', '.join(s.name for s in plan.systems)}")
    out = ws.root / "bringup" / check_name(cluster) / Path(plan_path).name
    out.parent.mkdir(parents=True, exist_ok=True)
    plans.parse(data, str(out))   # still a valid plan
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(out)


@flow(name="podium-submission", flow_run_name="bringup-{cluster}")
def bringup(plan: str, cluster: str, systems: list[str] | None = None, smoke_plan: str | None = SMOKE_PLAN,
            workspace: str = ".podium") -> State:
    ws = Workspace.at(workspace)
    logger = get_run_logger()
    target = cluster_plan(plan, systems, cluster, ws)
    loaded = plans.load(target)
    access = asdict(S3Access.for_plan(loaded.storage, ws.s3))
    with s3server.plan_storage(loaded.storage, ws.s3) as cfg:
        preflight(loaded, cfg)                  # the plan against the rules, engines, sources, S3, system descriptions
    checks = cluster_checks(loaded, cluster, str(ws.stage), access)
    runs: dict[str, dict] = {}
    stages = [("smoke", smoke_plan)] if smoke_plan and Path(smoke_plan).resolve() != Path(target).resolve() else []
    stages.append(("full", target))
    lines = [f"bring-up of {cluster}: {len(checks)}/{len(checks)} preflight checks passed"]
    with progress.tracking(sum(planned(plans.load(path)).total for _, path in stages)):
        for name, path in stages:
            logger.info("bring-up of %s: the %s plan %s", cluster, name, path)
            state = submission(path, workspace, return_state=True)
            if not state.is_completed():
                lines.append(f"{name} plan ended {state.name}: {state.message}")
                return Failed(message=" | ".join(lines + ["the full plan did not start"] * (name == "smoke")))
            lines.append(f"{name} plan {state.message}")
            runs[name] = {k: v for k, v in state.result().items() if k in ("run_id", "run_folder", "s3", "check")}
    logger.info(" | ".join(lines))
    return Completed(message=" | ".join(lines), data={"cluster": cluster, "plan": target, "preflight": checks,
                                                       "runs": runs})
