"""What every Prefect step (task) shares: where it logs, and which of its failures a retry may fix."""

from __future__ import annotations

import logging
from typing import Any

from prefect import get_run_logger

from submission.errors import PodiumError


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
