"""The endpoints client run step: one performance or accuracy run of one scenario (tasks.endpoints.measure), cached
by the run's content key; the peer of the loadgen step (tasks.harness.step), with the same call, retries and cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.runtime import flow_run

from submission.plan.selection import Reuse
from submission.results.runs import RunRecord, RunSpec
from tasks.endpoints.measure import run_once
from tasks.measuring import summary
from tasks.serving.session import EngineSession
from tasks.steps import call_cached, retry_transient, run_logger
from tasks.workspace import folder_key


def _cache_key(context, parameters: dict) -> str:
    return f"endpoints-{parameters['spec'].key()}-{folder_key(parameters['work_dir'])}"


@task(name="endpoints-run", task_run_name="{spec.mode}[{spec.system}/{spec.benchmark}/{spec.scenario}]",
      cache_key_fn=_cache_key, persist_result=True, retries=1, retry_delay_seconds=2,
      retry_condition_fn=retry_transient)
def endpoints_task(spec: RunSpec, engine: EngineSession, work_dir: str, evaluator: str | None,
                   tokenizer: str | None) -> RunRecord:
    rec = run_once(spec, engine, Path(work_dir), evaluator, tokenizer, flow_run.get_id())
    run_logger("run").info("%s: %s", spec.label, summary(rec))
    return rec


def run_endpoints(spec: RunSpec, engine: EngineSession, work_dir: str, evaluator: str | None, tokenizer: str | None,
                  reuse: Reuse = "cache", **call: Any) -> Any:
    """The endpoints-run task with its cache entry in the workspace, used as `reuse` says (`tasks.steps.call_cached`:
    None when "cached" finds none); `call`: Prefect's call options (`return_state=True`)."""
    parameters = {"spec": spec, "engine": engine, "work_dir": work_dir, "evaluator": evaluator, "tokenizer": tokenizer}
    return call_cached(endpoints_task, work_dir, parameters, reuse, **call)
