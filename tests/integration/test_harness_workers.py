"""Client worker processes (`harness_workers` > 1) behind one loadgen SUT, for real: the runner child, spawned
workers, the smoke engine. The answers are the in-process SUT's, token for token; first tokens reach loadgen; a
worker that dies ends the run with its reason instead of leaving loadgen waiting."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from submission.base.errors import CommandError
from submission.results.logs import load_run, parse_accuracy_log
from tasks.engines import Endpoint
from tasks.harness import runner
from tests.integration.engines_support import offline_spec, server_spec, simulated_engine

pytestmark = pytest.mark.integration


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out += [int(c) for c in text]
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _answers(run_dir: Path) -> dict[int, list[int]]:
    return {e.qsl_idx: e.tokens() for e in parse_accuracy_log(run_dir / "mlperf_log_accuracy.json")}


def test_workers_answer_token_for_token_as_the_in_process_sut(smoke_server: Endpoint, smoke_store: Path,
                                                                tmp_path: Path) -> None:
    data = smoke_store / "datasets" / "smoke" / "acc_eval_inputs.parquet"
    spec = offline_spec(data, "accuracy", samples=16, max_tokens=16, engine="smoke")
    one = runner.run(spec, smoke_server, tmp_path / "one", timeout_s=300)
    three = runner.run(spec.model_copy(update={"harness_workers": 3}), smoke_server, tmp_path / "three",
                       timeout_s=300)
    assert one["harness_workers"] == 1 and three["harness_workers"] == 3
    for stats in (one, three):
        assert stats["issued"] == stats["completed"] == 16 and stats["failed"] == 0, stats["errors"]
        assert stats["token_source"] == "re-tokenized text"   # transformers serve streams text only
    assert three["output_tokens"] == one["output_tokens"]
    answers = _answers(tmp_path / "one")
    assert len(answers) == 16 and all(answers.values())
    assert _answers(tmp_path / "three") == answers
    assert load_run(tmp_path / "three").num_errors == 0
    assert spec.model_copy(update={"harness_workers": 3}).key() != spec.key()


def test_workers_report_first_tokens_in_a_server_run(smoke_server: Endpoint, smoke_store: Path,
                                                      tmp_path: Path) -> None:
    spec = server_spec(smoke_store / "datasets" / "smoke" / "perf_eval_ref.parquet", qps=20, duration_ms=2000,
                       min_queries=40, workers=2, engine="smoke")
    stats = runner.run(spec, smoke_server, tmp_path / "server", timeout_s=300)
    assert stats["failed"] == 0 and stats["completed"] == stats["issued"] >= 40, stats
    run = load_run(tmp_path / "server")
    assert run.num_errors == 0 and run.scenario == "Server"
    assert run.ttft_p99_ns and 0 < run.ttft_p99_ns < run.latency_ns["99.00"]   # first tokens came before the ends


def test_a_worker_that_dies_ends_the_run_with_its_name(smoke_server: Endpoint, smoke_store: Path,
                                                      tmp_path: Path) -> None:
    spec = server_spec(smoke_store / "datasets" / "smoke" / "perf_eval_ref.parquet", qps=10, duration_ms=60000,
                       workers=2, engine="smoke")
    run_dir = tmp_path / "killed"
    outcome: dict[str, object] = {}

    def go() -> None:
        try:
            outcome["stats"] = runner.run(spec, smoke_server, run_dir, timeout_s=120)
        except CommandError as e:
            outcome["error"] = e

    thread = threading.Thread(target=go)
    thread.start()
    deadline = time.monotonic() + 60
    workers: list[int] = []
    while time.monotonic() < deadline and not workers:   # the runner child, its two workers, loadgen started
        time.sleep(0.2)
        for child in _children(os.getpid()):
            if "tasks.harness.runner" in Path(f"/proc/{child}/cmdline").read_text(errors="replace"):
                spawned = [p for p in _children(child)   # not multiprocessing's resource tracker
                           if "spawn_main" in Path(f"/proc/{p}/cmdline").read_text(errors="replace")]
                if len(spawned) >= 2 and (run_dir / "mlperf_log_detail.txt").exists():
                    workers = spawned
    assert len(workers) >= 2, "the runner never had its two workers with loadgen running"
    time.sleep(1.0)
    killed_at = time.monotonic()
    os.kill(workers[0], signal.SIGKILL)
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert time.monotonic() - killed_at < 15   # not the 60 s the run would have lasted
    error = outcome.get("error")
    assert isinstance(error, CommandError) and error.returncode == 1, outcome
    log = (run_dir / "harness.log").read_text()
    assert "harness worker" in log and "exited with code -9; ending the run" in log
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in workers)   # the other worker died with the runner
    assert json.loads((run_dir / "run.json").read_text())["harness_workers"] == 2


def test_an_engine_that_dies_under_workers_ends_the_run_as_engine_down(smoke_store: Path, tmp_path: Path) -> None:
    """The worker that finds the endpoint gone exits with ENDPOINT_DOWN and the runner passes that code on, so
    tasks.harness.step relaunches the engine and retries, as with the in-process SUT."""
    from tasks.serving import liveness

    with simulated_engine() as (server, endpoint):
        spec = server_spec(smoke_store / "datasets" / "smoke" / "perf_eval_ref.parquet", qps=20, duration_ms=60000,
                           workers=2, engine="simulated")
        threading.Timer(4.0, server.kill).start()
        started = time.monotonic()
        with pytest.raises(CommandError) as caught:
            runner.run(spec, endpoint, tmp_path / "run", timeout_s=120)
    assert caught.value.returncode == liveness.ENDPOINT_DOWN
    assert time.monotonic() - started < 20
    assert "no longer accepts connections" in (tmp_path / "run" / "harness.log").read_text()
