"""Readiness of an engine's replicas (`engine.replicas`): each replica judged on its own, the slow and the dead named.

The contract with the engine session (tasks/serving/session.py) and the head's dispatch:

- `tasks.launchers.start_replicas(backend, options, model_dir, where, log_dir, logger, timeout_s, build_dir)` starts
  every replica of a replicated backend (tasks/engines/replicas.py; `start_ready` wraps a plain backend itself when
  the launcher was made with `replicas`), waits up to `timeout_s` for each to answer its probes (a real one-token
  generation) and returns `(deployment, endpoint, readiness)`. It never waits longer, and never raises because some
  replica is not ready: `endpoint.replicas` lists the ready ones with their nodes' names, `readiness.missing` the
  others, each with its node, where it runs (a pid, a Slurm step, a pod), why and its log's tail. Only a launch that
  fails as a whole (no replica ready, the allocation refused) raises LaunchError, after stopping what it started.
- `readiness.require(count, purpose)`: LaunchError naming every missing replica when fewer than `count` are ready
  (`Layout.ready_needed(performance)` gives the plan's count for a performance run or for accuracy and audits).
  `start_ready` requires every replica.
- `Launcher.down(deployment)`: the replicas whose process has ended since, by name, with why (a crash mid-run).
  `Launcher.alive` stays "every process runs", so one replica's death makes it False.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

import httpx

from submission.base.errors import LaunchError

TAIL_LINES = 30   # lines of a replica's log in its report
POLL_S = 0.5


@dataclass(frozen=True)
class Straggler:
    """A replica that was not ready: its name, node, where it runs, why, and the last lines of its log."""

    name: str
    node: str
    where: str
    why: str
    log_tail: str = ""

    def line(self) -> str:
        return f"{self.name} on {self.node or 'no node yet'} ({self.where}): {self.why}"


@dataclass(frozen=True)
class Readiness:
    """Which replicas answered their probes in time (name -> node, in replica order) and which did not."""

    ready: tuple[tuple[str, str], ...]
    missing: tuple[Straggler, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.ready)

    def report(self, tails: bool = True) -> str:
        """Every missing replica, one line each (and its log's tail)."""
        return "\n".join(s.line() + (f"; last lines of its log:\n{s.log_tail}" if tails and s.log_tail else "")
                         for s in self.missing)

    def require(self, count: int, purpose: str) -> None:
        """LaunchError naming the missing replicas when fewer than `count` are ready for `purpose`."""
        if len(self.ready) < count:
            total = len(self.ready) + len(self.missing)
            raise LaunchError(f"{len(self.ready)} of {total} replicas ready, {purpose} needs {count}; not ready:\n"
                              f"{self.report()}", fix="read the replicas' logs above, or lower engine.replicas."
                                                  "min_ready / performance_min_ready (or raise ready_timeout_s)")


def wait(launcher: Any, deployment: Any, timeout_s: float, poll_s: float = POLL_S) -> Readiness:
    """Probe every replica of `deployment` in turn until each accepts all its probes, its process has ended
    (`launcher.down`) or `timeout_s` has passed; then ask the launcher where each runs and, for those not ready, for
    its log. `launcher` gives `probe`, `down`, `replica_nodes` and `replica_log` (tasks/launchers/__init__.py)."""
    pending = {s.name: [s, 0] for s in deployment.processes if s.replica is not None}
    order = list(pending)
    ready, why = set(), {}
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=30.0) as client:
        while pending:
            gone = launcher.down(deployment)
            for name in list(pending):
                spec, passed = pending[name]
                if name in gone:
                    why[name] = gone[name]
                    del pending[name]
                    continue
                while passed < len(spec.probes) and launcher.probe(deployment, spec, spec.probes[passed], client):
                    passed += 1
                pending[name][1] = passed
                if passed == len(spec.probes):
                    ready.add(name)
                    del pending[name]
            if not pending or time.monotonic() > deadline:
                break
            time.sleep(poll_s)
    for name, (spec, passed) in pending.items():
        probe = spec.probes[passed]
        why[name] = f"not ready after {timeout_s:.0f} s ({'GET' if probe.body is None else 'POST'} {probe.path} on " \
                    f"{spec.host}:{spec.port})"
    nodes = launcher.replica_nodes(deployment)
    missing = []
    for name in (n for n in order if n in why):
        where, tail = launcher.replica_log(deployment, name, TAIL_LINES)
        missing.append(Straggler(name, nodes.get(name, ""), where, why[name], tail))
    return Readiness(tuple((n, nodes.get(n, "")) for n in order if n in ready), tuple(missing))


def http_probe(spec: Any, probe: Any, client: httpx.Client) -> bool:
    """One probe of a process, straight to its host and port."""
    url = f"http://{spec.host}:{spec.port}{probe.path}"
    with contextlib.suppress(httpx.HTTPError):
        r = client.get(url) if probe.body is None else client.post(url, json=probe.body)
        return probe.accepts(r.status_code, r.text)
    return False
