"""What every Prefect step (task) shares: where it logs, which of its failures a retry may fix, where a cached step
keeps its cache entries and how a call uses them (`call_cached`: `podium run --only`), the text of a Prefect Secret
block (`secret_text`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, TypeVar

from prefect import Task, get_run_logger

from submission.base.errors import PlanError, PodiumError, StorageError
from submission.plan.selection import Reuse

T = TypeVar("T", bound=Task)


def run_logger(name: str) -> logging.Logger | logging.LoggerAdapter:
    """The Prefect run's logger inside a flow or task run (what the UI shows); `podium.<name>` outside one."""
    try:
        return get_run_logger()
    except Exception:  # outside a Prefect run (plain function use)
        return logging.getLogger(f"podium.{name}")


def secret_text(name: str, *, instead: str) -> str | None:
    """The text of the Prefect Secret block `name` on the Prefect server, None when there is no block of that name.
    `instead`: what the user may do instead of the block, for the fix of a block that cannot be read."""
    from prefect.blocks.system import Secret

    where = f"the Prefect Secret block {name}"
    try:
        value = Secret.load(name).get()
    except ValueError:   # Prefect: no block document of that name
        return None
    except Exception as e:
        raise StorageError(f"cannot read {where}: {type(e).__name__}",
                           fix=f"check PREFECT_API_URL, or {instead}") from None
    if not isinstance(value, str) or not value.strip():
        raise PlanError(f"{where} holds no text", fix=f"store it as the block's value, a string: {name}")
    return value


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
    on a host without that workspace named logs that are not there (docs/runs.md, "The cache")."""
    return step.with_options(result_storage=Path(work_dir).resolve() / "cache")   # a Path: a local folder, no block


def call_cached(step: Task, work_dir: str | Path, parameters: dict[str, Any], reuse: Reuse = "cache",
                **call: Any) -> Any:
    """`step(**parameters, **call)` with its cache entries in `<work_dir>/cache/` (`cached_in`), using its entry as
    `reuse` says (submission.plan.selection): "cache" as Prefect does; "fresh" measures again: the entry is dropped
    first and the run folder its record names set aside as `<name>.replaced-<time>`, so a fresh run that fails leaves no
    entry naming its logs (the next run measures it again, as after any rejected run); "cached" returns None, running
    nothing, when there is no entry. `call`: Prefect's call options (`return_state=True`)."""
    placed = cached_in(step, work_dir)
    if reuse != "cache":
        entry = _entry(placed, work_dir, parameters)
        if reuse == "cached" and not entry.is_file():
            return None
        if reuse == "fresh":
            _drop(entry)
            placed = placed.with_options(refresh_cache=True)   # past Prefect's in-memory copy of the entry too
    return placed(**parameters, **call)


def _entry(step: Task, work_dir: str | Path, parameters: dict[str, Any]) -> Path:
    """The file of the cache entry a call of `step` with `parameters` would find (its `cache_key_fn` names it)."""
    assert step.cache_policy is not None, f"{step.name} is not a cached step"
    key = step.cache_policy.compute_key(task_ctx=None, inputs=parameters, flow_parameters={})
    return Path(work_dir).resolve() / "cache" / str(key)


def _drop(entry: Path) -> None:
    """Remove a cache entry, first setting aside the run folder its record names (a run's or an audit's)."""
    from prefect.filesystems import LocalFileSystem
    from prefect.results import ResultStore

    from tasks.measuring import set_aside

    if not entry.is_file():
        return
    try:
        record = ResultStore(result_storage=LocalFileSystem(basepath=str(entry.parent))).read(entry.name).result
    except Exception:  # an entry Prefect cannot read back would not be used either; drop it all the same
        record = None
    run_dir = Path(getattr(record, "run_dir", "") or "")
    if run_dir.name and run_dir.is_dir():
        set_aside(run_dir, "replaced")
    entry.unlink()
