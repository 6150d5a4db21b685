"""The preflight step: everything that can be checked before an engine starts, on the host that runs the flow: the
plan's inputs (tasks/ops/inputs.py), each engine known and installed, each evaluator known, the bucket there, every
system description complete, and every engine fitting the GPUs the descriptions give. Returns the descriptions.

A system that runs on a work pool of its own (docs/fleet.md) is checked on its cluster, by its fleet member: here
only that its pool is there with a worker online."""

from __future__ import annotations

from prefect import task

from submission.errors import PlanError
from submission.plan import Plan
from submission.systems import describe, require_complete
from tasks.accuracy import evaluator
from tasks.engines import backend, engine_identity
from tasks.ops.inputs import check_capacity, check_inputs
from tasks.steps import run_logger
from tasks.storage import objects as storage


@task(name="preflight")
def preflight(plan: Plan, cfg: storage.StorageConfig) -> dict[str, dict[str, str]]:
    """Everything that can be checked before an engine starts. Returns the descriptions of the systems that run
    here (a pooled system's member describes its own)."""
    require_pools(plan)
    here = plan.local()
    check_inputs(here)                                            # sources there, storage credentials found
    for b in here.benchmarks:
        engine_identity(b.engine.name, b.engine.config())          # engine known and installed
        if b.accuracy:
            evaluator(b.evaluator or b.benchmark)                 # evaluator known
    storage.ensure_bucket(cfg)
    systems = describe_systems(here)
    check_capacity(here, {name: d.get("accelerator_memory_capacity", "") for name, d in systems.items()},
                   run_logger("preflight").info)                         # fits its GPUs; every run within its budget
    return systems


def describe_systems(plan: Plan) -> dict[str, dict[str, str]]:
    """Each system's description from this host and the plan's overrides, checked complete."""
    systems = {}
    for system in plan.systems:
        frameworks = sorted({f"{b.engine.name} {backend(b.engine.name).version(b.engine.config())}"
                             for b in plan.benchmarks if b.system == system.name})
        desc = describe(division=plan.division, submitter=plan.submitter, system_name=system.name,
                        status=system.status, system_type=system.system_type, number_of_nodes=system.nodes,
                        framework=", ".join(frameworks) or "none", overrides=system.description, round=plan.round)
        require_complete(desc, division=plan.division, submitter=plan.submitter, round=plan.round)
        systems[system.name] = desc
    return systems


def require_pools(plan: Plan) -> None:
    """Each pooled system's work pool exists with a worker online (one PlanError naming every problem)."""
    from tasks.ops.registration import pool_problems

    problems = pool_problems(plan.pools()) if plan.pools() else []
    if problems:
        raise PlanError("a system's work pool cannot run it now:\n  - " + "\n  - ".join(problems),
                        fix="start the named workers, or remove work_pool to run the system here")
