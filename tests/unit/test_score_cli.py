"""`podium score`: re-score a log offline, print the metric line, targets and verdict; exit 1 under a target."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from flows.cli import app
from tests.accuracy_logs import write_log
from tests.unit.test_datasets import _png
from tests.unit.test_eval_qwen3_vl import answer

runner = CliRunner()


def _case(tmp_path: Path, good: int, bad: int) -> list[str]:
    n = good + bad
    pq.write_table(pa.table({
        "product_title": ["t"] * n, "product_description": ["d"] * n,
        "potential_product_categories": [["A > B"]] * n,
        "product_image": [{"bytes": _png((9, 9, 9)), "path": None}] * n,
        "ground_truth_category": ["A > B"] * n, "ground_truth_brand": ["b"] * n,
        "ground_truth_is_secondhand": [False] * n}), tmp_path / "data.parquet")
    log = write_log(tmp_path / "log.json", [(i, answer("A > B") if i < good else b"oops") for i in range(n)])
    return ["score", "qwen3-vl-235b-a22b", "--accuracy-log", str(log), "--dataset", str(tmp_path / "data.parquet")]


def test_pass_prints_the_metric_target_and_verdict(tmp_path: Path) -> None:
    out = tmp_path / "accuracy.txt"
    result = runner.invoke(app, [*_case(tmp_path, 4, 0), "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert '{"f1": 1.0}' in result.output
    assert "F1_HIERARCHICAL 1 (target >= 0.782397): PASS" in result.output
    assert result.output.rstrip().endswith("qwen3-vl-235b-a22b Offline (v6.1): PASS")
    assert '{"f1": 1.0}' in out.read_text()


def test_under_the_target_exits_1_with_json(tmp_path: Path) -> None:
    result = runner.invoke(app, [*_case(tmp_path, 3, 1), "--scenario", "Interactive", "--json"])
    assert result.exit_code == 1
    report = json.loads(result.output)
    assert report["passed"] is False and report["metrics"]["F1_HIERARCHICAL"] == 0.75   # 3 of 4 paths right
    assert report["verdict"][0]["target"] == 0.779922 and report["samples"] == 4


def test_bad_input_is_a_plan_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["score", "gpt-oss-120b", "--accuracy-log", str(tmp_path / "none.json"),
                                 "--dataset", str(tmp_path / "none.parquet")])
    assert result.exit_code == 2 and "cannot read the dataset" in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["score", "llama4", "--accuracy-log", "x", "--dataset", "y"])
    assert result.exit_code == 2 and "unknown accuracy evaluator 'llama4'" in result.output
