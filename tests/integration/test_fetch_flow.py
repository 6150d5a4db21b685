"""`podium fetch` with Prefect (the session's test server): the `fetch` flow reads the hub's token from the Prefect
Secret block hf-token when HF_TOKEN is unset and shows its progress as an artifact that ends at 100 %; `podium fetch`
reads the same block where a Prefect server is configured, and a token the hub refuses is named by where it came
from, never printed nor logged."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from tests.fake_hub import FakeHub

pytestmark = pytest.mark.integration

PLANS = Path(__file__).parents[2] / "deployments" / "plans"
COMMIT = "c0ffee" + "1" * 34
MODEL = {"config.json": b'{"model_type": "tiny"}', "model.safetensors": b"w" * 4000}


@pytest.fixture()
def gated(prefect_server: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """A plan fetching one model repository from a hub that wants the token hf_right."""
    from prefect.blocks.system import Secret

    hub = FakeHub()
    hub.add("someone/tiny", COMMIT, MODEL)
    hub.token = "hf_right"
    hub.start()
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    data = yaml.safe_load((PLANS / "gpt-oss-120b-trtllm-k8s.yaml").read_text())
    data.pop("fetch")
    data["benchmarks"][0]["fetch"] = {data["benchmarks"][0]["model"]["source"]: {"repo": "someone/tiny",
                                                                                   "revision": COMMIT}}
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(data))
    yield plan
    hub.stop()
    with contextlib.suppress(ValueError):   # the block a test saved, if it saved one
        Secret.delete("hf-token")


def _logs(run: object, until: str, timeout_s: float = 30.0) -> list[str]:
    """The flow run's log lines on the server, once one holds `until` (they are shipped in batches)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    deadline = time.monotonic() + timeout_s
    while True:
        with get_client(sync_client=True) as client:
            lines = [log.message for log in client.read_logs(log_filter=LogFilter(
                flow_run_id=LogFilterFlowRunId(any_=[run])))]
        if any(until in line for line in lines) or time.monotonic() > deadline:
            return lines
        time.sleep(0.5)


def test_the_flow_reads_the_secret_block_and_ends_its_progress_at_100(gated: Path, tmp_path: Path) -> None:
    from prefect.blocks.system import Secret
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    from flows.fetch import fetch
    from tasks.staging.fetch import hub_token

    plan = gated
    assert hub_token(None, "no-such-block") == (None, "HF_TOKEN")   # no block of that name: no token
    Secret(value="hf_right").save("hf-token", overwrite=True)
    assert hub_token(None, "hf-token") == ("hf_right", "the Prefect Secret block hf-token")
    assert hub_token("hf_env", "hf-token") == ("hf_env", "HF_TOKEN")   # HF_TOKEN wins
    state = fetch(str(plan), str(tmp_path / "out"), return_state=True)
    assert state.is_completed(), state.message
    [done] = state.result()
    assert (done["files"], done["fetched"]) == (2, 2)
    run = state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(
            any_=[run])))
    [progress] = [a for a in artifacts if a.type == "progress"]
    assert progress.data == 100.0 and progress.description == f"podium fetch {plan}"
    logs = _logs(run, until="2 fetched, 0 already there")
    assert any("2 fetched, 0 already there" in line for line in logs), logs
    assert not any("hf_right" in line for line in logs)


def test_podium_fetch_reads_the_secret_block_and_names_it_when_the_hub_refuses_it(gated: Path, tmp_path: Path) -> None:
    from prefect.blocks.system import Secret

    plan = gated
    assert os.environ.get("PREFECT_API_URL")   # the session's server: the CLI reads the block from it
    Secret(value="hf_wrong").save("hf-token", overwrite=True)
    refused = CliRunner().invoke(app, ["fetch", str(plan), "--dest", str(tmp_path / "a")])
    assert refused.exit_code == 2, refused.output
    assert "the token in the Prefect Secret block hf-token was refused" in refused.output
    assert "hf_wrong" not in refused.output
    Secret(value="hf_right").save("hf-token", overwrite=True)
    fetched = CliRunner().invoke(app, ["fetch", str(plan), "--dest", str(tmp_path / "a")])
    assert fetched.exit_code == 0, fetched.output
    assert "2 file(s), 4,022 bytes, 2 fetched" in fetched.stdout
