"""The engine is SIGKILLed (its whole process group, by the pid the launcher recorded) in the middle of a Server run.

The runner's child ends the run at once (tasks.serving.liveness), the step fails with a LaunchError holding the
engine's log tail, its partial logs are set aside as `<key>.failed-<time>`, the engine is relaunched and the step
retried; the flow completes with a VALID Server result built only from the retried run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tasks.workspace import Workspace
from tests.faults.conftest import fault_plan
from tests.faults.procs import LOOPBACK, fault_mid_run, group_pids, kill_group, listening, recorded_engines

pytestmark = [pytest.mark.integration, pytest.mark.faults]


def _kill(seen: dict) -> Callable[[int], None]:
    def kill(pgid: int) -> None:   # record what the engine listens on, then SIGKILL its group
        seen["listening"] = listening(group_pids(pgid))
        kill_group(pgid)
    return kill


def _run_and_kill_the_engine(plan: Path, ws: Workspace) -> tuple[Any, dict, float]:
    """Run the submission flow while the engine is killed mid-run; its final state, what the fault saw (`pgid`,
    `run_dir`, `at`, `listening`) and how long the flow took."""
    from flows.submission import submission

    seen: dict = {}
    started = time.monotonic()
    with fault_mid_run(ws, _kill(seen), seen):
        state = submission(str(plan), str(ws.root), return_state=True)
    return state, seen, time.monotonic() - started


def _check_the_killed_attempt_was_set_aside(ws: Workspace, seen: dict) -> float:
    """The run folders: the retried run in place, the killed attempt beside it, never reused; the accuracy run. The
    killed attempt ended soon after the kill (how soon is returned), before writing its statistics."""
    key = seen["run_dir"].name
    folders = sorted(p.name for p in (ws.work / "runs").iterdir())
    aside = [f for f in folders if f.startswith(f"{key}.failed-")]
    assert key in folders and len(aside) == 1 and len(folders) == 3, folders
    failed = ws.work / "runs" / aside[0]
    assert "no longer accepts connections" in (failed / "harness.log").read_text()
    ended_after = (failed / "harness.log").stat().st_mtime - seen["at"]
    assert ended_after < 10, f"the run went on {ended_after:.1f} s after the engine died"
    assert not (failed / "sut_stats.json").exists()   # the child ended before writing its statistics
    return ended_after


def _check_only_the_retried_run_is_kept(result: dict, ws: Workspace, key: str) -> Path:
    """The tree and the run folder hold the retried run only; the run folder is returned."""
    tree = Path(result["tree"])
    summaries = [p for p in tree.rglob("mlperf_log_summary.txt") if "performance" in p.parts]
    assert len(summaries) == 1
    assert summaries[0].read_bytes() == (ws.work / "runs" / key / "mlperf_log_summary.txt").read_bytes()
    run_folder = Path(result["run_folder"])
    assert not [p for p in run_folder.rglob("*") if ".failed-" in str(p)]
    tarball = (run_folder / "submission.tar.gz").read_bytes()
    assert b".failed-" not in tarball
    return run_folder


def _prefect_log_messages() -> list[str]:
    """Every log message of the session's Prefect server, page by page (a page holds 200)."""
    import asyncio

    from prefect import get_client

    async def _logs() -> list[str]:
        out: list[str] = []
        async with get_client() as client:
            while batch := await client.read_logs(limit=200, offset=len(out)):
                out += [log.message for log in batch]
        return out

    return asyncio.run(_logs())


def _check_the_failure_was_logged(ws: Workspace, engine_log: Path, pgid: int) -> str:
    """The step's failure, in Prefect's logs, names the engine log and carries its last lines; its first such
    message is returned."""
    messages = [m for m in _prefect_log_messages() if "stopped accepting connections" in m and str(ws.root) in m]
    assert messages, "no log of the step's failure"
    assert any("last lines of" in m and str(engine_log) in m for m in messages), messages[0]
    assert any(f"(pid {pgid}) killed by signal 9" in m for m in messages), messages[0]
    return messages[0]


def test_engine_killed_mid_server_run_is_relaunched_and_the_run_retried(
        prefect_server: None, smoke_store: Path, tmp_path: Path) -> None:
    plan = fault_plan(tmp_path / "plan.yaml", smoke_store)
    ws = Workspace.at(tmp_path / "ws")
    state, seen, elapsed = _run_and_kill_the_engine(plan, ws)
    assert "pgid" in seen, "the engine was never killed: the fault did not happen"
    assert seen["listening"] and all(addr in LOOPBACK for addr, _ in seen["listening"]), seen["listening"]

    assert state.is_completed(), state.message
    result = state.result()
    assert result["engine_launches"] == 2 and result["failures"] == []
    assert [(r["scenario"], r["valid"]) for r in result["rows"]] == [("Server", True)], result["rows"]

    ended_after = _check_the_killed_attempt_was_set_aside(ws, seen)
    run_folder = _check_only_the_retried_run_is_kept(result, ws, seen["run_dir"].name)

    # the engine log holds both launches; the killed engine is gone, the relaunched one stopped
    logs = list((run_folder / "logs" / "engine").rglob("*.log"))
    assert len(logs) == 1 and logs[0].read_text().count("Application startup complete") == 2   # killed, relaunched
    assert group_pids(seen["pgid"]) == [] and recorded_engines(ws.pids) == []

    failure = _check_the_failure_was_logged(ws, logs[0], seen["pgid"])
    print(f"engine killed mid-run: the run ended {ended_after:.2f} s after the kill; flow completed in "
          f"{elapsed:.0f} s, 2 launches, 1 retried step\n--- the step's failure ---\n{failure}")
