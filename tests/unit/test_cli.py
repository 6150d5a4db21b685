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


def test_setup_without_a_server_says_so_in_one_line(tmp_path: Path, monkeypatch) -> None:
    """`podium setup` needs a Prefect server: with none set, or one that does not answer, one `error:` line and its
    fix, no traceback, no temporary server."""
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "home"))   # no profile that sets an API URL
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    unset = runner.invoke(app, ["setup"])
    assert unset.exit_code == 1 and unset.output.startswith("error: PREFECT_API_URL is not set")
    assert "export PREFECT_API_URL=" in unset.output and "Traceback" not in unset.output
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")   # the discard port: nothing listens
    down = runner.invoke(app, ["setup"])
    assert down.exit_code == 1 and isinstance(down.exception, SystemExit), down.exception   # not a traceback
    assert down.output.startswith("error: no Prefect server answers at http://127.0.0.1:9/api"), down.output
    assert len(down.output.strip().splitlines()) == 2   # the error and its fix
    assert not (tmp_path / "home" / "prefect.db").exists()
