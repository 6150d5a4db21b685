"""The great-expectations suite over the results table: passes on good rows, names each planted bad row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from submission.results.runs import RunRecord
from tasks.reporting.expectations import validate, write


def row(scenario: str, mode: str = "performance", **changes: object) -> RunRecord:
    base: dict = {"key": f"{scenario}-{mode}", "system": "cpu-smoke", "benchmark": "gpt-oss-120b",
                  "scenario": scenario, "mode": mode, "run_dir": f"/runs/{scenario}-{mode}"}
    if mode == "performance":
        base |= {"valid": True, "validity": "VALID", "metric": 900.0, "unit": "Tokens/s", "ttft_p99_ms": 120.0,
                 "tpot_p99_ms": 9.0 if scenario == "Interactive" else 40.0}
    else:
        base |= {"valid": None, "validity": None, "accuracy_metric": "exact_match", "accuracy": 100.0,
                 "accuracy_pass": True}
    return RunRecord.model_validate(base | changes)


GOOD = [row(s, m) for m in ("performance", "accuracy") for s in ("Offline", "Server", "Interactive")]


@pytest.fixture(scope="module")
def good_result():
    return validate(GOOD, "v6.1")


def test_good_table_passes(good_result) -> None:
    assert good_result.success, good_result.failures
    assert good_result.failed == 0 and good_result.rows == 6
    # row count, validity, metric present, metric > 0, errors, failures; Server + Interactive TTFT/TPOT;
    # per scenario: accuracy reported, exact_match floor, TOKENS_PER_SAMPLE upper limit
    assert good_result.evaluated == 6 + 4 + 3 * 3


def test_planted_bad_rows_fail_by_name(tmp_path: Path) -> None:
    bad = [r for r in GOOD if (r.scenario, r.mode) not in {("Interactive", "performance"), ("Server", "accuracy")}]
    bad += [row("Interactive", tpot_p99_ms=41.5, validity="INVALID", valid=False),
            row("Server", "accuracy", accuracy=50.0, accuracy_pass=False),
            row("Offline", key="again", metric=None)]
    result = validate(bad, "v6.1")
    assert not result.success
    failed = {f.check: f for f in result.failures}
    assert set(failed) == {"every performance run is VALID", "every performance run has a metric",
                           "gpt-oss-120b Interactive TPOT p99 <= 15 ms", "gpt-oss-120b Server exact_match >= 82.2987"}
    tpot = failed["gpt-oss-120b Interactive TPOT p99 <= 15 ms"]
    assert tpot.values == [41.5] and tpot.runs == ["cpu-smoke/gpt-oss-120b/Interactive/performance"]
    assert failed["gpt-oss-120b Server exact_match >= 82.2987"].runs == ["cpu-smoke/gpt-oss-120b/Server/accuracy"]
    assert failed["every performance run is VALID"].values == ["INVALID"]
    stored = json.loads(write(result, tmp_path).read_text())
    assert stored["success"] is False and len(stored["failures"]) == 4
    assert "TPOT p99 <= 15 ms" in result.markdown()


def test_empty_table_fails() -> None:
    result = validate([], "v6.1")
    assert not result.success
    assert [f.check for f in result.failures] == ["at least one result row"]


def test_bounds_follow_the_round(good_result) -> None:
    """The Server TPOT limit is 80 ms in the rules: 79 passes, 81 fails (nothing hard-coded in the suite)."""
    near = [r for r in GOOD if (r.scenario, r.mode) != ("Server", "performance")]
    assert validate([*near, row("Server", tpot_p99_ms=79.0)], "v6.1").success
    result = validate([*near, row("Server", tpot_p99_ms=81.0)], "v6.1")
    assert [f.check for f in result.failures] == ["gpt-oss-120b Server TPOT p99 <= 80 ms"]


def test_a_smoke_plans_relaxed_latency_bound_is_the_data_checks_bound() -> None:
    """The smoke-vlm plan judges Interactive by its `latency_ms` (a named deviation): the data check says the same."""
    qwen = row("Interactive", benchmark="qwen3-vl-235b-a22b", ttft_p99_ms=None, tpot_p99_ms=None,
               latency_p99_ms=3560.0)
    [failure] = validate([qwen], "v6.1").failures
    assert failure.check == "qwen3-vl-235b-a22b Interactive latency p99 <= 1500 ms"
    assert validate([qwen], "v6.1", {("qwen3-vl-235b-a22b", "Interactive"): {"latency": 12000.0}}).success
