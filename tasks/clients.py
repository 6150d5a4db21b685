"""The measuring clients, by the name the rules and the plan give them (`harness:`): each one's run step, called the
same way for every run (`step(spec, engine, work_dir, evaluator, tokenizer, reuse, **prefect_call)`; `reuse`: how it
uses its cache entry, `tasks.steps.call_cached`), so the flows never ask which client measures a run; and what each is
given for a run, for the launch review. Adding one: docs/architecture.md, "Where to add".
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from submission.plan import BenchmarkSpec, Plan
from submission.rules import load_rules
from submission.runs import RunSpec, plan_runs
from tasks.endpoints import runner as endpoints_runner
from tasks.engines import Endpoint

# The run steps by harness, imported when first asked for (as tasks.engines.BACKENDS): a step runs on an
# EngineSession, which launches through tasks.serving.launch, whose review asks this module how runs are measured.
STEPS = {"loadgen": "tasks.harness.step:run_loadgen", "endpoints": "tasks.endpoints.step:run_endpoints"}


def run_step(spec: RunSpec) -> Callable[..., Any]:
    """The run step of the client that measures `spec`."""
    module, _, name = STEPS[spec.harness].partition(":")
    return getattr(importlib.import_module(module), name)


def _loadgen_review(spec: RunSpec, endpoint: Endpoint, run_dir: Path, model_dir: Path) -> dict[str, Any]:
    return {"label": spec.label, "user_conf": spec.user_conf_text()}


REVIEWS: dict[str, Callable[..., dict[str, Any]]] = {"loadgen": _loadgen_review, "endpoints": endpoints_runner.review}


def review(plan: Plan, bench: BenchmarkSpec, endpoint: Endpoint, model_dir: Path, work_dir: Path) -> dict[str, Any]:
    """How every run of `bench` would be measured (`podium launch PLAN --dry-run`): its client and, per run, what the
    client is given (loadgen: the user.conf; the endpoints client: its command and config). Hashes are placeholders
    until staging."""
    sources = {path for _, kind, path in bench.sources() if kind == "datasets"}
    specs = plan_runs(plan, bench, load_rules(plan.round), model_sha256="staged", engine=bench.engine.name,
                      dataset_sha256=dict.fromkeys(sources, "staged"))
    runs = [REVIEWS[s.harness](s, endpoint, work_dir / "runs" / f"<{s.scenario}-{s.mode}>", model_dir) for s in specs]
    return {"harness": plan.harness(bench), "runs": runs}
