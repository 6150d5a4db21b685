"""Two of the checks of a valid plan's surroundings before anything starts (tasks/ops/prerequisites.py runs them for
`podium preflight`, `podium run` and the flows): no workspace folder, no Prefect, no process. Each problem is one
PlanError naming the plan field (or the environment variables) and the fix.

- every local source the plan names exists (model, performance, accuracy and compliance data sets);
- every engine fits its GPUs and every run its sequence budget (submission/budget/capacity.py; docs/engines.md), and
  every Slurm allocation of its own lasts as long as what it runs (submission/budget/slurm_time.py);
- object storage that is not the embedded server has credentials in boto3's default chain (environment variables,
  a shared credentials or config file profile, a web-identity token, container or instance credentials). Without
  any, uploads would fail only at the very end, after hours of runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from submission.base.errors import PlanError
from submission.budget import capacity
from submission.plan.fetch import reads_from
from submission.plan.model import Plan

CREDENTIALS_FIX = ("export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE naming a profile in "
                   "~/.aws/credentials), or set storage.embedded: true to use Podium's local S3 server")


def _sources(plan: Plan) -> list[tuple[str, str]]:
    """(plan field, path) of every source the plan stages."""
    return [(f"benchmarks.{i}.{field}", source)
            for i, b in enumerate(plan.benchmarks) for field, _, source in b.sources()]


def has_credentials() -> bool:
    """Whether boto3's default chain finds credentials (the same chain the uploads use)."""
    import botocore.session

    return botocore.session.get_session().get_credentials() is not None


def input_problems(plan: Plan, source: str | None = None) -> list[PlanError]:
    """One PlanError for each missing local source, and one for missing storage credentials."""
    fetched = [item.dest for item in plan.fetches()]
    copy = ("copy it there (docs/inputs.md, \"Staging models and data sets\"), or fix the path; the smoke plans' "
            "assets: `make smoke-assets`")
    problems = [PlanError(f"{field}: {path} does not exist", where=source,
                          fix=f"fetch it: podium fetch {source or 'PLAN'}"
                          if any(reads_from(d, [path]) for d in fetched) else copy)
                for field, path in _sources(plan) if not path.startswith("s3://") and not Path(path).exists()]
    if not plan.storage.embedded and not has_credentials():   # s3:// sources use the same storage's access
        problems.append(PlanError(f"storage: no credentials for {plan.storage.endpoint_url or 'AWS S3'} "
                                  f"(bucket {plan.storage.bucket!r}) in the environment, a profile or an instance "
                                  "role", where=source, fix=CREDENTIALS_FIX))
    return problems


def check_capacity(plan: Plan, capacities: Mapping[str, str] | None = None,
                   log: Callable[[str], object] | None = None) -> None:
    """Raise one PlanError when an engine does not fit its GPUs or a run's longest sequence its engine's limit, from
    the plan's local sources; `capacities` (system -> GPU memory, preflight's detected descriptions) wins over the
    plan's. Each benchmark's table goes to `log`."""
    from submission.budget.slurm_time import time_problems
    from tasks.serving.launch import sizing

    require_fit([sizing(plan, b, capacity=(capacities or {}).get(b.system)) for b in plan.benchmarks], log)
    problems = time_problems(plan)   # an allocation of its own (allocation: new) as long as what it runs
    if problems:
        raise PlanError("a Slurm allocation is shorter than what it runs:\n  - " + "\n  - ".join(problems),
                        fix="raise each engine.slurm.time_limit named above (`podium launch PLAN --dry-run` prints "
                            "the need)")


def require_fit(reviews: list[capacity.Review], log: Callable[[str], object] | None = None, when: str = "") -> None:
    """Each review's table to `log` (`when` follows its benchmark's key), then one PlanError for every problem."""
    for r in reviews:
        if log and (r.fits or r.budgets or r.notes):
            log(f"{r.key}{when}:\n" + "\n".join(capacity.render(r)))
    capacity.require([problem for r in reviews for problem in r.problems])
