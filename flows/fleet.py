"""A plan's systems on clusters of their own, at once (docs/fleet.md).

A system that names a Prefect work pool (`systems[].work_pool`) runs each of its benchmarks as a *member*: a
deployment run of `member` on that pool, whose worker runs on the system's cluster. The parent (the submission flow)
starts every member at once, runs the other systems' benchmarks in its own process meanwhile, then waits for the
members and gathers what they left. What crosses between them: the plan and where to write (the member's
parameters), and the member's run folder (object storage, under the parent's run prefix). The parameters carry no
secret: each engine env value is `<set>` in the plan (submission/plan/secret_env.py), and the values travel in a
Prefect Secret block of the parent's run (`ENV_BLOCK`), which the member reads and the parent deletes once every
member has ended. A member's records name files on its own cluster; the parent reads them from the copy it downloads.
A member re-run on the same cluster finds its finished runs in its workspace's cache, so a re-run of the parent
measures nothing twice.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from prefect.states import Completed, Failed, State

from flows.benchmark import measure, run_name
from submission.base.errors import PlanError
from submission.base.files import copy_run_folder, write_atomic
from submission.plan import model as plans
from submission.plan.model import Plan
from submission.plan.secret_env import env_values, shown_plan, with_env
from submission.plan.selection import NOT_RUN
from submission.results.runs import AuditRecord, RunRecord
from tasks.measuring import summary
from tasks.ops import registration
from tasks.ops.preflight import preflight
from tasks.reporting import progress
from tasks.storage import objects as storage
from tasks.storage import s3server
from tasks.storage.publish import publish
from tasks.workspace import Workspace

ENTRYPOINT = "flows.fleet:member"
MEMBER_FILE = "member.json"         # in a member's folder: its records, audits, failures, system description
FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
POLL_S = 3.0
UNATTENDED_S = 600.0   # a member not yet started while its pool has no worker online this long is cancelled
ENV_BLOCK = "podium-engine-env-{run}"   # the Prefect Secret block carrying a parent run's engine env to its members


@flow(name=registration.MEMBER_FLOW, flow_run_name=run_name)
def member(plan: dict, key: str, key_prefix: str, workspace: str | None = None, only: list[str] | None = None,
           env_block: str | None = None) -> State:
    """Benchmark `key` of `plan` on this worker's cluster: preflight of its system here, every run and audit
    (flows.benchmark.measure; `only`: the parent's `--only` selection), then its run folder to object storage under
    `key_prefix`. The workspace is this host's: `workspace`, else PODIUM_WORKSPACE, else `.podium` in the worker's
    checkout. `env_block`: the Prefect Secret block holding the engine env values the plan shows as `<set>`."""
    if env_block:
        plan = with_env(plan, carried_env(env_block))
    loaded = plans.parse(plan, f"plan {plan.get('name')!r} from the fleet's parent run")
    bench = loaded.benchmark(key)
    ws = Workspace.at(workspace or os.environ.get("PODIUM_WORKSPACE") or ".podium")
    run_id = str(flow_run.get_id())
    folder = ws.run_folder(run_id, latest=False)
    with s3server.plan_storage(loaded.storage, ws.s3) as cfg:
        systems = preflight(loaded.as_member(bench.system), cfg)
        out = measure(loaded, key, ws, folder / "logs", only or ())
        records = [RunRecord.model_validate(r) for r in out["records"]]
        audits = [AuditRecord.model_validate(a) for a in out["audits"]]
        write_atomic(folder / MEMBER_FILE, json.dumps({
            "key": key, "flow_run_id": run_id, "systems": systems, "failures": out["failures"],
            "engine_launches": out["engine_launches"], "skipped": out["skipped"], "records": carry(records, folder),
            "audits": carry(audits, folder)}, indent=2))
        publish(cfg, str(folder), key_prefix, {"flow-run-id": run_id, "plan-sha256": loaded.fingerprint()})
    line = (f"{key}: {len(records)} run(s), {len(audits)} audit(s), {len(out['failures'])} failed, engine launched "
            f"{out['engine_launches']} time(s); s3://{cfg.bucket}/{storage.object_key(cfg, key_prefix)}/")
    get_run_logger().info(line)
    return Failed(message=line) if out["failures"] else Completed(message=line)


def carry_env(plan: dict, parent_run_id: str) -> str | None:
    """Save the engine env values of `plan` (its JSON form) in the Prefect Secret block of the parent run; its name,
    or None when no engine has env."""
    from prefect.blocks.system import Secret

    values = env_values(plan)
    if not values:
        return None
    name = ENV_BLOCK.format(run=parent_run_id)
    Secret(value=values).save(name, overwrite=True)
    return name


def carried_env(name: str) -> dict[str, dict[str, str]]:
    """The engine env values `carry_env` saved in the block `name` (`submission.plan.secret_env.env_values`)."""
    from prefect.blocks.system import Secret

    try:
        return Secret.load(name).get()
    except ValueError:   # Prefect: no block document of that name
        raise PlanError(f"the Prefect Secret block {name} with the engine env of this fleet run is gone",
                        fix="run the plan again: its parent saves the block and deletes it once its members ended") \
            from None


def forget_env(started: list[Started]) -> None:
    """Delete the Secret blocks that carried the engine env to these members (they have ended)."""
    from prefect.blocks.system import Secret

    for name in sorted({s.env_block for s in started if s.env_block}):
        with contextlib.suppress(Exception):   # gone already, or the server forgot it: nothing to delete
            Secret.delete(name)


def carry(records: list[RunRecord] | list[AuditRecord], folder: Path) -> list[dict]:
    """Copy each run's folder (and an audit's TESTxx folder) into `folder`; the records then name the copies
    relative to it, so that they mean the same wherever the folder is downloaded (`landed`)."""
    out = []
    for r in records:
        name = r.label.replace("/", "-")
        moved = {"run_dir": f"logs/runs/{name}"} | ({"folder": f"logs/audits/{name}"}
                                                    if isinstance(r, AuditRecord) else {})
        for field, rel in moved.items():
            copy_run_folder(Path(getattr(r, field)), folder / rel)
        out.append(r.model_copy(update=moved).model_dump(mode="json"))
    return out


def landed(rows: list[dict], folder: Path, kind: type[RunRecord] | type[AuditRecord]) -> list[Any]:
    """`carry`'s records with their paths under `folder`, where the member's folder was downloaded."""
    return [kind.model_validate(row | {f: str(folder / row[f]) for f in ("run_dir", "folder") if f in row})
            for row in rows]


@dataclass
class Started:
    """A member the parent started: which benchmark, on which pool, as which flow run."""

    key: str
    pool: str
    flow_run_id: Any
    name: str
    key_prefix: str
    env_block: str | None = None   # the Secret block with the engine env values (`carry_env`)


def start(plan: Plan, parent_run_id: str, only: tuple[str, ...] = ()) -> list[Started]:
    """One deployment run per benchmark of every pooled system, all at once, each a subflow of the calling run.
    The idempotency key makes a retry of the parent find the members it already started. The parameters hold the
    plan with its engine env values as `<set>` and, where it has any, the Secret block holding them (`carry_env`)."""
    from prefect.deployments import run_deployment
    from prefect.utilities.callables import parameter_schema

    pools = plan.pools()
    deployments = {pool: registration.deploy_member(pool, ENTRYPOINT, parameter_schema(member).model_dump())
                   for pool in sorted(set(pools.values()))}
    data = plan.model_dump(mode="json")
    block = carry_env(data, parent_run_id)
    started = []
    for bench in (b for b in plan.benchmarks if b.system in pools):
        prefix = f"{plan.name}/{parent_run_id}/members/{bench.key.replace('/', '--')}"
        run = run_deployment(deployments[pools[bench.system]], timeout=0, as_subflow=True,
                             idempotency_key=f"{parent_run_id}:{bench.key}",
                             parameters={"plan": shown_plan(data), "key": bench.key, "key_prefix": prefix,
                                         **({"only": list(only)} if only else {}),
                                         **({"env_block": block} if block else {})})
        started.append(Started(bench.key, pools[bench.system], run.id, run.name, prefix, block))
        get_run_logger().info("%s: started on work pool %s as flow run %r", bench.key, pools[bench.system], run.name)
    return started


def wait(started: list[Started], poll_s: float = POLL_S, unattended_s: float = UNATTENDED_S,
         ) -> list[tuple[Started, Any]]:
    """Until every member has ended (Completed, Failed, Crashed or Cancelled); each with its final state. A member
    that no worker has picked up while its pool had no worker online for `unattended_s` is cancelled (its cluster
    is gone; a re-run of the plan starts it again), so the parent never waits for ever. Then the Secret blocks that
    carried their engine env are deleted (`forget_env`)."""
    from prefect.client.orchestration import get_client

    ended: dict[str, Any] = {}
    unready: dict[str, float] = {}   # pool -> since when it has had no worker online
    with get_client(sync_client=True) as client:
        while True:
            for s in (s for s in started if s.key not in ended):
                state = _settled(client, s, unready, unattended_s)
                if state is not None:
                    ended[s.key] = state
            if len(ended) == len(started):
                forget_env(started)
                return [(s, ended[s.key]) for s in started]
            time.sleep(poll_s)


def _settled(client: Any, s: Started, unready: dict[str, float], unattended_s: float) -> Any:
    """The member's final state, or None while it may still end by itself (see `wait`)."""
    from prefect.client.schemas.objects import WorkPoolStatus
    from prefect.states import Cancelled

    state = client.read_flow_run(s.flow_run_id).state
    if state is not None and state.type.value in FINAL:
        return state
    if state is not None and state.type.value not in ("SCHEDULED", "PENDING"):
        return None   # running: it ends by itself, or the watch marks it Crashed when its heartbeats stop
    if client.read_work_pool(s.pool).status == WorkPoolStatus.READY:
        unready.pop(s.pool, None)
        return None
    now = time.monotonic()
    if now - unready.setdefault(s.pool, now) < unattended_s:
        return None
    message = f"no worker of work pool {s.pool} was online for {unattended_s:g} s to start it"
    client.set_flow_run_state(s.flow_run_id, Cancelled(message=message), force=True)
    return Cancelled(message=message)


def gather(s: Started, state: Any, cfg: storage.StorageConfig, folder: Path) -> dict:
    """What a member left, from object storage into `folder/members/<name>/`: its records, audits, failures and
    system description; a member that ended without publishing is one failure naming its flow run and state."""
    here = folder / "members" / s.key_prefix.rsplit("/", 1)[-1]
    says = f"{s.key}: fleet member {s.name!r} on work pool {s.pool} ended {state.name}"
    if storage.object_key(cfg, s.key_prefix, storage.MANIFEST) not in storage.list_keys(cfg, s.key_prefix):
        return {"records": [], "audits": [], "failures": [f"{says}: {state.message or 'no message'}; nothing it "
                                                          "measured was published (a re-run reuses what it "
                                                          "finished on its cluster)"],
                "engine_launches": 0, "systems": {}}
    storage.get_tree(cfg, s.key_prefix, here)
    data = json.loads((here / MEMBER_FILE).read_text())
    records, audits = landed(data["records"], here, RunRecord), landed(data["audits"], here, AuditRecord)
    skipped = data.get("skipped", [])
    for line in [f"{r.label}: {summary(r)}" for r in records] + [f"{a.label}: {a.summary()}" for a in audits] + [
            f"{label}: {NOT_RUN}" for label in skipped]:
        progress.finished(f"{line} (on work pool {s.pool})")
    said = state.type.value == "COMPLETED" or (state.type.value == "FAILED" and data["failures"])   # by its failures
    failures = list(data["failures"]) + ([] if said else [f"{says}: {state.message}"])
    return {"records": [r.model_dump(mode="json") for r in records],
            "audits": [a.model_dump(mode="json") for a in audits], "failures": failures, "skipped": skipped,
            "engine_launches": data["engine_launches"], "systems": data["systems"]}
