"""The CPU smoke engine: `transformers serve --continuous-batching` over the tiny Llama of `model.py`.

Quirks it absorbs (transformers 5.24): prompts must be text, not token ids; responses carry text only (the harness
re-tokenizes, which is exact for the word-level smoke tokenizer); unknown request fields such as `ignore_eos` are
rejected; the model id of every request is the path the server was started with.
"""

from __future__ import annotations

import shutil
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

from submission.base.errors import LaunchError
from submission.plan.engine_options import OptionsLike
from tasks.engines import Endpoint, EngineBackend, HttpProbe, Placement, ProcessSpec
from tasks.engines.common import OFFLINE_ENV

# A fixed KV cache of 8192 tokens: 64 concurrent smoke requests need under 4k. Left to size itself, the
# continuous-batching cache took 14 GB of resident memory for this 1.7 MB model (measured: 1.0 GB with the cap).
KV_BLOCK_TOKENS, KV_BLOCKS = 32, 256
# One torch thread: on two shared cores, a second OpenMP thread spin-waits against the load generator and the
# flow, and latency tails explode (Interactive, 10 q/s, a busy neighbour: TPOT p99 26.8 ms with the default,
# 3.8 ms with one thread; TTFT p99 429 ms vs 21 ms; Offline throughput 1163 -> 1482 tokens/s).
ENGINE_ENV = {**OFFLINE_ENV, "OMP_NUM_THREADS": "1"}
# Request fields of vLLM / TRT-LLM that `transformers serve` rejects with HTTP 422 (it takes the OpenAI fields only).
UNSUPPORTED_FIELDS = frozenset({"ignore_eos", "min_tokens", "stream_options", "top_k", "min_p", "repetition_penalty",
                                "return_token_ids", "skip_special_tokens", "detokenize"})


def _cli() -> str:
    """The `transformers` CLI of this interpreter's environment (or PATH)."""
    beside = Path(sys.executable).with_name("transformers")
    found = str(beside) if beside.exists() else shutil.which("transformers")
    if not found:
        raise LaunchError("the `transformers` CLI is not installed",
                          fix="install the smoke engine: pip install -e '.[smoke]'")
    return found


class SmokeBackend(EngineBackend):
    """The text leg; the VLM leg (vlm.py) is this class with other values for the class attributes below."""

    name = "smoke"
    ports_needed = 1
    # `transformers serve` flags between the model and --device: continuous batching with the fixed KV cache
    serve_flags: tuple[str, ...] = ("--continuous-batching", "--cb-block-size", str(KV_BLOCK_TOKENS),
                                    "--cb-num-blocks", str(KV_BLOCKS))
    # the request that answers once the model is loaded: its path and body (the model field is added)
    ready_path = "/v1/completions"
    ready_body: ClassVar[dict[str, Any]] = {"prompt": "the", "max_tokens": 1}
    drop_fields = UNSUPPORTED_FIELDS

    def version(self, options: OptionsLike | None = None) -> str:
        _cli()   # the CLI must be there before anything counts on it
        try:
            return f"transformers {metadata.version('transformers')}"
        except metadata.PackageNotFoundError:
            raise LaunchError("transformers is not installed", fix="pip install -e '.[smoke]'") from None

    def processes(self, options: OptionsLike, model_dir: Path, placement: Placement,
                  build_dir: Path | None = None) -> list[ProcessSpec]:
        o = self.options(options)   # SmokeOptions: the device and env; any other option is refused, by name
        port, server = placement.ports[0], f"{self.name}-server"
        argv = (_cli(), "serve", str(model_dir), *self.serve_flags, "--device", o.device,
                "--host", placement.bind_host(0), "--port", str(port), "--log-level", "warning")
        ready = (HttpProbe("/health"), HttpProbe(self.ready_path, {"model": str(model_dir), **self.ready_body}))
        gpu = {"gpus": 1, "gpu_ids": (0,), "env": {**ENGINE_ENV, "CUDA_VISIBLE_DEVICES": "0", **o.env}} \
            if o.device == "cuda" else {"env": {**ENGINE_ENV, **o.env}}
        return [ProcessSpec(role="server", name=server, argv=argv, host=placement.address(0, server), port=port,
                            probes=ready, bind=placement.bind, **gpu)]

    def endpoint(self, options: OptionsLike, model_dir: Path, processes: list[ProcessSpec]) -> Endpoint:
        server = processes[0]
        return Endpoint(base_url=f"http://{server.host}:{server.port}", model=str(model_dir),
                        accepts_token_ids=False, returns_token_ids=False,
                        tokenizer=str(model_dir / "tokenizer.json"), drop_fields=self.drop_fields)


BACKEND = SmokeBackend()
