"""The engine is SIGKILLed (its whole process group, by the pid the launcher recorded) in the middle of a Server run.

The runner's child ends the run at once (tasks.harness.liveness), the step fails with a LaunchError holding the
engine's log tail, its partial logs are set aside as `<key>.failed-<time>`, the engine is relaunched and the step
retried; the flow completes with a VALID Server result built only from the retried run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

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


def test_engine_killed_mid_server_run_is_relaunched_and_the_run_retried(
        prefect_server: None, smoke_store: Path, tmp_path: Path) -> None:
    from prefect import get_client

    from flows.submission import submission

    plan = fault_plan(tmp_path / "plan.yaml", smoke_store)
    ws = Workspace.at(tmp_path / "ws")
    seen: dict = {}
    started = time.monotonic()
    with fault_mid_run(ws, _kill(seen), seen):
        state = submission(str(plan), str(ws.root), return_state=True)
    elapsed = time.monotonic() - started
    assert "pgid" in seen, "the engine was never killed: the fault did not happen"
    assert seen["listening"] and all(addr in LOOPBACK for addr, _ in seen["listening"]), seen["listening"]

    assert state.is_completed(), state.message
    result = state.result()
    assert result["engine_launches"] == 2 and result["failures"] == []
    assert [(r["scenario"], r["valid"]) for r in result["rows"]] == [("Server", True)], result["rows"]

    # the run folders: the retried run in place, the killed attempt beside it, never reused; the accuracy run
    key = seen["run_dir"].name
    folders = sorted(p.name for p in (ws.work / "runs").iterdir())
    aside = [f for f in folders if f.startswith(f"{key}.failed-")]
    assert key in folders and len(aside) == 1 and len(folders) == 3, folders
    failed = ws.work / "runs" / aside[0]
    assert "no longer accepts connections" in (failed / "harness.log").read_text()
    ended_after = (failed / "harness.log").stat().st_mtime - seen["at"]
    assert ended_after < 10, f"the run went on {ended_after:.1f} s after the engine died"
    assert not (failed / "sut_stats.json").exists()   # the child ended before writing its statistics

    # the tree and the run folder hold the retried run only
    tree = Path(result["tree"])
    summaries = [p for p in tree.rglob("mlperf_log_summary.txt") if "performance" in p.parts]
    assert len(summaries) == 1
    assert summaries[0].read_bytes() == (ws.work / "runs" / key / "mlperf_log_summary.txt").read_bytes()
    run_folder = Path(result["run_folder"])
    assert not [p for p in run_folder.rglob("*") if ".failed-" in str(p)]
    tarball = (run_folder / "submission.tar.gz").read_bytes()
    assert b".failed-" not in tarball

    # the engine log holds both launches; the killed engine is gone, the relaunched one stopped
    logs = list((run_folder / "logs" / "engine").rglob("*.log"))
    assert len(logs) == 1 and logs[0].read_text().count("Application startup complete") == 2   # killed, relaunched
    assert group_pids(seen["pgid"]) == [] and recorded_engines(ws.pids) == []

    # the step's failure, in Prefect's logs, names the engine log and carries its last lines
    import asyncio

    async def _logs() -> list[str]:   # every log of the session's server, page by page (a page holds 200)
        out: list[str] = []
        async with get_client() as client:
            while batch := await client.read_logs(limit=200, offset=len(out)):
                out += [log.message for log in batch]
        return out

    messages = [m for m in asyncio.run(_logs()) if "stopped accepting connections" in m and str(ws.root) in m]
    assert messages, "no log of the step's failure"
    assert any("last lines of" in m and str(logs[0]) in m for m in messages), messages[0]
    assert any(f"(pid {seen['pgid']}) killed by signal 9" in m for m in messages), messages[0]
    print(f"engine killed mid-run: the run ended {ended_after:.2f} s after the kill; flow completed in "
          f"{elapsed:.0f} s, 2 launches, 1 retried step\n--- the step's failure ---\n{messages[0]}")
