"""Run one loadgen test against an endpoint, in a child process of its own.

A child process keeps a loadgen crash (it segfaults on some settings) from taking the flow with it, and gives the
run a working directory where `audit.config` is present only when a compliance test asks for it.

    python -m tasks.harness.runner RUN_DIR [PARENT_PID]   # RUN_DIR holds run.json and endpoint.json; logs go there

The child dies with the process that started it (Linux PR_SET_PDEATHSIG): a flow killed mid-run leaves no loadgen
run behind to load the engine or write into a run folder that the re-run sets aside.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from submission.errors import CommandError
from submission.runs import RunSpec
from tasks.engines import Endpoint

STATS = "sut_stats.json"
PR_SET_PDEATHSIG = 1   # linux/prctl.h


def run_in_process(run_dir: Path) -> None:
    """The child's body: read the spec, drive loadgen, write the logs and the SUT's own statistics."""
    import mlperf_loadgen as lg

    from tasks.harness.client import CompletionClient
    from tasks.harness.requests import build_requests
    from tasks.harness.sut import PromptQSL, StreamingSUT

    spec = RunSpec.model_validate_json((run_dir / "run.json").read_text())
    endpoint_data = json.loads((run_dir / "endpoint.json").read_text())
    endpoint = Endpoint(**{**endpoint_data, "drop_fields": frozenset(endpoint_data["drop_fields"])})
    requests = build_requests(spec.benchmark, spec.dataset, spec.mode, max_tokens=spec.max_tokens,
                              temperature=spec.temperature)
    (run_dir / "user.conf").write_text(spec.user_conf_text())

    settings = lg.TestSettings()
    settings.FromConfig(str(run_dir / "user.conf"), spec.loadgen_model, spec.loadgen_scenario)
    settings.scenario = getattr(lg.TestScenario, spec.loadgen_scenario)
    settings.mode = lg.TestMode.AccuracyOnly if spec.mode == "accuracy" else lg.TestMode.PerformanceOnly
    log = lg.LogSettings()
    log.log_output.outdir = str(run_dir)
    log.log_output.copy_summary_to_stdout = False
    log.enable_trace = False

    client = CompletionClient(endpoint, max_tokens=spec.max_tokens, temperature=spec.temperature,
                              max_concurrency=spec.max_concurrency)
    started = time.time()
    first_token = spec.loadgen_scenario == "Server" and requests.output == "token_ids"
    with PromptQSL(len(requests)) as qsl, StreamingSUT(client, requests, report_first_token=first_token) as sut:
        audit = run_dir / "audit.config"   # absent unless a compliance run put it there
        lg.StartTestWithLogSettings(sut.handle, qsl.handle, settings, log, str(audit))
    stats = dataclasses.asdict(sut.stats) | {"wall_s": round(time.time() - started, 3)}
    (run_dir / STATS).write_text(json.dumps(stats, indent=2))


def run(spec: RunSpec, endpoint: Endpoint, run_dir: Path, timeout_s: float | None = None) -> dict:
    """Run the test in a child process; return the SUT statistics. A crash raises CommandError with the log tail."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(spec.model_dump_json(indent=2))
    endpoint_data = dataclasses.asdict(endpoint) | {"drop_fields": sorted(endpoint.drop_fields)}
    (run_dir / "endpoint.json").write_text(json.dumps(endpoint_data, indent=2))
    argv = [sys.executable, "-m", "tasks.harness.runner", str(run_dir), str(os.getpid())]
    with (run_dir / "harness.log").open("wb") as out:
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=run_dir)  # noqa: S603
        try:
            code = child.wait(timeout=timeout_s)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    if code != 0:
        tail = "\n".join((run_dir / "harness.log").read_text(errors="replace").splitlines()[-20:])
        raise CommandError(argv, code, tail, fix=f"read {run_dir / 'harness.log'} and mlperf_log_detail.txt there")
    return json.loads((run_dir / STATS).read_text())


def die_with_parent(parent: int) -> None:
    """Have the kernel SIGKILL this process when its parent dies; exit now if it already has."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


if __name__ == "__main__":
    if len(sys.argv) > 2:
        die_with_parent(int(sys.argv[2]))
    run_in_process(Path(sys.argv[1]))
