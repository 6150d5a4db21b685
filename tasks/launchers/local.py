"""The local launcher: subprocesses on this host, bound to 127.0.0.1.

Each process leads its own process group, writes stdout and stderr to `<log_dir>/<name>.log` (forwarded line by line
to the run logger), and is recorded in a pid file so that a later run can end it if this one was killed. Stopping
sends SIGTERM to the group, then SIGKILL after a grace period.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from submission.errors import LaunchError
from tasks.engines import Placement, ProcessSpec, write_files

TAIL_LINES = 30
LOW_PORTS = 20000   # where ports under a max_port are looked for


def free_port(host: str = "127.0.0.1", max_port: int | None = None) -> int:
    """A port nothing listens on now; under `max_port` when the engine cannot take a higher one (the kernel hands
    out ephemeral ports from 32768 up)."""
    if max_port is None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            return s.getsockname()[1]
    for port in random.sample(range(LOW_PORTS, max_port + 1), k=min(200, max_port + 1 - LOW_PORTS)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s, contextlib.suppress(OSError):
            s.bind((host, port))
            return port
    raise LaunchError(f"no free port between {LOW_PORTS} and {max_port} on {host}", fix="free some ports")


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@dataclass
class Running:
    spec: ProcessSpec
    popen: subprocess.Popen
    log: Path
    pidfile: Path


@dataclass
class LocalDeployment:
    processes: list[ProcessSpec]
    running: list[Running] = field(default_factory=list)
    stop_forwarding: threading.Event = field(default_factory=threading.Event)
    ready: threading.Event = field(default_factory=threading.Event)   # set when every probe passed


PROBLEM = re.compile(r"error|warn|exception|traceback|fatal|killed|out of memory|oom", re.IGNORECASE)


def forward_log(path: Path, name: str, logger: logging.Logger, stop: threading.Event,
                ready: threading.Event | None = None) -> None:
    """Follow a log file and forward its lines to the logger until `stop` is set and the file is drained: every
    line while the process starts, then (once `ready` is set) only lines that look like problems, so a busy engine's
    per-request lines do not flood the Prefect UI or take the CPU from a measurement. The file keeps every line."""
    skipped = 0
    with path.open(errors="replace") as f:
        while True:
            line = f.readline()
            if line:
                if ready is None or not ready.is_set() or PROBLEM.search(line):
                    logger.info("[%s] %s", name, line.rstrip())
                else:
                    skipped += 1
            elif stop.is_set():
                break
            else:
                time.sleep(0.2)
    if skipped:
        logger.info("[%s] %d routine line(s) after start-up not forwarded; all are in %s", name, skipped, path)


def _alive(pid: int, argv0: str) -> bool:
    try:
        return argv0 in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def reap_stale(state_dir: Path, logger: logging.Logger) -> int:
    """End the process groups recorded by runs that died without stopping them. Returns how many were ended."""
    ended = 0
    for pidfile in sorted(state_dir.glob("*.json")):
        record = json.loads(pidfile.read_text())
        if _alive(record["pid"], record["argv0"]):
            logger.warning("ending %s (pid %s) left behind by an earlier run", record["name"], record["pid"])
            with contextlib.suppress(ProcessLookupError):
                os.killpg(record["pid"], signal.SIGKILL)
            ended += 1
        pidfile.unlink(missing_ok=True)
    return ended


class LocalLauncher:
    name = "local"

    def __init__(self, state_dir: Path, host: str = "127.0.0.1", grace_s: float = 10.0) -> None:
        self.state_dir = state_dir
        self.host = host
        self.grace_s = grace_s

    def placement(self, ports_needed: int, max_port: int | None = None) -> Placement:
        ports: list[int] = []
        while len(ports) < ports_needed:   # distinct, though each was free when picked
            port = free_port(self.host, max_port)
            if port not in ports:
                ports.append(port)
        return Placement(self.host, tuple(ports))

    def start(self, specs: list[ProcessSpec], log_dir: Path, logger: logging.Logger) -> LocalDeployment:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        reap_stale(self.state_dir, logger)
        deployment = LocalDeployment(processes=specs)
        try:
            for spec in specs:
                log = log_dir / f"{spec.name}.log"
                write_files(spec)
                logger.info("starting %s: %s", spec.name, json.dumps(list(spec.argv)))
                with log.open("ab") as out:
                    popen = subprocess.Popen(  # noqa: S603 - argv list from a typed spec, no shell
                        list(spec.argv), env={**os.environ, **spec.env}, cwd=spec.cwd, stdout=out,
                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, process_group=0)
                pidfile = self.state_dir / f"{popen.pid}.json"
                pidfile.write_text(json.dumps({"pid": popen.pid, "name": spec.name, "argv0": spec.argv[0]}))
                deployment.running.append(Running(spec, popen, log, pidfile))
                threading.Thread(target=forward_log, args=(log, spec.name, logger, deployment.stop_forwarding,
                                                                 deployment.ready),
                                 daemon=True).start()
        except OSError as e:
            self.stop(deployment)
            raise LaunchError(f"cannot start {spec.name}: {e}", fix="check that the engine is installed") from e
        return deployment

    def wait_ready(self, deployment: LocalDeployment, timeout_s: float) -> None:
        """Ready means every probe of every process answers 200; a process that exits fails at once."""

        def exited() -> None:
            for proc in deployment.running:
                code = proc.popen.poll()
                if code is not None:
                    raise LaunchError(f"{proc.spec.name} exited with code {code} while starting; "
                                      f"last lines of {proc.log}:\n{tail(proc.log)}")

        wait_for_probes([(p.spec.name, p.spec, p.log) for p in deployment.running], timeout_s, exited)
        deployment.ready.set()

    def stop(self, deployment: LocalDeployment) -> None:
        """SIGTERM each process group (and SIGCONT, so a stopped one gets it too), SIGKILL what is left after the
        grace period."""
        for proc in deployment.running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGTERM)
                os.killpg(proc.popen.pid, signal.SIGCONT)
        deadline = time.monotonic() + self.grace_s
        for proc in deployment.running:
            try:
                proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGKILL)
                proc.popen.wait()
            with contextlib.suppress(ProcessLookupError):   # children that outlived their leader
                os.killpg(proc.popen.pid, signal.SIGKILL)
            proc.pidfile.unlink(missing_ok=True)
        deployment.stop_forwarding.set()


def make(state_dir: Path, **kwargs: object) -> LocalLauncher:
    return LocalLauncher(state_dir, **kwargs)  # type: ignore[arg-type]


def wait_for_probes(targets: list[tuple[str, ProcessSpec, Path]], timeout_s: float, exited: Callable[[], None],
                    poll_s: float = 0.5) -> None:
    """Poll every probe of each (label, spec, log) until it accepts; `exited` raises when a process of the
    deployment has died, and runs before every poll. A probe still refused at the deadline is a LaunchError with
    the process's log tail."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=30.0) as client:
        for label, spec, log in targets:
            for probe in spec.probes:
                url = f"http://{spec.host}:{spec.port}{probe.path}"
                while True:
                    exited()
                    with contextlib.suppress(httpx.HTTPError):
                        r = client.get(url) if probe.body is None else client.post(url, json=probe.body)
                        if probe.accepts(r.status_code, r.text):
                            break
                    if time.monotonic() > deadline:
                        raise LaunchError(f"{label} was not ready after {timeout_s:.0f} s ({url}); last lines of "
                                          f"{log}:\n{tail(log)}",
                                          fix="raise engine.ready_timeout_s or read the engine log")
                    time.sleep(poll_s)
