"""The external engine: an OpenAI-compatible endpoint someone else started (here the smoke engine, started by the
session fixture). Podium probes it, benchmarks it with a real loadgen run, and never starts or stops it."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from submission.base.errors import LaunchError
from submission.results.logs import load_run
from tasks.engines import Endpoint, backend
from tasks.harness import runner
from tasks.launchers import launched, launcher
from tests.integration.engines_support import offline_spec

pytestmark = pytest.mark.integration
LOG = logging.getLogger("test.external")


def _options(server: Endpoint, smoke_store: Path) -> dict:
    return {"base_url": server.base_url, "served_model_name": server.model, "version": "transformers (smoke)",
            "tokenizer": str(smoke_store / "models" / "tiny-llama" / "tokenizer.json"),
            "drop_fields": ["ignore_eos", "min_tokens", "stream_options"]}


def test_probed_and_benchmarked_never_started_nor_stopped(smoke_server: Endpoint, smoke_store: Path,
                                                          tmp_path: Path) -> None:
    options = _options(smoke_server, smoke_store)
    where = launcher("local", state_dir=tmp_path / "pids")
    with launched(backend("external"), options, smoke_store / "models" / "tiny-llama", where, tmp_path / "logs",
                  LOG, timeout_s=60) as endpoint:
        assert endpoint.base_url == smoke_server.base_url and not endpoint.returns_token_ids
        data = smoke_store / "datasets" / "smoke" / "perf_eval_ref.parquet"
        stats = runner.run(offline_spec(data, "performance", samples=16, max_tokens=8, engine="external", qps=40),
                           endpoint, tmp_path / "run", timeout_s=300)
    assert not (tmp_path / "pids").exists() and not (tmp_path / "logs").exists()   # nothing was started
    assert stats["failed"] == 0 and stats["completed"] >= 16 and stats["token_source"] == "re-tokenized text"
    assert load_run(tmp_path / "run").num_errors == 0
    assert httpx.get(f"{smoke_server.base_url}/health", timeout=10).status_code == 200   # still serving


def test_an_endpoint_that_never_answers_is_named(smoke_server: Endpoint, smoke_store: Path) -> None:
    options = {**_options(smoke_server, smoke_store), "served_model_name": "not-this-model"}
    with pytest.raises(LaunchError, match=r"(?s)did not pass /v1/models within 2 s; last: HTTP 200.*"
                                          r"Podium never starts an external"):
        backend("external").attach(options, timeout_s=2)
