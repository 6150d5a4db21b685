"""A loadgen child dies with the flow process that started it (a SIGKILLed flow leaves no run behind)."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHILD = ("import sys, time; from tasks.harness.child import die_with_parent; die_with_parent(int(sys.argv[1])); "
         "print('armed', flush=True); time.sleep(60)")
PARENT = ("import os, subprocess, sys, time; "
          "c = subprocess.Popen([sys.executable, '-c', sys.argv[1], str(os.getpid())]); "
          "print(c.pid, flush=True); time.sleep(60)")


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_the_child_is_killed_when_its_parent_is() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    child = 0
    try:
        child = int(parent.stdout.readline())
        assert parent.stdout.readline().strip() == "armed"   # the child shares the parent's stdout
        assert not _gone(child, 0.1)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        assert _gone(child, 5.0)
    finally:
        parent.kill()
        parent.wait()
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
