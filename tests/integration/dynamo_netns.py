"""Runs inside a fresh network namespace (`unshare -n`): the Dynamo mocker workers listen on 0.0.0.0, so this whole
deployment and the load that drives it live where nothing else can reach.

    unshare -n python -m tests.integration.dynamo_netns SPEC.json      (from the repository root)

SPEC.json names the dynamo interpreter, the model, the data set and a work folder; the script brings up loopback,
launches frontend + prefill mocker + decode mocker with the dynamo backend and the local launcher, records what the
frontend and the workers report, runs a loadgen Offline run through the harness, sampled as every measured run
(tasks.serving.telemetry: the frontend's and each worker's own metrics), stops everything and writes `result.json`
into the work folder.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import httpx


def main(spec_file: Path) -> None:
    from tasks.engines import backend
    from tasks.harness import runner
    from tasks.launchers import launcher, start_ready
    from tasks.serving import telemetry
    from tests.integration.engines_support import listening, loopback_up, offline_spec

    spec = json.loads(spec_file.read_text())
    work = Path(spec["work"])
    loopback_up()
    logging.basicConfig(level=logging.INFO, filename=work / "launch.log")
    log = logging.getLogger("dynamo-netns")
    options = {"python": spec["python"], "worker": "mocker", "discovery": "file", "gpus_per_node": 0,
               "served_model_name": "tiny", "prefill": {"workers": 1}, "decode": {"workers": 1},
               "worker_args": ["--speedup-ratio", "20"]}
    be = backend("dynamo")
    result: dict = {"version": be.version(options)}
    where = launcher("local", state_dir=work / "pids")
    deployment, endpoint = start_ready(be, options, Path(spec["model"]), where, work / "logs", log, timeout_s=90,
                                       build_dir=work / "build")
    try:
        result["endpoint"] = {"base_url": endpoint.base_url, "token_ids_in": endpoint.token_ids_in}
        result["frontend_health"] = httpx.get(f"{endpoint.base_url}/health", timeout=10).json()
        result["worker_health"] = {s.name: httpx.get(f"http://{s.host}:{s.port}/health", timeout=10).json()
                                   for s in deployment.processes if s.role in ("prefill", "decode")}
        result["argv"] = {s.name: list(s.argv) for s in deployment.processes}
        result["pgids"] = [r.popen.pid for r in deployment.running]
        result["listening"] = listening(set(result["pgids"]))
        run = offline_spec(Path(spec["data"]), "performance", samples=spec["samples"], max_tokens=spec["max_tokens"],
                           engine=result["version"], qps=spec["qps"])
        telemetry.INTERVAL_S = 0.25   # a few seconds' run: samples enough to see it
        with telemetry.sampling(work / "run", endpoint, "dynamo", run.harness):
            result["stats"] = runner.run(run, endpoint, work / "run", timeout_s=180)
    finally:
        where.stop(deployment)
    result["left"] = [p.name for p in (work / "pids").glob("*.json")]
    (work / "result.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
