"""`podium launch PLAN --dry-run [--json]`: every process spec of the seed's topologies, nothing started, no cluster
asked."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from submission.budget import cost, run_length, slurm_time
from submission.plan import model as plans
from submission.results.runs import plan_runs
from submission.rules import load_rules
from tasks.serving import launch

PLANS = Path(__file__).parents[2] / "deployments" / "plans"
runner = CliRunner()


def _json(plan: Path, tmp_path: Path) -> list[dict]:
    result = runner.invoke(app, ["launch", str(plan), "--dry-run", "--json", "--workspace", str(tmp_path / "ws")])
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "ws").exists()   # a review writes nothing
    return json.loads(result.output)


def test_qwen3_vl_75_25_review(tmp_path: Path) -> None:
    [review] = _json(PLANS / "qwen3-vl-dynamo-75-25.yaml", tmp_path)
    assert (review["engine"], review["launcher"]) == ("dynamo", "slurm")
    procs = review["processes"]
    assert Counter(p["role"] for p in procs) == {"etcd": 1, "prefill": 6, "decode": 4, "frontend": 1}
    assert {p["node"] for p in procs if p["role"] == "prefill"} == {0, 1, 2}
    assert {p["node"] for p in procs if p["role"] == "decode"} == {3}
    assert all(p["gpus"] == 2 for p in procs if p["role"] == "prefill")
    ports = [(p["node"], port) for p in procs for port in (p["port"], *p["side_ports"].values())]
    assert len(ports) == len(set(ports))
    workers = [p for p in procs if p["role"] in ("prefill", "decode")]
    # every address Dynamo and etcd bind or advertise is the node's IPv4 address, which the launch resolves on it
    for p in [*workers, procs[0], procs[-1]]:
        ip = f"NODE{p['node']}_IPV4"
        assert p["host"] == ip and p["bind"] == ip
        assert {v for k, v in p["env"].items() if k.endswith("_HOST")} <= {ip}
    assert all(p["env"]["VLLM_NIXL_SIDE_CHANNEL_HOST"] == f"NODE{p['node']}_IPV4" for p in workers)
    # the NVFP4 checkpoint names its own quantization (vLLM reads its quantization_config): no --quantization flag
    for p in workers:
        assert p["argv"][p["argv"].index("--model") + 1].endswith("Instruct-NVFP4-MLPerf-Inference-Closed-V6.1-FP8-KV")
        assert not any(a.startswith("--quantization") for a in p["argv"])
    assert "http://NODE0_IPV4:8001" in procs[0]["argv"]   # etcd listens on node 0's address
    # v6.1 forbids prefix caching (multimodal/qwen3-vl/README.md): every worker says so, publishes no KV events (it
    # has no cached block to announce) and the KV router balances load only
    for p in workers:
        assert "--no-enable-prefix-caching" in p["argv"] and "--enable-prefix-caching" not in p["argv"]
        assert json.loads(p["argv"][p["argv"].index("--kv-events-config") + 1]) == {"enable_kv_cache_events": False}
        assert "kv_events" not in p["side_ports"]
    assert "--load-aware" in procs[-1]["argv"] and not any("router-kv-events" in a for a in procs[-1]["argv"])
    front = procs[-1]
    assert front["probes"][-1] == {"method": "POST", "path": "/v1/completions", "body": {
        "model": "Qwen3-VL-235B-A22B-Instruct-NVFP4-MLPerf-Inference-Closed-V6.1-FP8-KV", "prompt": "hello",
        "max_tokens": 1}}   # the served name is the model folder's
    assert review["endpoint"]["token_ids_in"] == "nvext"


def test_qwen3_vl_50_50_review(tmp_path: Path) -> None:
    [review] = _json(PLANS / "qwen3-vl-dynamo-50-50.yaml", tmp_path)
    workers = [p for p in review["processes"] if p["role"] in ("prefill", "decode")]
    assert Counter((p["role"], p["node"]) for p in workers) == {
        ("prefill", 0): 2, ("prefill", 1): 2, ("decode", 2): 4, ("decode", 3): 4}
    assert sum(p["gpus"] for p in workers if p["role"] == "prefill") == 8
    assert sum(p["gpus"] for p in workers if p["role"] == "decode") == 8


def test_gpt_oss_kubernetes_review_has_the_manifests(tmp_path: Path) -> None:
    [review] = _json(PLANS / "gpt-oss-120b-trtllm-k8s.yaml", tmp_path)
    [server] = review["processes"]
    assert server["argv"][:2] == ["trtllm-serve", "/mnt/mlperf/models/gpt-oss-120b"]
    assert server["gpus"] == 4 and server["bind"] == "0.0.0.0"
    assert review["version"] == "tensorrt-llm 1.2.0"   # the pin: a container's engine cannot be asked
    kinds = [o["kind"] for o in review["kubernetes"]]
    assert kinds == ["ConfigMap", "Secret", "Deployment", "Service"]   # the Secret: the engine's env values
    yaml_text = next(iter(server["files"].values()))
    assert yaml.safe_load(yaml_text)["enable_attention_dp"] is True
    assert review["endpoint"]["base_url"] == \
        "http://podium-trtllm-trtllm-server.mlperf.svc.cluster.local:8000"


def test_text_review_shows_argv_env_ports_gpus_and_probes(tmp_path: Path) -> None:
    result = runner.invoke(app, ["launch", str(PLANS / "qwen3-vl-dynamo-75-25.yaml"), "--dry-run",
                                 "--workspace", str(tmp_path / "ws")])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "[node 3] decode-3 (decode) on NODE3_IPV4:" in out and "1 GPU(s) [3]" in out
    assert "argv: /opt/dynamo/venv/bin/python -m dynamo.vllm --model /lustre/mlperf/models/" in out
    assert "CUDA_VISIBLE_DEVICES=2,3" in out
    assert 'ready when: GET /health contains "status":"ready"' in out
    assert "ports are picked free at launch" in out
    assert "KV router: load-aware (--load-aware): the workers run with --no-enable-prefix-caching" in out


def test_the_dry_run_states_each_scenarios_time_and_gpu_hours_and_the_allocation_covers_them(tmp_path: Path) -> None:
    """Each scenario's one client run (`--mode both`) with its predicted seconds (submission/budget/run_length.py:
    Offline at its expected 230 q/s, Server and Interactive on the client's schedule, then their p99 bounds) and its
    GPU-hours on the plan's 16 GPUs; the allocation's time_limit covers them 1.5 times over, and the engine's start."""
    plan = plans.load(PLANS / "qwen3-vl-dynamo-75-25.yaml")
    result = runner.invoke(app, ["launch", str(PLANS / "qwen3-vl-dynamo-75-25.yaml"), "--dry-run",
                                 "--workspace", str(tmp_path / "ws")])
    assert result.exit_code == 0, result.output
    stated = {m["scenario"]: (int(m["s"]), float(m["gpu_hours"])) for m in re.finditer(
        r"predicted (?P<scenario>\w+)/performance with accuracy: .* samples .*, (?P<s>\d+) s, "
        r"(?P<gpu_hours>[\d.]+) GPU-hours", result.output)}
    bench, rules = plan.benchmarks[0], load_rules(plan.round)
    specs = plan_runs(plan, bench, rules, model_sha256="-", engine="-", dataset_sha256={
        p: "-" for _, kind, p in bench.sources() if kind == "datasets"})
    seconds = {s.scenario: run_length.run_length(s, rules, rate=bench.scenarios[s.scenario].expected_qps).seconds
               for s in specs}
    assert stated == {name: (round(s), round(s * 16 / 3600, 3)) for name, s in seconds.items()}
    assert stated["Server"][0] == 991 and stated["Interactive"][0] == 1613   # schedules + 2 x 12 s, 2 x 1.5 s
    limit = slurm_time.seconds(bench.engine.slurm_settings().time_limit)
    assert limit >= 1.5 * sum(seconds.values()) + bench.engine.ready_timeout_s + bench.engine.warmup_timeout_s
    assert f"--time={slurm_time.slurm_time(slurm_time.job_need(plan))}" in result.output


def test_a_bad_benchmark_key_is_named(tmp_path: Path) -> None:
    result = runner.invoke(app, ["launch", str(PLANS / "smoke.yaml"), "--dry-run", "-b", "cpu-smoke/gpt-oss",
                                 "--workspace", str(tmp_path / "ws")])
    assert result.exit_code == 2 and "did you mean 'cpu-smoke/gpt-oss-120b'" in result.output


def test_the_review_shows_how_each_run_is_measured(tmp_path: Path) -> None:
    [qwen] = launch.reviews(plans.load(PLANS / "qwen3-vl-dynamo-50-50.yaml"), tmp_path / "ws")
    measuring = qwen["measuring"]
    assert measuring["harness"] == "endpoints" and len(measuring["runs"]) == 3   # one client run per scenario
    by_label = {r["label"].split("/", 2)[2]: r for r in measuring["runs"]}
    interactive = by_label["Interactive/performance"]["config"]
    assert interactive["type"] == "online" and interactive["settings"]["load_pattern"]["type"] == "poisson"
    assert [d["name"] for d in interactive["datasets"]] == ["shopify_product_catalogue_8k::q3vl"] * 2
    assert all(r["command"][-2:] == ["--mode", "both"] for r in measuring["runs"])
    text = launch.render([qwen])
    assert "measured by the MLCommons endpoints client, 3 run(s)" in text
    assert "Interactive/performance: inference-endpoint benchmark from-config -c " in text
    assert "--mode perf" not in text and "--mode both" in text
    assert "| type: offline" in text and "| type: online" in text
    assert "shopify_product_catalogue_8k::q3vl" in text and "type: poisson" in text
    assert not (tmp_path / "ws").exists()   # a review writes nothing
    gpt = launch.render(launch.reviews(plans.load(PLANS / "smoke.yaml"), tmp_path / "ws"))
    assert "measured by loadgen (Podium's SUT), 6 run(s)" in gpt and "inference-endpoint" not in gpt
    assert "gpt-oss-120b-interactive.Server.target_qps = 10" in gpt


@pytest.mark.parametrize("name", ["gpt-oss-120b-trtllm-k8s.yaml", "qwen3-vl-dynamo-75-25.yaml",
                                  "qwen3-vl-dynamo-50-50.yaml"])
def test_both_production_plans_dry_runs_state_each_scenarios_seconds_and_gpu_hours(name: str, tmp_path: Path) -> None:
    """Kubernetes (gpt-oss-120b: loadgen's runs, accuracy runs and audits) as Slurm (Qwen3-VL: one client run per
    scenario): each scenario's seconds and GPU-hours, and the whole, are the cost model's for the plan's round."""
    plan = plans.load(PLANS / name)
    result = runner.invoke(app, ["launch", str(PLANS / name), "--dry-run", "--workspace", str(tmp_path / "ws")])
    assert result.exit_code == 0, result.output
    stated = {m["scenario"]: (int(m["runs"]), int(m["s"]), float(m["gpu_hours"])) for m in re.finditer(
        r"predicted (?P<scenario>\w+): (?P<runs>\d+) run\(s\), (?P<s>\d+) s, (?P<gpu_hours>[\d.]+) GPU-hours",
        result.output)}
    real = cost.real_round(plan)
    gpus = real["gpus"]
    expected: dict[str, list[float]] = {}
    for run, seconds in real["runs"].items():
        expected.setdefault(run.split("/")[2], []).append(seconds)
    assert stated == {s: (len(v), round(sum(v)), round(sum(v) * gpus / 3600, 3)) for s, v in expected.items()}
    total = sum(real["runs"].values())
    assert (f"predicted in all: {len(real['runs'])} run(s), {total:.0f} s ({total / 3600:.2f} h), "
            f"{real['gpu_hours']:g} GPU-hours on {gpus} GPUs") in result.output
    [review] = _json(PLANS / name, tmp_path)
    assert review["predicted"]["gpu_hours"] == real["gpu_hours"] and review["predicted"]["gpus"] == gpus
    assert {s: t["seconds"] for s, t in review["predicted"]["scenarios"].items()} == pytest.approx(
        {s: sum(v) for s, v in expected.items()}, abs=0.1)
    if plan.benchmarks[0].engine.launcher == "kubernetes":   # 8 runs: 4 per scenario, their audits' own lengths
        assert {s: n for s, (n, _, _) in stated.items()} == {"Offline": 4, "Server": 4}
        assert "predicted Server/TEST09: 6396 samples, 733 s" in result.output
