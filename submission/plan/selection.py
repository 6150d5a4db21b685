"""`podium run PLAN --only SYSTEM/BENCHMARK/SCENARIO`: the scenarios of a plan to measure afresh, the rest of the plan
taken from the cache only (docs/runs.md, "When a run is INVALID").

A selected scenario has every one of its runs measured again: its performance run, its accuracy run and its
compliance audits, cached or not, so that the scenario's folder in the tree comes from one sitting. A scenario is the
smallest selection: `SYSTEM/BENCHMARK/SCENARIO/accuracy` (or `/performance`) is refused with the reason
(`part_refusal`). For an endpoints benchmark the reason is the round's layout: the scenario folder is one client
report, whose config.yaml describes the run whose performance and accuracy results sit beside it; the client's
accuracy-only mode (`--mode acc`) writes a config of its own (one worker over one connection), so its accuracy
result cannot join an earlier run's performance result, and the scenario's accuracy is measured again by a whole
`--mode both` run (docs/benchmarks.md). Every other run
of the plan is taken from the cache when it is there and otherwise not run at all (no GPU time the user did not ask
for); the tree then lacks it, and the run's line says how many were not run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from submission.base.errors import PlanError, did_you_mean
from submission.plan.model import SCENARIOS, Plan

# How a run uses the cache (tasks.steps.call_cached): "cache", a plain run: a cached run is Cached, another is
# measured; "fresh", a selected scenario: measured again, its old entry dropped; "cached", any other run under
# --only: Cached when it is there, else not run.
Reuse = Literal["cache", "fresh", "cached"]
NOT_RUN = "not run: not selected by --only and not in the cache"


def scenario_keys(plan: Plan) -> list[str]:
    """Every `system/benchmark/scenario` of the plan, in the plan's order and the rules' scenario order."""
    return [f"{b.key}/{s}" for b in plan.benchmarks for s in SCENARIOS if s in b.scenarios]


def resolve(plan: Plan, only: Sequence[str], where: str | None = None) -> tuple[str, ...]:
    """The scenario keys `--only` names, in plan order and each once: `system/benchmark/scenario`, or
    `system/benchmark` for all of that benchmark's scenarios. A name the plan does not have is a PlanError listing
    the plan's names, raised before anything starts. Empty `only`: no selection (a plain run)."""
    keys = scenario_keys(plan)
    benchmarks = [b.key for b in plan.benchmarks]
    chosen: set[str] = set()
    for name in only:
        name = name.strip().strip("/")
        if name in keys:
            chosen.add(name)
        elif name in benchmarks:
            chosen |= {k for k in keys if k.startswith(f"{name}/")}
        elif (part := part_refusal(plan, name, keys)) is not None:
            raise PlanError(f"--only {name!r}: {part}", where=where,
                            fix=f"--only {name.rsplit('/', 1)[0]} measures the whole scenario again")
        else:
            raise PlanError(f"--only {name!r}: plan {plan.name!r} has no such scenario or benchmark", where=where,
                            fix="name one as SYSTEM/BENCHMARK/SCENARIO (or SYSTEM/BENCHMARK for all its "
                                f"scenarios); {did_you_mean(name, keys + benchmarks)}")
    return tuple(k for k in keys if k in chosen)


PARTS = ("performance", "accuracy")


def part_refusal(plan: Plan, name: str, keys: Sequence[str]) -> str | None:
    """Why `--only` measures no part of a scenario alone (`SYSTEM/BENCHMARK/SCENARIO/<part>`), by the client that
    measures it (module doc); None when `name` is not a part of one of the plan's scenarios."""
    scenario, _, part = name.rpartition("/")
    if part not in PARTS or scenario not in keys:
        return None
    bench = next(b for b in plan.benchmarks if scenario.startswith(f"{b.key}/"))
    if plan.harness(bench) == "endpoints":
        return (f"the endpoints client measures {scenario}'s performance and accuracy in one --mode both run, whose "
                "one report (config.yaml, performance/result_summary.json, accuracy/accuracy_results.json) is the "
                "scenario folder the round's layout asks for; an accuracy-only client run (--mode acc) writes a "
                "config.yaml of its own (one worker over one connection) that would not describe a performance "
                "result beside it, so the accuracy is measured again with the whole run")
    return (f"--only selects whole scenarios: {scenario}'s performance run, accuracy run and audits are measured "
            "in one sitting, so its folder in the tree comes from one engine and one set of settings")


def reuse(only: Sequence[str], system: str, benchmark: str, scenario: str) -> Reuse:
    """How one run of `system/benchmark/scenario` uses the cache, given the resolved selection (`resolve`)."""
    if not only:
        return "cache"
    return "fresh" if f"{system}/{benchmark}/{scenario}" in only else "cached"


def rerun(system: str, benchmark: str, scenario: str) -> str:
    """How to measure one scenario again, for the fix of a failed run."""
    return f"`podium run PLAN --only {system}/{benchmark}/{scenario}` measures just this scenario again"
