"""Run one loadgen test against an endpoint, in a child process of its own.

A child process keeps a loadgen crash (it segfaults on some settings) from taking the flow with it, and gives the
run a working directory where `audit.config` is present only when a compliance test asks for it.

    python -m tasks.harness.runner RUN_DIR [PARENT_PID [STALL_S [MAX_LOST]]]   # RUN_DIR holds run.json, endpoint.json

(STALL_S 0: no stall watchdog; MAX_LOST: the replicas the run may lose, tasks.harness.dispatch.Losses.)

The child dies with the process that started it (Linux PR_SET_PDEATHSIG): a flow killed mid-run leaves no loadgen
run behind to load the engine or write into a run folder that the re-run sets aside.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from submission.base.errors import CommandError
from submission.base.files import tail
from submission.results.runs import RunSpec
from tasks import clock
from tasks.engines import Endpoint
from tasks.harness.child import client_for, die_with_parent, requests_for

STATS = "sut_stats.json"


def review(spec: RunSpec, endpoint: Endpoint, run_dir: Path, model_dir: Path) -> dict:
    """What the run would be given, as plain data (`podium launch PLAN --dry-run`): its user.conf."""
    return {"label": spec.label, "user_conf": spec.user_conf_text()}


def run_in_process(run_dir: Path, stall_s: float | None = None, max_lost: int | None = None) -> None:
    """The child's body: read the spec, drive loadgen, write the logs and the SUT's own statistics. With
    `harness_workers` > 1 the samples are served by that many worker processes (`tasks.harness.workers`; no more
    than the engine has replicas, when it has several)."""
    import mlperf_loadgen as lg

    from tasks.harness.sut import PromptQSL, StreamingSUT
    from tasks.harness.workers import PooledSUT, worker_count

    setup = {"spec": (run_dir / "run.json").read_text(), "endpoint": (run_dir / "endpoint.json").read_text(),
             "stall_s": stall_s}
    spec = RunSpec.model_validate_json(setup["spec"])
    (run_dir / "user.conf").write_text(spec.user_conf_text())

    settings = lg.TestSettings()
    settings.FromConfig(str(run_dir / "user.conf"), spec.loadgen_model, spec.loadgen_scenario)
    settings.scenario = getattr(lg.TestScenario, spec.loadgen_scenario)
    settings.mode = lg.TestMode.AccuracyOnly if spec.mode == "accuracy" else lg.TestMode.PerformanceOnly
    log = lg.LogSettings()
    log.log_output.outdir = str(run_dir)
    log.log_output.copy_summary_to_stdout = False
    log.enable_trace = False

    requests = requests_for(setup)
    first_token = spec.loadgen_scenario == "Server" and requests.output == "token_ids"
    workers = worker_count(spec.harness_workers, len(json.loads(setup["endpoint"]).get("replicas") or ()))
    if workers > 1:
        sut = PooledSUT(setup, workers=workers, max_concurrency=spec.max_concurrency,
                        report_first_token=first_token, max_lost=max_lost)
    else:
        sut = StreamingSUT(client_for(setup, spec.max_concurrency), requests, report_first_token=first_token,
                           stall_s=stall_s, max_lost=max_lost)
    started = time.time()
    with PromptQSL(len(requests)) as qsl, sut:
        audit = run_dir / "audit.config"   # absent unless a compliance run put it there
        lg.StartTestWithLogSettings(sut.handle, qsl.handle, settings, log, str(audit))
    stats = dataclasses.asdict(sut.stats) | {"wall_s": round(time.time() - started, 3),
                                             "harness_workers": workers}
    (run_dir / STATS).write_text(json.dumps(stats, indent=2))
    if spec.loadgen_scenario == "Server" and spec.mode == "performance":
        sut.clock.write(run_dir)   # per-query times: the search's overload signals (tasks.harness.timing)


def run(spec: RunSpec, endpoint: Endpoint, run_dir: Path, timeout_s: float | None = None,
        stall_s: float | None = None, speed: float | None = None, max_lost: int | None = None) -> dict:
    """Run the test in a child process; return the SUT statistics. A crash raises CommandError with the log tail.
    `stall_s`: end the run (liveness.ENGINE_STALLED) when the engine sends nothing that long with requests in
    flight (with replicas: leave out a replica silent that long). `speed`: the child's accelerated clock
    (tasks.clock.ladder); None: the one PODIUM_CLOCK asks for. `max_lost`: end the run (liveness.REPLICAS_LOST)
    when more replicas than that are lost; None: only when none is left."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(spec.model_dump_json(indent=2))
    (run_dir / "endpoint.json").write_text(json.dumps(endpoint.for_client(), indent=2))
    # under the accelerated clock faketime is the child's parent: it then only dies with faketime (parent 0)
    speed = speed or clock.speed()
    parent = 0 if speed else os.getpid()
    argv = [sys.executable, "-m", "tasks.harness.runner", str(run_dir), str(parent)]
    if stall_s or max_lost is not None:
        argv.append(str(stall_s or 0))
    if max_lost is not None:
        argv.append(str(max_lost))
    argv = clock.wrap(argv, speed)
    with (run_dir / "harness.log").open("wb") as out:
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=run_dir)  # noqa: S603
        try:
            code = child.wait(timeout=timeout_s)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    if code != 0:
        raise CommandError(argv, code, tail(run_dir / "harness.log"),
                           fix=f"read {run_dir / 'harness.log'} and mlperf_log_detail.txt there")
    return json.loads((run_dir / STATS).read_text())


if __name__ == "__main__":
    if len(sys.argv) > 2:
        die_with_parent(int(sys.argv[2]))
    run_in_process(Path(sys.argv[1]), float(sys.argv[3]) if len(sys.argv) > 3 and float(sys.argv[3]) else None,
                   int(sys.argv[4]) if len(sys.argv) > 4 else None)
