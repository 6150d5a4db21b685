"""The Dynamo argv Podium generates for the seed's Qwen3-VL topology, read by Dynamo 1.6.1's own parsers (the vLLM
worker's, on vLLM's engine arguments, and the frontend's): each worker publishes KV-cache events on its own ZMQ port
and the frontend's KV router consumes them. Nothing is launched (no GPU here)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.integration.engines_support import engine_python

pytestmark = [pytest.mark.integration, pytest.mark.engines]
REPO = Path(__file__).parents[2]


def test_dynamo_parses_the_workers_kv_events_and_the_kv_router(tmp_path: Path) -> None:
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
        assert w["kv_events"] == {"enabled": True, "publisher": "zmq", "endpoint": f"tcp://*:{w['port']}"}
        assert (w["kv_transfer"], w["max_model_len"]) == ("NixlConnector", 32768)
        assert w["mm_limits"] == {"image": 1, "video": 0, "audio": 0}   # the plan names image only; not 999 videos
    assert {w["tp"] for n, w in workers.items() if n.startswith("prefill")} == {2}
    assert parsed["frontend"] == {"router_mode": "kv", "use_kv_events": True, "http_host": "NODE0_IPV4"}
