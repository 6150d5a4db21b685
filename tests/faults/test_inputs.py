"""tasks/ops/inputs.py, among the checks `podium run` and `podium preflight` make before anything starts: the
positive side (the bad side is test_bad_plans.py, through the CLI)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from submission.plan import model as plans
from tasks.ops.inputs import input_problems

pytestmark = [pytest.mark.faults]

SMOKE = Path(__file__).parents[2] / "deployments" / "plans" / "smoke.yaml"


def _plan(tmp_path: Path, storage: dict) -> plans.Plan:
    data = yaml.safe_load(SMOKE.read_text())
    bench = data["benchmarks"][0]
    (tmp_path / "model").mkdir()
    (tmp_path / "set.parquet").write_bytes(b"")
    bench["model"]["source"] = str(tmp_path / "model")
    bench["dataset"] = {"performance": str(tmp_path / "set.parquet"), "accuracy": "s3://bucket/acc.parquet",
                        "compliance": {"TEST07": str(tmp_path / "set.parquet")}}
    data["storage"] = storage
    return plans.parse(data)


def test_credentials_from_the_environment_or_a_profile_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    external = _plan(tmp_path, {"bucket": "b", "endpoint_url": "http://127.0.0.1:9"})
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    [problem] = input_problems(external)
    assert "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in str(problem)
    (tmp_path / "e").mkdir()
    embedded = _plan(tmp_path / "e", {"bucket": "b", "embedded": True})
    assert input_problems(embedded) == []   # embedded: the server's own keys
    (tmp_path / "credentials").write_text("[podium]\naws_access_key_id = AK\naws_secret_access_key = SK\n")
    monkeypatch.setenv("AWS_PROFILE", "podium")
    assert input_problems(external) == []   # a profile is enough
    monkeypatch.delenv("AWS_PROFILE")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AK")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "SK")
    assert input_problems(external) == []   # so are the two variables
