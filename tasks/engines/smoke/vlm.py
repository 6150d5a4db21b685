"""The CPU smoke engine's VLM leg: `transformers serve` over the tiny LLaVA of `smoke_vlm_model`.

The same CLI as the text smoke engine, without `--continuous-batching` (its batching path does not take images);
requests are served one at a time. Chat requests carry images as base64 data URLs. `transformers serve` rejects
fields outside the OpenAI schema (top_k, min_p, repetition_penalty, ...), so the endpoint drops every sampling
field the reference sets beyond temperature, top_p and max_tokens; the smoke plan runs it greedy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from submission.errors import LaunchError
from tasks.engines import Endpoint, HttpProbe, Placement, ProcessSpec
from tasks.engines.smoke.llm import ENGINE_ENV, UNSUPPORTED_FIELDS, SmokeBackend, _cli

DROPPED = UNSUPPORTED_FIELDS | {"presence_penalty", "frequency_penalty"}


class SmokeVlmBackend(SmokeBackend):
    name = "smoke-vlm"

    def processes(self, options: dict[str, Any], model_dir: Path, placement: Placement,
                  build_dir: Path | None = None) -> list[ProcessSpec]:
        if options:
            raise LaunchError(f"the smoke-vlm engine takes no options, got {sorted(options)}",
                              fix="remove engine.options from the plan")
        port = placement.ports[0]
        argv = (_cli(), "serve", str(model_dir), "--device", "cpu", "--host", placement.bind_host(0),
                "--port", str(port), "--log-level", "warning")
        ready = (HttpProbe("/health"),
                 HttpProbe("/v1/chat/completions", {"model": str(model_dir), "max_tokens": 1,
                                                    "messages": [{"role": "user", "content": "the"}]}))
        return [ProcessSpec(role="server", name="smoke-vlm-server", argv=argv, env=dict(ENGINE_ENV),
                            host=placement.address(0, "smoke-vlm-server"), port=port, probes=ready,
                            bind=placement.bind)]

    def endpoint(self, options: dict[str, Any], model_dir: Path, processes: list[ProcessSpec]) -> Endpoint:
        server = processes[0]
        return Endpoint(base_url=f"http://{server.host}:{server.port}", model=str(model_dir),
                        accepts_token_ids=False, returns_token_ids=False,
                        tokenizer=str(model_dir / "tokenizer.json"), drop_fields=DROPPED)


BACKEND = SmokeVlmBackend()
