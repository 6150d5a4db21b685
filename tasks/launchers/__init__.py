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
from tasks.engines import Endpoint, EngineBackend, Placement, ProcessSpec, demand


class Deployment(Protocol):
    processes: list[ProcessSpec]


class Launcher(Protocol):
    """Start, probe, stop. A launcher for several nodes also takes `placement(ports_needed, nodes=N)` (ports per
    node), and `max_port=P` when a backend cannot take ports above P. It writes each spec's `files`
    (tasks.engines.write_files) before starting it, and judges probe answers with `HttpProbe.accepts`. Optional:
    `alive(deployment) -> bool`, `endpoint(endpoint, deployment) -> Endpoint` when the endpoint is reached another
    way than the backend says (Kubernetes)."""

    name: str

    def placement(self, ports_needed: int) -> Placement: ...

    def start(self, specs: list[ProcessSpec], log_dir: Path, logger: logging.Logger) -> Deployment: ...

    def wait_ready(self, deployment: Deployment, timeout_s: float) -> None: ...

    def stop(self, deployment: Deployment) -> None: ...


LAUNCHERS = {"local": "tasks.launchers.local", "kubernetes": "tasks.launchers.kubernetes",
             "slurm": "tasks.launchers.slurm"}


def launcher(name: str, **kwargs: Any) -> Launcher:
    if name not in LAUNCHERS:
        raise PlanError(f"unknown launcher {name!r}", fix=did_you_mean(name, LAUNCHERS))
    return importlib.import_module(LAUNCHERS[name]).make(**kwargs)


def placement_for(backend: EngineBackend, options: dict[str, Any], where: Launcher) -> Placement:
    """The launcher's placement for what the backend needs: one node, or `nodes` of them; ports no higher than the
    backend's `max_port` when it has one (Dynamo reads DYN_SYSTEM_PORT as a signed 16-bit number)."""
    nodes, ports = demand(backend, options)
    kwargs: dict[str, Any] = {"nodes": nodes} if nodes > 1 else {}
    if getattr(backend, "max_port", None):
        kwargs["max_port"] = backend.max_port  # type: ignore[attr-defined]
    return where.placement(ports, **kwargs)


def start_ready(backend: EngineBackend, options: dict[str, Any], model_dir: Path, where: Launcher, log_dir: Path,
                logger: logging.Logger | logging.LoggerAdapter, timeout_s: float = 300,
                build_dir: Path | None = None) -> tuple[Deployment | None, Endpoint]:
    """Start the backend's processes and wait until the endpoint generates; stop them if it never does. An
    external engine starts nothing: it is probed, and the deployment is None."""
    if getattr(backend, "external", False):
        backend.attach(options, timeout_s)  # type: ignore[attr-defined]
        return None, backend.endpoint(options, model_dir, [])
    placement = placement_for(backend, options, where)
    try:
        specs = backend.processes(options, model_dir, placement, build_dir)
    except BaseException:
        release = getattr(where, "release", None)   # what a launcher took for the placement (a Slurm allocation)
        if release is not None:
            release()
        raise
    deployment = where.start(specs, log_dir, logger)
    try:
        where.wait_ready(deployment, timeout_s)
    except BaseException:
        where.stop(deployment)
        raise
    endpoint = backend.endpoint(options, model_dir, specs)
    rewrite = getattr(where, "endpoint", None)   # a launcher may reach the endpoint another way (kubernetes)
    return deployment, rewrite(endpoint, deployment) if rewrite else endpoint


@contextlib.contextmanager
def launched(backend: EngineBackend, options: dict[str, Any], model_dir: Path, where: Launcher, log_dir: Path,
             logger: logging.Logger, timeout_s: float = 300, build_dir: Path | None = None) -> Iterator[Endpoint]:
    """Start the backend's processes, yield its endpoint once it generates, stop everything on the way out."""
    deployment, endpoint = start_ready(backend, options, model_dir, where, log_dir, logger, timeout_s, build_dir)
    try:
        yield endpoint
    finally:
        if deployment is not None:
            where.stop(deployment)
