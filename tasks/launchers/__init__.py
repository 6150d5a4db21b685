"""Where it runs: a launcher starts the process specs of an engine backend, waits until they can generate, and
always stops them. `launched(...)` is the one way the flows use them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import httpx

from submission.base.errors import LaunchError, PlanError, did_you_mean
from submission.plan.engine_options import OptionsLike
from submission.plan.platforms import NVIDIA, Platform
from submission.plan.replicas import Layout
from tasks.engines import Endpoint, EngineBackend, HttpProbe, Placement, ProcessSpec, Watched, watched
from tasks.engines.replicas import replicated
from tasks.launchers import replicas as replica_wait
from tasks.launchers.replicas import Readiness


class Deployment(Protocol):
    processes: list[ProcessSpec]


class Launcher(Protocol):
    """Start, probe, stop. `placement` reserves `ports_needed` ports on each of `nodes` nodes (none above `max_port`
    when a backend cannot take them); `start` writes each spec's `files` (tasks.engines.write_files) before it starts
    the process; `wait_ready` judges probe answers with `HttpProbe.accepts`. The members with a body are defaults that
    a launcher overrides where it knows better: every launcher subclasses this Protocol. A launcher made with
    `replicas` (a layout of `engine.replicas`) starts a backend's replicas (tasks/launchers/replicas.py); its
    `platform` (the system's, submission/plan/platforms.py) goes into every placement, and says how it requests, pins
    and samples GPUs."""

    name: str
    replicas: Layout | None = None
    platform: Platform = NVIDIA

    def placement(self, ports_needed: int, nodes: int = 1, max_port: int | None = None) -> Placement: ...

    def start(self, specs: list[ProcessSpec], log_dir: Path, logger: logging.Logger) -> Deployment: ...

    def wait_ready(self, deployment: Deployment, timeout_s: float) -> None: ...

    def stop(self, deployment: Deployment) -> None: ...

    def release(self) -> None:
        """Give back what `placement` took when nothing was started on it (a Slurm allocation)."""

    def model_on_nodes(self, specs: list[ProcessSpec], model_dir: Path,
                       logger: logging.Logger | logging.LoggerAdapter) -> list[ProcessSpec]:
        """The specs reading the model where their nodes hold it, after `placement` and before `start` (a Slurm
        engine's `local_stage` copies it onto each node first); default: the model folder as given."""
        return specs

    def alive(self, deployment: Deployment) -> bool:
        """Whether every process still runs (default: no way to tell from here, so yes)."""
        return True

    def endpoint(self, endpoint: Endpoint, deployment: Deployment) -> Endpoint:
        """The endpoint as this launcher reaches it (Kubernetes: through a Service); default: as the backend says."""
        return endpoint

    def review(self, specs: list[ProcessSpec], endpoint: Endpoint) -> tuple[dict[str, Any], Endpoint]:
        """What a dry run shows beyond the specs (the Kubernetes objects) and the endpoint as a launch would reach
        it, computed without starting or asking anything; default: nothing more, the backend's endpoint."""
        return {}, endpoint

    def watched(self, deployment: Deployment) -> Watched:
        """What each run's telemetry reads of the deployment, by node name (tasks.engines.watched); default: every
        process on this host."""
        return watched(deployment.processes, (socket.gethostname(),))

    def log_report(self, deployment: Deployment, lines: int = 20) -> str | None:
        """The processes' states and last log lines for an error message; None when the logs are not on this host."""
        return None

    # --- replicas (tasks/launchers/replicas.py) ------------------------------------------------------------------
    def wait_replicas(self, deployment: Deployment, timeout_s: float) -> Readiness:
        """Which replicas answer their probes within `timeout_s`, and why the others do not; never raises for a
        replica that is not ready."""
        return replica_wait.wait(self, deployment, timeout_s)

    def probe(self, deployment: Deployment, spec: ProcessSpec, probe: HttpProbe, client: httpx.Client) -> bool:
        """Whether one probe of a process accepts now (default: straight to its host and port)."""
        return replica_wait.http_probe(spec, probe, client)

    def down(self, deployment: Deployment) -> dict[str, str]:
        """The processes of the deployment that have ended, by name, with why (default: none known)."""
        return {}

    def replica_nodes(self, deployment: Deployment) -> dict[str, str]:
        """The node each process runs on, by name (default: this host)."""
        return {s.name: socket.gethostname() for s in deployment.processes}

    def replica_log(self, deployment: Deployment, name: str, lines: int) -> tuple[str, str]:
        """Where process `name` runs (a pid, a Slurm step, a pod) and the last `lines` of its log, for a report."""
        return "", ""


LAUNCHERS = {"local": "tasks.launchers.local", "kubernetes": "tasks.launchers.kubernetes",
             "slurm": "tasks.launchers.slurm"}


def launcher(name: str, **kwargs: Any) -> Launcher:
    if name not in LAUNCHERS:
        raise PlanError(f"unknown launcher {name!r}", fix=did_you_mean(name, LAUNCHERS))
    return importlib.import_module(LAUNCHERS[name]).make(**kwargs)


def placement_for(backend: EngineBackend, options: OptionsLike, where: Launcher) -> Placement:
    """The launcher's placement for what the backend needs: one node, or `nodes` of them; ports no higher than the
    backend's `max_port` when it has one (Dynamo reads DYN_SYSTEM_PORT as a signed 16-bit number)."""
    nodes, ports = backend.demand(options)
    return where.placement(ports, nodes=nodes, max_port=backend.max_port)


def _started(backend: EngineBackend, options: OptionsLike, model_dir: Path, where: Launcher, log_dir: Path,
             logger: logging.Logger | logging.LoggerAdapter, build_dir: Path | None) -> Deployment:
    placement = placement_for(backend, options, where)
    try:
        specs = where.model_on_nodes(backend.processes(options, model_dir, placement, build_dir), model_dir, logger)
    except BaseException:
        where.release()
        raise
    return where.start(specs, log_dir, logger)


def start_replicas(backend: EngineBackend, options: OptionsLike, model_dir: Path, where: Launcher, log_dir: Path,
                   logger: logging.Logger | logging.LoggerAdapter, timeout_s: float = 300,
                   build_dir: Path | None = None) -> tuple[Deployment, Endpoint, Readiness]:
    """Start every replica (the backend replicated by `where.replicas`) and wait up to `timeout_s` for each; the
    endpoint lists the ready replicas by their nodes' names, the readiness names the others
    (tasks/launchers/replicas.py). Raises, everything stopped, only when no replica is ready."""
    backend = replicated(backend, where.replicas)
    deployment = _started(backend, options, model_dir, where, log_dir, logger, build_dir)
    try:
        readiness = where.wait_replicas(deployment, timeout_s)
        if not readiness.ready:
            raise LaunchError(f"no replica of {len(readiness.missing)} was ready:\n{readiness.report()}",
                              fix="read the replicas' logs above, or raise engine.ready_timeout_s")
    except BaseException:
        where.stop(deployment)
        raise
    for straggler in readiness.missing:
        logger.warning("replica not ready, left out: %s", straggler.line())
    nodes = dict(readiness.ready)
    endpoint = where.endpoint(backend.endpoint(options, model_dir, deployment.processes), deployment)
    kept = tuple(dataclasses.replace(r, node=nodes[r.name]) for r in endpoint.replicas if r.name in nodes)
    endpoint = dataclasses.replace(endpoint, replicas=kept, base_url=kept[0].base_url,
                                   watched=where.watched(deployment))
    return deployment, endpoint, readiness


def start_ready(backend: EngineBackend, options: OptionsLike, model_dir: Path, where: Launcher, log_dir: Path,
                logger: logging.Logger | logging.LoggerAdapter, timeout_s: float = 300,
                build_dir: Path | None = None) -> tuple[Deployment | None, Endpoint]:
    """Start the backend's processes and wait until the endpoint generates; stop them if it never does. An
    external engine starts nothing: it is probed, and the deployment is None. The endpoint carries what its runs'
    telemetry reads (`Launcher.watched`). A launcher made with `replicas` starts them all and requires every one
    (`start_replicas` leaves that judgement to its caller)."""
    if backend.external:
        backend.attach(options, timeout_s)
        return None, backend.endpoint(options, model_dir, [])
    if where.replicas is not None:
        deployment, endpoint, readiness = start_replicas(backend, options, model_dir, where, log_dir, logger,
                                                         timeout_s, build_dir)
        try:
            readiness.require(where.replicas.count, "the launch")
        except BaseException:
            where.stop(deployment)
            raise
        return deployment, endpoint
    deployment = _started(backend, options, model_dir, where, log_dir, logger, build_dir)
    try:
        where.wait_ready(deployment, timeout_s)
    except BaseException:
        where.stop(deployment)
        raise
    endpoint = where.endpoint(backend.endpoint(options, model_dir, deployment.processes), deployment)
    return deployment, dataclasses.replace(endpoint, watched=where.watched(deployment))


@contextlib.contextmanager
def launched(backend: EngineBackend, options: OptionsLike, model_dir: Path, where: Launcher, log_dir: Path,
             logger: logging.Logger, timeout_s: float = 300, build_dir: Path | None = None) -> Iterator[Endpoint]:
    """Start the backend's processes, yield its endpoint once it generates, stop everything on the way out."""
    deployment, endpoint = start_ready(backend, options, model_dir, where, log_dir, logger, timeout_s, build_dir)
    try:
        yield endpoint
    finally:
        if deployment is not None:
            where.stop(deployment)
