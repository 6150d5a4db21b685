"""Real NVIDIA Dynamo 1.6.1 (ai-dynamo installed with --no-deps, in its own virtualenv): the frontend, a prefill
mocker and a decode mocker with file discovery, launched by the dynamo backend and the local launcher inside their
own network namespace (the mocker listens on 0.0.0.0), driven by a loadgen Offline run from inside that namespace,
whose telemetry holds the frontend's series and each worker's (its system port). The mocker's tokens are random:
this checks plumbing (readiness, P/D registration, token ids, loadgen, metrics), not accuracy.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest

from submission.results.logs import load_run
from tasks.launchers.local import reap_stale
from tasks.serving import telemetry
from tests.integration.engines_support import engine_python, run_driver

pytestmark = [pytest.mark.integration, pytest.mark.engines]
SAMPLES, MAX_TOKENS = 16, 8
QPS = 400   # the mocker at speedup 20 answers ~100 requests/s here: one 440-sample query outlasts the 1 s minimum


def test_dynamo_frontend_prefill_and_decode_mockers(smoke_store: Path, tmp_path: Path) -> None:
    python = engine_python(".venv-dynamo", "venv-dynamo")
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) for a network namespace")
    spec = {"python": str(python), "model": str(smoke_store / "models" / "tiny-llama"), "work": str(tmp_path),
            "data": str(smoke_store / "datasets" / "smoke" / "perf_eval_ref.parquet"), "samples": SAMPLES,
            "max_tokens": MAX_TOKENS, "qps": QPS}
    try:
        returncode, output = run_driver(["unshare", "-n"], "tests.integration.dynamo_netns", spec, tmp_path,
                                        timeout_s=420)
    finally:
        reap_stale(tmp_path / "pids", logging.getLogger("test.dynamo"))   # what a killed run left, if anything
    assert returncode == 0, output[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["version"] == "ai-dynamo 1.6.1"
    # both workers registered with the frontend, each in its role
    components = {(i["component"], i["endpoint"]) for i in result["frontend_health"]["instances"]}
    assert {("prefill", "generate"), ("backend", "generate")} <= components
    assert all(h["endpoints"]["generate"] == "ready" for h in result["worker_health"].values())
    assert result["argv"]["prefill-0"][3:] == ["--model-path", spec["model"], "--model-name", "tiny",
                                               "--disaggregation-mode", "prefill", "--discovery-backend", "file",
                                               "--speedup-ratio", "20"]
    # the mocker's ZMQ listeners on 0.0.0.0 are why this runs in a namespace of its own
    assert any(s.startswith("0.0.0.0:") for s in result["listening"])
    stats = result["stats"]
    assert stats["failed"] == 0 and stats["completed"] >= SAMPLES, stats["errors"]
    assert stats["token_source"] == "engine" and stats["output_tokens"] == stats["completed"] * MAX_TOKENS
    assert stats["engine_token_mismatches"] == 0   # nvext.completion_token_ids agree with usage.completion_tokens
    run = load_run(tmp_path / "run")
    assert run.num_errors == 0 and run.valid, run
    _check_the_workers_were_sampled(telemetry.load(tmp_path / "run" / telemetry.FILE))
    _check_the_kv_gauge_moved_under_load(result["kv_under_load"], telemetry.load(tmp_path / "load" / telemetry.FILE))
    assert result["left"] == []
    for pgid in result["pgids"]:   # every process group the launcher started is gone
        with pytest.raises(ProcessLookupError):
            os.killpg(pgid, 0)


def _check_the_workers_were_sampled(lines: list[dict]) -> None:
    """The frontend's series (and its output tokens/s) and each worker's own, read from its system port: the decode
    mocker's KV use and requests (the vLLM gauges it imitates), the prefill mocker's work handler; both tagged with
    role and node. The workers' values during this short run are read, not judged: the mocker updates its gauges on
    its own cadence, and on a busy machine a 3 s run can end before it has (every worker value 0 while the frontend
    counted 2-5 running); the frontend's own counters show the traffic, and the load after the run moves the KV gauge
    (_check_the_kv_gauge_moved_under_load)."""
    header = lines[0]
    assert [(w["name"], w["role"]) for w in header["workers"]] == [("prefill-0", "prefill"), ("decode-0", "decode")]
    assert all(w["node"] == header["nodes"][0] and w["url"].endswith("/metrics") for w in header["workers"])
    samples = [x for x in lines if x["kind"] == "sample"]
    seen = {name: set().union(*(s.get("workers", {}).get(name, {}) for s in samples)) for name in ("prefill-0",
                                                                                                   "decode-0")}
    assert {"running", "waiting", "kv_cache"} <= seen["decode-0"], seen
    assert {"running", "waiting"} <= seen["prefill-0"], seen
    assert {"running", "waiting", "tokens_per_s"} <= set().union(*(s.get("engine", {}) for s in samples))
    assert max(s.get("engine", {}).get("running", 0) for s in samples) > 0


def _check_the_kv_gauge_moved_under_load(load: dict, lines: list[dict]) -> None:
    """Under the load dynamo_netns keeps in flight until it moves, the decode worker's KV use, sampled as a run's
    is, rises above 0 and stays a fraction. The frontend's running count is judged on the run's own samples
    (_check_the_workers_were_sampled), not here: the load stops once the gauge moves, and on a busy machine the
    gauge, updated on the mocker's own cadence, can move after the last sample that caught a request running (a CI
    run saw every sample of this load at 0 running)."""
    assert load["completed"] > 0 and load["errors"] == [], load
    samples = [x for x in lines if x["kind"] == "sample"]
    kv = [v for x in samples if (v := x.get("workers", {}).get("decode-0", {}).get("kv_cache")) is not None]
    assert kv and max(kv) > 0 and all(0 <= v <= 1 for v in kv), (load, kv)
