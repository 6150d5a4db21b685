"""Where it runs: a launcher starts the process specs of an engine backend, waits until they can generate, and
always stops them. `launched(...)` is the one way the flows use them.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from submission.errors import PlanError, did_you_mean
from tasks.engines import Endpoint, EngineBackend, Placement, ProcessSpec


class Deployment(Protocol):
    processes: list[ProcessSpec]


class Launcher(Protocol):
    name: str

    def placement(self, ports_needed: int) -> Placement: ...

    def start(self, specs: list[ProcessSpec], log_dir: Path, logger: logging.Logger) -> Deployment: ...

    def wait_ready(self, deployment: Deployment, timeout_s: float) -> None: ...

    def stop(self, deployment: Deployment) -> None: ...


LAUNCHERS = {"local": "tasks.launchers.local"}


def launcher(name: str, **kwargs: Any) -> Launcher:
    if name not in LAUNCHERS:
        raise PlanError(f"unknown launcher {name!r}", fix=did_you_mean(name, LAUNCHERS))
    return importlib.import_module(LAUNCHERS[name]).make(**kwargs)


@contextlib.contextmanager
def launched(backend: EngineBackend, options: dict[str, Any], model_dir: Path, where: Launcher, log_dir: Path,
             logger: logging.Logger, timeout_s: float = 300) -> Iterator[Endpoint]:
    """Start the backend's processes, yield its endpoint once it generates, stop everything on the way out."""
    specs = backend.processes(options, model_dir, where.placement(backend.ports_needed))
    deployment = where.start(specs, log_dir, logger)
    try:
        where.wait_ready(deployment, timeout_s)
        yield backend.endpoint(options, model_dir, specs)
    finally:
        where.stop(deployment)
