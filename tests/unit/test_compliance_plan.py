"""Which audits run, with what: audit.config lines from the rules, plan options, and the audit jobs of a benchmark
(tests per scenario folder from the rules, derated Server/Interactive rates, TEST07's own set, reference runs)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from submission.base.errors import PlanError
from submission.plan import model as plans
from submission.results.runs import AuditCheck, AuditRecord, RunRecord, plan_runs
from submission.rules import load_rules
from tasks.compliance import audit, audit_values, required_tests
from tasks.compliance.planning import audit_jobs, derated

RULES = load_rules("v6.1")
SMOKE = Path(__file__).parents[2] / "deployments" / "plans" / "smoke.yaml"


def _parquet(path: Path, rows: int) -> str:
    pq.write_table(pa.table({"input_tokens": pa.array([[5, 6, 7 + i] for i in range(rows)], pa.list_(pa.int32())),
                             "ground_truth": [f"answer {i}" for i in range(rows)]}), path)
    return str(path)


def _smoke(tmp: Path, **changes: object) -> dict:
    data = yaml.safe_load(SMOKE.read_text())
    bench = data["benchmarks"][0]
    perf, acc = _parquet(tmp / "perf.parquet", 32), _parquet(tmp / "acc.parquet", 16)
    bench["dataset"] = {"performance": perf, "accuracy": acc, "compliance": {"TEST07": acc}}
    data.update(changes)
    return data


def _jobs(plan: plans.Plan, tmp: Path, records: list[RunRecord] | None = None, rules=RULES):
    bench = plan.benchmarks[0]
    sources = {bench.dataset.performance, bench.dataset.accuracy, *bench.dataset.compliance.values()}
    datasets = {s: {"path": s, "sha256": f"sha-{Path(s).name}"} for s in sources}
    specs = plan_runs(plan, bench, rules, model_sha256="m", engine="e",
                      dataset_sha256={s: d["sha256"] for s, d in datasets.items()})
    if records is None:
        records = [_record(s) for s in specs]
    model = tmp / "model"
    model.mkdir(exist_ok=True)
    (model / "generation_config.json").write_text(json.dumps({"eos_token_id": [128001, 128009]}))
    jobs, skipped = audit_jobs(plan, bench, rules, specs, records, datasets=datasets, model_dir=str(model),
                               tokenizer=str(model / "tokenizer.json"))
    return specs, jobs, skipped


def _record(spec) -> RunRecord:
    return RunRecord(key=spec.key(), system=spec.system, benchmark=spec.benchmark, scenario=spec.scenario,
                     mode=spec.mode, run_dir=f"/runs/{spec.key()}", valid=True, validity="VALID")


def test_smoke_plan_audits_each_scenario_with_the_rules_tests(tmp_path: Path) -> None:
    plan = plans.parse(_smoke(tmp_path))
    specs, jobs, skipped = _jobs(plan, tmp_path)
    assert not skipped and required_tests(RULES, "gpt-oss-120b") == ("TEST07", "TEST09")
    assert [(j.spec.scenario, j.test) for j in jobs] == [(s, t) for s in ("Offline", "Server", "Interactive")
                                                       for t in ("TEST07", "TEST09")]
    by = {(j.spec.scenario, j.test): j for j in jobs}
    server, interactive = by[("Server", "TEST09")], by[("Interactive", "TEST07")]
    assert server.target_qps == 24.25 and ("gpt-oss-120b.Server.target_qps", "24.25") in server.spec.user_conf
    assert interactive.target_qps == 9.7
    assert ("gpt-oss-120b-interactive.Server.target_qps", "9.7") in interactive.spec.user_conf
    assert by[("Offline", "TEST09")].target_qps is None
    test07, test09 = by[("Offline", "TEST07")], by[("Offline", "TEST09")]
    acc = plan.benchmarks[0].dataset.accuracy
    assert test07.spec.dataset == acc and test07.spec.dataset_sha256 == "sha-acc.parquet"
    assert ("gpt-oss-120b.*.performance_sample_count_override", "16") in test07.spec.user_conf   # the set's size
    assert test09.spec.dataset == plan.benchmarks[0].dataset.performance
    assert audit_values(test07.spec.audit_config)["test07_accuracy_threshold"] == 60.698   # the rules' threshold
    assert audit_values(test09.spec.audit_config)["test09_min_output_tokens"] == 14.4      # the smoke override
    assert any(line.startswith("# SMOKE values") for line in test09.spec.audit_config)
    assert (test07.evaluator, test07.metric, test07.eos_token_ids) == ("smoke-exact-match", "exact_match", ())
    assert len({j.spec.key() for j in jobs} | {s.key() for s in specs}) == len(jobs) + len(specs)
    assert test07.spec.label == "cpu-smoke/gpt-oss-120b/Offline/TEST07"


def test_non_audit_keys_are_those_of_before_audits() -> None:
    plan = plans.load(SMOKE)
    sources = (plan.benchmarks[0].dataset.performance, plan.benchmarks[0].dataset.accuracy)
    spec = plan_runs(plan, plan.benchmarks[0], RULES, model_sha256="m", engine="e",
                     dataset_sha256=dict.fromkeys(sources, "x"))[0]
    before = spec.model_dump(mode="json", exclude={"audit", "audit_config", "harness_workers",
                                                   "guided_decoding", "harness", "lcb_tests", "with_accuracy",
                                                   "client", "math_grader"})   # the fields it had
    assert spec.key() == hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()[:20]
    assert spec.model_copy(update={"audit": "TEST09"}).key() != spec.key()
    assert spec.model_copy(update={"harness_workers": 2}).key() != spec.key()
    assert spec.harness == "loadgen" and spec.model_copy(update={"harness": "endpoints"}).key() != spec.key()
    assert spec.lcb_tests is None and spec.model_copy(update={"lcb_tests": "t.jsonl"}).key() != spec.key()


def test_compliance_follows_the_division_unless_told(tmp_path: Path) -> None:
    open_auto = plans.parse(_smoke(tmp_path, compliance={"run": "auto"}))
    assert not open_auto.audits_enabled and _jobs(open_auto, tmp_path)[1] == []
    closed = _smoke(tmp_path, division="closed", compliance={"run": "auto"})
    closed["benchmarks"][0]["model"]["name"] = "gpt-oss-120b"
    assert plans.parse(closed).audits_enabled
    assert not plans.parse(_smoke(tmp_path, compliance={"run": "never"})).audits_enabled


def test_llama_runs_test06_with_the_models_eos_ids(tmp_path: Path) -> None:
    data = _smoke(tmp_path)
    data["benchmarks"][0] |= {"benchmark": "llama3.1-8b", "scenarios": {"Offline": {"target_qps": 100}}}
    _, jobs, _ = _jobs(plans.parse(data), tmp_path)
    assert [j.test for j in jobs] == ["TEST06"]
    assert jobs[0].eos_token_ids == (128001, 128009)
    assert audit_values(jobs[0].spec.audit_config)["min_query_count"] == 100


def test_reference_runs_for_test01_and_test04(tmp_path: Path) -> None:
    bench = RULES.benchmark("gpt-oss-120b").model_copy(update={"compliance_tests": ("TEST04", "TEST01")})
    rules = RULES.model_copy(update={"benchmarks": {**RULES.benchmarks, "gpt-oss-120b": bench}})
    data = _smoke(tmp_path, compliance={"run": "always", "overrides": {"TEST01": {
        "accuracy_log_sampling_target": 8}}})
    data["benchmarks"][0]["scenarios"] = {"Offline": {"target_qps": 100}}
    plan = plans.parse(data)
    specs, jobs, skipped = _jobs(plan, tmp_path, rules=rules)
    test04, test01 = jobs
    assert test04.reference_performance == f"/runs/{specs[0].key()}" and test04.reference_accuracy is None
    assert test01.reference_accuracy == f"/runs/{specs[1].key()}"
    _, jobs, skipped = _jobs(plan, tmp_path, records=[_record(specs[1])], rules=rules)
    assert jobs == [] and skipped == [
        "cpu-smoke/gpt-oss-120b/Offline/TEST04: not run, the scenario's performance run has no result",
        "cpu-smoke/gpt-oss-120b/Offline/TEST01: not run, the scenario's performance run has no result"]


def test_derating_changes_only_the_server_rate() -> None:
    conf = (("m.Server.target_qps", "25"), ("m.Server.min_duration", "1000"))
    assert derated(conf, "m", 0.97) == ((("m.Server.target_qps", "24.25"), ("m.Server.min_duration", "1000")), 24.25)
    assert derated((("m.Offline.target_qps", "100"),), "m", 0.97) == ((("m.Offline.target_qps", "100"),), None)


def test_audit_config_lines_come_from_the_rules() -> None:
    assert audit("TEST06").config_lines(RULES, "llama3.1-8b")[1:] == tuple(
        RULES.audit("TEST06").config_lines("llama3.1-8b"))
    test04 = audit("TEST04").config_lines(RULES, "gpt-oss-120b")
    assert "*.Offline.performance_issue_same_index = 3" in test04 and "*.Server.mode = 2" in test04
    assert audit_values(test04) == {"mode": 2, "performance_issue_unique": 0, "performance_issue_same": 1,
                                    "performance_issue_same_index": 3}   # the SDXL/wan lines are not for us
    with pytest.raises(PlanError, match="accuracy_log_sampling_target"):
        audit("TEST01").config_lines(RULES, "gpt-oss-120b")
    lines = audit("TEST01").config_lines(RULES, "gpt-oss-120b", {"accuracy_log_sampling_target": 8})
    assert "*.*.accuracy_log_sampling_target = 8" in lines and "SMOKE" in lines[1]
    with pytest.raises(PlanError, match=r"(?s)unknown compliance test 'TEST05'.*did you mean 'TEST0"):
        audit("TEST05")


@pytest.mark.parametrize(("change", "message"), [
    ({"compliance": {"overrides": {"TEST99": {}}}}, "compliance.overrides: unknown test 'TEST99'"),
    ({"compliance": {"overrides": {"TEST09": {"test09_max_tokens": 1}}}},
     "compliance.overrides.TEST09.test09_max_tokens: not a TEST09 audit.config value; did you mean"),
    ({"compliance": {"server_qps_factor": 1.5}}, "compliance.server_qps_factor"),
])
def test_bad_compliance_options(tmp_path: Path, change: dict, message: str) -> None:
    with pytest.raises(PlanError, match=message.replace(".", r"\.")):
        plans.parse(_smoke(tmp_path, **change))


def test_overrides_are_smoke_only(tmp_path: Path) -> None:
    data = _smoke(tmp_path, profile="submission")
    data["benchmarks"][0]["loadgen"] = {}
    for sc in data["benchmarks"][0]["scenarios"].values():   # without the smoke-only latency bounds
        sc.pop("ttft_ms", None), sc.pop("tpot_ms", None)
    with pytest.raises(PlanError, match=r"compliance\.overrides: only the smoke profile may change audit\.config"):
        plans.parse(data)
    del data["compliance"]["overrides"]
    assert plans.parse(data).compliance.overrides == {}


def test_the_compliance_set_is_required_when_test07_runs(tmp_path: Path) -> None:
    data = _smoke(tmp_path)
    del data["benchmarks"][0]["dataset"]["compliance"]
    with pytest.raises(PlanError, match=r"benchmarks\.0\.dataset\.compliance\.TEST07: gpt-oss-120b runs TEST07 on its "
                                        r"own data set; name it, e\.g\. compliance: \{TEST07: acc/acc_eval_compliance"):
        plans.parse(data)
    data["compliance"] = {"run": "never"}
    assert plans.parse(data).benchmarks[0].dataset.compliance == {}


def test_a_failed_audit_says_what_and_by_how_much() -> None:
    record = AuditRecord(key="k", system="s", benchmark="b", scenario="Offline", test="TEST09", run_dir="r",
                         folder="f", passed=False, attempts=2, checks=(
                             AuditCheck(name="samples logged", passed=True, measured=32, bound="> 0"),
                             AuditCheck(name="mean output tokens", passed=False, measured=32.0,
                                        bound="in [14.4, 17.6]", detail="min 32, max 32")))
    assert record.summary() == "FAIL: mean output tokens 32 in [14.4, 17.6]: FAIL (min 32, max 32)"
    assert record.model_copy(update={"passed": True}).summary() == "PASS"
    assert AuditCheck(name="first token", passed=None, detail="Offline").line() == "first token: skipped (Offline)"
