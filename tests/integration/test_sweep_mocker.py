"""The prefill:decode sweep end to end on the CPU over the Dynamo mocker topology (NVIDIA Dynamo 1.6.1 frontend,
prefill and decode mockers with file discovery, in its own virtualenv): for every split of 3 'GPUs' the flow
launches the deployment, measures Offline, searches the peak Server rate with real loadgen runs, tears it down,
then picks the best split and writes it back as a plan fragment. It runs in a network namespace of its own (the
mocker listens on 0.0.0.0). The mocker's timing is Dynamo's, not known in advance: this checks the sweep, not a
number.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from submission import plan as plans
from submission.engine_options import parse_options
from tests.integration.engines_support import engine_python, run_driver

pytestmark = [pytest.mark.integration, pytest.mark.engines]


def test_sweep_over_the_dynamo_mocker(smoke_store: Path, tmp_path: Path) -> None:
    python = engine_python(".venv-dynamo", "venv-dynamo")
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) for a network namespace")
    options = {"python": str(python), "worker": "mocker", "discovery": "file", "gpus_per_node": 0,
               "served_model_name": "tiny", "worker_args": ["--speedup-ratio", "20"],
               "prefill": {"workers": 1}, "decode": {"workers": 1}}
    data = str(smoke_store / "datasets" / "smoke" / "perf_eval_ref.parquet")
    plan = {"name": "mocker-sweep", "round": "v6.1", "division": "open", "profile": "smoke", "submitter": "Podium",
            "systems": [{"name": "cpu-mocker"}],
            "benchmarks": [{"benchmark": "gpt-oss-120b", "system": "cpu-mocker",
                            "engine": {"name": "dynamo", "options": options, "ready_timeout_s": 120},
                            "model": {"name": "tiny-llama", "source": str(smoke_store / "models" / "tiny-llama")},
                            "dataset": {"performance": data, "accuracy": data},
                            "generation": {"max_tokens": 8, "temperature": 0}, "accuracy": False,
                            "loadgen": {"min_duration_ms": 1000, "performance_sample_count": 32},
                            "scenarios": {"Offline": {"target_qps": 200, "max_concurrency": 256},
                                          "Server": {"target_qps": 10, "min_query_count": 480,
                                                     "max_concurrency": 256}}}],
            "storage": {"bucket": "podium", "embedded": True}}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    plans.load(tmp_path / "plan.yaml")
    spec = {"plan": str(tmp_path / "plan.yaml"), "work": str(tmp_path), "gpus": 3,
            "settings": {"precision": 0.25, "probe_queries": 480, "probe_duration_ms": 1000, "max_probes": 8}}
    returncode, output = run_driver(["unshare", "-n"], "tests.integration.sweep_netns", spec, tmp_path,
                                    timeout_s=900)
    assert returncode == 0, output[-4000:]
    result = json.loads((tmp_path / "result.json").read_text())
    rows = {r["ratio"]: r for r in result["rows"]}
    assert set(rows) == {"67:33", "33:67"}
    for row in rows.values():
        pools = (row["options"]["prefill"]["workers"], row["options"]["decode"]["workers"])
        assert pools == (row["prefill"], row["decode"]) and sum(pools) == 3
        assert row["runs"] >= 2                           # an Offline run and probes, for real, per deployment
    assert result["best"] is not None and result["best"]["confirmed"]
    assert result["best"]["metric_per_gpu"] == max(r["metric_per_gpu"] for r in rows.values() if r["confirmed"])
    fragment = yaml.safe_load(Path(result["fragment"]).read_text())["benchmarks"][0]
    assert fragment["engine"]["name"] == "dynamo"
    parse_options("dynamo", fragment["engine"]["options"])          # the winner is a valid Dynamo topology
    assert fragment["scenarios"]["Server"]["target_qps"] == result["best"]["qps"]
    assert not list((tmp_path / "ws" / "pids").glob("*.json"))     # every deployment was stopped
