"""The Dynamo argv Podium generates for the seed's Qwen3-VL topology, read by Dynamo 1.6.1's own parsers (the vLLM
worker's, on vLLM's engine arguments, and the frontend's): every worker runs without prefix caching, as the v6.1
README requires, and the frontend's KV router runs load-aware. Nothing is launched (no GPU here)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.integration.engines_support import engine_python

pytestmark = [pytest.mark.integration, pytest.mark.engines]
REPO = Path(__file__).parents[2]


def test_dynamo_parses_workers_without_prefix_caching_and_a_load_aware_router(tmp_path: Path) -> None:
    vllm = engine_python(".venv-vllm", "venv-vllm")
    dynamo = engine_python(".venv-dynamo", "venv-dynamo")
    site = next((dynamo.parent.parent / "lib").glob("python3*/site-packages"))
    out = tmp_path / "parsed.json"
    done = subprocess.run([str(vllm), "-m", "tests.integration.dynamo_argv",
                           str(REPO / "deployments/plans/qwen3-vl-dynamo-75-25.yaml"), str(out)], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": f"{REPO}:{site}"}, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    parsed = json.loads(out.read_text())
    workers = {k: v for k, v in parsed.items() if k != "frontend"}
    assert len(workers) == 10
    for name, w in workers.items():
        assert w["mode"] == name.split("-")[0]   # prefill | decode
        # prefix caching off (v6.1 Qwen3-VL README): vLLM reads it, and no KV events are asked for
        assert w["prefix_caching"] is False and w["port"] is None
        assert w["kv_events"] == {"enabled": False, "publisher": "null", "endpoint": "tcp://*:5557"}
        assert (w["kv_transfer"], w["max_model_len"]) == ("NixlConnector", 32768)
        assert w["mm_limits"] == {"image": 1, "video": 0, "audio": 0}   # the plan names image only; not 999 videos
    assert {w["tp"] for n, w in workers.items() if n.startswith("prefill")} == {2}
    # --load-aware: a KV router that reads no events, credits no prefix overlap and balances active blocks
    assert parsed["frontend"] == {"router_mode": "kv", "use_kv_events": False, "overlap_credit": 0.0,
                                  "assume_kv_reuse": False, "track_active_blocks": True, "http_host": "NODE0_IPV4"}
