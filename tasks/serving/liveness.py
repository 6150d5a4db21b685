"""A dead or hung engine ends the loadgen run at once, in the runner's child process.

When an engine dies mid-run every remaining request fails within milliseconds (connection refused). Completing
those samples with no tokens makes loadgen log errors for the rest of the run, and a 0-token response can crash
loadgen 6.0.17 outright. So after a failed request the SUT asks whether the endpoint still accepts a TCP
connection; when it does not, the child writes one line to its log and exits with `ENDPOINT_DOWN` before that
sample reaches loadgen. The parent (tasks.harness.runner, tasks.harness.measure) turns that exit code into a LaunchError
naming the engine's log; the step is retried on a relaunched engine.

A hung engine (a stuck collective, a deadlocked scheduler) keeps accepting connections and answers nothing. The
SUT's watchdog (`tasks.harness.sut.SampleServer`) ends the run with `ENGINE_STALLED` when no byte arrived on any
stream for the plan's `engine.stall_timeout_s` while requests were in flight; tasks.harness.measure then stops the hung
engine, so the retry gets a fresh one.

An engine of independent replicas (`Endpoint.replicas`) is judged replica by replica by the head's dispatch
(tasks/harness/dispatch.py): a replica that refuses connections or hangs is left out and its unanswered samples go to
the live ones. The run ends with `ENDPOINT_DOWN` only when no replica is left, and with `REPLICAS_LOST` when more
replicas are lost than the plan's `engine.replicas.max_lost` allows; that too is retried on a relaunched engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from urllib.parse import urlsplit

from tasks import clock

ENDPOINT_DOWN = 75          # the runner child's exit code when the engine stopped accepting connections
ENGINE_STALLED = 76         # ... when it sent nothing for the stall timeout with requests in flight
REPLICAS_LOST = 77          # ... when more replicas were lost than engine.replicas.max_lost allows
ENGINE_GONE = (ENDPOINT_DOWN, ENGINE_STALLED, REPLICAS_LOST)   # the codes that mean: relaunch the engine and retry
CONNECT_TIMEOUT_S = 2.0


def reachable(base_url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> bool:
    """Whether something accepts a TCP connection at the URL's host and port."""
    url = urlsplit(base_url)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "127.0.0.1", port), timeout=clock.real(timeout_s)):
            return True
    except OSError:
        return False


async def reachable_async(base_url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> bool:
    """`reachable` on the running event loop, which it never blocks."""
    url = urlsplit(base_url)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(url.hostname or "127.0.0.1", url.port or 80),
                                           clock.real(timeout_s))
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


def end_run(code: int, line: str) -> None:
    """End this process with `code` (one of ENGINE_GONE), after one line on its log saying why."""
    sys.stderr.write(f"podium: {line}; ending the run\n")
    sys.stderr.flush()
    os._exit(code)


def exit_stalled(base_url: str, silent_s: float, in_flight: int) -> None:
    """The engine sent no byte on any stream for `silent_s` with requests in flight: end this process."""
    sys.stderr.write(f"podium: the engine at {base_url} sent nothing for {silent_s:.0f} s with {in_flight} "
                     f"request(s) in flight (hung, yet its port is open); ending the run\n")
    sys.stderr.flush()
    os._exit(ENGINE_STALLED)


def exit_if_down(base_url: str, error: str) -> None:
    """After a failed request: end this process with ENDPOINT_DOWN if the endpoint no longer accepts connections."""
    if reachable(base_url):
        return
    sys.stderr.write(f"podium: the engine at {base_url} no longer accepts connections (last request: {error}); "
                     f"ending the run\n")
    sys.stderr.flush()
    os._exit(ENDPOINT_DOWN)
