"""What a killed run leaves, ended (tasks/ops/cleanup.py, tasks.launchers.local.reap_stale): engine process groups
recorded under every node folder of a workspace, also when the group's leader died and its workers live on, never a
process that only reuses a recorded pid; and the exit status the GPU acceptance script fails a leg on."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tasks.launchers.local import group_members
from tasks.ops import cleanup

SLEEPER = "import os, subprocess, sys, time; [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])" \
          " for _ in range(int(sys.argv[1]))]; time.sleep(60)"


def _engine(pids: Path, workers: int = 1) -> subprocess.Popen:
    """A stand-in engine: a group leader with `workers` children, recorded as the local launcher records it."""
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER, str(workers)], process_group=0)
    pids.mkdir(parents=True, exist_ok=True)
    (pids / f"{proc.pid}.json").write_text(json.dumps({"pid": proc.pid, "name": "engine", "argv0": sys.executable}))
    deadline = time.monotonic() + 10
    while len(group_members(proc.pid)) < workers + 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc


def test_engines_of_every_node_folder_are_ended_and_waited_for(tmp_path: Path) -> None:
    a, b = _engine(tmp_path / "pids" / "node-a", workers=2), _engine(tmp_path / "pids" / "node-b")
    members = group_members(a.pid) + group_members(b.pid)
    assert len(members) == 5
    done = cleanup.end_leftovers(tmp_path)
    assert done == ["ended 1 engine process group(s) recorded for node node-a",
                    "ended 1 engine process group(s) recorded for node node-b"]
    assert a.wait(timeout=10) == b.wait(timeout=10) == -signal.SIGKILL
    assert not [p for p in members if p in group_members(a.pid) + group_members(b.pid)]
    assert not list((tmp_path / "pids").rglob("*.json"))   # the records go with them
    assert cleanup.end_leftovers(tmp_path) == []


def test_workers_whose_leader_died_are_ended_too(tmp_path: Path) -> None:
    """A killed run's engine leader may be gone while its workers (vLLM's engine core) still hold the GPU."""
    proc = _engine(tmp_path / "pids" / "node", workers=2)
    workers = [p for p in group_members(proc.pid) if p != proc.pid]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert sorted(group_members(proc.pid)) == sorted(workers)
    assert cleanup.end_engines(tmp_path) == ["ended 1 engine process group(s) recorded for node node"]
    assert group_members(proc.pid) == []


def test_a_pid_reused_by_another_program_is_left_alone(tmp_path: Path) -> None:
    proc = _engine(tmp_path / "pids" / "node", workers=0)
    record = tmp_path / "pids" / "node" / f"{proc.pid}.json"
    record.write_text(json.dumps({"pid": proc.pid, "name": "engine", "argv0": "/opt/engine/bin/vllm"}))
    try:
        assert cleanup.end_engines(tmp_path) == []
        assert group_members(proc.pid) == [proc.pid] and not record.exists()
    finally:
        proc.kill()
        proc.wait()


def test_the_command_fails_when_something_outlives_the_kill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A process that SIGKILL cannot end (uninterruptible sleep) fails the clean-up, naming it: the acceptance
    script then fails the leg's row instead of leaving the GPU held unseen."""
    proc = _engine(tmp_path / "pids" / "node", workers=0)
    real = group_members
    monkeypatch.setattr("tasks.launchers.local.group_members", lambda pgid: real(pgid) or [4242])
    monkeypatch.setattr(cleanup, "reap_stale", functools.partial(cleanup.reap_stale, wait_s=0.3))
    assert cleanup.main([str(tmp_path)]) == 1
    assert "clean-up failed: process(es) [4242] of the engine groups" in capsys.readouterr().out
    proc.wait(timeout=10)
    assert cleanup.main([str(tmp_path / "empty")]) == 0
    assert capsys.readouterr().out.strip() == f"nothing left running in {tmp_path / 'empty'}"
