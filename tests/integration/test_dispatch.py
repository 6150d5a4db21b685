"""The head's dispatch over an engine's replicas (tasks/harness/dispatch.py), for real: simulated replicas on
127.0.0.1, the harness's own SUT and, for a run, the real loadgen. Least outstanding requests balances the work of
skewed answers where round robin cannot; a replica killed (or hung) during a Server run has its unanswered samples
served by the live ones, every sample answered once, and the run's record and report name it; a run that loses
more replicas than it may ends with that reason."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from submission.base.errors import CommandError
from submission.results.logs import load_run
from submission.results.runs import record
from submission.rules import load_rules
from tasks.engines import Replica
from tasks.harness import runner
from tasks.harness.client import CompletionClient
from tasks.harness.sut import SampleServer
from tasks.reporting import replicas as report
from tasks.serving import liveness
from tests.integration.engines_support import endpoint_of, replica_servers, server_spec

pytestmark = pytest.mark.integration


def known_answers(path: Path, lengths: list[int]) -> tuple[tuple[int, ...], ...]:
    """A data set the simulated engine answers at these lengths (tasks/engines/simulated/answers.py): prompt i is
    (7, 11, i), its answer `lengths[i]` tokens long. Returns the prompts."""
    prompts = [[7, 11, i] for i in range(len(lengths))]
    pq.write_table(pa.table({"input_tokens": pa.array(prompts, pa.list_(pa.int32())),
                             "rehearsal_answer_tokens": pa.array([[5]] * len(lengths), pa.list_(pa.int32())),
                             "rehearsal_output_tokens": pa.array(lengths, pa.int32())}), path)
    return tuple(tuple(p) for p in prompts)


def serve_all(replicas: tuple[Replica, ...], prompts: tuple, policy: str) -> tuple[dict[int, int], list[dict]]:
    """Every prompt issued at once to the harness's SampleServer over `replicas` by `policy`; the output tokens
    answered per sample id, and the replica rows."""
    client = CompletionClient(endpoint_of(replicas), max_tokens=1000, temperature=0.0, max_concurrency=8)
    answered: dict[int, int] = {}
    done = threading.Event()

    def on_done(sample_id: int, data: object, n_tokens: int) -> None:
        assert sample_id not in answered, f"sample {sample_id} answered twice"
        answered[sample_id] = n_tokens
        if len(answered) == len(prompts):
            done.set()

    server = SampleServer(client, prompts, done=on_done)
    server.dispatch.round_robin = policy == "round-robin"
    server.start()
    server.submit([(i, i) for i in range(len(prompts))])
    assert done.wait(300), f"{len(answered)} of {len(prompts)} answered"
    server.close()
    return answered, server.stats.replicas


def test_least_outstanding_requests_balance_skewed_answers_where_round_robin_cannot(tmp_path: Path) -> None:
    """Answers of 64 and 4 tokens in turn over 4 replicas: round robin gives two replicas every long answer (16
    times the others' tokens); least outstanding requests sends more samples to the replicas that finish sooner.
    Both answer every sample once, and the rows sum to the samples issued."""
    lengths = [64 if i % 2 == 0 else 4 for i in range(96)]
    prompts = known_answers(tmp_path / "answers.parquet", lengths)
    flags = ["--answers", str(tmp_path / "answers.parquet"), "--decode-slots", "2", "--tpot-ms", "2",
             "--prefill-ms", "1", "--output-tokens", "1000", *["--port", "0"] * 4]
    spread = {}
    with replica_servers([flags]) as (_, replicas):
        for policy in ("round-robin", "least-requests"):
            answered, rows = serve_all(replicas, prompts, policy)
            assert sorted(answered.values()) == sorted(lengths)   # each sample once, at its own length
            assert [r["replica"] for r in rows] == [f"replica-{i}" for i in range(4)]
            assert sum(r["samples"] for r in rows) == len(prompts) and sum(r["errors"] for r in rows) == 0
            assert sum(r["output_tokens"] for r in rows) == sum(lengths)
            tokens = [r["output_tokens"] for r in rows]
            spread[policy] = max(tokens) / min(tokens)
            if policy == "round-robin":
                assert [r["samples"] for r in rows] == [24] * 4 and spread[policy] == 16
    assert spread["least-requests"] < spread["round-robin"] / 4, spread


def run_with_fault(replicas: tuple[Replica, ...], victim: subprocess.Popen, spec, run_dir: Path, max_lost: int,
                   after_s: float = 2.0, fault: int = signal.SIGKILL,
                   stall_s: float | None = None) -> dict | CommandError:
    """A loadgen run over `replicas`, `victim`'s process group sent `fault` (SIGKILL: dead; SIGSTOP: hung, its port
    open) once loadgen has run `after_s`; its statistics, or the error that ended it."""
    outcome: dict = {}

    def go() -> None:
        try:
            outcome["stats"] = runner.run(spec, endpoint_of(replicas), run_dir, timeout_s=120, max_lost=max_lost,
                                          stall_s=stall_s)
        except CommandError as e:
            outcome["error"] = e

    thread = threading.Thread(target=go)
    thread.start()
    deadline = time.monotonic() + 60
    while not (run_dir / "mlperf_log_detail.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(after_s)
    os.killpg(victim.pid, fault)
    thread.join(timeout=150)
    assert not thread.is_alive()
    return outcome.get("stats") or outcome["error"]


@pytest.mark.parametrize(("workers", "fault"), [(1, "killed"), (2, "killed"), (1, "hung")])
def test_a_replica_lost_during_a_server_run_has_its_samples_served_by_the_others(
        workers: int, fault: str, smoke_store: Path, tmp_path: Path) -> None:
    """Three replicas (replica-1 alone in its process), replica-1 killed (or stopped: hung, its port open) mid-run.
    With two harness workers, worker 1 owns replica-1 alone: its samples come back to the runner and go to worker
    0's replicas."""
    spec = server_spec(smoke_store / "datasets" / "smoke" / "perf_eval_ref.parquet", qps=20, duration_ms=6000,
                       workers=workers, engine="simulated")
    one = ["--port", "0"]
    with replica_servers([one, one, one]) as (procs, replicas):
        stats = run_with_fault(replicas, procs[1], spec, tmp_path / "run", max_lost=1,
                               fault=signal.SIGKILL if fault == "killed" else signal.SIGSTOP, stall_s=3.0)
    assert isinstance(stats, dict), stats
    assert stats["failed"] == 0 and stats["completed"] == stats["issued"] > 0, stats
    rows = {r["replica"]: r for r in stats["replicas"]}
    assert list(rows) == ["replica-0", "replica-1", "replica-2"]
    assert sum(r["samples"] for r in rows.values()) == stats["issued"]   # each sample counted once
    lost = rows["replica-1"]
    why = "stopped accepting connections" if fault == "killed" else "hung (nothing for "
    assert lost["lost"]["why"].startswith(why) and lost["moved"] >= 1, lost
    assert len(lost["moved_indices"]) == lost["moved"] and rows["replica-0"]["lost"] is None
    run = load_run(tmp_path / "run")
    assert run.num_errors == 0 and run.validity is not None
    times = json.loads((tmp_path / "run" / "query_times.json").read_text())
    assert len(times["done"]) == stats["issued"] and None not in times["first"]   # every sample answered, once
    log = (tmp_path / "run" / "harness.log").read_text()
    assert f"podium: replica lost (1 of at most 1): replica-1 on node1 {why}" in log

    rec = record(spec, str(tmp_path / "run"), run, load_rules("v6.1"), stats)
    assert [r.replica for r in rec.replicas if r.lost_at] == ["replica-1"]
    section = "\n".join(report.markdown([rec]))
    assert f"{stats['issued']} samples over 3 replicas (the rows sum to the samples issued)" in section
    assert f"- replica-1 on node1 was lost at {lost['lost']['at']}: {lost['lost']['why']}; " \
           f"{lost['moved']} sample(s) moved to live replicas" in section


def test_a_run_that_loses_more_replicas_than_it_may_ends_with_that_reason(smoke_store: Path, tmp_path: Path) -> None:
    spec = server_spec(smoke_store / "datasets" / "smoke" / "perf_eval_ref.parquet", qps=20, duration_ms=60000,
                       workers=1, engine="simulated")
    one = ["--port", "0"]
    started = time.monotonic()
    with replica_servers([one, one]) as (procs, replicas):
        error = run_with_fault(replicas, procs[0], spec, tmp_path / "run", max_lost=0, after_s=1.0)
    assert isinstance(error, CommandError) and error.returncode == liveness.REPLICAS_LOST, error
    assert time.monotonic() - started < 50   # ended then, not after the 60 s the run would last
    log = (tmp_path / "run" / "harness.log").read_text()
    assert "podium: 1 replicas lost during the run (replica-0 at " in log
    assert "more than engine.replicas.max_lost (0) allows; ending the run" in log
