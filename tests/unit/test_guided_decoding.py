"""generation.guided_decoding (Qwen3-VL): the reference's response_format in every request, the plan errors for
engines that cannot apply it, the run key, and the README line that records it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from submission.base.errors import PlanError
from submission.plan import model as plans
from tasks.datasets.requests import build_requests
from tests.qwen3_vl_cases import write_case
from tests.unit.test_datasets import _png

SMOKE = Path(__file__).parents[2] / "deployments" / "plans" / "smoke.yaml"
QWEN = "qwen3-vl-235b-a22b"


def qwen_plan(engine: dict, guided: bool = True, benchmark: str = QWEN) -> dict:
    data = yaml.safe_load(SMOKE.read_text())
    bench = data["benchmarks"][0]
    # measured by loadgen (the smoke profile's named deviation): the endpoints client sends no response_format
    bench.update(benchmark=benchmark, engine=engine, scenarios={"Offline": {"target_qps": 10}}, harness="loadgen")
    bench["generation"]["guided_decoding"] = guided
    data["compliance"] = {"run": "never"}
    return data


def test_requests_carry_the_reference_response_format(tmp_path: Path) -> None:
    data = write_case(tmp_path, _png((1, 2, 3)))["data"]
    body = build_requests(QWEN, data, "accuracy", guided_decoding=True).body(0)
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "product_metadata"
    assert fmt["json_schema"]["strict"] is True
    schema = fmt["json_schema"]["schema"]
    assert schema["additionalProperties"] is False and schema["required"] == ["category", "brand", "is_secondhand"]
    assert {k: v["type"] for k, v in schema["properties"].items()} == {
        "category": "string", "brand": "string", "is_secondhand": "boolean"}
    assert "response_format" not in build_requests(QWEN, data, "accuracy").body(0)


@pytest.mark.parametrize(("engine", "error"), [
    ({"name": "smoke-vlm"}, "the smoke-vlm engine cannot constrain decoding"),
    ({"name": "trtllm", "options": {"gpus_per_node": 1}}, "llm_api_options.guided_decoding_backend: xgrammar"),
    ({"name": "dynamo", "options": {"worker": "mocker", "gpus_per_node": 0}}, "mocker worker generates no text"),
    ({"name": "external", "options": {"base_url": "http://127.0.0.1:9", "served_model_name": "m",
                                      "drop_fields": ["response_format"]}},
     "drops response_format"),
])
def test_plan_refuses_engines_that_cannot(engine: dict, error: str) -> None:
    with pytest.raises(PlanError, match=r"generation\.guided_decoding") as caught:
        plans.parse(qwen_plan(engine), "plan.yaml")
    assert error in str(caught.value)


def test_plan_accepts_engines_that_can_and_refuses_other_benchmarks() -> None:
    for engine in ({"name": "vllm", "options": {"gpus_per_node": 0}},
                   {"name": "trtllm", "options": {"gpus_per_node": 1,
                                                  "llm_api_options": {"guided_decoding_backend": "xgrammar"}}}):
        assert plans.parse(qwen_plan(engine), "plan.yaml").benchmarks[0].generation.guided_decoding
    with pytest.raises(PlanError, match="reference has no guided decoding"):
        plans.parse(qwen_plan({"name": "smoke"}, benchmark="gpt-oss-120b"), "plan.yaml")


def test_run_key_and_readme_record_it() -> None:
    from submission.results.runs import plan_runs
    from submission.rules import load_rules
    from submission.tree.assemble import _scenario_readme

    keys = {}
    for guided in (True, False):
        plan = plans.parse(qwen_plan({"name": "vllm", "options": {"gpus_per_node": 0}}, guided), "plan.yaml")
        bench = plan.benchmarks[0]
        runs = plan_runs(plan, bench, load_rules("v6.1"), model_sha256="m", engine="vllm",
                         dataset_sha256={bench.dataset.performance: "p", bench.dataset.accuracy: "a"})
        assert all(run.guided_decoding is guided for run in runs)
        keys[guided] = runs[0].key()
        readme = _scenario_readme(plan, bench, "Offline", "abc", plan.harness(bench))
        assert f"- guided decoding: {'on' if guided else 'off'}" in readme
    assert keys[True] != keys[False]
