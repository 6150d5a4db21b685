"""Plan copies and the embedded S3 server for the integration suite (its other fixtures are in tests/conftest.py,
shared with tests/faults)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tasks.storage import s3server
from tasks.storage.s3server import S3Server

REPO = Path(__file__).parents[2]
SMOKE = REPO / "deployments" / "plans" / "smoke.yaml"


def write_plan(path: Path, store: Path, **changes: object) -> Path:
    """The smoke plan with its sources pointed at `store`; top-level keys replaced by `changes`."""
    data = yaml.safe_load(SMOKE.read_text())
    bench = data["benchmarks"][0]
    bench["model"]["source"] = str(store / "models" / "tiny-llama")
    bench["dataset"] = {"performance": str(store / "datasets" / "smoke" / "perf_eval_ref.parquet"),
                        "accuracy": str(store / "datasets" / "smoke" / "acc_eval_inputs.parquet"),
                        "compliance": {"TEST07": str(store / "datasets" / "smoke" / "acc_eval_inputs.parquet")}}
    data.update(changes)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real SeaweedFS `weed mini` on 127.0.0.1 for one test module, stopped after its last test."""
    began = time.monotonic()
    srv = s3server.start(tmp_path_factory.mktemp("s3"))
    print(f"weed mini ready in {time.monotonic() - began:.2f} s")
    try:
        yield srv
    finally:
        s3server.stop(srv)


@pytest.fixture(scope="module")
def client() -> Path:
    """The MLCommons endpoints client `make venv-endpoints` installed, checked at the round's pinned commit."""
    from tasks.endpoints.install import DEFAULT_VENV, require_client
    from tests.integration.engines_support import engine_python

    engine_python(DEFAULT_VENV.name, "venv-endpoints")     # make test requires it; a plain pytest skips without it
    return require_client("v6.1")


@pytest.fixture(scope="session", autouse=True)
def _one_prefect_api(prefect_server: None) -> None:
    """Every integration test shares the session's Prefect server, the `podium` commands it starts too."""
