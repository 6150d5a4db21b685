"""The local launcher: subprocesses on this host, bound to 127.0.0.1. An engine's replicas (`replicas`) may ask for
several nodes: each is this host, its name a label (`node<i>`), its ports its own.

Each process leads its own process group, writes stdout and stderr to `<log_dir>/<name>.log` (forwarded line by line
to the run logger), and is recorded in a pid file so that a later run can end it if this one was killed. Stopping
sends SIGTERM to the group, then SIGKILL after a grace period. A process's environment is this host's with the
spec's added; the log names the spec's variables, never their values (`NAME=<set>`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from submission.base.errors import LaunchError
from submission.base.files import tail
from submission.plan.platforms import NVIDIA, Platform
from submission.plan.replicas import Layout
from submission.plan.secret_env import shown_env
from tasks.engines import Node, Placement, ProcessSpec, Watched, watched, write_files
from tasks.launchers import Launcher
from tasks.launchers.processes import TAIL_LINES, forward_log, wait_for_probes

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


def _alive(pid: int, argv0: str) -> bool:
    try:
        return argv0 in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def group_members(pgid: int) -> list[int]:
    """The live processes (zombies left out) of process group `pgid`, the leader's included."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(stat.parent.name))
    return members


def reap_stale(state_dir: Path, logger: logging.Logger, wait_s: float = 10.0) -> int:
    """End the process groups recorded by runs that died without stopping them, and wait until they are gone.
    A group is ended while its leader is still the process Podium started, or, once the leader has died, while
    anything of the group lives on (an engine's worker processes: no new group can take that id while they do).
    Returns how many groups were ended; raises LaunchError naming any process still alive after `wait_s`."""
    ended: list[int] = []
    for pidfile in sorted(state_dir.glob("*.json")):
        record = json.loads(pidfile.read_text())
        pid = record["pid"]
        members = group_members(pid)
        ours = _alive(pid, record["argv0"]) or (members and pid not in members)
        if members and ours:
            logger.warning("ending %s (pid %s) left behind by an earlier run: %d process(es) in its group",
                           record["name"], pid, len(members))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            ended.append(pid)
        pidfile.unlink(missing_ok=True)
    deadline = time.monotonic() + wait_s
    while (left := [p for g in ended for p in group_members(g)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    if left:
        raise LaunchError(f"process(es) {left} of the engine groups {ended} still alive {wait_s:g} s after SIGKILL",
                          fix="end them by hand (kill -9) before starting an engine on this node")
    return len(ended)


class LocalLauncher(Launcher):
    name = "local"

    def __init__(self, state_dir: Path, host: str = "127.0.0.1", grace_s: float = 10.0,
                 replicas: Layout | None = None, platform: Platform = NVIDIA) -> None:
        self.state_dir = state_dir
        self.host = host
        self.grace_s = grace_s
        self.replicas = replicas
        self.platform = platform

    def placement(self, ports_needed: int, nodes: int = 1, max_port: int | None = None) -> Placement:
        if nodes > 1 and self.replicas is None:
            raise LaunchError(f"the local launcher runs on this host alone; the deployment spans {nodes} nodes",
                              fix="use engine.launcher slurm or kubernetes, or options.nodes 1")
        ports: list[int] = []
        while len(ports) < ports_needed * nodes:   # distinct, though each was free when picked
            port = free_port(self.host, max_port)
            if port not in ports:
                ports.append(port)
        per_node = tuple(Node(self.host, tuple(ports[i * ports_needed:(i + 1) * ports_needed])) for i in range(nodes))
        return Placement(self.host, per_node[0].ports, nodes=per_node if nodes > 1 else (), platform=self.platform)

    def node_names(self) -> tuple[str, ...]:
        """This host's name; with replicas over several nodes, their labels."""
        if self.replicas is None or self.replicas.nodes == 1:
            return (socket.gethostname(),)
        return tuple(f"node{i}" for i in range(self.replicas.nodes))

    def start(self, specs: list[ProcessSpec], log_dir: Path, logger: logging.Logger) -> LocalDeployment:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        reap_stale(self.state_dir, logger)
        deployment = LocalDeployment(processes=specs)
        try:
            for spec in specs:
                log = log_dir / f"{spec.name}.log"
                write_files(spec)
                logger.info("starting %s: %s; env %s", spec.name, json.dumps(list(spec.argv)),
                            json.dumps(shown_env(spec.env)))
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
                                      f"last lines of {proc.log}:\n{tail(proc.log, TAIL_LINES)}")

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

    def alive(self, deployment: LocalDeployment) -> bool:
        return all(r.popen.poll() is None for r in deployment.running)

    def log_report(self, deployment: LocalDeployment, lines: int = 20) -> str | None:
        return "\n".join(f"{r.spec.name} (pid {r.popen.pid}) {_status(r.popen.poll())}; last lines of {r.log}:\n"
                         f"{tail(r.log, lines)}" for r in deployment.running)

    def watched(self, deployment: LocalDeployment) -> Watched:
        return watched(deployment.processes, self.node_names())

    def down(self, deployment: LocalDeployment) -> dict[str, str]:
        return {r.spec.name: _status(code) for r in deployment.running if (code := r.popen.poll()) is not None}

    def replica_nodes(self, deployment: LocalDeployment) -> dict[str, str]:
        names = self.node_names()
        return {s.name: names[min(s.node_index, len(names) - 1)] for s in deployment.processes}

    def replica_log(self, deployment: LocalDeployment, name: str, lines: int) -> tuple[str, str]:
        run = next(r for r in deployment.running if r.spec.name == name)
        return f"pid {run.popen.pid}, log {run.log}", tail(run.log, lines)


def _status(code: int | None) -> str:
    return "running" if code is None else (f"killed by signal {-code}" if code < 0 else f"exited with code {code}")


def make(state_dir: Path, **kwargs: object) -> LocalLauncher:
    return LocalLauncher(state_dir, **kwargs)  # type: ignore[arg-type]
