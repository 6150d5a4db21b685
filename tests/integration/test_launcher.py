"""The local launcher: readiness, fail-fast on exit, timeouts, stopping whole process groups, orphans."""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from pathlib import Path

import pytest

from submission.base.errors import LaunchError
from tasks.engines import HttpProbe, Placement, ProcessSpec, backend
from tasks.launchers import launched
from tasks.launchers.local import LocalLauncher

pytestmark = pytest.mark.integration
LOG = logging.getLogger("test-launcher")

# Serves HTTP on 127.0.0.1:<port> after spawning a child that sleeps; writes the child's pid to a file.
SERVER = """
import http.server, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
open(sys.argv[2], "w").write(str(child.pid))
time.sleep(float(sys.argv[3]))
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()
"""


def _spec(port: int, pidfile: Path, delay: float = 0.0, path: str = "/") -> ProcessSpec:
    return ProcessSpec(role="server", name="web", argv=(sys.executable, "-c", SERVER, str(port), str(pidfile),
                                                        str(delay)), port=port, probes=(HttpProbe(path),))


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def _gone_soon(pid: int, within_s: float = 10.0) -> bool:
    """A SIGKILLed process of a group other than ours is gone once the kernel has delivered the signal; on a
    loaded machine that can take a moment after the call that sent it."""
    deadline = time.monotonic() + within_s
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _gone(pid)


def test_ready_then_stopped_with_its_children(tmp_path: Path) -> None:
    launcher = LocalLauncher(tmp_path / "pids", grace_s=5)
    port = launcher.placement(1).ports[0]
    deployment = launcher.start([_spec(port, tmp_path / "child.pid", delay=1.0)], tmp_path / "logs", LOG)
    launcher.wait_ready(deployment, timeout_s=30)
    leader, child = deployment.running[0].popen.pid, int((tmp_path / "child.pid").read_text())
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    assert list((tmp_path / "pids").glob("*.json"))
    launcher.stop(deployment)
    assert _gone(leader) and _gone_soon(child)
    assert not list((tmp_path / "pids").glob("*.json"))
    assert (tmp_path / "logs" / "web.log").is_file()


def test_exit_during_start_fails_at_once_with_the_log_tail(tmp_path: Path) -> None:
    launcher = LocalLauncher(tmp_path / "pids")
    spec = ProcessSpec(role="server", name="broken", port=1,
                       argv=(sys.executable, "-c", "print('weights not found: /models/x'); raise SystemExit(3)"),
                       probes=(HttpProbe("/health"),))
    deployment = launcher.start([spec], tmp_path / "logs", LOG)
    started = time.monotonic()
    with pytest.raises(LaunchError) as e:
        launcher.wait_ready(deployment, timeout_s=120)
    assert time.monotonic() - started < 10
    assert "exited with code 3" in str(e.value) and "weights not found: /models/x" in str(e.value)
    launcher.stop(deployment)


def test_not_ready_in_time(tmp_path: Path) -> None:
    launcher = LocalLauncher(tmp_path / "pids", grace_s=5)
    port = launcher.placement(1).ports[0]
    deployment = launcher.start([_spec(port, tmp_path / "c.pid", path="/never-200")], tmp_path / "logs", LOG)
    try:
        with pytest.raises(LaunchError, match="was not ready after 3 s"):
            launcher.wait_ready(deployment, timeout_s=3)
    finally:
        launcher.stop(deployment)
    assert _gone_soon(int((tmp_path / "c.pid").read_text()))


def test_a_later_run_ends_what_a_killed_run_left_behind(tmp_path: Path) -> None:
    first = LocalLauncher(tmp_path / "pids")
    port = first.placement(1).ports[0]
    orphan = first.start([_spec(port, tmp_path / "o.pid")], tmp_path / "logs", LOG)
    first.wait_ready(orphan, timeout_s=30)   # the run that started it "dies" here without stopping it
    leader = orphan.running[0].popen.pid
    second = LocalLauncher(tmp_path / "pids")
    again = second.start([], tmp_path / "logs", LOG)
    orphan.running[0].popen.wait(timeout=10)
    assert _gone(leader) and _gone_soon(int((tmp_path / "o.pid").read_text()))
    second.stop(again)


def test_smoke_engine_on_a_taken_port(tmp_path: Path, smoke_store: Path) -> None:
    engine = backend("smoke")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]

    class Taken(LocalLauncher):
        def placement(self, ports_needed: int, nodes: int = 1, max_port: int | None = None) -> Placement:
            return Placement("127.0.0.1", (port,))

    try:
        with pytest.raises(LaunchError) as e, launched(engine, {}, smoke_store / "models" / "tiny-llama",
                                                       Taken(tmp_path / "pids"), tmp_path / "logs", LOG, 120):
            pass
    finally:
        taken.close()
    assert "exited with code" in str(e.value)
    assert "address already in use" in str(e.value).lower() or "errno 98" in str(e.value).lower()
