"""Download links: the plan's `storage.link_expiry_s` (default 1 h, within SigV4's 7 days), the `podium link` command
a report prints for the plan's storage, and the command's refusals before it signs anything."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from submission.base.errors import PlanError, StorageError
from submission.plan import model as plans
from tasks.storage import links

SMOKE = Path(__file__).parents[2] / "deployments" / "plans" / "smoke.yaml"
TARBALL = "s3://podium/runs/smoke/r1/submission.tar.gz"


@pytest.fixture()
def data() -> dict:
    return yaml.safe_load(SMOKE.read_text())


def test_links_live_an_hour_unless_the_plan_says_otherwise(data: dict) -> None:
    assert plans.parse(data).storage.link_expiry_s == plans.LINK_EXPIRY_S == 3600
    for seconds in (1, 900, 7 * 24 * 3600):
        data["storage"]["link_expiry_s"] = seconds
        assert plans.parse(data).storage.link_expiry_s == seconds


@pytest.mark.parametrize("seconds", [0, -60, 7 * 24 * 3600 + 1])
def test_a_lifetime_outside_sigv4s_range_is_refused(data: dict, seconds: int) -> None:
    data["storage"]["link_expiry_s"] = seconds
    with pytest.raises(PlanError) as e:
        plans.parse(data, "plan.yaml")
    assert f"storage.link_expiry_s: {seconds} s is outside 1..604800" in str(e.value)
    assert "at most 7 days" in str(e.value) and "link_expiry_s: 3600" in str(e.value)   # the fix, by example


def test_the_report_prints_a_command_for_the_plans_storage(data: dict) -> None:
    embedded = plans.parse(data).storage
    assert shlex.split(links.command(embedded, TARBALL, Path("/ws/.podium"))) == [
        "podium", "link", "--embedded", "--workspace", "/ws/.podium", "--expires", "3600", TARBALL]
    data["storage"] = {"bucket": "results", "endpoint_url": "https://s3.example:9000", "region": "eu-west-1",
                       "link_expiry_s": 900}
    remote = plans.parse(data).storage
    odd = "s3://results/runs/a b/report.md"
    assert shlex.split(links.command(remote, odd, Path("/ws"))) == [
        "podium", "link", "--endpoint-url", "https://s3.example:9000", "--region", "eu-west-1", "--expires", "900",
        odd]
    assert [links.lifetime(s) for s in (3600, 900, 7 * 86400, 61)] == ["1 h", "15 min", "7 d", "61 s"]


@pytest.mark.parametrize("url", ["podium/runs/x.tar.gz", "s3://podium", "s3://podium/runs/", "s3:///key"])
def test_a_link_names_one_object(url: str) -> None:
    with pytest.raises(StorageError, match="not the s3:// URL of one object"):
        links.parse(url)
    assert links.parse(TARBALL) == ("podium", "runs/smoke/r1/submission.tar.gz")


def test_the_command_refuses_before_signing(tmp_path: Path) -> None:
    runner = CliRunner()
    for seconds in ("0", str(7 * 24 * 3600 + 1)):   # outside SigV4's range: a usage error, nothing contacted
        out = runner.invoke(app, ["link", "--expires", seconds, TARBALL])
        assert out.exit_code == 2 and "--expires" in out.output, out.output
    out = runner.invoke(app, ["link", "runs/x.tar.gz"])
    assert out.exit_code == StorageError.exit_code and "s3://<bucket>/<key>" in out.output, out.output
    out = runner.invoke(app, ["link", "--embedded", "--workspace", str(tmp_path), TARBALL])
    assert out.exit_code == StorageError.exit_code, out.output
    assert "is not running" in out.output and "podium dev up --s3-only" in out.output
