"""Watching the processes a launcher started, wherever they run: their log files forwarded to the run's logger, and
their readiness probes polled until every one accepts."""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from submission.base.errors import LaunchError
from submission.base.files import tail
from tasks.engines import ProcessSpec

TAIL_LINES = 30   # lines of a log quoted in an error
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
                                          f"{log}:\n{tail(log, TAIL_LINES)}",
                                          fix="raise engine.ready_timeout_s or read the engine log")
                    time.sleep(poll_s)
