"""The engine of one benchmark, launched lazily: only a step that is not cached starts it.

`EngineSession.endpoint()` launches the engine on first use (a task with retries: a taken port or a slow start
costs a retry, not the run), warms it up (`tasks.serving.warmup`) and relaunches it, warming it up again, when a
process has died. `close()` always stops it.

An engine of replicas (the plan's `engine.replicas`) starts every replica and serves with those ready (a real
generation) within `engine.ready_timeout_s`, warmed one by one and all serving the same checkpoint and engine version
(`tasks.serving.startup`); a replica never ready, whose warm-up failed or whose process ended since is left out and
named. `endpoint(performance)` refuses, naming them, when fewer serve than the run needs (`min_ready` for accuracy
runs and audits, `performance_min_ready` for performance runs); when replicas ended since the launch and too few are
left, it launches the engine again.
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
from tasks.launchers import start_ready, start_replicas
from tasks.launchers.nodes import NodeSlot, this_node
from tasks.launchers.replicas import Readiness
from tasks.serving import liveness, startup, telemetry
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


@task(name="launch", task_run_name="launch[{engine_name} replicas]", retries=2, retry_delay_seconds=3,
      cache_policy=NO_CACHE)
def launch_replicas(engine_name: str, options: OptionsLike, model_dir: str, state_dir: str, log_dir: str,
                    timeout_s: float, where: dict[str, Any], build_dir: str | None = None) -> tuple[Any, Endpoint,
                                                                                                   Readiness]:
    """Start every replica of the engine (`where["replicas"]`) and wait up to `timeout_s` for each: the deployment,
    the endpoint of the ready ones and who was not ready (tasks/launchers/replicas.py). Fails only when none is."""
    launcher_ = launcher_for(engine_name, where, Path(state_dir))
    return start_replicas(backend(engine_name), options, Path(model_dir), launcher_, Path(log_dir),
                          run_logger("engine"), timeout_s, Path(build_dir) if build_dir else None)


class EngineSession:
    def __init__(self, engine_name: str, options: OptionsLike, model_dir: str, state_dir: str, log_dir: str,
                 timeout_s: float = 300, where: dict[str, Any] | None = None, build_dir: str | None = None,
                 stall_s: float | None = None, warmup: WarmUp | None = None,
                 exporter_urls: tuple[str, ...] = ()) -> None:
        self.args = (engine_name, options, model_dir, state_dir, log_dir, timeout_s, where, build_dir)
        self.stall_s = stall_s   # the plan's engine.stall_timeout_s: a run ends when the engine is silent that long
        self.warmup = warmup     # what each launch is warmed up with before it serves a run; None: nothing
        self.exporter_urls = tuple(exporter_urls)   # the plan's engine.telemetry.exporter_urls, filled per launch
        self.where = launcher_for(engine_name, where, Path(state_dir))
        self.layout = self.where.replicas   # the plan's engine.replicas resolved (None: one serving instance)
        self.max_lost = None if self.layout is None else self.layout.max_lost   # replicas a run may lose
        self.left_out = startup.LeftOut()   # replicas of this launch that do not serve, with why
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

    def endpoint(self, performance: bool = True) -> Endpoint:
        """The engine's endpoint, launched and warmed up on first use. With replicas, the replicas that serve, as
        many as a performance run (`performance`) or an accuracy run or audit needs, else a LaunchError naming the
        replicas left out."""
        if self.layout is not None:
            return self._replicas(performance)
        if self._endpoint is not None and not self.alive():
            run_logger("engine").warning("the engine died; relaunching it")
            self.close()
        if self._endpoint is None:
            self.slot.acquire()
            self.deployment, endpoint = launch_engine(*self.args)
            self._endpoint = self._read_beside(endpoint)
            self.launches += 1
            if self.warmup is not None:
                try:
                    warm_up(self.args[0], self._endpoint, self.warmup, run_logger("engine"))
                except BaseException:
                    self.close()
                    raise
        assert self._endpoint is not None
        return self._endpoint

    def _read_beside(self, endpoint: Endpoint) -> Endpoint:
        """The endpoint with the plan's exporters filled in for its nodes (what telemetry reads beside it)."""
        dcgm = telemetry.expand_dcgm(self.exporter_urls, endpoint.watched.nodes)
        if any(telemetry.NODE in url for url in self.exporter_urls) and not endpoint.watched.nodes:
            run_logger("engine").warning("engine.telemetry.exporter_urls: the launcher names no engine node to fill "
                                         "{node} with (an external engine, or pods the API did not list), so it is "
                                         "not read")
        return dataclasses.replace(endpoint, watched=dataclasses.replace(endpoint.watched, dcgm=dcgm))

    def _replicas(self, performance: bool) -> Endpoint:
        needed = self.layout.ready_needed(performance)
        if self._endpoint is not None and len(self._serving()) < needed and self.left_out.ended:
            run_logger("engine").warning("%d replica(s) ended since the launch (%s) and %d serve, fewer than the run "
                                         "needs (%d); launching the engine again", len(self.left_out.ended),
                                         ", ".join(self.left_out.ended), len(self._endpoint.replicas), needed)
            self.close()
        if self._endpoint is None:
            self.slot.acquire()
            self.deployment, endpoint, readiness = launch_replicas(*self.args)
            self.launches += 1
            try:
                self._endpoint, self.left_out = startup.admit(self.args[0], self._read_beside(endpoint), readiness,
                                                              self.warmup, self.layout, run_logger("engine"))
            except BaseException:
                self.close()
                raise
        self.left_out.require(len(self._endpoint.replicas), needed,
                              "a performance run" if performance else "an accuracy run or audit")
        return self._endpoint

    def _serving(self) -> tuple:
        """The replicas that serve, less those whose process has ended since the launch (named in `left_out`)."""
        gone = self.where.down(self.deployment) if self.deployment is not None else {}
        for r in self._endpoint.replicas:
            if r.name in gone:
                self.left_out.end(r, gone[r.name])
        kept = tuple(r for r in self._endpoint.replicas if r.name not in gone)
        self._endpoint = dataclasses.replace(self._endpoint, replicas=kept,
                                             base_url=kept[0].base_url if kept else self._endpoint.base_url)
        return kept

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
            self.left_out = startup.LeftOut()
            self.slot.release()

    def __enter__(self) -> EngineSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
