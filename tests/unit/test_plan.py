"""The plan model: the embedded default loads, and bad input fails with the field and the fix."""

from __future__ import annotations

import copy
import functools
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from submission.base.errors import PlanError
from submission.base.schema import Input
from submission.plan import model as plans
from submission.plan.engine_options import OPTIONS as ENGINE_OPTIONS
from submission.plan.limits import MAX_DEPTH, MAX_NODES, MAX_QPS, MAX_TOKENS
from submission.plan.slurm_options import SlurmSettings
from submission.results import published
from submission.results.runs import plan_runs
from submission.rules import load_rules, model_rules

SMOKE = Path(__file__).parents[2] / "deployments" / "plans" / "smoke.yaml"


@pytest.fixture()
def data() -> dict:
    return yaml.safe_load(SMOKE.read_text())


def test_smoke_plan_loads() -> None:
    p = plans.load(SMOKE)
    assert (p.name, p.round, p.division, p.profile) == ("smoke", "v6.1", "open", "smoke")
    bench = p.benchmarks[0]
    assert bench.key == "cpu-smoke/gpt-oss-120b"
    assert set(bench.scenarios) == {"Offline", "Server", "Interactive"}
    assert p.storage.embedded and p.storage.endpoint_url is None
    assert len(p.fingerprint()) == 64 and p.fingerprint() == plans.load(SMOKE).fingerprint()


def _error(data: dict) -> str:
    with pytest.raises(PlanError) as e:
        plans.parse(data, "plan.yaml")
    return str(e.value)


def test_unknown_top_level_field(data: dict) -> None:
    data["sumbitter"] = "x"
    assert "sumbitter: unknown field" in _error(data)


def test_unknown_nested_field(data: dict) -> None:
    data["benchmarks"][0]["scenarios"]["Server"]["target_qsp"] = 3
    assert "benchmarks.0.scenarios.Server.target_qsp: unknown field" in _error(data)


def test_unknown_benchmark_suggests(data: dict) -> None:
    data["benchmarks"][0]["benchmark"] = "gpt-oss-12b"
    message = _error(data)
    assert "unknown benchmark 'gpt-oss-12b'" in message and "did you mean 'gpt-oss-120b'" in message
    assert "llama3.1-8b" in message   # the full list of valid values


def test_unknown_scenario(data: dict) -> None:
    data["benchmarks"][0]["scenarios"]["SingleStream"] = {"target_qps": 1}
    message = _error(data)
    assert "'SingleStream' is not a gpt-oss-120b scenario" in message and "Interactive" in message


def test_server_needs_target_qps(data: dict) -> None:
    del data["benchmarks"][0]["scenarios"]["Server"]["target_qps"]
    assert "scenarios.Server.target_qps is required for Server, e.g. target_qps: 2" in _error(data)


def test_harness_workers_within_max_concurrency(data: dict) -> None:
    data["benchmarks"][0]["scenarios"]["Server"] |= {"max_concurrency": 4, "harness_workers": 8}
    message = _error(data)
    assert "benchmarks.0.scenarios.Server" in message and "harness_workers 8 is over max_concurrency 4" in message
    data["benchmarks"][0]["scenarios"]["Server"]["harness_workers"] = 4
    plan = plans.parse(data, "plan.yaml")
    dataset = plan.benchmarks[0].dataset
    specs = plan_runs(plan, plan.benchmarks[0], load_rules(plan.round), model_sha256="m", engine="e",
                      dataset_sha256={dataset.performance: "p", dataset.accuracy: "a"})
    assert {(s.scenario, s.mode): s.harness_workers for s in specs if s.scenario != "Interactive"} == {
        ("Offline", "performance"): 1, ("Server", "performance"): 4, ("Offline", "accuracy"): 1,
        ("Server", "accuracy"): 4}


def test_unknown_round(data: dict) -> None:
    data["round"] = "v6.2"
    message = _error(data)
    assert "round: unknown round 'v6.2'" in message and "v6.1" in message


@pytest.mark.parametrize("name", ["a/b", "..", "x..y", "has space", ""])
def test_unsafe_system_names(data: dict, name: str) -> None:
    data["systems"][0]["name"] = name
    assert "systems.0.name" in _error(data)


def test_wrong_type(data: dict) -> None:
    data["benchmarks"][0]["generation"]["max_tokens"] = "many"
    assert "benchmarks.0.generation.max_tokens" in _error(data)


def test_system_must_exist(data: dict) -> None:
    data["benchmarks"][0]["system"] = "cpu-smok"
    message = _error(data)
    assert "'cpu-smok' is not among systems" in message and "did you mean 'cpu-smoke'" in message


def test_closed_division_runs_the_benchmark_model(data: dict) -> None:
    data["division"] = "closed"
    assert "model.name: the closed division runs the benchmark's own model" in _error(data)


def test_submission_profile_refuses_short_runs(data: dict) -> None:
    data["profile"] = "submission"
    message = _error(data)
    assert "loadgen.min_duration_ms: 1000 is under the round's minimum of 600000 ms" in message
    assert "use profile: smoke" in message


def test_submission_profile_refuses_small_sample_counts(data: dict) -> None:
    data["profile"] = "submission"
    del data["benchmarks"][0]["loadgen"]["min_duration_ms"]
    assert "performance_sample_count: 32 is under 6396" in _error(data)


def test_submission_profile_needs_required_scenarios(data: dict) -> None:
    data["profile"] = "submission"
    data["benchmarks"][0]["loadgen"] = {}
    only_server = copy.deepcopy(data)
    del only_server["benchmarks"][0]["scenarios"]["Offline"]
    assert "gpt-oss-120b requires Offline" in _error(only_server)
    only_offline = copy.deepcopy(data)
    for s in ("Server", "Interactive"):
        del only_offline["benchmarks"][0]["scenarios"][s]
    assert "needs one of Interactive, Server" in _error(only_offline)


def test_embedded_storage_has_no_endpoint(data: dict) -> None:
    data["storage"]["endpoint_url"] = "http://127.0.0.1:9000"
    assert "embedded storage picks its own endpoint" in _error(data)


def test_missing_required_field(data: dict) -> None:
    del data["storage"]
    assert "storage: required field is missing" in _error(data)


def test_not_a_mapping() -> None:
    with pytest.raises(PlanError, match="a plan is a YAML mapping"):
        plans.parse(["a", "list"], "plan.yaml")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PlanError) as e:
        plans.load(tmp_path / "nope.yaml")
    assert "nope.yaml" in str(e.value) and "fix:" in str(e.value)


def test_yaml_error_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nround: [v6.1\n")
    with pytest.raises(PlanError, match=r"bad\.yaml:\d+: not valid YAML"):
        plans.load(bad)


def test_every_problem_is_listed(data: dict) -> None:
    data["sumbitter"] = "x"
    data["division"] = "secret"
    message = _error(data)
    assert "sumbitter" in message and "division" in message


# The measuring client (`harness:`) and a scenario's own data set, on the shipped Qwen3-VL plans.
PLANS = SMOKE.parent


def _plan(name: str) -> dict:
    return yaml.safe_load((PLANS / name).read_text())


def test_a_submission_plan_cannot_measure_qwen3_vl_with_loadgen() -> None:
    data = _plan("qwen3-vl-dynamo-50-50.yaml")
    data["benchmarks"][0]["harness"] = "loadgen"
    message = _error(data)
    assert "benchmarks.0.harness" in message and "measured by the endpoints client" in message
    assert "multimodal/qwen3-vl/README.md" in message   # the rule's source
    data |= {"profile": "smoke", "division": "open"}  # the smoke profile may choose loadgen, a named deviation
    data["benchmarks"][0]["model"]["name"] = "tiny-qwen"
    del data["benchmarks"][0]["scenarios"]["Interactive"]
    del data["benchmarks"][0]["dataset"]["scenarios"]
    del data["benchmarks"][0]["fetch"]["/lustre/mlperf/data/qwen3-vl/shopify_product_catalogue_8k"]   # read by none
    p = plans.parse(data, "plan.yaml")
    assert p.harness(p.benchmarks[0]) == "loadgen"


def test_gpt_oss_cannot_be_measured_by_the_endpoints_client(data: dict) -> None:
    data["benchmarks"][0]["harness"] = "endpoints"
    message = _error(data)
    assert "benchmarks.0.harness: gpt-oss-120b is measured by the loadgen client" in message
    assert "remove harness: endpoints" in message


def test_loadgen_has_no_qwen3_vl_interactive() -> None:
    data = _plan("smoke-vlm.yaml")
    p = plans.parse(copy.deepcopy(data), "plan.yaml")
    assert p.harness(p.benchmarks[0]) == "endpoints"   # the round's client for Qwen3-VL
    data["benchmarks"][0]["harness"] = "loadgen"
    message = _error(data)
    assert "benchmarks.0.scenarios.Interactive: loadgen has no qwen3-vl-235b-a22b Interactive" in message
    assert "harness: endpoints, or drop Interactive" in message


def test_a_submission_plan_names_the_interactive_data_set() -> None:
    data = _plan("qwen3-vl-dynamo-50-50.yaml")
    plans.parse(copy.deepcopy(data), "plan.yaml")
    del data["benchmarks"][0]["dataset"]["scenarios"]
    message = _error(data)
    assert "benchmarks.0.dataset.scenarios.Interactive" in message and "(8000 rows)" in message


def test_a_scenario_data_set_needs_its_scenario() -> None:
    data = _plan("qwen3-vl-dynamo-50-50.yaml")
    del data["benchmarks"][0]["scenarios"]["Interactive"]
    message = _error(data)
    assert "benchmarks.0.dataset.scenarios.Interactive: the plan runs no Interactive" in message


# Numbers no run has, names that are not names, nesting no plan needs (submission/plan/limits.py).
def _models(model: type[BaseModel]) -> set[type[BaseModel]]:
    """`model` and every model its fields' types name, at any depth."""
    found, todo = set(), [model]
    while todo:
        m = todo.pop()
        if m in found:
            continue
        found.add(m)
        types = [f.annotation for f in m.model_fields.values()]
        while types:
            t = types.pop()
            if isinstance(t, type) and issubclass(t, BaseModel):
                todo.append(t)
            types += typing.get_args(t)
    return found


def test_every_model_of_a_plan_refuses_inf_and_nan() -> None:
    models = set().union(*map(_models, [plans.Plan, SlurmSettings, *ENGINE_OPTIONS.values()]))
    assert {plans.ScenarioSpec, plans.GatesSpec, SlurmSettings, ENGINE_OPTIONS["simulated"]} <= models
    assert [m.__name__ for m in models if not issubclass(m, Input)] == []


def test_the_bounds_are_above_what_they_cite() -> None:
    rows = published.load("v6.1").results
    assert max(r.value for r in rows) * 100 <= MAX_QPS   # the largest rate, tokens/s included, x 100
    assert max(r.nodes for r in rows) * 1000 < MAX_NODES
    assert max(m["max_position"] for m in model_rules()["models"].values()) * 16 < MAX_TOKENS


def test_infinite_values_and_values_no_system_has(data: dict) -> None:
    data["benchmarks"][0]["scenarios"]["Server"]["target_qps"] = float("inf")
    data["compliance"]["overrides"]["TEST09"] = {"min_output_tokens": float("nan")}   # inside a mapping's values
    data["systems"][0]["nodes"] = 10**20
    message = _error(data)
    assert "benchmarks.0.scenarios.Server.target_qps: inf is not a finite number" in message
    assert "compliance.overrides.TEST09.min_output_tokens: nan is not a finite number" in message
    assert "systems.0.nodes: 100000000000000000000 is over 1000000, more nodes than any cluster has" in message


def test_an_answer_fits_the_reference_models_context() -> None:
    data = _plan("gpt-oss-120b-trtllm-k8s.yaml")
    data["benchmarks"][0]["generation"]["max_tokens"] = 131072   # config.json max_position_embeddings
    plans.parse(copy.deepcopy(data), "plan.yaml")
    data["benchmarks"][0]["generation"]["accuracy_max_tokens"] = 131073
    assert "generation.accuracy_max_tokens: 131073 is over gpt-oss-120b's context of 131072 tokens" in _error(data)


def test_engine_env_names_and_slurm_nodes_one_per_item(data: dict) -> None:
    engine = {"name": "vllm", "options": {"gpus_per_node": 1, "version": "0.31.0", "env": {"HF_HOME": "/m", "_X1": ""}},
              "launcher": "slurm", "slurm": {"nodelist": ["gpu01", "gpu[02-04]"]}}
    data["benchmarks"][0]["engine"] = engine
    plans.parse(copy.deepcopy(data), "plan.yaml")
    for name in ("A,B", "1X", "A B", "A=B", ""):
        engine["options"]["env"] = {name: "1"}
        assert f"options.env: {name!r} is not an environment variable name" in _error(data)
    engine["options"]["env"] = {}
    for item in ("gpu01,gpu02", "gpu[01,03]", "gpu 01", ""):
        engine["slurm"]["nodelist"] = [item]
        assert f"slurm.nodelist: {item!r} is not one node or one range" in _error(data)


def test_nesting_deeper_than_a_plan_needs(data: dict, tmp_path: Path) -> None:
    data["benchmarks"][0]["engine"] = {"name": "vllm", "options": {"gpus_per_node": 1, "version": "0.31.0"}}
    options = data["benchmarks"][0]["engine"]["options"]
    options["mm_processor_kwargs"] = functools.reduce(lambda inner, _: {"a": inner}, range(MAX_DEPTH - 6), {})
    assert plans.parse(copy.deepcopy(data), "plan.yaml").fingerprint()   # 32 levels: loads and serialises
    options["mm_processor_kwargs"] = {"a": options["mm_processor_kwargs"]}
    assert "benchmarks: nested more than 32 levels deep" in _error(data)
    plan = tmp_path / "plan.yaml"
    plan.write_text(SMOKE.read_text() + "cycle: &x [*x]\n")   # a YAML alias inside itself
    with pytest.raises(PlanError, match="cycle: nested more than 32 levels deep"):
        plans.load(plan)
    plan.write_text(SMOKE.read_text() + "deep: " + "[" * 20000 + "]" * 20000 + "\n")
    with pytest.raises(PlanError, match=r"plan\.yaml: nested deeper than the YAML parser follows"):
        plans.load(plan)


def test_a_plan_that_is_not_utf8(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_bytes(SMOKE.read_bytes() + b"# caf\xe9\n")
    lines = SMOKE.read_bytes().count(b"\n") + 1
    with pytest.raises(PlanError) as e:
        plans.load(plan)
    assert str(e.value) == (f"{plan}:{lines}: not UTF-8 text: byte 0xe9 at byte {SMOKE.stat().st_size + 5}\n"
                            "  fix: save the plan as UTF-8 (e.g. iconv -f latin1 -t utf-8)")
