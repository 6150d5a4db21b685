"""The stall watchdog: an engine that hangs with its port open (here SIGSTOPped: it accepts connections and answers
nothing) ends the run with ENGINE_STALLED after the stall timeout, in-process and with worker processes."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from submission.base.errors import CommandError
from tasks.engines import Endpoint
from tasks.harness import runner
from tasks.serving import liveness
from tests.integration.engines_support import offline_spec, server_spec, simulated_engine

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("workers", [1, 2])
def test_a_hung_engine_ends_the_run_after_the_stall_timeout(smoke_store: Path, tmp_path: Path, workers: int) -> None:
    run_dir = tmp_path / "run"
    with simulated_engine() as (server, endpoint):
        spec = server_spec(smoke_store / "datasets" / "smoke" / "perf_eval_ref.parquet", qps=20, duration_ms=60000,
                           workers=workers, engine="simulated")
        hung: dict[str, float] = {}

        def hang() -> None:
            while not (run_dir / "mlperf_log_detail.txt").exists():
                time.sleep(0.1)
            time.sleep(2)
            os.kill(server.pid, signal.SIGSTOP)   # still listening: the kernel accepts, nobody answers
            hung["at"] = time.monotonic()

        threading.Thread(target=hang, daemon=True).start()
        with pytest.raises(CommandError) as caught:
            runner.run(spec, endpoint, run_dir, timeout_s=120, stall_s=3)
        ended = time.monotonic()
        assert liveness.reachable(endpoint.base_url)   # the port is still open: only the silence tells
    assert caught.value.returncode == liveness.ENGINE_STALLED
    assert 3 <= ended - hung["at"] < 12, ended - hung["at"]   # the 3 s timeout, checked every 0.75 s, plus exit
    log = (run_dir / "harness.log").read_text()
    assert "sent nothing for" in log and "request(s) in flight (hung, yet its port is open)" in log, log
    assert "harness worker" not in log   # a worker that found the stall passes the code on, no second line


def test_a_slow_but_streaming_engine_is_not_a_stall(smoke_store: Path, tmp_path: Path) -> None:
    """Requests that take longer than the stall timeout are fine while tokens keep arriving."""
    from tasks.engines.simulated import server as testing
    from tasks.engines.simulated.queueing import SimConfig

    config = SimConfig(prefill_workers=1, prefill_ms=5, decode_workers=1, decode_slots=8, tpot_ms=100,
                       tpot_load=0.0, output_tokens=30)   # 3 s per request, a token every 100 ms
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with testing.running(config, port) as base_url:
        endpoint = Endpoint(base_url, "simulated", accepts_token_ids=True, returns_token_ids=True)
        data = smoke_store / "datasets" / "smoke" / "perf_eval_ref.parquet"
        spec = offline_spec(data, "performance", samples=8, max_tokens=30, engine="simulated", qps=4)
        stats = runner.run(spec, endpoint, tmp_path / "run", timeout_s=120, stall_s=1)
    assert stats["failed"] == 0 and stats["completed"] == stats["issued"] > 0, stats
