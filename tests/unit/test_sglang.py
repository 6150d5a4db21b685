"""The SGLang engine up to the process boundary: its typed options, the exact server argv and endpoint, one engine
launch per variant of the options (speculative decoding for Interactive only), the round's speculative-decoding rule
refusing a closed plan with the rule named, the shipped plan's dry run and SGLang's metric names as telemetry reads
them. SGLang's own parser reads the same argv in tests/integration/test_sglang_argv.py."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from submission.base.errors import PlanError
from submission.plan import model as plans
from submission.plan.engine_options import parse_options
from tasks.engines import Placement, backend, engine_identity
from tasks.serving import launch, metrics

REPO = Path(__file__).parents[2]
PLAN = REPO / "deployments" / "plans" / "deepseek-r1-sglang.yaml"
APPENDIX = {"algorithm": "EAGLE", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4, "scenarios": ["Interactive"]}


def plan_data() -> dict:
    return yaml.safe_load(PLAN.read_text())


def with_speculative(**changes: object) -> dict:
    """The shipped plan with its speculative settings changed."""
    data = copy.deepcopy(plan_data())
    data["benchmarks"][0]["engine"]["options"]["speculative"] = {**APPENDIX, **changes}
    return data


def test_the_server_argv_is_exact_and_metrics_are_always_on(tmp_path: Path) -> None:
    options = {"python": "/venv/bin/python", "tensor_parallel_size": 4, "expert_parallel_size": 4,
               "data_parallel_size": 2, "enable_dp_attention": True, "mem_fraction_static": 0.8,
               "chunked_prefill_size": 8192, "cuda_graph_max_bs": 128, "cuda_graph_bs": [1, 2, 4],
               "context_length": 4096, "kv_cache_dtype": "fp8_e4m3", "gpus_per_node": 4,
               "env": {"NCCL_DEBUG": "WARN"}, "extra_args": ["--log-level", "warning"]}
    be = backend("sglang")
    spec, = be.processes(options, tmp_path / "ckpt", Placement("127.0.0.1", (8123,)))
    assert list(spec.argv) == [
        "/venv/bin/python", "-m", "sglang.launch_server", "--model-path", str(tmp_path / "ckpt"),
        "--served-model-name", "ckpt", "--host", "127.0.0.1", "--port", "8123", "--tp-size", "4", "--ep-size", "4",
        "--dp-size", "2", "--mem-fraction-static", "0.8", "--chunked-prefill-size", "8192", "--cuda-graph-max-bs",
        "128", "--context-length", "4096", "--kv-cache-dtype", "fp8_e4m3", "--enable-dp-attention", "--cuda-graph-bs",
        "1", "2", "4", "--enable-metrics", "--log-level", "warning"]
    # DP attention runs inside the tensor-parallel GPUs: 4, not 4 x 2
    assert (spec.gpus, spec.gpu_ids, spec.env["CUDA_VISIBLE_DEVICES"]) == (4, (0, 1, 2, 3), "0,1,2,3")
    assert spec.env["NCCL_DEBUG"] == "WARN" and spec.env["HF_HUB_OFFLINE"] == "1"
    assert [p.path for p in spec.probes] == ["/health", "/v1/models", "/v1/completions"]   # ready: a real generation
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "tokenizer.json").write_text("{}")
    endpoint = be.endpoint(options, tmp_path / "ckpt", [spec])
    assert (endpoint.base_url, endpoint.model) == ("http://127.0.0.1:8123", "ckpt")
    # token-id prompts in, text out: the harness re-tokenizes with the model's tokenizer
    assert (endpoint.accepts_token_ids, endpoint.returns_token_ids) == (True, False)
    assert endpoint.tokenizer == str(tmp_path / "ckpt" / "tokenizer.json") and endpoint.request_fields == {}


def test_plain_data_parallel_copies_the_gpus_and_must_fit_the_node() -> None:
    assert parse_options("sglang", {"tensor_parallel_size": 2, "data_parallel_size": 4}).server_gpus() == 8
    with pytest.raises(PlanError, match=r"needs 16 GPUs .* but gpus_per_node is 8"):
        parse_options("sglang", {"tensor_parallel_size": 4, "data_parallel_size": 4})
    with pytest.raises(PlanError, match=r"enable_dp_attention: .*divides 8"):
        parse_options("sglang", {"tensor_parallel_size": 8, "data_parallel_size": 3, "enable_dp_attention": True})
    with pytest.raises(PlanError, match="nodes: the sglang engine serves from one node"):
        parse_options("sglang", {"nodes": 2})


@pytest.mark.parametrize("flag", ["--speculative-num-steps=5", "--speculative-algo", "--quantization",
                                  "--enable-metrics"])
def test_flags_a_typed_option_sets_are_refused_among_free_args(flag: str) -> None:
    with pytest.raises(PlanError, match=f"extra_args: {flag} given as a free flag"):
        parse_options("sglang", {"extra_args": [flag, "x"]})


def test_speculative_decoding_runs_only_in_the_scenarios_it_names() -> None:
    bench = plans.load(PLAN).benchmarks[0]
    (first, plain), (second, speculative) = bench.engine_variants()
    assert (first, second) == (("Offline", "Server"), ("Interactive",))
    assert plain.speculative is None and speculative.speculative.num_steps == 3
    assert plain.as_plan() == {k: v for k, v in bench.engine.config().as_plan().items() if k != "speculative"}
    flags = [list(backend("sglang").processes(o, Path("/m"), Placement("h", (1,)))[0].argv)
             for o in (plain, speculative)]
    assert not any(a.startswith("--speculative") for a in flags[0])
    # each launch's runs carry its own engine identity (their cache key)
    plain_id, speculative_id = (engine_identity("sglang", o) for o in (plain, speculative))
    assert plain_id.startswith("sglang sglang 0.5.4 {") and '"speculative"' not in plain_id
    assert '"speculative": {"algorithm": "EAGLE"' in speculative_id
    assert flags[1][flags[1].index("--speculative-algorithm"):flags[1].index("--enable-metrics")] == [
        "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4"]
    # any other engine's options serve every scenario with one launch
    vllm = plans.parse(yaml.safe_load((REPO / "deployments/plans/smoke.yaml").read_text())).benchmarks[0]
    assert len(vllm.engine_variants()) == 1


@pytest.mark.parametrize(("changes", "field", "says"), [
    ({"num_steps": 2}, "speculative.num_steps", "2 is not the appendix's 3"),
    ({"eagle_topk": 2}, "speculative.eagle_topk", "2 is not the appendix's 1"),
    ({"num_draft_tokens": 8}, "speculative.num_draft_tokens", "8 is not the 4 the appendix's configuration implies"),
    ({"algorithm": "EAGLE3"}, "speculative.algorithm", "EAGLE3 is not the reference's EAGLE-style decoding"),
    ({"scenarios": ["Server", "Interactive"]}, "speculative.scenarios", "Server may not use it"),
    ({"draft_model_path": "/m/head"}, "speculative.draft_model_path", "/m/head is another head than the reference's"),
])
def test_a_closed_plan_with_other_speculative_settings_is_refused_naming_the_rule(changes: dict, field: str,
                                                                                  says: str) -> None:
    with pytest.raises(PlanError) as e:
        plans.parse(with_speculative(**changes))
    message = str(e.value)
    assert f"benchmarks.0.engine.options.{field}: {says}" in message
    assert "breaks the serving rule speculative_decoding of deepseek-r1" in message
    assert "inference_rules.adoc appendix-speculative-decoding" in message


def test_an_mtp_head_quantized_unlike_the_reference_is_refused() -> None:
    data = with_speculative()
    data["benchmarks"][0]["engine"]["options"]["quantization"] = "w8a8_int8"
    with pytest.raises(PlanError, match=r"MTP head would not be at the reference's precision \(fp8.*"
                                        r"options.quantization w8a8_int8"):
        plans.parse(data)
    data = with_speculative()
    data["benchmarks"][0]["model"]["weight_data_types"] = "nvfp4"
    with pytest.raises(PlanError, match=r"model.weight_data_types nvfp4.*speculative_decoding"):
        plans.parse(data)


def test_the_open_division_and_a_plan_without_speculative_decoding_load() -> None:
    data = with_speculative(num_steps=5)
    data["division"] = "open"
    assert plans.parse(data).benchmarks[0].engine.config().speculative.num_steps == 5
    data = copy.deepcopy(plan_data())
    del data["benchmarks"][0]["engine"]["options"]["speculative"]
    assert len(plans.parse(data).benchmarks[0].engine_variants()) == 1


def test_the_shipped_plan_dry_runs_with_both_launches(tmp_path: Path) -> None:
    plan = plans.load(PLAN)
    reviewed = launch.reviews(plan, tmp_path)
    launch.require_capacity(reviewed)   # fits 8 x 180 GB, its budgets and Slurm times hold
    text = launch.render(reviewed)
    first, again = text.split("these serve Offline, Server; for Interactive the engine is stopped and launched again")
    assert "-m sglang.launch_server --model-path /lustre/mlperf/models/DeepSeek-R1" in first
    assert "--enable-metrics" in first and "--speculative" not in first
    assert "--speculative-algorithm EAGLE --speculative-num-steps 3" in again.splitlines()[1]
    assert "memory fit on 180.0 GiB GPUs" in text and "x 2 launches" in text
    assert [s["gpu_hours"] > 0 for s in reviewed[0]["predicted"]["scenarios"].values()] == [True] * 3
    # 8 x 80 GB cannot hold the FP8 weights: the dry run says so (exit 2)
    data = plan_data()
    data["systems"][0]["description"]["accelerator_memory_capacity"] = "80 GB"
    with pytest.raises(PlanError, match=r"server worker \(1 x TP8 x PP1\) holds 78.1 GiB of weights per GPU"):
        launch.require_capacity(launch.reviews(plans.parse(data), tmp_path))


def test_sglang_metrics_are_read_from_its_page() -> None:
    page = "\n".join([
        "# TYPE sglang:num_running_reqs gauge", 'sglang:num_running_reqs{model_name="m",engine_type="unified"} 7.0',
        "# TYPE sglang:num_queue_reqs gauge", 'sglang:num_queue_reqs{model_name="m",engine_type="unified"} 3.0',
        "# TYPE sglang:token_usage gauge", 'sglang:token_usage{model_name="m",engine_type="unified"} 0.42',
        "# TYPE sglang:generation_tokens_total counter",
        'sglang:generation_tokens_total{model_name="m"} 1000.0', ""])
    reader = metrics.Reader(metrics.source_for("sglang 0.5.4 {}"))
    assert reader.read(page, 0.0) == {"running": 7.0, "waiting": 3.0, "kv_cache": 0.42}
    later = reader.read(page.replace("} 1000.0", "} 1500.0"), 2.0)
    assert later["tokens_per_s"] == 250.0


@pytest.mark.parametrize("where", ["local", "kubernetes"])
def test_the_plan_dry_runs_on_the_other_launchers(where: str, tmp_path: Path) -> None:
    data = plan_data()
    engine = data["benchmarks"][0]["engine"]
    engine["launcher"] = where
    del engine["slurm"]
    if where == "kubernetes":
        engine["kubernetes"] = {"image": "lmsysorg/sglang:v0.5.4", "model_claim": "models", "volume_mount": "/lustre"}
    reviewed, = launch.reviews(plans.parse(data), tmp_path)
    server, = reviewed["processes"]
    host = {"local": "127.0.0.1", "kubernetes": "0.0.0.0"}[where]   # a pod binds every address, reached by its Service
    assert server["argv"][:3] == ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server"]
    assert server["argv"][server["argv"].index("--host") + 1] == host and server["gpus"] == 8
    assert [r["scenarios"] for r in reviewed["relaunches"]] == [["Interactive"]]
    if where == "kubernetes":
        kinds = sorted(o["kind"] for o in reviewed["kubernetes"])
        assert kinds == ["Deployment", "Secret", "Service"]
