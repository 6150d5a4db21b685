"""The `podium` command at its edge: exit codes, messages, nothing started on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from flows.cli import app

SMOKE = Path(__file__).parents[2] / "deployments" / "plans" / "smoke.yaml"
runner = CliRunner()


def test_bad_plan_exits_2_and_starts_nothing(tmp_path: Path) -> None:
    data = yaml.safe_load(SMOKE.read_text())
    data["benchmarks"][0]["scenarios"]["Server"] = {"min_query_count": 10}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    ws = tmp_path / "ws"
    result = runner.invoke(app, ["run", str(bad), "--workspace", str(ws)])
    assert result.exit_code == 2
    assert "benchmarks.0.scenarios.Server.target_qps is required" in result.output
    assert "Traceback" not in result.output
    assert not ws.exists()


def test_missing_plan_file(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", str(tmp_path / "nope.yaml"), "--workspace", str(tmp_path / "ws")])
    assert result.exit_code == 2 and "cannot read the plan" in result.output


def test_check_empty_tree_fails(tmp_path: Path) -> None:
    result = runner.invoke(app, ["check", str(tmp_path), "--round", "v6.1"])
    assert result.exit_code == 1
    assert "empty-tree" in result.output


def test_check_json(tmp_path: Path) -> None:
    result = runner.invoke(app, ["check", str(tmp_path), "--json"])
    report = json.loads(result.output)
    assert result.exit_code == 1 and report["ok"] is False
    assert report["findings"][0]["rule"] == "empty-tree" and report["findings"][0]["fix"]


def test_check_unknown_round(tmp_path: Path) -> None:
    result = runner.invoke(app, ["check", str(tmp_path), "--round", "v7.0"])
    assert result.exit_code == 2 and "no rules for round 'v7.0'" in result.output
