"""The engine of one benchmark, launched lazily: only a step that is not cached starts it.

`EngineSession.endpoint()` launches the engine on first use (a task with retries: a taken port or a slow start
costs a retry, not the run) and relaunches it when a process has died. `close()` always stops it.
"""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from tasks.engines import Endpoint, backend
from tasks.launchers import launcher
from tasks.launchers.local import LocalDeployment
from tasks.nodes import NodeSlot


def _logger() -> logging.Logger | logging.LoggerAdapter:
    try:
        return get_run_logger()
    except Exception:  # outside a Prefect run (plain function use)
        return logging.getLogger("podium.engine")


def engine_identity(name: str, options: dict[str, Any]) -> str:
    """What identifies a deployment's behaviour: the engine, its version and its options."""
    return f"{name} {backend(name).version()} {json.dumps(options, sort_keys=True)}"


@task(name="launch", task_run_name="launch[{engine_name}]", retries=2, retry_delay_seconds=3, cache_policy=NO_CACHE)
def launch_engine(engine_name: str, options: dict[str, Any], model_dir: str, state_dir: str, log_dir: str,
                  timeout_s: float) -> tuple[LocalDeployment, Endpoint]:
    engine = backend(engine_name)
    where = launcher("local", state_dir=Path(state_dir))
    specs = engine.processes(options, Path(model_dir), where.placement(engine.ports_needed))
    deployment = where.start(specs, Path(log_dir), _logger())
    try:
        where.wait_ready(deployment, timeout_s)
    except BaseException:
        where.stop(deployment)
        raise
    return deployment, engine.endpoint(options, Path(model_dir), specs)


class EngineSession:
    def __init__(self, engine_name: str, options: dict[str, Any], model_dir: str, state_dir: str, log_dir: str,
                 timeout_s: float = 300) -> None:
        self.args = (engine_name, options, model_dir, state_dir, log_dir, timeout_s)
        self.where = launcher("local", state_dir=Path(state_dir))
        self.deployment: LocalDeployment | None = None
        self._endpoint: Endpoint | None = None
        self.launches = 0
        self.slot = NodeSlot([socket.gethostname()])   # gpu-<node>: one engine per node across flows

    def alive(self) -> bool:
        return self.deployment is not None and all(r.popen.poll() is None for r in self.deployment.running)

    def endpoint(self) -> Endpoint:
        if self.deployment is not None and not self.alive():
            _logger().warning("the engine died; relaunching it")
            self.close()
        if self.deployment is None:
            self.slot.acquire()
            self.deployment, self._endpoint = launch_engine(*self.args)
            self.launches += 1
        assert self._endpoint is not None
        return self._endpoint

    def close(self) -> None:
        try:
            if self.deployment is not None:
                self.where.stop(self.deployment)
        finally:
            self.deployment = self._endpoint = None
            self.slot.release()

    def __enter__(self) -> EngineSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
