"""A data set on MLCommons' storage with Prefect (the session's test server): where the environment sets no
Cloudflare Access credentials, the `fetch` flow and `podium fetch` read a service token from the Prefect Secret
blocks cf-access-client-id and cf-access-client-secret, send it to the stand-in storage (tests/fake_r2.py) and show it
nowhere: not in the run's logs, its result or the command's output."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from tests.fake_r2 import FakeR2
from tests.integration.test_fetch_flow import _logs

pytestmark = pytest.mark.integration

PLANS = Path(__file__).parents[2] / "deployments" / "plans"
CLIENT = ("0123abcd.access", "cf-secret-planted-b10c")
FILES = {"perf/perf_eval_ref.parquet": b"perf" * 500, "acc/acc_eval_inputs.parquet": b"acc" * 300}
BLOCKS = ("cf-access-client-id", "cf-access-client-secret")


@pytest.fixture()
def guarded(prefect_server: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """The shipped gpt-oss plan's MLCommons source alone, its storage a stand-in that wants the service token."""
    from prefect.blocks.system import Secret

    r2 = FakeR2(client=CLIENT).start()
    r2.publish("gpt-oss-data", FILES)
    for name in ("CF_ACCESS_TOKEN", "CF_ACCESS_CLIENT_ID", "CF_ACCESS_CLIENT_SECRET"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PODIUM_MLCOMMONS_STORAGE_URL", r2.url)
    data = yaml.safe_load((PLANS / "gpt-oss-120b-trtllm-k8s.yaml").read_text())
    data.pop("fetch")
    bench = data["benchmarks"][0]
    bench["fetch"] = {dest: src for dest, src in bench["fetch"].items() if "mlcommons_uri" in src}
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(data))
    for name, value in zip(BLOCKS, CLIENT, strict=True):
        Secret(value=value).save(name, overwrite=True)
    yield plan
    r2.stop()
    for name in BLOCKS:
        with contextlib.suppress(ValueError):
            Secret.delete(name)


def test_the_flow_and_podium_fetch_read_the_service_token_from_secret_blocks_and_show_it_nowhere(
        guarded: Path, tmp_path: Path) -> None:
    from flows.fetch import fetch

    out = tmp_path / "out"
    state = fetch(str(guarded), str(out), return_state=True)
    assert state.is_completed(), state.message
    [done] = state.result()
    assert (done["files"], done["fetched"]) == (3, 3)   # two files and the listing
    dest = out / "mnt/mlperf/data/gpt-oss-120b"
    assert {rel: (dest / rel).read_bytes() for rel in FILES} == FILES
    logs = _logs(state.state_details.flow_run_id, until="each MD5 checked")
    assert any("2 fetched, 0 already there" in line for line in logs), logs
    assert not any(CLIENT[1] in line for line in logs) and CLIENT[1] not in json.dumps(done)

    again = CliRunner().invoke(app, ["fetch", str(guarded), "--dest", str(out)])
    assert again.exit_code == 0, again.output
    assert " 0 fetched, 3 verified in place" in again.stdout and CLIENT[1] not in again.output
    (dest / "acc/acc_eval_inputs.parquet").unlink()
    refetched = CliRunner().invoke(app, ["fetch", str(guarded), "--dest", str(out)])
    assert refetched.exit_code == 0, refetched.output
    assert (dest / "acc/acc_eval_inputs.parquet").read_bytes() == FILES["acc/acc_eval_inputs.parquet"]
    assert CLIENT[1] not in refetched.output
    assert not any(CLIENT[1].encode() in p.read_bytes() for p in out.rglob("*") if p.is_file())
