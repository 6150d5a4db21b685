"""The measuring clients, by the name the rules and the plan give them (`harness:`): each one's run step, called the
same way for every run (`step(spec, engine, work_dir, evaluator, tokenizer, **prefect_call)`), so the flows never ask
which client measures a run. Adding one: docs/architecture.md, "Where to add".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from submission.runs import RunSpec
from tasks.endpoints.step import run_endpoints
from tasks.harness.step import run_loadgen

STEPS: dict[str, Callable[..., Any]] = {"loadgen": run_loadgen, "endpoints": run_endpoints}


def run_step(spec: RunSpec) -> Callable[..., Any]:
    """The run step of the client that measures `spec`."""
    return STEPS[spec.harness]
