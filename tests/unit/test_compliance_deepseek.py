"""TEST06 on DeepSeek-R1: the rules run it (and only it) in every scenario a DeepSeek-R1 plan measures; on real loadgen
TEST06 runs of each scenario's loadgen configuration (deepseek-r1 Offline and Server, deepseek-r1-interactive for
Interactive) Podium's verdict and the official run_verification.py's stand side by side and agree; the EOS id comes
from the served model folder (the synthetic DeepSeek-R1 stand-in's generation_config.json)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from submission.results.runs import RunSpec
from submission.rules import load_rules
from tasks.compliance import AuditJob, audit, required_tests
from tasks.compliance.official_scripts import run_official
from tasks.compliance.test06 import eos_token_ids
from tasks.rehearsal.data import build
from tests.loadgen_fake import default_user_conf, run_fake

RULES = load_rules("v6.1")
BENCH = RULES.benchmark("deepseek-r1")
TOTAL, TOKENS = 16, 8


def test_test06_is_deepseek_r1s_audit_in_every_scenario() -> None:
    assert tuple(required_tests(RULES, "deepseek-r1")) == ("TEST06",)
    assert {name: BENCH.loadgen_model_for(name) for name in BENCH.scenarios} == {
        "Offline": "deepseek-r1", "Server": "deepseek-r1", "Interactive": "deepseek-r1-interactive"}


@pytest.fixture(scope="module")
def eos(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, ...]:
    built = build("deepseek-r1", tmp_path_factory.mktemp("deepseek"), scale=0.005)
    return eos_token_ids(Path(built.plan["model.source"]))


def _job(scenario: str, run: Path, eos: tuple[int, ...], src: Path) -> AuditJob:
    model = BENCH.loadgen_model_for(scenario)
    spec = RunSpec(
        plan="unit", profile="smoke", round="v6.1", system="sys", benchmark="deepseek-r1", scenario=scenario,
        mode="performance", loadgen_model=model, loadgen_scenario=BENCH.scenario(scenario).loadgen_scenario,
        user_conf=tuple(tuple(line.split(" = ")) for line in default_user_conf(model, TOTAL)),
        dataset=str(run / "dataset"), dataset_sha256="-", model_sha256="-", engine="fake", max_tokens=TOKENS,
        temperature=0.0, max_concurrency=1, audit="TEST06",
        audit_config=audit("TEST06").config_lines(RULES, "deepseek-r1", None))
    return AuditJob(spec=spec, eos_token_ids=eos, inference_src=str(src))


@pytest.mark.parametrize("scenario", ["Offline", "Server", "Interactive"])
def test_test06_verdicts_podiums_and_the_official_side_by_side(scenario: str, eos: tuple[int, ...],
                                                               inference_src: Path, tmp_path: Path) -> None:
    model, loadgen_scenario = BENCH.loadgen_model_for(scenario), BENCH.scenario(scenario).loadgen_scenario
    run = run_fake(tmp_path / "run", scenario=loadgen_scenario, loadgen_model=model, total_count=TOTAL,
                   tokens_per_sample=TOKENS, audit_config_lines=audit("TEST06").config_lines(RULES, "deepseek-r1",
                                                                                             None))
    job = _job(scenario, run, eos, inference_src)
    assert eos == (257,)   # the stand-in's EOS, as DeepSeek-R1's generation_config.json names its own
    ours = audit("TEST06").verify(run, job)
    copy = tmp_path / "official"
    shutil.copytree(run, copy)
    official = run_official(audit("TEST06"), job, copy)
    assert ours.passed and official.verdict == "PASS" and official.disagreement(ours.passed) is None
    assert f'"--eos_token_id", "{eos[0]}"' in (copy / "official" / "official.log").read_text()
    lines = (copy / "official" / "output" / "TEST06" / "verify_accuracy.txt").read_text().splitlines()
    assert lines == ours.files["verify_accuracy.txt"].splitlines()[:4]   # the same lines, word for word
    # an output that ends in two EOS: Podium fails it; the official script compares the id as text and passes it,
    # and the record names the disagreement
    entries = json.loads((copy / "mlperf_log_accuracy.json").read_text())
    entries[0].update(data=entries[0]["data"] + (eos[0]).to_bytes(4, "little").hex().upper() * 2,
                      token_count=entries[0]["token_count"] + 2)
    (copy / "mlperf_log_accuracy.json").write_text(json.dumps(entries))
    worse = audit("TEST06").verify(copy, job)
    assert not worse.passed and "EOS check pass: False" in worse.files["verify_accuracy.txt"]
    again = run_official(audit("TEST06"), job, copy)
    assert again.verdict == "PASS" and "official run_verification.py says PASS, Podium says FAIL" in \
        again.disagreement(worse.passed)
