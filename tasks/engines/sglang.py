"""SGLang: one OpenAI-compatible server, `PYTHON -m sglang.launch_server --model-path MODEL ...` (docs/engines.md,
"SGLang"). One instance is one process on one node (TP, EP and DP attention inside it); more are `engine.replicas`.

The engine is never imported: the version comes from package metadata, the server from its CLI, whose flags Podium
checks with SGLang's own parser (tests/integration/test_sglang_argv.py). `--enable-metrics` is always given: SGLang
serves its Prometheus page (`/metrics`) only with it. SGLang 0.5.4 takes token-id prompts on `/v1/completions` but
streams text only (its OpenAI completions stream has no token ids: `CompletionResponseStreamChoice`, srt/entrypoints/
openai/protocol.py; logprobs carry token text, serving_completions.py forces `return_text_in_logprobs`), so the
harness re-tokenizes the text with the model's tokenizer, as the reference's SGLang backend does (language/deepseek-r1/
backends/sglang_backend.py encodes the generated text), and counts where that differs from the usage SGLang reports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from submission.plan.engine_options import OptionsLike, SglangOptions
from tasks.engines import Endpoint, EngineBackend, Placement, ProcessSpec
from tasks.engines.common import OFFLINE_ENV, check_checkpoint, engine_version, gpu_env, ready_probes, served_name

DISTS = ("sglang",)
LAUNCH_SERVER = "sglang.launch_server"


def engine_flags(o: SglangOptions) -> list[str]:
    """The engine flags of an SGLang server (parallelism, memory, scheduler, kernels, speculative decoding), each as
    SGLang 0.5.4's `ServerArgs.add_cli_args` spells it."""
    args = ["--tp-size", str(o.tensor_parallel_size)]
    for flag, value in (("--pp-size", o.pipeline_parallel_size if o.pipeline_parallel_size > 1 else None),
                        ("--ep-size", o.expert_parallel_size),
                        ("--dp-size", o.data_parallel_size if o.data_parallel_size > 1 else None),
                        ("--mem-fraction-static", o.mem_fraction_static),
                        ("--chunked-prefill-size", o.chunked_prefill_size),
                        ("--cuda-graph-max-bs", o.cuda_graph_max_bs),
                        ("--max-running-requests", o.max_running_requests),
                        ("--context-length", o.context_length), ("--dtype", o.dtype),
                        ("--kv-cache-dtype", o.kv_cache_dtype), ("--quantization", o.quantization),
                        ("--attention-backend", o.attention_backend), ("--random-seed", o.random_seed)):
        if value is not None:
            args += [flag, str(value)]
    if o.enable_dp_attention:
        args.append("--enable-dp-attention")
    if o.cuda_graph_bs:
        args += ["--cuda-graph-bs", *map(str, o.cuda_graph_bs)]
    if o.trust_remote_code:
        args.append("--trust-remote-code")
    return args + speculative_flags(o) + ["--enable-metrics"]


def speculative_flags(o: SglangOptions) -> list[str]:
    """`--speculative-*` for the options' speculative decoding (none without it). The draft model path is given only
    when the plan names one: SGLang drafts DeepSeek-V3-style models with the served checkpoint's own MTP layer
    (srt/server_args.py:1314-1327 at 0.5.4)."""
    s = o.speculative
    if s is None:
        return []
    args = ["--speculative-algorithm", s.algorithm, "--speculative-num-steps", str(s.num_steps),
            "--speculative-eagle-topk", str(s.eagle_topk)]
    if s.num_draft_tokens is not None:
        args += ["--speculative-num-draft-tokens", str(s.num_draft_tokens)]
    if s.draft_model_path is not None:
        args += ["--speculative-draft-model-path", s.draft_model_path]
    return args


class SglangBackend(EngineBackend):
    name = "sglang"
    ports_needed = 1

    def version(self, options: OptionsLike | None = None) -> str:
        o = self.options(options or {})
        return engine_version("SGLang", o.version, o.python, DISTS,
                              fix="install sglang for options.python, or pin options.version when it runs in a "
                                  "container")

    def build(self, options: OptionsLike, model_dir: Path, out_dir: Path, runner: Any) -> list[str]:
        """SGLang needs no engine build: check the checkpoint."""
        return runner.check_checkpoint(model_dir, check_checkpoint(model_dir))

    def processes(self, options: OptionsLike, model_dir: Path, placement: Placement,
                  build_dir: Path | None = None) -> list[ProcessSpec]:
        o = self.options(options)
        port, model = placement.node(0).ports[0], served_name(o, model_dir)
        argv = [o.python, "-m", LAUNCH_SERVER, "--model-path", str(model_dir), "--served-model-name", model,
                "--host", placement.bind_host(0), "--port", str(port), *engine_flags(o), *o.extra_args]
        gpu_ids = tuple(range(o.server_gpus()))
        env = {**OFFLINE_ENV, **gpu_env(gpu_ids, placement.platform), **o.env}
        return [ProcessSpec(role="server", name="sglang-server", argv=tuple(argv), env=env,
                            host=placement.address(0, "sglang-server"), port=port, gpus=len(gpu_ids),
                            gpu_ids=gpu_ids, probes=ready_probes(model), bind=placement.bind)]

    def endpoint(self, options: OptionsLike, model_dir: Path, processes: list[ProcessSpec]) -> Endpoint:
        server = processes[0]
        tokenizer = model_dir / "tokenizer.json"
        return Endpoint(base_url=f"http://{server.host}:{server.port}", model=served_name(self.options(options),
                                                                                         model_dir),
                        accepts_token_ids=True, returns_token_ids=False,
                        tokenizer=str(tokenizer) if tokenizer.is_file() else None)


BACKEND = SglangBackend()
