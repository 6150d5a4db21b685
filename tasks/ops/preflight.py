"""The preflight step: everything that can be checked before an engine starts, on the host that runs the flow: the
plan's inputs (tasks/ops/inputs.py), each engine known and installed, each evaluator known, the bucket there, the
nodes of each Slurm engine (its interpreter's architecture, the job's time: tasks/ops/slurm_checks.py), every
system description complete, and every engine fitting the GPUs the descriptions give. Returns the descriptions.

A system is described from the node that runs its engine: node 0 of its Slurm allocation, by a Slurm step
(tasks/ops/slurm_checks.py); under Kubernetes, the node a short-lived pod shaped like the engine's lands on
(tasks/ops/kube_checks.py); a local engine's system from this host. A closed submission takes no field that holds no
fact (`unknown`, or a guessed default).

A system that runs on a work pool of its own (docs/fleet.md) is checked on its cluster, by its fleet member: here
only that its pool is there with a worker online."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from submission.base.errors import PlanError
from submission.plan.model import Plan
from submission.tree.systems import describe_sourced, forecast, gaps, require_complete
from tasks.accuracy import evaluator
from tasks.engines import backend, engine_identity
from tasks.ops.inputs import check_capacity, check_inputs
from tasks.steps import run_logger
from tasks.storage import objects as storage


@task(name="preflight")
def preflight(plan: Plan, cfg: storage.StorageConfig, workspace: str | None = None) -> dict[str, dict[str, str]]:
    """Everything that can be checked before an engine starts. Returns the descriptions of the systems that run
    here (a pooled system's member describes its own)."""
    from tasks.ops.kube_checks import describe_engine_nodes
    from tasks.ops.slurm_checks import node_checks

    require_pools(plan)
    here = plan.local()
    check_inputs(here)                                            # sources there, storage credentials found
    require_description_sources(here)                             # a closed plan names what nothing can detect
    for b in here.benchmarks:
        engine_identity(b.engine.name, b.engine.config())          # engine known and installed
        if b.accuracy:
            evaluator(b.evaluator or b.benchmark)                 # evaluator known
    storage.ensure_bucket(cfg)
    log = run_logger("preflight").info
    root = Path(workspace).resolve() if workspace else None
    nodes = node_checks(here, root / "pids" if root else None, str(root or "/"), log)   # on each Slurm engine's nodes
    nodes |= describe_engine_nodes(here, root / "pids" if root else None, log)         # a pod like each k8s engine's
    systems = describe_systems(here, nodes)
    gpu_memory = {name: d.get("accelerator_memory_capacity", "") for name, d in systems.items()}
    check_capacity(here, gpu_memory, log)                         # fits its GPUs; every run within its budget
    return systems


def describe_systems(plan: Plan, detected: dict[str, dict[str, str]] | None = None) -> dict[str, dict[str, str]]:
    """Each system's description from the plan's overrides and what its engine's node told (`detected`; this host
    for a system missing there), checked complete; a closed submission's also free of guesses."""
    systems = {}
    for system in plan.systems:
        frameworks = sorted({f"{b.engine.name} {backend(b.engine.name).version(b.engine.config())}"
                             for b in plan.benchmarks if b.system == system.name})
        desc, sources = describe_sourced(
            division=plan.division, submitter=plan.submitter, system_name=system.name, status=system.status,
            system_type=system.system_type, number_of_nodes=system.nodes, framework=", ".join(frameworks) or "none",
            overrides=system.description, host=(detected or {}).get(system.name), round=plan.round)
        require_complete(desc, division=plan.division, submitter=plan.submitter, round=plan.round)
        missing = gaps(desc, sources, plan.round) if plan.strict_description else []
        if missing:
            i = plan.systems.index(system)
            raise PlanError(f"system {system.name!r}: a closed submission needs a real value for "
                            f"{len(missing)} field(s) that nothing detected: "
                            + ", ".join(f"{f} (now {desc[f]!r}, {sources[f]})" for f in missing),
                            fix=f"give each in systems.{i}.description, e.g. {missing[0]}: ...")
        systems[system.name] = desc
    return systems


def require_description_sources(plan: Plan) -> None:
    """Before the flow starts (and again in preflight): a closed submission's fields that neither the plan gives
    nor a node can tell, one PlanError listing them all with the fix."""
    if not plan.strict_description:
        return
    problems = [f"systems.{i}.description.{field}" for i, system in enumerate(plan.systems)
                for field, source in forecast(system.description, system.nodes, plan.round) if source == "nowhere"]
    if problems:
        raise PlanError("a closed submission's system description needs fields that no node can tell and the plan "
                        "does not give:\n  - " + "\n  - ".join(problems),
                        fix="give each one in the plan (what the official checker requires non-empty; "
                            "`podium launch PLAN --dry-run` lists where every field comes from)")


def require_pools(plan: Plan) -> None:
    """Each pooled system's work pool exists with a worker online (one PlanError naming every problem)."""
    from tasks.ops.registration import pool_problems

    problems = pool_problems(plan.pools()) if plan.pools() else []
    if problems:
        raise PlanError("a system's work pool cannot run it now:\n  - " + "\n  - ".join(problems),
                        fix="start the named workers, or remove work_pool to run the system here")
