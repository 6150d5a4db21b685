"""The liveness check the SUT runs after a failed request: a port that refuses connections ends the child process
with ENDPOINT_DOWN and one line saying why; a port that accepts them changes nothing."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.serving.liveness import ENDPOINT_DOWN, reachable

pytestmark = [pytest.mark.faults]

REPO = Path(__file__).parents[2]


def test_reachable_and_down() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert reachable(f"http://127.0.0.1:{port}/v1")
        code = subprocess.run([sys.executable, "-c", "from tasks.serving.liveness import exit_if_down; "
                               f"exit_if_down('http://127.0.0.1:{port}', 'HTTP 400'); print('went on')"],
                              capture_output=True, text=True, cwd=REPO, timeout=60)
        assert code.returncode == 0 and "went on" in code.stdout
    assert not reachable(f"http://127.0.0.1:{port}/v1")   # closed now: refused
    down = subprocess.run([sys.executable, "-c", "from tasks.serving.liveness import exit_if_down; "
                           f"exit_if_down('http://127.0.0.1:{port}', 'ConnectError: refused'); print('went on')"],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert down.returncode == ENDPOINT_DOWN and "went on" not in down.stdout
    assert f"the engine at http://127.0.0.1:{port} no longer accepts connections" in down.stderr
    assert "ConnectError: refused" in down.stderr
