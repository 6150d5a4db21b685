"""`podium assemble` over two real runs of two plans (the smoke plan and a second one on another system name, Offline
only to keep them short): one from its run folder, one from object storage; the tree checks and packs. Then two
refusals through the CLI and an unfinished publish skipped."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from tasks.storage import objects as storage
from tasks.storage import s3server
from tests.integration.conftest import write_plan

pytestmark = pytest.mark.integration
runner = CliRunner()


def _offline_plan(path: Path, store: Path, name: str, system: str, **changes: object) -> Path:
    """The smoke plan named `name` on `system`, Offline only."""
    write_plan(path, store, name=name, **changes)
    data = yaml.safe_load(path.read_text())
    data["systems"][0]["name"] = data["benchmarks"][0]["system"] = system
    scenarios = data["benchmarks"][0]["scenarios"]
    data["benchmarks"][0]["scenarios"] = {"Offline": scenarios["Offline"]}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def runs(prefect_server: None, smoke_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    from flows.submission import submission

    base = tmp_path_factory.mktemp("curation")
    ws = base / "ws"
    server = s3server.start(ws / "s3")   # the flows publish to it; assemble finds it running in the workspace
    try:
        smoke = _offline_plan(base / "smoke.yaml", smoke_store, "smoke", "cpu-smoke")
        other = _offline_plan(base / "other.yaml", smoke_store, "smoke-b", "cpu-smoke-b",
                              compliance={"run": "never"})
        states = [submission(str(plan), str(ws), return_state=True) for plan in (smoke, other)]
        cfg = storage.StorageConfig(server.endpoint_url, "podium", "runs", "us-east-1",
                                    server.credentials.access_key, server.credentials.secret_key)
        yield {"base": base, "ws": ws, "cfg": cfg, "results": [s.result(raise_on_failure=False) for s in states],
               "states": states}
    finally:
        s3server.stop(server)


def test_two_runs_of_two_plans_make_one_tree(runs: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    assert all(s.is_completed() for s in runs["states"]), [s.message for s in runs["states"]]
    first, second = runs["results"]
    out = runs["base"] / "curated"
    done = runner.invoke(app, ["assemble", "--from", first["run_folder"], "--from", second["s3"], "--out", str(out),
                               "--workspace", str(runs["ws"])])
    assert done.exit_code == 0, done.output
    assert "| cpu-smoke | gpt-oss-120b | Offline | open |" in done.output and "no errors" in done.output
    org = out / "submission" / "open" / "Podium"
    assert sorted(p.name for p in (org / "systems").iterdir()) == ["cpu-smoke-b.json", "cpu-smoke.json"]
    for system in ("cpu-smoke", "cpu-smoke-b"):
        assert (org / "results" / system / "tiny-llama" / "Offline" / "performance" / "run_1").is_dir()
    offline = org / "results" / "cpu-smoke" / "tiny-llama" / "Offline"
    assert {"TEST07", "TEST09"} <= {p.name for p in offline.iterdir()}
    assert len(list((org / "src" / "podium" / "plans").glob("*.yaml"))) == 2
    record = json.loads((out / "curation.json").read_text())
    assert {(c["system"], c["source"], c["run_id"]) for c in record["chosen"]} == {
        ("cpu-smoke", first["run_folder"], first["run_id"]), ("cpu-smoke-b", second["s3"], second["run_id"])}
    assert record["profile"] == "smoke" and (out / "summary.csv").is_file()
    check = runner.invoke(app, ["check", str(out / "submission")])
    assert check.exit_code == 0, check.output
    assert "SMOKE tree: not a valid MLPerf submission" in check.output
    packed = runner.invoke(app, ["package", str(out / "submission"), "--out", str(runs["base"] / "package")])
    assert packed.exit_code == 0, packed.output


def test_refusals_and_an_unfinished_publish(runs: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    first, second = runs["results"]
    edited = runs["base"] / "edited-copy"
    shutil.copytree(first["run_folder"], edited)
    system = edited / "submission" / "open" / "Podium" / "systems" / "cpu-smoke.json"
    system.write_text(json.dumps(json.loads(system.read_text()) | {"hw_notes": "another machine"}))
    refused = runner.invoke(app, ["assemble", "--from", first["run_folder"], "--from", str(edited), "--out",
                                  str(runs["base"] / "refused"), "--workspace", str(runs["ws"])])
    assert refused.exit_code == 2, refused.output
    assert "system 'cpu-smoke' is described differently" in refused.output
    assert first["run_folder"] in refused.output and str(edited) in refused.output
    cfg = runs["cfg"]
    storage.client(cfg).put_object(Bucket=cfg.bucket, Key="runs/smoke-b/unfinished/results.json", Body=b"[]")
    by_name = runner.invoke(app, ["assemble", "--from", "smoke-b", "--out", str(runs["base"] / "by-name"),
                                  "--workspace", str(runs["ws"])])
    assert by_name.exit_code == 0, by_name.output
    assert "s3://podium/runs/smoke-b/unfinished/ skipped: it has no manifest.json" in by_name.output
    record = json.loads((runs["base"] / "by-name" / "curation.json").read_text())
    assert [c["run_id"] for c in record["chosen"]] == [second["run_id"]]
