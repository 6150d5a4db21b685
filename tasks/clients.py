"""The measuring clients, by the name the rules and the plan give them (`harness:`): what the flows need of each, so
they never ask which client measures a run. Adding one: docs/architecture.md, "Where to add".

- `review`: what it is given for a run, for the launch review (`review(spec, endpoint, run_dir, model_dir)`);
- `probe`: one run of the peak-QPS search at a rate, judged by the bar its checker applies
  (`probe(spec, stage, qps, engine, work_dir, tokenizer) -> Probe`; tasks.tuning.probes runs it as the probe task);
- `probe_length`: how long a probe at a rate runs, in the client's own terms
  (`probe_length(qps, settings, base) -> (min_duration_ms, min_query_count)`; None: the plan's own line stays);
- `window`: a finished run's measured phase, read from its run folder (`window(run_dir) -> (start, end)` in UNIX
  seconds, or None), which each run's telemetry marks (tasks/serving/telemetry.py).

Each is named by dotted path and imported when first asked for (as tasks.engines.BACKENDS): a probe runs on an
EngineSession, which launches through tasks.serving.launch, whose review asks this module how runs are measured. The
run step both clients share is `tasks.run_step`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from submission.plan.model import BenchmarkSpec, Plan
from submission.results.runs import RunSpec, plan_runs
from submission.rules import load_rules
from tasks.engines import Endpoint


@dataclass(frozen=True)
class Client:
    review: str
    probe: str
    probe_length: str
    window: str

    def part(self, name: str) -> Callable[..., Any]:
        """The function `name` (review, probe, probe_length or window) of this client."""
        module, _, attr = getattr(self, name).partition(":")
        return getattr(importlib.import_module(module), attr)


CLIENTS: dict[str, Client] = {
    "loadgen": Client(review="tasks.harness.runner:review",
                      probe="tasks.harness.probe:probe", probe_length="tasks.harness.probe:probe_length",
                      window="submission.results.logs:measured_window"),
    "endpoints": Client(review="tasks.endpoints.runner:review",
                        probe="tasks.endpoints.probe:probe", probe_length="tasks.endpoints.probe:probe_length",
                        window="tasks.endpoints.results:measured_window"),
}


def client(spec: RunSpec) -> Client:
    """The client that measures `spec`."""
    return CLIENTS[spec.harness]


def review(plan: Plan, bench: BenchmarkSpec, endpoint: Endpoint, model_dir: Path, work_dir: Path) -> dict[str, Any]:
    """How every run of `bench` would be measured (`podium launch PLAN --dry-run`): its client and, per run, what the
    client is given (loadgen: the user.conf; the endpoints client: its command and config). Hashes are placeholders
    until staging."""
    sources = {path for _, kind, path in bench.sources() if kind == "datasets"}
    specs = plan_runs(plan, bench, load_rules(plan.round), model_sha256="staged", engine=bench.engine.name,
                      dataset_sha256=dict.fromkeys(sources, "staged"))
    runs = [client(s).part("review")(s, endpoint, work_dir / "runs" / f"<{s.scenario}-{s.mode}>", model_dir)
            for s in specs]
    return {"harness": plan.harness(bench), "runs": runs}
