"""The acceptance gates of a report against the previous run of the same plan, read back from a real S3 server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from submission.plan import model as plans
from tasks.reporting.gate_inputs import evaluate, previous_results
from tasks.storage import objects as storage
from tasks.storage import s3server

pytestmark = pytest.mark.integration
SMOKE = Path(__file__).parents[2] / "deployments" / "plans" / "smoke.yaml"


@pytest.fixture(scope="module")
def cfg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[storage.StorageConfig]:
    server = s3server.start(tmp_path_factory.mktemp("s3"))
    try:
        config = storage.StorageConfig(endpoint_url=server.endpoint_url, bucket="podium", prefix="runs",
                                       access_key=server.credentials.access_key,
                                       secret_key=server.credentials.secret_key)
        storage.ensure_bucket(config)
        yield config
    finally:
        s3server.stop(server)


def record(scenario: str, metric: float, mode: str = "performance", **extra: object) -> dict:
    return {"system": "cpu-smoke", "benchmark": "gpt-oss-120b", "scenario": scenario, "mode": mode, "metric": metric,
            "unit": "Tokens/s", **extra}


def upload(cfg: storage.StorageConfig, folder: Path, plan: str, run_id: str, records: list[dict],
           manifest: bool = True) -> None:
    run = folder / run_id
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps(records))
    made = storage.put_tree(cfg, run, f"{plan}/{run_id}")
    if manifest:
        storage.put_manifest(cfg, f"{plan}/{run_id}", made)


def test_gates_compare_with_the_newest_finished_run(cfg: storage.StorageConfig, tmp_path: Path) -> None:
    upload(cfg, tmp_path, "smoke", "run-1", [record("Offline", 500.0), record("Server", 300.0)])
    time.sleep(1.1)   # S3 LastModified has one-second resolution
    upload(cfg, tmp_path, "smoke", "run-2", [record("Offline", 1000.0), record("Server", 900.0)])
    time.sleep(1.1)
    upload(cfg, tmp_path, "smoke", "run-3", [record("Offline", 1.0)], manifest=False)   # never finished
    upload(cfg, tmp_path, "other-plan", "run-9", [record("Offline", 5.0)])
    upload(cfg, tmp_path, "smoke", "run-3/members/cpu-smoke-a--gpt-oss-120b", [])   # a fleet member's: not a run
    assert previous_results(cfg, "smoke", "run-now")[0] == "run-2"
    assert previous_results(cfg, "smoke", "run-2")[0] == "run-1"      # the current run is never its own baseline
    assert previous_results(cfg, "nothing-yet", "run-now") is None

    plan = plans.load(SMOKE)   # the smoke plan only reports the Server/Offline ratio; gate it at the default here
    plan = plan.model_copy(update={"gates": plan.gates.model_copy(update={"server_offline_min_ratio": 0.9})})
    now = [record("Offline", 980.0), record("Server", 600.0),
           record("Offline", 0.0, mode="accuracy", accuracy=90.0, accuracy_metric="exact_match", accuracy_pass=True)]
    systems = {"cpu-smoke": {"accelerators_per_node": "4", "number_of_nodes": "2"}}
    out = evaluate(plan, now, systems, previous_results(cfg, "smoke", "run-now"), tmp_path)
    found = {(g["gate"], g["subject"]): g for g in out["gates"]}
    regression = found[("regression", "cpu-smoke/gpt-oss-120b/Server")]
    assert regression["passed"] is False and regression["value"] == pytest.approx(-33.333, abs=1e-3)
    assert found[("regression", "cpu-smoke/gpt-oss-120b/Offline")]["passed"] is True
    ratio = found[("server/offline", "cpu-smoke/gpt-oss-120b/Server")]
    assert ratio["value"] == pytest.approx(600 / 980, abs=1e-4) and ratio["passed"] is False
    assert found[("accuracy margin", "cpu-smoke/gpt-oss-120b/Offline")]["passed"] is True
    assert out["previous_run"] == "run-2" and out["failed"] == 2
    per_gpu = {r["scenario"]: r for r in out["per_gpu"]}
    assert per_gpu["Offline"]["gpus"] == 8 and per_gpu["Offline"]["per_gpu"] == pytest.approx(980 / 8)
    assert "## Acceptance gates" in out["markdown"] and "| 8 | 122.50 |" in out["markdown"]
    assert out["published_line"] == "no published closed v6.1 result for accelerator (none named in the system " \
        "description)"
    assert "Against the published" in out["markdown"]


def test_the_published_gate_against_a_named_accelerator(tmp_path: Path) -> None:
    """A system of 4 GB200 at Crusoe's 50,912.9 tokens/s: 83.2 % of the best published GB200 per GPU, under a
    `published_min_fraction` of 0.9: the gate fails, the line says FAIL, the report shows the table."""
    plan = plans.load(SMOKE)
    plan = plan.model_copy(update={"gates": plan.gates.model_copy(update={"published_min_fraction": 0.9})})
    systems = {"cpu-smoke": {"accelerators_per_node": "4", "number_of_nodes": "1",
                             "accelerator_model_name": "NVIDIA GB200"}}
    out = evaluate(plan, [record("Offline", 50912.9)], systems, None, tmp_path)
    (gate,) = [g for g in out["gates"] if g["gate"] == "published"]
    assert gate["passed"] is False and gate["value"] == pytest.approx(0.8318, abs=1e-4) and "RedHat_Supermicro" in \
        gate["detail"]
    assert out["failed"] == 1
    assert out["published_line"] == "gpt-oss-120b Offline: 83 % of the best published GB200 per GPU FAIL: under 90 %"
    assert "| 83.2% |" in out["markdown"] and "2 of 6" in out["markdown"] and "not an MLPerf metric" in out["markdown"]

