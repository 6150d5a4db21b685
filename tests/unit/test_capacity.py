"""Memory fit and sequence budgets (submission/capacity.py) before any GPU is allocated: the seed's plans as they were
(bf16 Qwen3-VL on TP1/TP2 workers, gpt-oss accuracy runs past max_seq_len) exit 2 from the dry run naming the worker,
the numbers and the fix; the shipped plans fit; staged weights and prompts are read from the files themselves."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from safetensors.numpy import save_file
from typer.testing import CliRunner

from flows.cli import app
from submission import capacity
from submission.plan import parse
from tasks.serving.launch import sizing

PLANS = Path(__file__).parents[2] / "deployments" / "plans"
runner = CliRunner()
GIB = 1024**3


def _dry_run(plan: dict, tmp_path: Path) -> tuple[int, str]:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    result = runner.invoke(app, ["launch", str(path), "--dry-run", "--workspace", str(tmp_path / "ws")])
    return result.exit_code, result.output


def _shipped(name: str) -> dict:
    return yaml.safe_load((PLANS / name).read_text())


def test_the_seeds_bf16_qwen3_vl_does_not_fit_its_gb200_workers(tmp_path: Path) -> None:
    plan = _shipped("qwen3-vl-dynamo-50-50.yaml")
    plan["benchmarks"][0]["model"]["weight_data_types"] = "bf16"   # as the seed's plans declared it
    code, out = _dry_run(plan, tmp_path)
    assert code == 2, out
    assert "prefill            4x2     218.9 GiB" in out and "DOES NOT FIT" in out   # the fit table, then the error
    assert "prefill worker (4 x TP2 x PP1) holds 218.9 GiB of weights per GPU (235B parameters x bf16" in out
    assert "decode worker (8 x TP1 x PP1) holds 437.7 GiB" in out
    assert "of the 167.4 GiB it may use (0.9 of 186.0 GiB)" in out
    assert "model.weight_data_types: nvfp4 (123.1 GiB per GPU)" in out   # the decode worker's fix
    assert "larger prefill tensor_parallel_size (4 fits)" in out


def test_a_max_seq_len_under_the_accuracy_budget_exits_2_naming_both_numbers(tmp_path: Path) -> None:
    plan = _shipped("gpt-oss-120b-trtllm-k8s.yaml")
    plan["benchmarks"][0]["engine"]["options"]["max_seq_len"] = 25776   # the seed's value
    code, out = _dry_run(plan, tmp_path)
    assert code == 2, out
    assert "accuracy runs need 32769 tokens (at least one prompt token + max_tokens 32768), but the engine is " \
           "launched with max_seq_len 25776" in out
    assert "fix: set benchmarks[b200x4-k8s/gpt-oss-120b].engine.options.max_seq_len to at least 32769" in out
    assert "performance" in out and "SHORT" in out


@pytest.mark.parametrize("name", ["qwen3-vl-dynamo-50-50.yaml", "qwen3-vl-dynamo-75-25.yaml",
                                  "gpt-oss-120b-trtllm-k8s.yaml"])
def test_the_shipped_gpu_plans_fit_and_say_so(name: str, tmp_path: Path) -> None:
    code, out = _dry_run(_shipped(name), tmp_path)
    assert code == 0, out
    table = out[out.index("memory fit"):]
    assert "fits" in table and "DOES NOT FIT" not in table and "SHORT" not in table
    assert "sequence budgets" in table and "accuracy" in table


def test_weights_of_a_staged_model_are_its_safetensors_bytes(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    tensors = {"a": np.zeros((1024, 512), np.float16), "b": np.ones((300,), np.float32)}
    save_file(tensors, str(model / "model-00001-of-00002.safetensors"))
    save_file({"c": np.zeros((7, 9), np.int8)}, str(model / "model-00002-of-00002.safetensors"))
    assert capacity.safetensors_bytes(model) == (1024 * 512 * 2 + 300 * 4 + 63, 2)


def _vllm_plan(max_model_len: int, max_tokens: int, data: Path, memory: str = "80 GB") -> dict:
    return {"name": "fit", "round": "v6.1", "division": "open", "profile": "smoke", "submitter": "t",
            "systems": [{"name": "h100", "description": {"accelerator_memory_capacity": memory}}],
            "benchmarks": [{"benchmark": "gpt-oss-120b", "system": "h100",
                            "engine": {"name": "vllm", "options": {"gpus_per_node": 1, "max_model_len": max_model_len}},
                            "model": {"name": "m", "source": "/nowhere/model", "weight_data_types": "mxfp4"},
                            "dataset": {"performance": str(data), "accuracy": str(data)},
                            "generation": {"max_tokens": max_tokens},
                            "scenarios": {"Offline": {"target_qps": 1}}}],
            "compliance": {"run": "never"}, "storage": {"bucket": "b", "embedded": True}}


def test_the_longest_staged_prompt_counts_against_max_model_len(tmp_path: Path) -> None:
    data = tmp_path / "perf.parquet"
    pd.DataFrame({"input_tokens": [[1] * 5, [2] * 700, [3] * 40],
                  "ground_truth": ["a", "b", "c"], "dataset": ["aime25"] * 3}).to_parquet(data)
    plan = parse(_vllm_plan(1024, 400, data))
    sized = sizing(plan, plan.benchmarks[0], datasets={str(data): str(data)}, capacity="80 GB")
    assert [(b.run, b.prompt_max, b.need, b.ok) for b in sized.budgets] == [
        ("performance", 700, 1100, False), ("accuracy", 700, 1100, False)]
    assert f"performance, accuracy runs need 1100 tokens (the longest prompt of {data} (700 tokens) + max_tokens " \
           "400)" in sized.problems[0]
    assert "engine.options.max_model_len to at least 1100" in sized.problems[0]
    fine = parse(_vllm_plan(1100, 400, data))
    assert all(b.ok for b in sizing(fine, fine.benchmarks[0], capacity="80 GB").budgets)   # read from the source


def test_staged_weights_decide_the_fit(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    save_file({"w": np.zeros((3 * GIB // 4,), np.float32)}, str(model / "model.safetensors"))   # 3 GiB of weights
    data = tmp_path / "d.parquet"
    pd.DataFrame({"input_tokens": [[1, 2]], "ground_truth": ["x"], "dataset": ["aime25"]}).to_parquet(data)
    plan = parse(_vllm_plan(2048, 16, data))
    small = sizing(plan, plan.benchmarks[0], model=model, capacity="7 GB")   # 6.3 usable - 4 reserve < 3
    assert small.facts.weight_source.startswith("1 safetensors file(s)")
    assert [round(f.weights / GIB, 3) for f in small.fits] == [3.0] and not small.fits[0].fits
    big = sizing(plan, plan.benchmarks[0], model=model, capacity="8 GB")     # 7.2 - 4 - 3 = 0.2 GiB of KV room
    assert big.fits[0].fits and big.problems == []


def test_gpu_memory_sizes_as_system_descriptions_write_them() -> None:
    assert capacity.gpu_capacity("186 GB") == 186 * GIB
    assert capacity.gpu_capacity("80GiB") == 80 * GIB
    assert capacity.gpu_capacity("1.5 TB") == 1.5 * 1024 * GIB
    assert capacity.gpu_capacity("N/A") is None and capacity.gpu_capacity("unknown") is None


def test_an_unknown_gpu_memory_is_said_not_guessed(tmp_path: Path) -> None:
    plan = copy.deepcopy(_shipped("qwen3-vl-dynamo-75-25.yaml"))
    del plan["systems"][0]["description"]["accelerator_memory_capacity"]
    code, out = _dry_run(plan, tmp_path)
    assert code == 0, out
    assert "memory fit not checked: GPU memory unknown" in out and "accelerator_memory_capacity" in out


def test_a_substitute_model_not_yet_staged_is_not_sized_as_the_reference(tmp_path: Path) -> None:
    """CI ran the GPU acceptance plans' dry run before the tiny model was staged: the tiny Llama (mapped onto
    gpt-oss-120b) was sized as gpt-oss-120b's 116.8B parameters in fp32 and the dry run exited 2."""
    plan = yaml.safe_load((PLANS.parent / "gpu" / "vllm.yaml").read_text())
    model = plan["benchmarks"][0]["model"]
    model["source"] = str(tmp_path / "not-staged")
    model.pop("parameters", None)
    bench = parse(plan).benchmarks[0]
    facts = capacity.model_facts(bench, None)
    assert facts.weight_bytes is None and "model.parameters" in facts.weight_source   # unknown, said so, not guessed
    model["parameters"] = 424832
    assert capacity.model_facts(parse(plan).benchmarks[0], None).weight_bytes == 424832 * 4   # fp32: 4 bytes each
    code, out = _dry_run(plan, tmp_path)
    assert code == 0, out
