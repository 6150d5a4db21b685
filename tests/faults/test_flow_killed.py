"""The flow process (`podium run`) is SIGKILLed between scenarios; running the same plan again resumes.

No finished loadgen run is repeated (its folder and logs are untouched, and no copy of it is set aside), the
interrupted run is set aside and measured again, and the engine the killed flow left running is ended by the next
launch (the local launcher's pid files), so no engine process outlives the test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tasks.storage import s3server
from tasks.workspace import Workspace
from tests.faults.conftest import fault_plan
from tests.faults.procs import group_pids, recorded_engines

pytestmark = [pytest.mark.integration, pytest.mark.faults]

REPO = Path(__file__).parents[2]


def _podium(plan: Path, ws: Path, api_url: str, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PREFECT_API_URL": api_url, "PYTHONPATH": str(REPO)}
    with log.open("w") as out:
        return subprocess.Popen([sys.executable, "-c", "from flows.cli import main; main()", "run", str(plan),
                                 "--workspace", str(ws)], stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)


def _wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_sigkill_between_scenarios_then_resume(prefect_server: None, smoke_store: Path, tmp_path: Path) -> None:
    from prefect.settings import PREFECT_API_URL

    plan = fault_plan(tmp_path / "plan.yaml", smoke_store, scenarios=("Offline", "Server"))
    ws = Workspace.at(tmp_path / "ws")
    runs = ws.work / "runs"
    api_url = PREFECT_API_URL.value()
    flow = _podium(plan, ws.root, api_url, tmp_path / "first.log")
    second = None
    try:
        # the Offline performance run has finished when the second run folder (Server) appears: kill the flow
        _wait_for(lambda: runs.is_dir() and len(list(runs.iterdir())) >= 2, 400, "the second loadgen run")
        flow.send_signal(signal.SIGKILL)
        flow.wait()
        finished = min(runs.iterdir(), key=lambda p: p.stat().st_mtime_ns)
        interrupted = next(p for p in runs.iterdir() if p != finished)
        before = {p.name: p.stat().st_mtime_ns for p in finished.iterdir()}
        engines = recorded_engines(ws.pids)
        assert len(engines) == 1 and group_pids(engines[0]["pid"]), "the killed flow's engine should still run"
        left = engines[0]["pid"]

        began = time.monotonic()
        second = _podium(plan, ws.root, api_url, tmp_path / "second.log")
        second.wait(timeout=600)
        took = time.monotonic() - began
    finally:
        for p in (flow, second):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        server = s3server.running(ws.s3)   # the killed flow's SeaweedFS, reused by the second run
        if server is not None:
            s3server.stop(server)
        for record in recorded_engines(ws.pids):   # only if the test failed half-way
            if group_pids(record["pid"]):
                os.killpg(record["pid"], signal.SIGKILL)

    out = (tmp_path / "second.log").read_text()
    assert second.returncode == 0, out[-3000:]

    # the finished Offline run was not repeated: its folder is untouched and was never set aside
    assert {p.name: p.stat().st_mtime_ns for p in finished.iterdir()} == before
    assert not list(runs.glob(f"{finished.name}.failed-*"))
    # the interrupted Server run was set aside and measured again
    assert len(list(runs.glob(f"{interrupted.name}.failed-*"))) == 1 and (interrupted / "sut_stats.json").is_file()
    assert len([p for p in runs.iterdir() if ".failed-" not in p.name]) == 4   # 2 scenarios x (performance, accuracy)

    # the engine the killed flow left behind was ended by the next launch (pid file), and no engine remains
    assert f"(pid {left}) left behind by an earlier run" in out
    assert "of an earlier run that no longer exists" in out   # the killed flow's gpu-<node> lease, released
    assert group_pids(left) == [] and recorded_engines(ws.pids) == []
    _wait_for(lambda: not _mentioning(str(ws.root)), 30, "every process of the killed run to end")
    lines = [line for line in out.splitlines() if "earlier run" in line]
    print(f"resume after SIGKILL: finished run {finished.name} kept; engine pid {left} reaped by the next launch; "
          f"second run took {took:.0f} s\n" + "\n".join(lines))


def _mentioning(text: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                if text.encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
    return found
