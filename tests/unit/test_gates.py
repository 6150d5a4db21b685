"""Acceptance gates: Server/Offline ratio, scaling efficiency, accuracy margin, per-GPU values, regressions."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from submission.checks import gates
from submission.plan import model as plans
from tasks.reporting.gate_inputs import evaluate

SMOKE = Path(__file__).parents[2] / "deployments" / "plans" / "smoke.yaml"


def row(scenario: str, metric: float | None, system: str = "s", bench: str = "b") -> dict:
    return {"system": system, "benchmark": bench, "scenario": scenario, "metric": metric, "unit": "Tokens/s"}


def test_server_offline_ratio() -> None:
    rows = [row("Offline", 1000.0), row("Server", 994.0), row("Interactive", 400.0),
            row("Offline", 100.0, bench="c"), row("Server", 50.0, bench="c"), row("Server", 10.0, bench="no-offline")]
    found = {g.subject: g for g in gates.server_offline(rows, min_ratio=0.9)}
    assert found["s/b/Server"].value == pytest.approx(0.994) and found["s/b/Server"].passed   # the seed: within 0.6 %
    assert found["s/b/Interactive"].passed is None                     # reported, not gated
    assert found["s/c/Server"].passed is False and "podium search" in found["s/c/Server"].detail
    assert "s/no-offline/Server" not in found
    over = gates.server_offline([row("Offline", 100.0), row("Server", 110.0)], min_ratio=0.9)[0]
    assert over.passed is False and "under-measured" in over.detail
    assert gates.server_offline(rows, min_ratio=None)[0].passed is None


def test_scaling_efficiency_math() -> None:
    rows = gates.scaling([(4, 380.0), (1, 100.0), (2, 196.0)], gpus_per_node=8)
    assert [r["nodes"] for r in rows] == [1, 2, 4]
    assert [r["efficiency"] for r in rows] == pytest.approx([1.0, 0.98, 0.95])
    assert [r["linear"] for r in rows] == pytest.approx([100.0, 200.0, 400.0])
    assert rows[2]["per_gpu"] == pytest.approx(380 / 32) and rows[2]["per_node"] == pytest.approx(95.0)
    verdicts = gates.scaling_gates(rows, floor=0.96, subject="x")
    assert [(g.value, g.passed) for g in verdicts] == [(0.98, True), (0.95, False)]
    assert gates.scaling([(2, 150.0), (4, 300.0)])[1]["efficiency"] == pytest.approx(1.0)   # linear from 2 nodes
    assert gates.scaling([(1, 10.0)], None)[0]["per_gpu"] is None


def test_accuracy_margin() -> None:
    rec = SimpleNamespace(mode="accuracy", system="s", benchmark="b", scenario="Offline", accuracy=84.0,
                          accuracy_metric="exact_match", accuracy_pass=True)
    low = SimpleNamespace(**{**vars(rec), "scenario": "Server", "accuracy": 82.0, "accuracy_pass": False})
    stand_in = SimpleNamespace(**{**vars(rec), "scenario": "Interactive", "accuracy": 0.0, "accuracy_pass": None})
    found = gates.accuracy_margin([rec, low, stand_in, SimpleNamespace(mode="performance")],
                                  {("b", "Offline"): 82.2987, ("b", "Server"): 82.2987, ("b", "Interactive"): 80.0},
                                  min_margin=0.5)
    assert len(found) == 2   # a smoke stand-in's score (accuracy_pass None) is reported, not gated
    assert found[0].value == pytest.approx(100 * (84 - 82.2987) / 82.2987, abs=1e-3) and found[0].passed
    assert found[1].passed is False and found[1].value < 0


def test_per_gpu() -> None:
    out = gates.per_gpu([row("Offline", 800.0), row("Offline", 10.0, system="cpu")], {"s": 8, "cpu": 0})
    assert out[0]["per_gpu"] == 100.0 and out[0]["gpus"] == 8
    assert out[1]["per_gpu"] is None and out[1]["gpus"] is None


def test_regression_against_the_previous_run() -> None:
    previous = [row("Offline", 1000.0), row("Server", 900.0), row("Interactive", 10.0)]
    now = [row("Offline", 960.0), row("Server", 800.0), row("Interactive", None)]
    found = {g.subject: g for g in gates.regression(now, previous, 0.05, "run-1")}
    assert found["s/b/Offline"].passed and found["s/b/Offline"].value == pytest.approx(-4.0)
    assert found["s/b/Server"].passed is False and "run-1" in found["s/b/Server"].detail
    assert "s/b/Interactive" not in found
    assert gates.regression(now, None, 0.05) == []


def test_markdown() -> None:
    text = gates.markdown(gates.server_offline([row("Offline", 100.0), row("Server", 50.0)], 0.9))
    assert "## Acceptance gates" in text and "| FAIL |" in text and "1 gate(s) failed." in text
    assert gates.markdown([]) == ""

def test_the_last_scaling_check_joins_the_report(tmp_path: Path) -> None:
    plan = plans.load(SMOKE)
    (tmp_path / "search").mkdir()
    gate = {"gate": "scaling", "subject": "cpu-smoke/gpt-oss-120b Offline @ 2 node(s)", "value": 0.91,
            "bound": ">= 0.95", "passed": False, "detail": ""}
    (tmp_path / "search" / "scaling-cpu-smoke-gpt-oss-120b-Offline.json").write_text(json.dumps({"gates": [gate]}))
    out = evaluate(plan, [{**row("Offline", 10.0), "mode": "performance"}], {}, None, tmp_path)
    assert [g["gate"] for g in out["gates"]] == ["scaling"] and out["failed"] == 1
    assert "nothing to compare with" in out["markdown"]


def test_a_rehearsal_is_not_held_against_the_published_results(tmp_path: Path) -> None:
    """A GB200 system's Offline row is compared with the published GB200 results; the same row of a rehearsal (the
    simulated engine at the rehearsal's own rates) is not: a full-size rehearsal printed "16 % of the best published
    B200 per GPU" in its outcome line."""
    plan = plans.load(SMOKE)
    systems = {"s": {"accelerator_model_name": "NVIDIA GB200", "accelerators_per_node": "4", "number_of_nodes": "1"}}
    records = [{**row("Offline", 20000.0), "benchmark": "gpt-oss-120b", "unit": "Tokens/s", "mode": "performance"}]
    real = evaluate(plan, records, systems, None, tmp_path)
    assert real["published"] and "published" in real["published_line"]
    rehearsal = evaluate(plan.model_copy(update={"name": "rehearsal-" + plan.name}), records, systems, None, tmp_path)
    assert rehearsal["published"] == [] and rehearsal["published_line"] == ""
    assert "published" not in rehearsal["markdown"]
