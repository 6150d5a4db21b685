"""The run step of both measuring clients: one performance or accuracy run of one scenario, measured by the client
the rules name (`tasks.harness.measure` for loadgen, `tasks.endpoints.measure` for the endpoints client) and cached by
the run's content key. Each client keeps its own task name (`loadgen-run`, `endpoints-run`) and key prefix, so a
cache entry written by either is found again.

A run that cannot change by retrying (`RunRejected`: INVALID, loadgen errors, accuracy under the target) is not
retried and not cached, so the next run of the plan measures it again. Any other failure (the engine died, the
client crashed) is retried once on a relaunched engine.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect import Task, task
from prefect.runtime import flow_run

from submission.plan.selection import Reuse
from submission.results.runs import RunRecord, RunSpec
from tasks.endpoints import measure as endpoints_measure
from tasks.harness import measure as loadgen_measure
from tasks.measuring import summary
from tasks.serving.session import EngineSession
from tasks.steps import call_cached, retry_transient, run_logger
from tasks.workspace import folder_key


def cache_key(prefix: str, spec: RunSpec, work_dir: str) -> str:
    """The cache key of a run of `spec` whose records point into `work_dir`, under the client's `prefix`."""
    return f"{prefix}-{spec.key()}-{folder_key(work_dir)}"


def _run_task(client: str, run_once: Callable[..., RunRecord]) -> Task:
    """The cached run task of one client."""
    def key(context: Any, parameters: dict) -> str:
        return cache_key(client, parameters["spec"], parameters["work_dir"])

    @task(name=f"{client}-run", task_run_name="{spec.mode}[{spec.system}/{spec.benchmark}/{spec.scenario}]",
          cache_key_fn=key, persist_result=True, retries=1, retry_delay_seconds=2,
          retry_condition_fn=retry_transient)
    def run(spec: RunSpec, engine: EngineSession, work_dir: str, evaluator: str | None,
            tokenizer: str | None) -> RunRecord:
        rec = run_once(spec, engine, Path(work_dir), evaluator, tokenizer, flow_run.get_id())
        run_logger("run").info("%s: %s", spec.label, summary(rec))
        return rec

    return run


TASKS: dict[str, Task] = {"loadgen": _run_task("loadgen", loadgen_measure.run_once),
                          "endpoints": _run_task("endpoints", endpoints_measure.run_once)}


def run_measured(spec: RunSpec, engine: EngineSession, work_dir: str, evaluator: str | None, tokenizer: str | None,
                 reuse: Reuse = "cache", **call: Any) -> Any:
    """The run task of the client that measures `spec` (its `harness`), with its cache entry in the workspace, used
    as `reuse` says (`tasks.steps.call_cached`: None when "cached" finds none); `call`: Prefect's call options
    (`return_state=True`)."""
    parameters = {"spec": spec, "engine": engine, "work_dir": work_dir, "evaluator": evaluator, "tokenizer": tokenizer}
    return call_cached(TASKS[spec.harness], work_dir, parameters, reuse, **call)
