"""The VLM smoke leg end to end: the tiny LLaVA served by `transformers serve`, the Qwen3-VL request builder sending
product text and PNG data URLs, a real loadgen accuracy run through the harness, then scoring."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from submission.results.logs import load_run, parse_accuracy_log
from submission.results.runs import RunSpec
from tasks.accuracy import score
from tasks.engines import backend
from tasks.harness import runner
from tasks.launchers import launched, launcher

pytestmark = pytest.mark.integration
MAX_TOKENS = 8
SAMPLES = 8


@pytest.fixture(scope="module")
def vlm_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from tasks.engines.smoke import vlm_data as smoke_vlm_data
    from tasks.engines.smoke import vlm_model as smoke_vlm_model

    store = tmp_path_factory.mktemp("vlm-store")
    model = store / "models" / smoke_vlm_model.MODEL_NAME
    first = smoke_vlm_model.build(model)
    again = smoke_vlm_model.build(store / "again" / smoke_vlm_model.MODEL_NAME)
    data = smoke_vlm_data.build(model, store / "datasets", count=SAMPLES, max_tokens=MAX_TOKENS)
    return {"model": model, "data": data, "manifest": first, "manifest_again": again}


def _spec(dataset: Path) -> RunSpec:
    model = "qwen3-vl-235b-a22b"
    return RunSpec(plan="smoke-vlm", profile="smoke", round="v6.1", system="cpu-smoke", benchmark=model,
                   scenario="Offline", mode="accuracy", loadgen_model=model, loadgen_scenario="Offline",
                   user_conf=((f"{model}.*.performance_sample_count_override", str(SAMPLES)),
                              (f"{model}.*.accuracy_sample_count_override", str(SAMPLES))),
                   dataset=str(dataset), dataset_sha256="-", model_sha256="-", engine="smoke-vlm",
                   max_tokens=MAX_TOKENS, temperature=0.0, max_concurrency=2)


@pytest.fixture(scope="module")
def accuracy_run(vlm_store: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    base = tmp_path_factory.mktemp("vlm-run")
    where = launcher("local", state_dir=base / "pids")
    with launched(backend("smoke-vlm"), {}, vlm_store["model"], where, base / "logs",
                  logging.getLogger("test.vlm"), timeout_s=240) as endpoint:
        stats = runner.run(_spec(vlm_store["data"]), endpoint, base / "run", timeout_s=600)
    yield {"dir": base / "run", "stats": stats, "data": vlm_store["data"], "endpoint": endpoint}


def test_tiny_llava_builds_byte_identical(vlm_store: dict[str, Path]) -> None:
    assert vlm_store["manifest"] == vlm_store["manifest_again"]
    assert {"model.safetensors", "processor_config.json", "tokenizer.json"} <= set(vlm_store["manifest"])


def test_loadgen_accuracy_run_through_the_harness(accuracy_run: dict) -> None:
    stats = accuracy_run["stats"]
    assert stats["failed"] == 0 and stats["completed"] == SAMPLES, stats["errors"]
    run = load_run(accuracy_run["dir"])
    assert run.num_errors == 0 and run.settings.accuracy_sample_count == SAMPLES
    entries = parse_accuracy_log(accuracy_run["dir"] / "mlperf_log_accuracy.json")
    assert sorted(e.qsl_idx for e in entries) == list(range(SAMPLES))
    texts = [bytes.fromhex(e.data).decode() for e in entries]
    assert all(len(t.split()) == MAX_TOKENS for t in texts)   # UTF-8 answers, not token ids
    assert len(set(texts)) == SAMPLES   # every product (and image) answered differently
    # Qwen3-VL runs without token latencies, so loadgen logs no token_count; the SUT counted the engine's tokens.
    assert all(e.token_count is None for e in entries)
    assert stats["output_tokens"] == SAMPLES * MAX_TOKENS and stats["engine_token_mismatches"] == 0


def test_served_answers_equal_offline_references(accuracy_run: dict) -> None:
    result = score("smoke-vlm-exact-match", accuracy_run["dir"], accuracy_run["data"], None,
                   benchmark="qwen3-vl-235b-a22b")
    assert result.metrics["exact_match"] == 100.0 and result.samples == SAMPLES
    assert "'exact_match': 100.000" in (accuracy_run["dir"] / "accuracy.txt").read_text()


def test_qwen3_vl_evaluator_scores_the_real_log(accuracy_run: dict) -> None:
    result = score("qwen3-vl-235b-a22b", accuracy_run["dir"], accuracy_run["data"], None,
                   benchmark="qwen3-vl-235b-a22b")
    # The tiny model writes words, not JSON: every answer is unparsable and scores as pad categories.
    assert result.metrics["F1_HIERARCHICAL"] == 0.0
    assert result.notes[0].startswith(f"{SAMPLES} of {SAMPLES} answer(s) did not validate")
    text = (accuracy_run["dir"] / "accuracy.txt").read_text()
    assert json.loads(text.splitlines()[2]) == {"f1": 0.0}
    verdict = result.verdict
    assert verdict is not None and not verdict.passed
    assert verdict.metrics[0].metric == "F1_HIERARCHICAL" and verdict.metrics[0].value == 0.0
