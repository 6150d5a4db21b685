"""Memory fit and sequence budgets (submission/budget/capacity.py) before any GPU is allocated: the seed's plans as
they were
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
from submission.budget import capacity
from submission.plan.engine_options import parse_options
from submission.plan.model import parse
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
    assert "prefill            4x2     219.5 GiB" in out and "DOES NOT FIT" in out   # the fit table, then the error
    assert "prefill worker (4 x TP2 x PP1) holds 219.5 GiB of weights per GPU (235.7B parameters: all x bf16" in out
    assert "decode worker (8 x TP1 x PP1) holds 439.0 GiB" in out
    assert "of the 171.1 GiB it may use (0.92 of 186.0 GiB)" in out
    assert "model.weight_data_types: nvfp4 (126.0 GiB per GPU)" in out   # the decode worker's fix
    assert "larger prefill tensor_parallel_size (4 fits)" in out


def test_a_max_seq_len_under_the_accuracy_budget_exits_2_naming_both_numbers(tmp_path: Path) -> None:
    plan = _shipped("gpt-oss-120b-trtllm-k8s.yaml")
    plan["benchmarks"][0]["engine"]["options"]["max_seq_len"] = 25776   # the seed's value
    code, out = _dry_run(plan, tmp_path)
    assert code == 2, out
    assert "accuracy runs need 32769 tokens (at least one prompt token + max_tokens 32768), but the engine is " \
           "launched with max_seq_len 25776" in out
    assert "fix: set benchmarks[gb200x4-k8s/gpt-oss-120b].engine.options.max_seq_len to at least 32769" in out
    assert "performance" in out and "SHORT" in out


@pytest.mark.parametrize("name", ["qwen3-vl-dynamo-50-50.yaml", "qwen3-vl-dynamo-75-25.yaml",
                                  "qwen3-vl-dynamo-gb200x4.yaml", "gpt-oss-120b-trtllm-k8s.yaml",
                                  "gpt-oss-120b-vllm-512.yaml", "deepseek-r1-sglang-512.yaml"])
def test_the_shipped_gpu_plans_fit_and_say_so(name: str, tmp_path: Path) -> None:
    code, out = _dry_run(_shipped(name), tmp_path)
    assert code == 0, out
    table = out[out.index("memory fit"):]
    assert "fits" in table and "DOES NOT FIT" not in table and "SHORT" not in table
    assert "sequence budgets" in table and "accuracy" in table


def test_weights_of_a_staged_model_are_its_tensor_bytes_by_part(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    tensors = {"model.layers.0.self_attn.q_proj.weight": np.zeros((1024, 512), np.float16),
               "model.layers.0.mlp.experts.0.up_proj.weight": np.ones((300,), np.float32)}
    save_file(tensors, str(model / "model-00001-of-00002.safetensors"))
    save_file({"lm_head.weight": np.zeros((7, 9), np.int8), "model.norm.weight": np.zeros(5, np.float32)},
              str(model / "model-00002-of-00002.safetensors"))
    facts = capacity.model_facts(parse(_vllm_plan(64, 8, model)).benchmarks[0], model)
    assert facts.parts == {"attention": 1024 * 512 * 2, "experts": 300 * 4, "lm_head": 63, "other": 20}
    assert facts.weight_source == f"2 safetensors file(s) in {model}"


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


def _fit(name: str, **llm_api: object) -> list[capacity.Fit]:
    plan = _shipped(name)
    plan["benchmarks"][0]["engine"]["options"].get("llm_api_options", {}).update(llm_api)
    parsed = parse(plan)
    return sizing(parsed, parsed.benchmarks[0]).fits


def test_vllm_workers_take_vllms_default_gpu_memory_utilization() -> None:
    """vllm 0.31.0 vllm/config/cache.py:103: gpu_memory_utilization defaults to 0.92 (the fit used 0.9)."""
    assert [w.memory_fraction for w in parse_options("vllm", {}).workers()] == [0.92]
    assert {f.worker.memory_fraction for f in _fit("qwen3-vl-dynamo-50-50.yaml")} == {0.92}
    assert parse_options("vllm", {"gpu_memory_utilization": 0.5}).workers()[0].memory_fraction == 0.5


def test_nvfp4_qwen3_vl_counts_its_bf16_parts_and_vllm_splits_every_part_over_tp() -> None:
    """The NVFP4 checkpoint keeps embeddings, lm_head, router and vision tower in BF16 (rules/models.yaml): 126 GiB on
    a TP1 GPU, not 235B x 4.5 bits = 123.1. vLLM shards all of them over TP (VocabParallelEmbedding, ParallelLMHead,
    the vision tower by weights: vllm 0.31.0 config/multimodal.py:205), so a TP2 GPU holds exactly half."""
    rows = {f.worker.name: f for f in _fit("qwen3-vl-dynamo-50-50.yaml")}
    assert round(rows["decode"].weights / GIB, 1) == 126.0
    assert rows["prefill"].weights == pytest.approx(rows["decode"].weights / 2)


def test_trtllm_attention_dp_keeps_attention_and_embeddings_whole_on_every_gpu() -> None:
    """TensorRT-LLM attention DP (Attention tp_size 1, the embedding and lm_head unsplit): gpt-oss-120b at TP4/EP4
    holds its 4.25 GB of BF16 attention, embeddings, lm_head and router on each GPU beside a quarter of the MXFP4
    experts, 18.1 GiB, not 60.7 / 4 = 15.2 (14.4 as the 116.8B x 4.25 bits it used to count)."""
    (dp,) = _fit("gpt-oss-120b-trtllm-k8s.yaml")
    assert round(dp.weights / GIB, 1) == 18.1
    (tp,) = _fit("gpt-oss-120b-trtllm-k8s.yaml", enable_attention_dp=False)
    assert round(tp.weights / GIB, 1) == 15.2


def test_trtllm_attention_dp_keeps_each_sequences_kv_cache_on_one_gpu() -> None:
    """Under attention DP a sequence lives on one rank with all 8 KV heads: 2 x 36 layers x 8 x 64 x 1 byte (fp8) x
    35840 tokens = 1.32 GB per sequence on that GPU, not a quarter of it (0.33 GB)."""
    (dp,) = _fit("gpt-oss-120b-trtllm-k8s.yaml")
    assert dp.kv_min == 2 * 36 * 8 * 64 * 35840 == 1_321_205_760
    (tp,) = _fit("gpt-oss-120b-trtllm-k8s.yaml", enable_attention_dp=False)
    assert tp.kv_min == dp.kv_min / 4
