"""Engine logs reach the flow's logger in full while the engine starts, then only the lines that look like problems."""

import logging
import threading
import time
from pathlib import Path

import pytest

from tasks.launchers.local import forward_log


def test_routine_lines_after_start_up_stay_in_the_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = tmp_path / "engine.log"
    log.write_text("Loading weights\nUvicorn running\n")
    stop, ready = threading.Event(), threading.Event()
    logger = logging.getLogger("test-forward")
    with caplog.at_level(logging.INFO, logger="test-forward"):
        thread = threading.Thread(target=forward_log, args=(log, "engine", logger, stop, ready))
        thread.start()
        deadline = time.monotonic() + 10
        while len(caplog.records) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        ready.set()
        with log.open("a") as f:
            f.write("[Request received] 1\n[Request received] 2\nRuntimeError: CUDA out of memory\n"
                    "WARNING: KV cache 95% full\n")
        stop.set()
        thread.join(10)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["[engine] Loading weights", "[engine] Uvicorn running",
                     "[engine] RuntimeError: CUDA out of memory", "[engine] WARNING: KV cache 95% full",
                     f"[engine] 2 routine line(s) after start-up not forwarded; all are in {log}"]
    assert log.read_text().count("Request received") == 2


def test_without_a_ready_event_every_line_is_forwarded(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = tmp_path / "engine.log"
    log.write_text("a\nb\n")
    stop = threading.Event()
    stop.set()
    with caplog.at_level(logging.INFO, logger="test-forward"):
        forward_log(log, "engine", logging.getLogger("test-forward"), stop)
    assert [r.getMessage() for r in caplog.records] == ["[engine] a", "[engine] b"]
