"""The round's serving rules for Qwen3-VL (v6.1 multimodal/qwen3-vl/README.md, "Sampling parameters" and
"Constraints"), checked when a closed submission plan loads: each rule refused with the field, the rule, its source
and the fix; the shipped plans pass, and what they serve and send is what the README asks."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from submission.base.errors import PlanError
from submission.plan import model as plans
from submission.rules import load_rules
from tasks.datasets.requests import build_requests
from tasks.engines import backend
from tasks.serving.launch import review_placement
from tests.unit.test_datasets import shopify_parquet

PLANS = Path(__file__).parents[2] / "deployments" / "plans"
SHIPPED = ["qwen3-vl-dynamo-50-50.yaml", "qwen3-vl-dynamo-75-25.yaml"]
SOURCE = 'source: multimodal/qwen3-vl/README.md, v6.1 round, "Sampling parameters" and "Constraints"'


@pytest.fixture()
def data() -> dict:
    return yaml.safe_load((PLANS / SHIPPED[1]).read_text())


def _error(data: dict) -> str:
    with pytest.raises(PlanError) as e:
        plans.parse(data, "plan.yaml")
    return str(e.value)


def _options(data: dict) -> dict:
    return data["benchmarks"][0]["engine"]["options"]


def test_the_rules_data() -> None:
    rules = load_rules("v6.1").benchmark("qwen3-vl-235b-a22b")
    assert rules.serving is not None and rules.serving.prefix_caching is False
    assert {"max_pixels", "min_pixels", "size"} <= set(rules.serving.image_budget_keys)
    assert rules.serving.reference_sampling and rules.serving.guided_decoding is False
    assert (rules.scenario("Server").latency_ms, rules.scenario("Interactive").latency_ms) == (12000, 1500)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_plans_serve_as_the_readme_asks(name: str, tmp_path: Path) -> None:
    plan = plans.load(PLANS / name)
    bench = plan.benchmarks[0]
    options = bench.engine.config()
    specs = backend("dynamo").processes(options, Path("/m/q"), review_placement(bench.engine, tmp_path), None)
    workers = [s for s in specs if s.role in ("prefill", "decode")]
    assert workers and all("--no-enable-prefix-caching" in s.argv for s in workers)
    assert not any("--enable-prefix-caching" in s.argv or "--mm-processor-kwargs" in s.argv for s in workers)
    assert "--load-aware" in specs[-1].argv   # no cached prefix to match: the KV router balances load
    # what the request builder sends with the plan's generation settings is the README's sampling
    builder = build_requests(bench.benchmark, shopify_parquet(tmp_path / "s.parquet"), "performance",
                             max_tokens=bench.generation.max_tokens, temperature=bench.generation.temperature)
    assert {k: v for k, v in builder.body(0).items() if k not in ("messages", "max_tokens")} == {
        "temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.0, "repetition_penalty": 1.0,
        "presence_penalty": 0.0, "frequency_penalty": 0.0}


@pytest.mark.parametrize("value", [None, True])
def test_prefix_caching_must_be_off(data: dict, value: bool | None) -> None:
    _options(data).pop("enable_prefix_caching")
    if value is not None:
        _options(data)["enable_prefix_caching"] = value
    message = _error(data)
    assert "benchmarks.0.engine.options.enable_prefix_caching: " in message
    assert "breaks the serving rule prefix_caching: false of qwen3-vl-235b-a22b" in message
    assert SOURCE in message and "set enable_prefix_caching: false" in message


def test_prefix_caching_flags_are_the_typed_options(data: dict) -> None:
    _options(data)["worker_args"] = ["--enable-prefix-caching"]
    assert ("benchmarks.0.engine: options: worker_args: --enable-prefix-caching given as a free flag; set "
            "enable_prefix_caching: true or false instead") in _error(data)


@pytest.mark.parametrize(("where", "args", "keys"), [
    ("worker_args", ["--mm-processor-kwargs", '{"max_pixels": 1003520}'], "max_pixels"),
    ("decode", ["--mm-processor-kwargs.min_pixels=3136"], "min_pixels"),
    ("extra_args", ['--mm-processor-kwargs={"images_kwargs": {"size": {"longest_edge": 512}}}'], "size"),
])
def test_no_image_budget_override(data: dict, where: str, args: list[str], keys: str) -> None:
    if where == "decode":
        _options(data)["decode"]["extra_args"] = args
        where = "decode.extra_args"
    else:
        _options(data)[where] = args
    message = _error(data)
    assert f"benchmarks.0.engine.options.{where}: the multimodal processor override sets {keys}" in message
    assert "breaks the serving rule image_budget_keys" in message and "remove it" in message


def test_a_vllm_engine_is_held_to_the_same_rules(data: dict) -> None:
    data["benchmarks"][0]["engine"] = {"name": "vllm", "options": {
        "tensor_parallel_size": 4, "gpus_per_node": 4, "mm_processor_kwargs": {"max_pixels": 1, "fps": 2}}}
    message = _error(data)
    assert "benchmarks.0.engine.options.enable_prefix_caching: not set" in message
    assert "benchmarks.0.engine.options.mm_processor_kwargs: the multimodal processor override sets max_pixels (" \
        in message   # fps (video) is not an image budget
    data["benchmarks"][0]["engine"]["options"] |= {"enable_prefix_caching": False, "mm_processor_kwargs": {"fps": 2}}
    plans.parse(data)
    data["benchmarks"][0]["engine"]["options"]["extra_args"] = ["--mm-processor-kwargs", "max_pixels=5"]
    assert "is not a JSON object Podium can read" in _error(data)


def test_sampling_is_the_readmes(data: dict) -> None:
    del data["benchmarks"][0]["generation"]["temperature"]   # the plan default, 0: greedy, no top_p/top_k sent
    message = _error(data)
    assert "benchmarks.0.generation.temperature: 0 is not the reference's sampling (temperature 0.7, top_p 0.8, " \
        "top_k 20" in message and "set temperature: 0.7" in message and SOURCE in message
    data["benchmarks"][0]["generation"] |= {"temperature": 0.7, "guided_decoding": True}
    message = _error(data)
    assert "benchmarks.0.generation.guided_decoding: true, which breaks the serving rule guided_decoding: false" \
        in message and "set guided_decoding: false" in message


def test_the_smoke_profile_and_the_open_division_may_deviate(data: dict) -> None:
    _options(data).pop("enable_prefix_caching")
    data["benchmarks"][0]["generation"]["temperature"] = 0
    closed = _error(data)   # the same plan as a closed submission: both deviations refused
    assert "enable_prefix_caching: not set" in closed and "temperature: 0 is not the reference's sampling" in closed
    for plan in (plans.parse({**data, "profile": "smoke"}), plans.parse({**data, "division": "open"})):
        bench = plan.benchmarks[0]   # loaded as written, the deviations kept
        assert bench.engine.config().enable_prefix_caching is None and bench.generation.temperature == 0
