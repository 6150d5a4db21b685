"""Request builders: each benchmark's API, prompt form and the sampling settings its reference fixes."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pandas as pd
import pytest

from submission.base.errors import PlanError
from submission.rules.generation import benchmark_generation, reference_generation
from tasks.datasets.requests import ProductMetadata, build_requests
from tasks.engines import Endpoint
from tasks.harness.client import CompletionClient
from tests.unit.test_datasets import _png, gpt_oss_parquet, shopify_parquet


def test_gpt_oss_performance_and_accuracy_settings(tmp_path: Path) -> None:
    data = gpt_oss_parquet(tmp_path / "acc.parquet")
    perf = build_requests("gpt-oss-120b", data, "performance")
    acc = build_requests("gpt-oss-120b", data, "accuracy")
    assert perf.path == "/v1/completions" and perf.output == "token_ids"
    assert perf.body(0) == {"prompt": [1, 2, 3], "max_tokens": 10240, "temperature": 1.0, "top_p": 1.0}
    assert acc.body(1) == {"prompt": [4, 5], "max_tokens": 32768, "temperature": 1.0, "top_p": 1.0}
    assert perf.sampling.reasoning_effort == "low" and acc.sampling.reasoning_effort == "high"
    assert "reasoning_effort" not in acc.body(0)   # baked into the pre-tokenized harmony prompt


def test_plan_overrides_only_max_tokens_and_temperature(tmp_path: Path) -> None:
    smoke = build_requests("gpt-oss-120b", gpt_oss_parquet(tmp_path / "a.parquet"), "accuracy", max_tokens=16,
                           temperature=0.0)
    assert smoke.body(0) == {"prompt": [1, 2, 3], "max_tokens": 16, "temperature": 0.0}   # greedy: no top_p


def test_llama_and_deepseek_are_greedy_token_prompts(tmp_path: Path) -> None:
    (tmp_path / "cnn_eval.json").write_text(json.dumps([{"tok_input": [1, 2], "output": "s"}]))
    body = build_requests("llama3.1-8b", tmp_path / "cnn_eval.json", "accuracy").body(0)
    assert body == {"prompt": [1, 2], "max_tokens": 128, "min_tokens": 1, "temperature": 0.0}
    assert build_requests("llama3.1-8b", tmp_path / "cnn_eval.json", "accuracy").sampling.top_k == 1
    pd.DataFrame({"tok_input": [[3]], "output": ["o"]}).to_pickle(tmp_path / "orca.pkl")
    assert build_requests("llama2-70b-99.9", tmp_path / "orca.pkl", "performance").body(0) == {
        "prompt": [3], "max_tokens": 1024, "min_tokens": 1, "temperature": 0.0}
    pd.DataFrame({"tok_input": [[5, 6]], "ground_truth": ["1"], "dataset": ["aime"]}).to_pickle(tmp_path / "ds.pkl")
    assert build_requests("deepseek-r1", tmp_path / "ds.pkl", "accuracy").body(0)["max_tokens"] == 20000


def test_qwen3_vl_chat_request_with_the_original_image(tmp_path: Path) -> None:
    builder = build_requests("qwen3-vl-235b-a22b", shopify_parquet(tmp_path / "s.parquet"), "accuracy")
    assert builder.path == "/v1/chat/completions" and builder.output == "text"
    body = builder.body(0)
    assert {k: v for k, v in body.items() if k != "messages"} == {
        "max_tokens": 150, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.0, "repetition_penalty": 1.0,
        "presence_penalty": 0.0, "frequency_penalty": 0.0}
    system, user = body["messages"]
    assert system["role"] == "system" and '"is_secondhand"' in system["content"]
    assert json.loads(system["content"][system["content"].index("{"):]) == ProductMetadata.model_json_schema()
    text, image = user["content"]
    assert text["type"] == "text" and "Desk lamp" in text["text"] and "<div>brass</div>" in text["text"]
    assert '["Home > Lighting", "Apparel > Shoes"]' in text["text"]
    url = image["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == _png((255, 0, 0))   # not re-encoded, not resized


def test_generation_rules_cover_every_benchmark() -> None:
    from submission.rules import load_rules

    for round_ in ("v6.0", "v6.1"):
        for name in load_rules(round_).benchmarks:
            assert benchmark_generation(name).performance.max_tokens >= 1
    assert reference_generation("qwen3-vl-235b-a22b", "performance") == reference_generation(
        "qwen3-vl-235b-a22b", "accuracy")
    with pytest.raises(PlanError, match="no generation settings for benchmark 'gpt-oss'"):
        benchmark_generation("gpt-oss")


def test_client_adapts_a_body_to_a_text_only_engine(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"<unk>": 0, "hello": 1, "world": 2}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(tmp_path / "tokenizer.json"))
    text_only = Endpoint("http://127.0.0.1:9", "m", accepts_token_ids=False, returns_token_ids=False,
                         tokenizer=str(tmp_path / "tokenizer.json"), drop_fields=frozenset({"top_k", "stream_options"}))
    client = CompletionClient(text_only, max_tokens=4, temperature=0.0, max_concurrency=1)
    body = client.prepare("/v1/completions", {"prompt": [1, 2], "max_tokens": 8, "top_k": 1, "top_p": 1.0})
    assert body == {"model": "m", "prompt": "hello world", "max_tokens": 8, "top_p": 1.0, "stream": True}
    chat = client.prepare("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert chat["messages"][0]["content"] == "hi" and "return_token_ids" not in chat
    ids = Endpoint("http://127.0.0.1:9", "m", accepts_token_ids=True, returns_token_ids=True)
    body = CompletionClient(ids, max_tokens=4, temperature=0.0, max_concurrency=1).prepare(
        "/v1/completions", {"prompt": [1, 2], "max_tokens": 8})
    assert body["prompt"] == [1, 2] and body["return_token_ids"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_smoke_plan_bodies_equal_the_legacy_request(tmp_path: Path) -> None:
    """The smoke flow's requests did not change: the builder's body, prepared for the smoke endpoint, equals what
    the client sent before request builders existed."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"<unk>": 0, "a": 1, "b": 2, "c": 3, "d": 4, "e": 5}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(tmp_path / "tokenizer.json"))
    smoke = Endpoint("http://127.0.0.1:9", "/models/tiny-llama", accepts_token_ids=False, returns_token_ids=False,
                     tokenizer=str(tmp_path / "tokenizer.json"),
                     drop_fields=frozenset({"ignore_eos", "min_tokens", "stream_options"}))
    client = CompletionClient(smoke, max_tokens=16, temperature=0.0, max_concurrency=1)
    builder = build_requests("gpt-oss-120b", gpt_oss_parquet(tmp_path / "perf.parquet"), "performance",
                             max_tokens=16, temperature=0.0)
    for i in range(len(builder)):
        assert client.prepare(builder.path, builder.body(i)) == client.request(builder.prompts.prompts[i])
    assert client.request((1, 2, 3)) == {"model": "/models/tiny-llama", "prompt": "a b c", "max_tokens": 16,
                                         "temperature": 0.0, "stream": True}
