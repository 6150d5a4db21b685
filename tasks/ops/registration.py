"""What a Prefect server needs before Podium's deployments run on it: the work pools, the result-storage block, a
concurrency limit per GPU node, the notification automations, and the deployments of `deployments/prefect.yaml`.

Every function works against the current Prefect API (run it under `prefect.settings.temporary_settings` or with
PREFECT_API_URL set) and is idempotent: `podium dev up` calls all of them on the local server, `podium setup`
on a production one.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from submission.base.errors import CommandError, PlanError
from submission.base.files import write_atomic
from tasks.storage import objects as storage

REPO = Path(__file__).resolve().parents[2]
PREFECT_YAML = REPO / "deployments" / "prefect.yaml"
TEMPLATES = REPO / "deployments" / "work-pools"
POOLS = {"podium-process": "process", "podium-kubernetes": "kubernetes"}
RESULTS_BLOCK = "podium-results"          # result storage: s3-bucket/podium-results
RESULTS_FOLDER = "prefect-results"
CREDENTIALS_BLOCK = "podium-s3"


def prefect_cli() -> list[str]:
    """The `prefect` command of this interpreter (the virtualenv's)."""
    beside = Path(sys.executable).parent / "prefect"
    return [str(beside)] if beside.is_file() else [sys.executable, "-m", "prefect"]


def template(kind: str) -> dict:
    path = TEMPLATES / f"{kind}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PlanError(f"cannot read the {kind} job template: {exc}", where=str(path)) from exc


def create_pools(pools: dict[str, str] | None = None) -> list[str]:
    """Create or update each work pool (name -> type) with Podium's job template for its type."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate, WorkPoolUpdate
    from prefect.exceptions import ObjectAlreadyExists

    made = []
    with get_client(sync_client=True) as client:
        for name, kind in (pools or POOLS).items():
            base = template(kind)
            try:
                client.create_work_pool(WorkPoolCreate(name=name, type=kind, base_job_template=base))
            except ObjectAlreadyExists:
                client.update_work_pool(name, WorkPoolUpdate(base_job_template=base))
            made.append(name)
    return made


def save_result_storage(cfg: storage.StorageConfig, name: str = RESULTS_BLOCK) -> str:
    """Save the prefect-aws blocks that keep task results in `s3://<bucket>/<prefix>/prefect-results/` (`cfg`'s bucket
    and prefix: `podium setup` gives no prefix, the local stack `runs`); returns the slug for
    PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK. No keys in `cfg`: the workers' boto3 chain (instance role) applies."""
    from prefect_aws import AwsCredentials, S3Bucket
    from prefect_aws.client_parameters import AwsClientParameters

    params = AwsClientParameters(endpoint_url=cfg.endpoint_url) if cfg.endpoint_url else AwsClientParameters()
    creds = AwsCredentials(aws_access_key_id=cfg.access_key, aws_secret_access_key=cfg.secret_key,
                           region_name=cfg.region, aws_client_parameters=params)
    creds.save(CREDENTIALS_BLOCK, overwrite=True)
    S3Bucket(bucket_name=cfg.bucket, credentials=creds, bucket_folder=storage.object_key(cfg, RESULTS_FOLDER)) \
        .save(name, overwrite=True)
    return f"s3-bucket/{name}"


def deployments(prefect_yaml: Path = PREFECT_YAML) -> list[dict]:
    try:
        return list(yaml.safe_load(prefect_yaml.read_text()).get("deployments") or [])
    except (OSError, yaml.YAMLError, AttributeError) as exc:
        raise PlanError(f"cannot read the deployments: {exc}", where=str(prefect_yaml)) from exc


def deployable(prefect_yaml: Path = PREFECT_YAML, repo: Path = REPO) -> tuple[list[str], dict[str, str]]:
    """The deployments whose entrypoint exists in this checkout, and why each other one is left out (a flow that
    another part of the project has not built yet, e.g. search before it lands)."""
    ready, skipped = [], {}
    for d in deployments(prefect_yaml):
        path, _, func = str(d.get("entrypoint", "")).partition(":")
        if not path.endswith(".py"):   # a module path: flows.bringup -> flows/bringup.py
            path = path.replace(".", "/") + ".py"
        file = repo / path
        if not file.is_file():
            skipped[d["name"]] = f"{path} does not exist"
        elif not re.search(rf"^def {re.escape(func)}\(", file.read_text(), re.MULTILINE):
            skipped[d["name"]] = f"{path} has no flow {func}()"
        else:
            ready.append(d["name"])
    return ready, skipped


def schedule_states(names: Sequence[str], prefect_yaml: Path = PREFECT_YAML) -> dict[tuple[str, str], bool]:
    """Whether each schedule of the named deployments is active on the server now, keyed by (deployment, slug); what
    the server does not have yet is absent. A deployment of that name for another entrypoint is not ours."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName

    if not names:
        return {}
    entrypoints = {d["name"]: d.get("entrypoint") for d in deployments(prefect_yaml)}
    with get_client(sync_client=True) as client:
        found = client.read_deployments(deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=list(names))))
    return {(d.name, s.slug): s.active for d in found if d.entrypoint == entrypoints.get(d.name)
            for s in d.schedules if s.slug}


def with_schedules(out: Path, states: dict[tuple[str, str], bool], active: bool | None = None,
                   prefect_yaml: Path = PREFECT_YAML) -> dict[tuple[str, str], bool]:
    """Write to `out` a copy of `prefect_yaml` in which every schedule says whether it is active: `active` when given,
    else as it is on the server now (`states`: what the user set stays so), else paused. `prefect deploy` of that
    copy updates each schedule in place by its slug (same id). Returns what each schedule was set to."""
    data = yaml.safe_load(prefect_yaml.read_text())
    chosen = {}
    for d in data.get("deployments") or []:
        for schedule in d.get("schedules") or []:
            key = (d["name"], schedule.get("slug") or "")
            schedule["active"] = chosen[key] = active if active is not None else states.get(key, False)
    write_atomic(out, yaml.safe_dump(data, sort_keys=False))
    return chosen


def deploy(names: Sequence[str], env: dict[str, str] | None = None, prefect_yaml: Path = PREFECT_YAML) -> str:
    """`prefect deploy` of the named deployments from the repository root; returns its output. PODIUM_REPO is
    left out of its environment so the pull step's `{{ $PODIUM_REPO }}` stays a placeholder that each worker
    fills in with its own checkout."""
    if not names:
        return ""
    argv = [*prefect_cli(), "--no-prompt", "deploy", "--prefect-file", str(prefect_yaml)]
    for name in names:
        argv += ["--name", name]
    env = {k: v for k, v in {**os.environ, **(env or {})}.items() if k != "PODIUM_REPO"}   # resolved on each worker
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)  # noqa: S603
    if done.returncode != 0 or "Deployment '" not in done.stdout:
        raise CommandError(argv, done.returncode, (done.stdout + done.stderr)[-3000:],
                           fix="read the output above; the work pool must exist before `prefect deploy`")
    return done.stdout


# ----- the fleet (docs/fleet.md) --------------------------------------------------------------------------------

PULL_STEPS = [{"prefect.deployments.steps.set_working_directory": {"directory": "{{ $PODIUM_REPO }}"}}]


# What every member's flow run gets, whichever worker runs it: a heartbeat every 30 s (Prefect's minimum; the
# default is 180), which `watch_members` watches, Podium's log records in the run's logs, and no output piped to the
# worker (a member keeps running when its worker restarts; a write to the pipe of a dead worker would end it).
MEMBER_JOB = {"env": {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30", "PREFECT_LOGGING_EXTRA_LOGGERS": "podium"},
              "stream_output": False}
MEMBER_FLOW = "fleet-member"   # the flow of flows/fleet.py: its deployments are fleet-member/<pool>
MEMBER_WATCH = "podium: fleet member lost (no heartbeat)"
MEMBER_WATCH_S = 90.0   # three missed heartbeats


def deploy_member(pool: str, entrypoint: str, schema: dict) -> str:
    """Create or update the deployment `fleet-member/<pool>` that runs a fleet member on `pool`'s workers, from each
    worker's own checkout (PODIUM_REPO), as prefect.yaml's deployments do. Returns its full name."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        flow_id = client.create_flow_from_name(MEMBER_FLOW)
        client.create_deployment(flow_id=flow_id, name=pool, work_pool_name=pool, work_queue_name="default",
                                 entrypoint=entrypoint, pull_steps=PULL_STEPS, parameter_openapi_schema=schema,
                                 job_variables=MEMBER_JOB, tags=["podium", "fleet"],
                                 description=f"One benchmark of a plan on the cluster of work pool {pool}")
    return f"{MEMBER_FLOW}/{pool}"


def watch_members(within_s: float = MEMBER_WATCH_S) -> Any:
    """The automation that marks a fleet member Crashed when its heartbeats stop for `within_s` seconds (its
    cluster, or its process, died; a worker's death alone leaves its members running). Replaces an earlier copy.
    A member that ended is never changed: the server refuses to move a final state (the action does not force)."""
    from datetime import timedelta

    from prefect.automations import Automation
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture

    ended = {f"prefect.flow-run.{state}" for state in ("Completed", "Failed", "Cancelled", "Crashed")}
    automation = Automation(
        name=MEMBER_WATCH, description=f"A {MEMBER_FLOW} flow run sent no heartbeat for {within_s:g} s",
        trigger=EventTrigger(after={"prefect.flow-run.heartbeat"}, expect={"prefect.flow-run.heartbeat"} | ended,
                             match={"prefect.resource.id": "prefect.flow-run.*"},
                             match_related={"prefect.resource.role": "flow", "prefect.resource.name": MEMBER_FLOW},
                             for_each={"prefect.resource.id"}, posture=Posture.Proactive, threshold=1,
                             within=timedelta(seconds=within_s)),
        actions=[ChangeFlowRunState(state=StateType.CRASHED, message=f"no heartbeat for {within_s:g} s: its "
                                    "cluster or its process died; re-run the plan to resume")])
    try:
        while True:   # names are not unique on the server: remove every earlier copy
            Automation.read(name=MEMBER_WATCH).delete()
    except ValueError:
        pass
    return automation.create()


def pool_problems(pools: dict[str, str]) -> list[str]:
    """What keeps each system's work pool (system -> pool) from running a member now: the pool missing on the
    server, paused, or without a worker online. Each problem names the system, the pool and the fix."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import WorkerStatus, WorkPoolStatus
    from prefect.exceptions import ObjectNotFound

    start = "start a worker on the cluster: `prefect worker start --pool {p} --type process` (locally: " \
            "`podium dev up --pool {p}`)"
    problems = []
    with get_client(sync_client=True) as client:
        for system, pool in pools.items():
            where = f"systems[{system}].work_pool: {pool}"
            try:
                found = client.read_work_pool(pool)
            except ObjectNotFound:
                problems.append(f"{where}: no such work pool on the Prefect server; create it and "
                                + start.format(p=pool))
                continue
            if found.is_paused:
                problems.append(f"{where}: the pool is paused; resume it: `prefect work-pool resume {pool}`")
            elif found.status != WorkPoolStatus.READY and not any(
                    w.status == WorkerStatus.ONLINE for w in client.read_workers_for_work_pool(pool)):
                # the pool's own status follows its workers' heartbeats late: a worker just started is online first
                problems.append(f"{where}: no worker of the pool is online; " + start.format(p=pool))
    return problems
