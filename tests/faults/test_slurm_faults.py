"""The engine runs as a Slurm job step (`engine.launcher: slurm`) on the local cluster and, in the middle of a Server
run, its processes on the node are SIGKILLed (the engine died) or SIGSTOPped (it hung, its port still open), by the
pids `scontrol listpids` gives for the step the launcher recorded: a node-side fault, not a signal to Podium's srun.

Either way the run ends (ENDPOINT_DOWN / ENGINE_STALLED), the old step is gone from the node (a live one cancelled
with scancel by its recorded id), a fresh step is launched and the run retried; the flow completes with a VALID
Server result built from the retried run, and nothing of the old step is left: no process, nothing in
`squeue --steps`, no job.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tasks.launchers.slurm import SlurmLauncher
from tasks.workspace import Workspace
from tests.faults.conftest import fault_plan
from tests.faults.procs import fault_mid_run, slurm, slurm_engine, step_tasks
from tests.integration.test_slurm import LOG, _settings, _web

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.slurm]
STALL_S = 4
GRACE_S = 20   # SIGTERM to SIGKILL: long, so a stop that waits it out shows
FAULTS = {"killed": (signal.SIGKILL, "no longer accepts connections"),
          "hung": (signal.SIGSTOP, "sent nothing for")}


def _plan(path: Path, store: Path, conf: Path) -> Path:
    """The fault plan (Server only) with its engine as a step of an allocation the launcher takes."""
    plan = fault_plan(path, store)
    data = yaml.safe_load(plan.read_text())
    data["benchmarks"][0]["engine"].update(
        launcher="slurm", stall_timeout_s=STALL_S,
        slurm={"slurm_conf": str(conf), "allocation": "new", "python": sys.executable, "grace_s": GRACE_S,
               "step_timeout_s": 30})
    plan.write_text(yaml.safe_dump(data, sort_keys=False))
    return plan


def _prefect_logs() -> list[tuple[float, str]]:
    """Every log the session's Prefect server holds, oldest first, page by page: (unix time, message)."""
    from prefect import get_client
    from prefect.client.schemas.sorting import LogSort

    async def read() -> list[tuple[float, str]]:
        out: list[tuple[float, str]] = []
        async with get_client() as client:
            while batch := await client.read_logs(limit=200, offset=len(out), sort=LogSort.TIMESTAMP_ASC):
                out += [(log.timestamp.timestamp(), log.message) for log in batch]
        return out
    return asyncio.run(read())


def _left(pids: list[int]) -> list[str]:
    """Those of `pids` that still exist, with their state (T: stopped, Z: zombie)."""
    out = []
    for pid in pids:
        try:
            out.append(f"{pid} {Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0]}")
        except OSError:
            continue
    return out


def _steps(conf: Path, job: str) -> list[str]:
    return slurm(conf, "squeue", "--noheader", "--steps", f"--jobs={job}", "--format=%i").split()


def _run_with_fault(plan: Path, ws: Workspace, conf: Path, sig: signal.Signals) -> tuple[object, dict, float]:
    from flows.submission import submission

    seen: dict = {}
    started = time.monotonic()
    try:
        with fault_mid_run(ws, lambda pgid: os.killpg(pgid, sig), seen, find=slurm_engine(conf, seen)):
            state = submission(str(plan), str(ws.root), return_state=True)
    finally:
        seen["left"] = _left(seen.get("pids", []))   # what the flow left of the old step, read before the clean-up
        for pid in seen.get("pids", []):   # whatever happened, never leave a stopped engine behind
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
    return state, seen, time.monotonic() - started


def _assert_retried(result: dict, ws: Workspace, seen: dict, fault: str) -> tuple[Path, float]:
    """The flow completed on a relaunched engine; the run ended soon after the fault, for the fault's reason; its
    partial logs are set aside and the retried run is in place. Returns the set-aside folder and the seconds."""
    assert result["engine_launches"] == 2 and result["failures"] == []
    assert [(r["scenario"], r["valid"]) for r in result["rows"]] == [("Server", True)], result["rows"]
    key = seen["run_dir"].name
    aside = [p for p in (ws.work / "runs").iterdir() if p.name.startswith(f"{key}.failed-")]
    assert len(aside) == 1 and (ws.work / "runs" / key / "mlperf_log_summary.txt").is_file()
    assert FAULTS[fault][1] in (aside[0] / "harness.log").read_text()
    ended_after = (aside[0] / "harness.log").stat().st_mtime - seen["at"]
    low, high = (0, 10) if fault == "killed" else (STALL_S, STALL_S + 10)
    assert low <= ended_after < high, f"the run ended {ended_after:.1f} s after the engine was {fault}"
    return aside[0], ended_after


def _engine_steps(messages: list[str]) -> list[str]:
    """The launcher's step messages about the engine's steps: those of the GPU samplers beside them (one per node,
    cancelled with them) taken out."""
    samplers = {m.split()[2] for m in messages if re.fullmatch(r"Slurm step \S+ of gpus-\S+ on \S+", m)}
    out = []
    for m in messages:
        found = re.fullmatch(r"(.*Slurm step\(s\) )(\d+\.\d+(?:, \d+\.\d+)*)( .*)", m)
        if found:
            ids = [i for i in found.group(2).split(", ") if i not in samplers]
            m = f"{found.group(1)}{', '.join(ids)}{found.group(3)}" if ids else ""
        if m and not re.fullmatch(r"Slurm step \S+ of gpus-\S+ on \S+", m):
            out.append(m)
    return out


def _assert_steps(logs: list[tuple[float, str]], engine_log: str, old: str, fault: str) -> str:
    """What happened to the recorded step, from the launcher's log and Slurm's own lines; returns the fresh step."""
    after = next(i for i, (_, m) in enumerate(logs) if f"Slurm step {old} of smoke-server" in m)
    mine = _engine_steps([m for _, m in logs[after:] if "Slurm step" in m])
    if fault == "hung":   # alive, stopped, so cancelled by its recorded id; Slurm says so in the step's output
        assert mine[1].startswith(f"cancelling Slurm step(s) {old} by their recorded ids"), mine
        assert re.search(rf"STEP {re.escape(old)} ON \S+ CANCELLED", engine_log), engine_log[-2000:]
    else:   # the engine's task died: srun ends the step itself (--kill-on-bad-exit); cancelled if Slurm still lists it
        assert mine[1] in (f"Slurm step(s) {old} already ended", f"cancelling Slurm step(s) {old} by their recorded "
                           f"ids: SIGTERM and SIGCONT, SIGKILL after {GRACE_S} s"), mine
        assert "task 0: Killed" in engine_log and f"Terminating StepId={old}" in engine_log
    fresh = re.fullmatch(r"Slurm step (\d+\.\d+) of smoke-server on \S+", mine[2])
    assert fresh and fresh.group(1) != old, mine                 # a fresh step for the retry
    assert re.search(rf"STEP {re.escape(fresh.group(1))} ON \S+ CANCELLED", engine_log)   # stopped at the end
    return fresh.group(1)


@pytest.mark.parametrize("fault", list(FAULTS))
def test_engine_step_fault_on_slurm_cancels_the_step_and_retries_on_a_fresh_one(
        prefect_server: None, smoke_store: Path, slurm_conf: Path, tmp_path: Path, fault: str) -> None:
    ws = Workspace.at(tmp_path / "ws")
    state, seen, elapsed = _run_with_fault(_plan(tmp_path / "plan.yaml", smoke_store, slurm_conf), ws, slurm_conf,
                                           FAULTS[fault][0])
    assert "at" in seen, f"the engine was never {fault}: the fault did not happen"
    assert state.is_completed(), state.message
    result = state.result()
    aside, ended_after = _assert_retried(result, ws, seen, fault)

    # the step failed only once the engine was stopped: a stopped engine must not wait out the grace period
    logs = _prefect_logs()
    failed_at = next(t for t, m in logs if "Task run failed" in m and aside.name in m)
    stopped_in = failed_at - (aside / "harness.log").stat().st_mtime
    assert stopped_in < GRACE_S / 4, f"the engine took {stopped_in:.1f} s to stop (grace period {GRACE_S} s)"

    engine_log = next((Path(result["run_folder"]) / "logs" / "engine").rglob("smoke-server.log")).read_text()
    fresh = _assert_steps(logs, engine_log, seen["step"], fault)

    # nothing of the old step is left: no process (none stopped), no step, no job
    assert seen["left"] == [], seen["left"]
    assert slurm(slurm_conf, "squeue", "--noheader", "--steps", "--format=%i").split() == []
    assert slurm(slurm_conf, "squeue", "--noheader", "--format=%i").split() == []
    print(f"slurm engine {fault} mid-run: the run ended {ended_after:.2f} s after the fault, the engine was "
          f"stopped {stopped_in:.2f} s later; step {seen['step']} on {seen['node']} ({len(seen['pids'])} task "
          f"pid(s)), fresh step {fresh}; flow completed in {elapsed:.0f} s, 2 launches")


def test_a_step_whose_srun_died_is_cancelled_by_its_recorded_id(slurm_conf: Path, tmp_path: Path) -> None:
    """Podium's srun client dies (SIGKILL) while its step runs on on the node. Inside a job Podium runs in (not
    cancelled by it) nothing else would end that step: stop cancels it by the id recorded at start."""
    env = {**os.environ, "SLURM_CONF": str(slurm_conf)}
    out = subprocess.run(["salloc", "--no-shell", "--nodes=1", "--job-name=outer"], env=env, capture_output=True,
                         text=True, check=True, timeout=60)
    job = out.stderr.split("Granted job allocation ")[1].split()[0]
    try:
        where = SlurmLauncher(tmp_path / "state", _settings(slurm_conf, allocation="auto"),
                              environ={**os.environ, "SLURM_JOB_ID": job})
        deployment = where.start([_web("web", where.placement(1).ports[0])], tmp_path / "logs", LOG)
        where.wait_ready(deployment, timeout_s=30)
        step = deployment.steps[0]
        _, pids = step_tasks(slurm_conf, step.step_id)
        os.killpg(step.srun.pid, signal.SIGKILL)
        step.srun.wait()
        assert step.step_id in _steps(slurm_conf, job) and _left(pids), "the step did not outlive its srun"
        assert not where.alive(deployment)   # an engine session stops it and launches a fresh one
        where.stop(deployment)
        assert _steps(slurm_conf, job) == [] and _left(pids) == []
    finally:
        subprocess.run(["scancel", job], env=env, check=True, timeout=60)
