"""A plan's `fetch` sections: each destination of a benchmark read by the benchmark, the plan's own holding source
archives, each repository at a commit, the round's pins taken from its rules and never written differently by a
plan."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from submission.base.errors import PlanError
from submission.plan import model as plans
from submission.rules import load_rules

PLANS = Path(__file__).parents[2] / "deployments" / "plans"
MODEL = "/mnt/mlperf/models/gpt-oss-120b"
PERF = "/mnt/mlperf/data/gpt-oss-120b/perf/perf_eval_ref.parquet"
SHA = "ab" * 32


def _k8s() -> dict:
    return yaml.safe_load((PLANS / "gpt-oss-120b-trtllm-k8s.yaml").read_text())


def _error(data: dict) -> str:
    with pytest.raises(PlanError) as e:
        plans.parse(data, "plan.yaml")
    return str(e.value)


def test_the_round_pins_the_reference_checkpoint_the_data_sets_and_the_tools_by_full_commit() -> None:
    rules = load_rules("v6.1")
    assert rules.hub_pins() == {
        "openai/gpt-oss-120b": "b5c939de8f754692c1647ca79fbf85e8c1e70f8a",
        "Shopify/product-catalogue": "d5c517c509f5aca99053897ef1de797d6d7e5aa5",
        "nvidia/Shopify-product-catalogue-8k": "2bc8c6c4b6ebd27b880b0cba519cb45d09867045",
        "deepseek-ai/DeepSeek-R1": "56d4cbbb4d29f4355bab4b9a39ccb717a14ad5ad",
        "livecodebench/code_generation_lite": "0fe84c3912ea0c4d4a78037083943e8f0c4dd505"}
    release = rules.livecodebench["release_v6"]
    assert release.files == ("test.jsonl", *(f"test{i}.jsonl" for i in range(2, 7)))
    assert rules.livecodebench["release_v1"].files == ("test.jsonl",)   # deepseek-r1's eval_accuracy.py reads v1
    assert rules.source_pins() == {"mlcommons/inference": rules.inference_sources.commit,
                                   "mlcommons/endpoints": rules.endpoints_client.commit,
                                   "openai/prm800k": "7ecc794703b2877f63226f2477a49b34f9b25163"}


def test_shipped_plans_fetch_what_they_read_at_the_rounds_pins() -> None:
    pins = load_rules("v6.1").hub_pins()
    rules = load_rules("v6.1")
    k8s = plans.load(PLANS / "gpt-oss-120b-trtllm-k8s.yaml")
    inference, model, data, lcb = k8s.fetches()
    assert (data.dest, data.source.mlcommons_uri) == ("/mnt/mlperf/data/gpt-oss-120b", "https://inference."
                                                      "mlcommons-storage.org/metadata/gpt-oss-data.uri")
    assert (model.dest, model.source.repo, model.revision) == (MODEL, "openai/gpt-oss-120b",
                                                               pins["openai/gpt-oss-120b"])
    assert model.dest == k8s.benchmarks[0].model.source
    assert (lcb.dest, lcb.repo, lcb.revision, lcb.files) == (k8s.benchmarks[0].dataset.lcb_tests,
                                                             "livecodebench/code_generation_lite",
                                                             pins["livecodebench/code_generation_lite"],
                                                             rules.livecodebench["release_v6"].files)
    assert (inference.field, inference.repo, inference.revision) == (
        "fetch./mnt/mlperf/src/inference", "mlcommons/inference", rules.inference_sources.commit)
    for name in ("qwen3-vl-dynamo-50-50.yaml", "qwen3-vl-dynamo-75-25.yaml"):
        plan = plans.load(PLANS / name)
        fetched = {i.repo: i for i in plan.fetches()}
        assert set(fetched) == {"Shopify/product-catalogue", "nvidia/Shopify-product-catalogue-8k",
                                "mlcommons/endpoints"}
        assert fetched.pop("mlcommons/endpoints").revision == rules.endpoints_client.commit
        assert all(i.source.repo_type == "dataset" and i.revision == pins[r] for r, i in fetched.items())
        dataset = plan.benchmarks[0].dataset
        assert fetched["Shopify/product-catalogue"].dest == dataset.performance == dataset.accuracy
        assert fetched["nvidia/Shopify-product-catalogue-8k"].dest == dataset.scenarios["Interactive"]


def test_a_plan_may_not_write_another_commit_for_a_pinned_repository() -> None:
    data = _k8s()
    data["benchmarks"][0]["fetch"] = {MODEL: {"repo": "openai/gpt-oss-120b", "revision": "1" * 40}}
    message = _error(data)
    assert f"benchmarks.0.fetch.{MODEL}.revision" in message and "b5c939de8f75" in message
    assert "remove revision" in message


def test_an_unpinned_repository_names_its_commit_and_only_a_full_one() -> None:
    data = _k8s()
    data["benchmarks"][0]["fetch"] = {MODEL: {"repo": "someone/gpt-oss-120b-fp8"}}
    assert "the round pins no commit of someone/gpt-oss-120b-fp8" in _error(data)
    data["benchmarks"][0]["fetch"] = {MODEL: {"repo": "someone/gpt-oss-120b-fp8", "revision": "main"}}
    assert "not a full commit" in _error(data)
    data["benchmarks"][0]["fetch"] = {MODEL: {"repo": "someone/gpt-oss-120b-fp8", "revision": "c" * 40}}
    assert [i.revision for i in plans.parse(data).fetches() if i.repo == "someone/gpt-oss-120b-fp8"] == ["c" * 40]


def test_a_destination_no_field_reads_is_refused() -> None:
    data = _k8s()
    data["benchmarks"][0]["fetch"] = {"/mnt/elsewhere/gpt-oss-120b": {"repo": "openai/gpt-oss-120b"}}
    message = _error(data)
    assert "fetch./mnt/elsewhere/gpt-oss-120b: no field of this benchmark reads from it" in message


def test_a_url_needs_its_sha256_and_a_folder_holding_a_data_set_is_a_destination() -> None:
    data = _k8s()
    data["benchmarks"][0]["fetch"] = {PERF: {"url": "https://example.org/perf_eval_ref.parquet"}}
    assert "sha256: a url needs the file's sha256" in _error(data)
    data["benchmarks"][0]["fetch"] = {PERF: {"url": "https://example.org/p.parquet", "sha256": SHA},
                                      "/mnt/mlperf/data/gpt-oss-120b/acc": {"repo": "o/acc", "repo_type": "dataset",
                                                                           "revision": "d" * 40}}
    assert {i.dest for i in plans.parse(data).fetches() if i.field.startswith("benchmarks.")} == {
        PERF, "/mnt/mlperf/data/gpt-oss-120b/acc"}
    data["benchmarks"][0]["fetch"] = {PERF: {"url": "https://example.org/p", "repo": "o/p"}}
    assert "name one source" in _error(data)


def test_two_benchmarks_fetching_one_destination_name_one_source() -> None:
    data = _k8s()
    second = yaml.safe_load(yaml.safe_dump(data["benchmarks"][0]))
    data["benchmarks"][0]["fetch"] = {PERF: {"url": "https://example.org/a", "sha256": SHA}}
    second["fetch"] = {PERF: {"url": "https://example.org/b", "sha256": SHA}}
    data["benchmarks"].append(second)
    assert "fetches another source to the same destination" in _error(data)


def test_a_missing_input_the_plan_fetches_names_podium_fetch() -> None:
    from tasks.ops.inputs import input_problems

    plan = plans.load(PLANS / "gpt-oss-120b-trtllm-k8s.yaml")
    problems = input_problems(plan, "k8s.yaml")
    [model] = [p for p in problems if "model.source" in p.message]
    assert model.message == f"benchmarks.0.model.source: {MODEL} does not exist"
    assert model.fix == "fetch it: podium fetch k8s.yaml"
    [tests] = [p for p in problems if "dataset.lcb_tests" in p.message]
    assert tests.fix == "fetch it: podium fetch k8s.yaml"


def test_the_livecodebench_tests_come_from_a_release_the_round_names_to_the_file_the_evaluator_reads() -> None:
    data = _k8s()
    tests = data["benchmarks"][0]["dataset"]["lcb_tests"]
    data["benchmarks"][0]["fetch"] = {tests: {"livecodebench": "release_v5"}}
    assert "round v6.1 names no LiveCodeBench release 'release_v5' (it names: release_v6, release_v1)" in _error(data)
    data["benchmarks"][0]["fetch"] = {tests: {"livecodebench": "release_v6", "revision": "1" * 40}}
    assert "the round pins livecodebench/code_generation_lite at 0fe84c3912ea" in _error(data)
    data["benchmarks"][0]["fetch"] = {"/mnt/mlperf/data/lcb.jsonl": {"livecodebench": "release_v6"}}
    assert "no field of this benchmark reads from it; make it the model.source, a data set file, dataset.lcb_tests" \
        in _error(data)


def test_source_archives_are_pinned_like_repositories_and_an_archive_names_its_sha256() -> None:
    data = _k8s()
    src = "/mnt/mlperf/src/inference"
    data["fetch"] = {src: {"github": "mlcommons/inference", "revision": "1" * 40}}
    assert f"fetch.{src}.revision: the round pins mlcommons/inference at b66003e10e2d" in _error(data)
    data["fetch"] = {"/mnt/mlperf/src/tool": {"github": "someone/tool"}}
    assert "the round pins no commit of someone/tool; name it" in _error(data)
    data["fetch"] = {"/mnt/mlperf/src/tool": {"archive": "https://example.org/tool.tar.gz"}}
    assert "sha256: an archive needs the file's sha256" in _error(data)
    data["fetch"] = {"/mnt/mlperf/src/tool": {"archive": "https://example.org/tool.tar.gz", "sha256": SHA}}
    [tool] = [i for i in plans.parse(data).fetches() if i.field == "fetch./mnt/mlperf/src/tool"]
    assert (tool.source.kind, tool.revision) == ("archive", None)


def test_the_plans_own_section_holds_source_archives_and_agrees_with_inference_src() -> None:
    data = _k8s()
    data["fetch"] = {MODEL: {"repo": "openai/gpt-oss-120b"}}
    assert (f"fetch.{MODEL}: the plan's own fetch section holds source archives (github, archive); move a repo "
            "source to the fetch section of the benchmark that reads it") in _error(data)
    data["fetch"] = {"/mnt/mlperf/src/inference": {"github": "mlcommons/inference"}}
    data["inference_src"] = "/elsewhere/inference"
    assert "inference_src is /elsewhere/inference, not this destination; make them one folder" in _error(data)
    data["inference_src"] = "/mnt/mlperf/src/inference/"
    assert plans.parse(data).inference_src == "/mnt/mlperf/src/inference/"
