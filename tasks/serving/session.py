"""The engine of one benchmark, launched lazily: only a step that is not cached starts it.

`EngineSession.endpoint()` launches the engine on first use (a task with retries: a taken port or a slow start
costs a retry, not the run), warms it up (`tasks.serving.warmup`) and relaunches it, warming it up again, when a
process has died. `close()` always stops it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from submission.base.errors import CommandError
from submission.plan.engine_options import OptionsLike
from tasks.engines import Endpoint, backend
from tasks.launchers import start_ready
from tasks.launchers.nodes import NodeSlot, this_node
from tasks.serving import liveness, telemetry
from tasks.serving.launch import launcher_for
from tasks.serving.warmup import WarmUp, warm_up
from tasks.steps import run_logger


@task(name="launch", task_run_name="launch[{engine_name}]", retries=2, retry_delay_seconds=3, cache_policy=NO_CACHE)
def launch_engine(engine_name: str, options: OptionsLike, model_dir: str, state_dir: str, log_dir: str,
                  timeout_s: float, where: dict[str, Any] | None = None,
                  build_dir: str | None = None) -> tuple[Any, Endpoint]:
    """Start the engine where the plan says (`where`: tasks.serving.launch.where; None: this host) and wait until it
    generates. An external engine is only probed: its deployment is None."""
    launcher_ = launcher_for(engine_name, where, Path(state_dir))
    return start_ready(backend(engine_name), options, Path(model_dir), launcher_, Path(log_dir), run_logger("engine"),
                       timeout_s, Path(build_dir) if build_dir else None)


class EngineSession:
    def __init__(self, engine_name: str, options: OptionsLike, model_dir: str, state_dir: str, log_dir: str,
                 timeout_s: float = 300, where: dict[str, Any] | None = None, build_dir: str | None = None,
                 stall_s: float | None = None, warmup: WarmUp | None = None, dcgm_urls: tuple[str, ...] = ()) -> None:
        self.args = (engine_name, options, model_dir, state_dir, log_dir, timeout_s, where, build_dir)
        self.stall_s = stall_s   # the plan's engine.stall_timeout_s: a run ends when the engine is silent that long
        self.warmup = warmup     # what each launch is warmed up with before it serves a run; None: nothing
        self.dcgm_urls = tuple(dcgm_urls)   # the plan's engine.telemetry.dcgm_urls, filled in for each launch
        self.where = launcher_for(engine_name, where, Path(state_dir))
        self.deployment: Any = None
        self._endpoint: Endpoint | None = None
        self.launches = 0
        self.slot = NodeSlot([this_node()],   # gpu-<node>: one engine per node across flows
                             record_dir=Path(state_dir) / "leases")   # a killed flow's lease: released by the next

    def alive(self) -> bool:
        if self._endpoint is None:
            return False
        if self.deployment is None:   # an external engine: not ours to watch
            return True
        return self.where.alive(self.deployment)

    def log_report(self, lines: int = 20) -> str:
        """The engine's processes and their last log lines, for an error message (where its logs are on this host)."""
        report = self.where.log_report(self.deployment, lines) if self.deployment is not None else None
        return report or f"the engine's logs are under {self.args[4]}"

    def endpoint(self) -> Endpoint:
        if self._endpoint is not None and not self.alive():
            run_logger("engine").warning("the engine died; relaunching it")
            self.close()
        if self._endpoint is None:
            self.slot.acquire()
            self.deployment, endpoint = launch_engine(*self.args)
            dcgm = telemetry.expand_dcgm(self.dcgm_urls, endpoint.watched.nodes)
            if any(telemetry.NODE in url for url in self.dcgm_urls) and not endpoint.watched.nodes:
                run_logger("engine").warning("engine.telemetry.dcgm_urls: the launcher names no engine node to fill "
                                             "{node} with (an external engine, or pods the API did not list), so it "
                                             "is not read")
            self._endpoint = dataclasses.replace(endpoint, watched=dataclasses.replace(endpoint.watched, dcgm=dcgm))
            self.launches += 1
            if self.warmup is not None:
                try:
                    warm_up(self.args[0], self._endpoint, self.warmup, run_logger("engine"))
                except BaseException:
                    self.close()
                    raise
        assert self._endpoint is not None
        return self._endpoint

    @contextlib.contextmanager
    def stopped_if_hung(self) -> Iterator[None]:
        """Around a harness run: when the run ended because the engine hung (the stall watchdog's
        `liveness.ENGINE_STALLED`), stop the engine, which still holds its port and accelerators, so that the
        step's retry launches a fresh one. The error goes on."""
        try:
            yield
        except CommandError as e:
            if e.returncode == liveness.ENGINE_STALLED:
                run_logger("engine").warning("the engine hung (nothing for %s s with requests in flight); "
                                             "stopping it", self.stall_s)
                self.close()
            raise

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
