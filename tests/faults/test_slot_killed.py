"""A flow SIGKILLed while it holds its node's slot (`gpu-<node>`, tasks.launchers.nodes.NodeSlot) on the workspace's own
Prefect API (a plain `podium run` or `podium rehearse`: no PREFECT_API_URL, Prefect's temporary server on the
workspace's database): the next run in the same workspace takes the slot at once instead of waiting at launch.

Each holder is a process of its own with its own temporary server, as two `podium` commands are; the killed one's
whole process group (it and its server) is killed, so nothing outlives the test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.faults]

REPO = Path(__file__).parents[2]
NODE = "killed-holder"
WAIT_S = 20.0   # the second holder's timeout: far more than taking a free slot needs, far less than a lease lasts

HOLDER = """
import sys, time
from pathlib import Path
from flows.cli_common import prefect_env
workspace, hold = Path(sys.argv[1]), sys.argv[3] == "hold"
prefect_env(workspace)
from tasks.launchers.nodes import NodeSlot
slot = NodeSlot([sys.argv[2]], timeout_s=float(sys.argv[4]), record_dir=workspace / "leases")
slot.acquire()
print("held", flush=True)
time.sleep(600 if hold else 0)
slot.release()
"""


def _holder(workspace: Path, mode: str, **popen: object) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")} | {"PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", HOLDER, str(workspace), NODE, mode, str(WAIT_S)], env=env,
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, **popen)


def test_a_killed_holders_slot_is_taken_by_the_next_run(tmp_path: Path) -> None:
    first = _holder(tmp_path, "hold")
    try:
        assert first.stdout is not None
        line = first.stdout.readline()   # blocks until the slot is held (or the holder died saying why)
        assert line.strip() == "held", line + first.stdout.read()
        assert len(list((tmp_path / "leases").glob("*.json"))) == 1
    finally:
        os.killpg(first.pid, signal.SIGKILL)   # the flow and its temporary Prefect server, as kill -9 leaves them
        first.wait()
    began = time.monotonic()
    second = _holder(tmp_path, "release")
    try:
        out, _ = second.communicate(timeout=WAIT_S + 120)
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
            second.wait()
    took = time.monotonic() - began
    assert second.returncode == 0, f"the next run could not take the slot:\n{out[-3000:]}"
    assert "waiting for gpu-" not in out, out[-3000:]
    assert list((tmp_path / "leases").glob("*.json")) == []
    print(f"second holder took the slot and released it in {took:.1f} s")
