"""The staged checkpoint against the plan's model.weight_data_types (submission/budget/checkpoint.py), on small
checkpoints of
each kind written with safetensors: ModelOpt NVFP4 (config.json or the legacy hf_quant_config.json), compressed-tensors
NVFP4, gpt-oss MXFP4 and plain BF16. Before the check, a plan declaring nvfp4 over a BF16 folder was sized at a
quarter of what the engine loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from submission.base.errors import PlanError
from submission.budget import capacity
from submission.plan.engine_options import Worker
from submission.plan.model import parse
from tasks.serving.launch import sizing

MODELOPT = {"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16,
            "exclude_modules": ["lm_head", "model.visual*", "*mlp.gate"]}
COMPRESSED = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
              "config_groups": {"group_0": {"format": "nvfp4-pack-quantized", "targets": ["Linear"],
                                            "weights": {"num_bits": 4, "type": "float", "group_size": 16}}}}


def _nvfp4(name: str, rows: int = 64, cols: int = 64, packed: str = "weight") -> dict[str, torch.Tensor]:
    """One NVFP4 linear: two 4-bit values per byte, one FP8 scale per 16 values, a per-tensor FP32 scale."""
    return {f"{name}.{packed}": torch.zeros(rows, cols // 2, dtype=torch.uint8),
            f"{name}.weight_scale": torch.zeros(rows, cols // 16, dtype=torch.float8_e4m3fn),
            f"{name}.weight_scale_2": torch.zeros((), dtype=torch.float32)}


def _bf16(*names: str) -> dict[str, torch.Tensor]:
    return {f"{n}.weight": torch.zeros(64, 64, dtype=torch.bfloat16) for n in names}


BF16_PARTS = ("model.language_model.embed_tokens", "lm_head", "model.visual.blocks.0.attn.qkv")
EXPERT = "model.language_model.layers.0.mlp.experts.0.gate_proj"
ATTENTION = "model.language_model.layers.0.self_attn.q_proj"


def _checkpoint(folder: Path, kind: str) -> Path:
    """A tiny checkpoint of `kind` in `folder`: config.json plus one safetensors file."""
    config: dict = {"architectures": ["Qwen3VLMoeForConditionalGeneration"], "num_hidden_layers": 1}
    if kind == "modelopt-nvfp4":
        config["quantization_config"] = MODELOPT
        tensors = {**_nvfp4(EXPERT, 512, 512), **_nvfp4(ATTENTION), **_bf16(*BF16_PARTS)}
    elif kind == "legacy-modelopt-nvfp4":   # ModelOpt before 0.31: hf_quant_config.json beside config.json
        folder.mkdir(parents=True)
        (folder / "hf_quant_config.json").write_text(json.dumps({"producer": {"name": "modelopt"}, "quantization": {
            k: v for k, v in MODELOPT.items() if k != "quant_method"}}))
        tensors = {**_nvfp4(EXPERT, 512, 512), **_bf16(*BF16_PARTS)}
    elif kind == "compressed-tensors-nvfp4":
        config["quantization_config"] = COMPRESSED
        tensors = {**_nvfp4(EXPERT, 512, 512, packed="weight_packed"), **_bf16(*BF16_PARTS)}
    elif kind == "mxfp4":   # gpt-oss: U8 blocks of 32 4-bit values with a U8 exponent each
        config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": ["lm_head"]}
        tensors = {"model.layers.0.mlp.experts.gate_up_proj_blocks": torch.zeros(4, 128, 16, 16, dtype=torch.uint8),
                   "model.layers.0.mlp.experts.gate_up_proj_scales": torch.zeros(4, 128, 16, dtype=torch.uint8),
                   **_bf16("model.embed_tokens", "lm_head", "model.layers.0.self_attn.q_proj")}
    elif kind == "bf16":
        tensors = _bf16(EXPERT, ATTENTION, *BF16_PARTS)
    elif kind == "nvfp4-config-over-bf16":   # a quantization_config copied onto BF16 weights
        config["quantization_config"] = MODELOPT
        tensors = _bf16(EXPERT, ATTENTION, *BF16_PARTS)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(folder / "model-00001-of-00001.safetensors"))
    return folder


def _plan(model: Path, declared: str) -> dict:
    return {"name": "ckpt", "round": "v6.1", "division": "closed", "profile": "smoke", "submitter": "t",
            "systems": [{"name": "gb200", "description": {"accelerator_memory_capacity": "186 GB"}}],
            "benchmarks": [{"benchmark": "qwen3-vl-235b-a22b", "system": "gb200",
                            "engine": {"name": "vllm", "options": {"gpus_per_node": 1, "max_model_len": 4096}},
                            "model": {"name": "qwen3-vl-235b-a22b", "source": str(model),
                                      "weight_data_types": declared},
                            "dataset": {"performance": "/nowhere/p.parquet", "accuracy": "/nowhere/p.parquet"},
                            "generation": {"max_tokens": 150}, "scenarios": {"Offline": {"target_qps": 1}}}],
            "compliance": {"run": "never"}, "storage": {"bucket": "b", "embedded": True}}


def _problems(model: Path, declared: str) -> list[str]:
    plan = parse(_plan(model, declared))
    return sizing(plan, plan.benchmarks[0], model=model).problems


@pytest.mark.parametrize(("kind", "declared"), [
    ("modelopt-nvfp4", "nvfp4"), ("legacy-modelopt-nvfp4", "nvfp4"), ("compressed-tensors-nvfp4", "nvfp4"),
    ("modelopt-nvfp4", "fp4"), ("mxfp4", "mxfp4, bf16"), ("bf16", "bf16"), ("bf16", "fp32")])
def test_a_checkpoint_of_the_declared_weight_type_is_accepted(kind: str, declared: str, tmp_path: Path) -> None:
    assert _problems(_checkpoint(tmp_path / kind, kind), declared) == []


@pytest.mark.parametrize(("kind", "declared", "says"), [
    ("bf16", "nvfp4", "its quantization config says unquantized and its tensors bf16 (100% BF16 of the bytes, 16.00 "
                      "bits per parameter)"),
    ("modelopt-nvfp4", "bf16", "its quantization config says nvfp4 and its tensors nvfp4"),
    ("mxfp4", "nvfp4", "its quantization config says mxfp4 and its tensors mxfp4"),
    ("nvfp4-config-over-bf16", "nvfp4", "its quantization config says nvfp4 and its tensors bf16")])
def test_a_checkpoint_that_contradicts_the_declared_type_is_refused(kind: str, declared: str, says: str,
                                                                    tmp_path: Path) -> None:
    folder = _checkpoint(tmp_path / kind, kind)
    problems = _problems(folder, declared)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"benchmarks[gb200/qwen3-vl-235b-a22b].model.weight_data_types: the plan declares "
                                  f"{declared!r}, but the checkpoint in {folder} is not {declared}: {says}")
    assert f"fix: point benchmarks[gb200/qwen3-vl-235b-a22b].model.source at a {declared} checkpoint" in problems[0]
    with pytest.raises(PlanError, match=r"model\.weight_data_types: the plan declares"):
        capacity.require(problems)


def test_staged_weights_count_each_part_as_stored_and_shard_it_by_the_engines_rule(tmp_path: Path) -> None:
    """After staging the fit reads the tensors: NVFP4 experts (64 x 256 U8 + 64 x 32 FP8 scales + 4 bytes per
    linear) and BF16 embeddings, lm_head and vision tower at 2 bytes a value; TRT-LLM attention DP keeps the
    non-expert parts whole on each GPU."""
    folder = _checkpoint(tmp_path / "ckpt", "modelopt-nvfp4")
    facts = capacity.model_facts(parse(_plan(folder, "nvfp4")).benchmarks[0], folder)
    bf16 = 64 * 64 * 2
    assert facts.parts == {"experts": 512 * 256 + 512 * 32 + 4, "attention": 64 * 32 + 64 * 4 + 4,
                           "embeddings": bf16, "lm_head": bf16, "vision": bf16}
    dp = Worker("server", 1, 4, 1, 1.0, None, "options.max_seq_len", attention_dp=True)
    whole = sum(facts.parts.values()) - facts.parts["experts"] - facts.parts["vision"]
    assert capacity.weights_per_gpu(facts.parts, dp) == whole + (facts.parts["experts"] + facts.parts["vision"]) / 4
