"""What every Prefect step (task) shares: where it logs, which of its failures a retry may fix, and where a cached
step keeps its cache entries."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, TypeVar

from prefect import Task, get_run_logger

from submission.errors import PodiumError

T = TypeVar("T", bound=Task)


def run_logger(name: str) -> logging.Logger | logging.LoggerAdapter:
    """The Prefect run's logger inside a flow or task run (what the UI shows); `podium.<name>` outside one."""
    try:
        return get_run_logger()
    except Exception:  # outside a Prefect run (plain function use)
        return logging.getLogger(f"podium.{name}")


def retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    """A step's retry condition: retry what another attempt may not repeat (a crashed process, a dead engine, a cut
    connection), never a final error (`PodiumError.final`: the plan's fault, the rules', a run's own results, corrupt
    data)."""
    try:
        state.result()
    except PodiumError as e:
        return not e.final
    except Exception:
        return True
    return False


def cached_in(step: T, work_dir: str | Path) -> T:
    """`step` (a task with a `cache_key_fn`) keeping its cache entries in `<work_dir>/cache/`, beside the run folders
    they name, whichever way its flow was started. Prefect would otherwise put them in its default result storage,
    which differs between `podium run` (`<workspace>/prefect/storage`) and a deployment run through a worker (the
    pool's S3 block): the same plan in the same workspace then measured everything again, and an entry found in S3
    on a host without that workspace named logs that are not there (docs/operations.md, "The cache")."""
    return step.with_options(result_storage=Path(work_dir).resolve() / "cache")   # a Path: a local folder, no block
