"""`podium launch PLAN` for real on the smoke plan: stage, build, launch where the plan says, wait until it
generates, report the endpoint, stop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from tests.integration.conftest import write_plan

pytestmark = pytest.mark.integration


def test_launch_serves_then_stops(smoke_store: Path, tmp_path: Path) -> None:
    plan = write_plan(tmp_path / "plan.yaml", smoke_store)
    ws = tmp_path / "ws"
    result = CliRunner().invoke(app, ["launch", str(plan), "--hold", "0", "--workspace", str(ws)])
    assert result.exit_code == 0, result.output
    assert "serving '" in result.output and "at http://127.0.0.1:" in result.output
    [build] = (ws / "builds").iterdir()
    record = json.loads((build / "build.json").read_text())
    assert build.name.startswith("smoke-") and record["engine"] == "smoke" and record["commands"] == []
    assert list((ws / "stage" / "models").iterdir())   # the model was staged first
    assert not list((ws / "pids").glob("*.json"))      # and the engine stopped
    assert [p.name for p in (ws / "launch" / "cpu-smoke-gpt-oss-120b").iterdir()] == ["smoke-server.log"]
