"""Podium's engines answer the official MLCommons endpoints client: the real `inference-endpoint` of
`.venv-endpoints` (`make venv-endpoints`) runs `benchmark offline` with streaming on and off against the simulated
engine (text prompts) and the smoke VLM engine (the client's own Qwen3-VL requests, built by its
`shopify_product_catalogue::q3vl` preset: a system prompt, product text and a PNG data URL), tokenizer by local path
and the hub off. Every sample must succeed, and both modes must carry the same answers."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tasks.endpoints import dataset
from tasks.endpoints.config import CLIENT_DATASETS
from tasks.endpoints.install import DEFAULT_VENV
from tasks.endpoints.runner import OFFLINE_ENV
from tasks.engines import backend
from tasks.launchers import launched, launcher
from tests.integration.engines_support import run_group, simulated_engine

pytestmark = pytest.mark.integration
SAMPLES, MAX_TOKENS = 4, 4
# The client's predefined Shopify data set, in its own layout under its working folder (tasks.endpoints.dataset).
SHOPIFY = "Shopify/product-catalogue"


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny LLaVA and the VLM smoke products, as `podium dev smoke-assets` builds them."""
    from tasks.engines.smoke import vlm_data, vlm_model

    store = tmp_path_factory.mktemp("endpoints-store")
    model = store / vlm_model.MODEL_NAME
    vlm_model.build(model)
    return {"model": model, "data": vlm_data.build(model, store / "data", count=SAMPLES, max_tokens=MAX_TOKENS)}


def benchmark(client: Path, work: Path, url: str, model: str, dataset: str, streaming: str, tokenizer: Path) -> dict:
    """One `inference-endpoint benchmark offline` run in `work`; its result summary and answers (by sample index)."""
    report = work / f"report-{streaming}"
    argv = [str(client), "benchmark", "offline", "--endpoints", url, "--model", model, "--dataset", dataset,
            "--streaming", streaming, "--tokenizer", str(tokenizer), "--max-output-tokens", str(MAX_TOKENS),
            "--duration", "0", "--workers", "1", "--report-dir", str(report)]
    code, output = run_group(argv, cwd=work, timeout_s=120, env={**os.environ, **OFFLINE_ENV})
    assert code == 0, output[-3000:]
    summary = json.loads((report / "performance" / "result_summary.json").read_text())
    index = json.loads((report / "sample_idx_map.json").read_text())["performance"]
    answers = {}
    for line in (report / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["event_type"] == "sample.complete" and event["data"]:   # a failed sample has no data
            text = event["data"][1]
            answers[index[event["sample_uuid"]]] = "".join(text) if isinstance(text, list) else text
    return {"summary": summary, "answers": answers, "output": output}


def both_modes(client: Path, work: Path, url: str, model: str, dataset: str, tokenizer: Path) -> dict[str, dict]:
    runs = {mode: benchmark(client, work, url, model, dataset, mode, tokenizer) for mode in ("on", "off")}
    for mode, run in runs.items():
        s = run["summary"]
        assert (s["n_samples_issued"], s["n_samples_completed"], s["n_samples_failed"]) == (SAMPLES, SAMPLES, 0), \
            f"streaming {mode}: " + run["output"][-3000:]
        assert sorted(run["answers"]) == list(range(SAMPLES))
    assert runs["on"]["summary"]["ttft"] and not runs["off"]["summary"]["ttft"]   # TTFT only when streamed
    assert runs["on"]["answers"] == runs["off"]["answers"]                        # the same answers either way
    return runs


def test_the_installed_client_is_at_the_pin(client: Path) -> None:
    assert client == DEFAULT_VENV / "bin" / "inference-endpoint"


def test_the_simulated_engine_answers_the_client(client: Path, assets: dict[str, Path], tmp_path: Path) -> None:
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": f"product {i} in a few words"}) + "\n" for i in range(SAMPLES)))
    with simulated_engine() as (_, endpoint):
        runs = both_modes(client, tmp_path, endpoint.base_url, endpoint.model, str(dataset), assets["model"])
    assert all(len(a.split()) == MAX_TOKENS for a in runs["off"]["answers"].values())   # max_completion_tokens held


@pytest.fixture(scope="module")
def vlm_engine(assets: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("endpoints-vlm")
    with launched(backend("smoke-vlm"), {}, assets["model"], launcher("local", state_dir=base / "pids"), base / "logs",
                  logging.getLogger("test.endpoints-vlm"), timeout_s=240) as endpoint:
        yield endpoint.base_url


def test_the_smoke_vlm_engine_answers_the_clients_qwen3_vl_requests(client: Path, assets: dict[str, Path],
                                                                    vlm_engine: str, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(assets["data"])
    rows = table.to_pylist()
    rows[1] = {**rows[0], "product_image": rows[1]["product_image"]}   # the same text as row 0, another image
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), tmp_path / "staged.parquet")
    cache = dataset.convert(tmp_path / "staged.parquet", dataset.cache_file(tmp_path, *CLIENT_DATASETS[SHOPIFY]))
    runs = both_modes(client, tmp_path, vlm_engine, str(assets["model"]),
                      f"{cache},name=shopify_product_catalogue::q3vl", assets["model"])
    answers = runs["off"]["answers"]
    assert answers[0] != answers[1]          # the image reached the model: same text, another image, another answer
    assert all(len(a.split()) == MAX_TOKENS for a in answers.values())
