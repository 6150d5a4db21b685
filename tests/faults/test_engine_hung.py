"""The engine hangs in the middle of a Server run: its whole process group is SIGSTOPped, so its port stays open
(the kernel still accepts connections) and it answers nothing, as with a stuck collective or a deadlocked scheduler.

The harness's stall watchdog ends the run after the plan's `engine.stall_timeout_s`; the step stops the hung engine
(it would hold its port and accelerators), sets the partial logs aside and is retried on a freshly launched engine;
the flow completes with a VALID Server result built only from the retried run.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
import yaml

from tasks.workspace import Workspace
from tests.faults.conftest import fault_plan
from tests.faults.procs import fault_mid_run, group_pids, recorded_engines

pytestmark = [pytest.mark.integration, pytest.mark.faults]
STALL_S = 4


def test_engine_hung_mid_server_run_is_stopped_relaunched_and_the_run_retried(
        prefect_server: None, smoke_store: Path, tmp_path: Path) -> None:
    from flows.submission import submission

    plan = fault_plan(tmp_path / "plan.yaml", smoke_store)
    data = yaml.safe_load(plan.read_text())
    data["benchmarks"][0]["engine"]["stall_timeout_s"] = STALL_S
    plan.write_text(yaml.safe_dump(data, sort_keys=False))
    ws = Workspace.at(tmp_path / "ws")
    seen: dict = {}
    try:   # SIGSTOP the engine's group 3 s into the run
        with fault_mid_run(ws, lambda pgid: os.killpg(pgid, signal.SIGSTOP), seen):
            state = submission(str(plan), str(ws.root), return_state=True)
    finally:
        if "pgid" in seen:   # whatever happened, never leave a stopped group behind
            for pid in group_pids(seen["pgid"]):
                os.kill(pid, signal.SIGKILL)
    assert "pgid" in seen, "the engine was never hung: the fault did not happen"

    assert state.is_completed(), state.message
    result = state.result()
    assert result["engine_launches"] == 2 and result["failures"] == []
    assert [(r["scenario"], r["valid"]) for r in result["rows"]] == [("Server", True)], result["rows"]

    key = seen["run_dir"].name
    aside = [p for p in (ws.work / "runs").iterdir() if p.name.startswith(f"{key}.failed-")]
    assert len(aside) == 1 and (ws.work / "runs" / key / "mlperf_log_summary.txt").is_file()
    log = (aside[0] / "harness.log").read_text()
    silent = re.search(r"sent nothing for (\d+) s with \d+ request\(s\) in flight \(hung, yet its port is open\)", log)
    assert silent and STALL_S <= int(silent.group(1)) <= STALL_S + 2, log
    ended_after = (aside[0] / "harness.log").stat().st_mtime - seen["at"]
    assert STALL_S <= ended_after < STALL_S + 10, f"the run ended {ended_after:.1f} s after the engine hung"
    assert not (aside[0] / "sut_stats.json").exists()

    # the hung engine was stopped by the step, not left holding its port until the flow ended
    assert group_pids(seen["pgid"]) == [] and recorded_engines(ws.pids) == []
    tarball = (Path(result["run_folder"]) / "submission.tar.gz").read_bytes()
    assert b".failed-" not in tarball
    print(f"engine hung mid-run: the run ended {ended_after:.2f} s after the hang (stall timeout {STALL_S} s); "
          f"2 launches, 1 retried step")
