"""`podium launch PLAN` for real: stage the model, build, attach where the plan says, report the endpoint, stop. The
plan's engine is the session's smoke server as an external engine, so this costs no second engine start (the local
launcher itself is tested in test_launcher.py, test_vllm_cpu.py and test_dynamo_mocker.py)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from tasks.engines import Endpoint
from tests.integration.conftest import write_plan

pytestmark = pytest.mark.integration


def test_launch_stages_builds_and_serves(smoke_store: Path, smoke_server: Endpoint, tmp_path: Path) -> None:
    plan = write_plan(tmp_path / "plan.yaml", smoke_store)
    data = yaml.safe_load(plan.read_text())
    data["benchmarks"][0]["engine"] = {"name": "external", "options": {
        "base_url": smoke_server.base_url, "served_model_name": smoke_server.model}}
    plan.write_text(yaml.safe_dump(data))
    ws = tmp_path / "ws"
    result = CliRunner().invoke(app, ["launch", str(plan), "--hold", "0", "--workspace", str(ws)])
    assert result.exit_code == 0, result.output
    assert f"serving {smoke_server.model!r} at {smoke_server.base_url}" in result.output
    [build] = (ws / "builds").iterdir()
    record = json.loads((build / "build.json").read_text())
    assert build.name.startswith("external-") and record["commands"] == [] and record["version"] == "external (unknown)"
    assert list((ws / "stage" / "models").iterdir())   # the model was staged first (its tokenizer serves the harness)
    assert httpx.get(f"{smoke_server.base_url}/health", timeout=10).status_code == 200   # not ours to stop
