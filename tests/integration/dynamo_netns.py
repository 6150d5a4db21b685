"""Runs inside a fresh network namespace (`unshare -n`): the Dynamo mocker workers listen on 0.0.0.0, so this whole
deployment and the load that drives it live where nothing else can reach.

    unshare -n python -m tests.integration.dynamo_netns SPEC.json      (from the repository root)

SPEC.json names the dynamo interpreter, the model, the data set and a work folder; the script brings up loopback,
launches frontend + prefill mocker + decode mocker with the dynamo backend and the local launcher, records what the
frontend and the workers report, runs a loadgen Offline run through the harness, sampled as every measured run
(tasks.serving.telemetry: the frontend's and each worker's own metrics), then keeps the deployment under load, sampled
the same way into `load/`, until the decode mocker's KV gauge moves (`kv_under_load`), stops everything and writes
`result.json` into the work folder.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from pathlib import Path

import httpx

LOAD_STREAMS = 8        # requests kept in flight at the frontend while the KV gauge is watched
KV_DEADLINE_S = 90.0    # the mocker publishes its gauges on its own cadence, later on a busy machine


def kv_under_load(endpoint, work: Path) -> dict:
    """Keep LOAD_STREAMS long completions in flight at the frontend, sampled as a run is (the workers' own pages,
    every 0.1 s, into `work`/telemetry.jsonl), until a sample has the decode worker's KV use above 0 or
    KV_DEADLINE_S pass; what the load did."""
    from tasks.serving import telemetry

    stop, lock = threading.Event(), threading.Lock()
    done = {"completed": 0, "errors": []}

    def load() -> None:
        with httpx.Client(base_url=endpoint.base_url, timeout=60) as http:
            while not stop.is_set():
                try:
                    http.post("/v1/completions", json={"model": "tiny", "prompt": list(range(1, 65)),
                                                       "max_tokens": 256}).raise_for_status()
                    with lock:
                        done["completed"] += 1
                except httpx.HTTPError as e:
                    with lock:
                        done["errors"].append(f"{type(e).__name__}: {e}")

    def moved(sampler) -> bool:
        return any(x.get("workers", {}).get("decode-0", {}).get("kv_cache", 0) > 0 for x in list(sampler.lines)
                   if x["kind"] == "sample")

    began = time.monotonic()
    threads = [threading.Thread(target=load, daemon=True) for _ in range(LOAD_STREAMS)]
    with telemetry.sampling(work, endpoint, "dynamo", interval_s=0.1) as sampler:
        for t in threads:
            t.start()
        while not moved(sampler) and time.monotonic() - began < KV_DEADLINE_S:
            time.sleep(0.1)
        stop.set()
        for t in threads:
            t.join(timeout=70)
    return {**done, "errors": done["errors"][:5], "waited_s": round(time.monotonic() - began, 1)}


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
        result["kv_under_load"] = kv_under_load(endpoint, work / "load")
    finally:
        where.stop(deployment)
    result["left"] = [p.name for p in (work / "pids").glob("*.json")]
    (work / "result.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
