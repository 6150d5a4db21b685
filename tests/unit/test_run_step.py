"""The one run step of both measuring clients (tasks/run_step.py): each client keeps its task name and its cache key,
so that a run cached before the two step modules became one is found again and not measured twice."""

from __future__ import annotations

from submission.results.runs import RunSpec
from tasks import run_step

QWEN = "qwen3-vl-235b-a22b"
LOADGEN = RunSpec(plan="p", profile="smoke", round="v6.1", system="s", benchmark="gpt-oss-120b", scenario="Server",
                  mode="performance", loadgen_model="gpt-oss-120b", loadgen_scenario="Server",
                  user_conf=(("*.Server.target_qps", "50"),), dataset="d", dataset_sha256="-", model_sha256="-",
                  engine="fake", max_tokens=8, temperature=0.0, max_concurrency=1)
ENDPOINTS = RunSpec(plan="p", profile="submission", round="v6.1", system="s", benchmark=QWEN, scenario="Interactive",
                    mode="performance", harness="endpoints", loadgen_model=QWEN, loadgen_scenario="Server",
                    user_conf=((f"{QWEN}.Server.target_qps", "40"),), dataset="/d.parquet", dataset_sha256="d",
                    model_sha256="m", engine="e", max_tokens=150, temperature=0.7, max_concurrency=512)


def test_each_client_keeps_its_task_name_and_the_cache_keys_it_had() -> None:
    # the keys the two step modules gave these specs before they became one (tasks/harness/step.py and
    # tasks/endpoints/step.py at 8cf1c37), for a work folder at /ws/work
    pinned = {"loadgen": (LOADGEN, "loadgen-4a96671d568da3401b17-c7b3e1975ea9"),
              "endpoints": (ENDPOINTS, "endpoints-91bedf43a0252ef5aef6-c7b3e1975ea9")}
    for client, (spec, key) in pinned.items():
        task = run_step.TASKS[client]
        assert task.name == f"{client}-run"
        assert task.cache_key_fn(None, {"spec": spec, "work_dir": "/ws/work"}) == key
