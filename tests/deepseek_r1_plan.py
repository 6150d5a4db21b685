"""A minimal DeepSeek-R1 plan (one 8-GPU node, Offline and Server, vLLM), as tests write it where the shipped
deepseek-r1-sglang.yaml is not needed: its inputs named as that plan names them (the data sets on MLCommons'
storage, the checkpoint and LiveCodeBench release_v1 at the round's pins, the MATH-500 grader from GitHub)."""

from __future__ import annotations

from typing import Any

DATA = "/mnt/mlperf/data/deepseek-r1"
URI = "https://inference.mlcommons-storage.org/metadata/deepseek-r1-datasets-fp8-eval.uri"   # the README's
FILES = ("mlperf_deepseek_r1_dataset_4388_fp8_eval.pkl", "mlperf_deepseek_r1_calibration_dataset_500_fp8_eval.pkl")


def plan(**overrides: Any) -> dict[str, Any]:
    data = {
        "name": "deepseek-r1-minimal", "round": "v6.1", "division": "closed", "profile": "submission",
        "submitter": "Podium",
        "systems": [{"name": "h200x8", "nodes": 1, "description": {
            "accelerator_model_name": "NVIDIA H200", "accelerators_per_node": "8",
            "accelerator_memory_capacity": "141 GB"}}],
        "benchmarks": [{
            "benchmark": "deepseek-r1", "system": "h200x8",
            "engine": {"name": "vllm", "launcher": "local", "options": {
                "version": "0.11.0", "tensor_parallel_size": 8, "max_model_len": 23140}},
            "model": {"name": "deepseek-r1", "source": "/mnt/mlperf/models/DeepSeek-R1", "weight_data_types": "fp8"},
            "dataset": {"performance": f"{DATA}/{FILES[0]}", "accuracy": f"{DATA}/{FILES[0]}",
                        "lcb_tests": f"{DATA}/livecodebench_tests.jsonl",
                        "math_grader": "/mnt/mlperf/tools/prm800k"},
            "fetch": {"/mnt/mlperf/models/DeepSeek-R1": {"repo": "deepseek-ai/DeepSeek-R1"},
                      DATA: {"mlcommons_uri": URI},
                      f"{DATA}/livecodebench_tests.jsonl": {"livecodebench": "release_v1"},
                      "/mnt/mlperf/tools/prm800k": {"github": "openai/prm800k"}},
            "generation": {"max_tokens": 20000},
            "scenarios": {"Offline": {"target_qps": 8, "max_concurrency": 512},
                          "Server": {"target_qps": 5, "max_concurrency": 512}}}],
        "storage": {"bucket": "mlperf-submissions", "prefix": "runs"},
    }
    data.update(overrides)
    return data
