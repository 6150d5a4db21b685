"""The CPU smoke engine's VLM leg: `transformers serve` over the tiny LLaVA of `vlm_model.py`.

The same CLI as the text smoke engine, without `--continuous-batching` (its batching path does not take images);
requests are served one at a time. Chat requests carry images as base64 data URLs. `transformers serve` rejects
fields outside the OpenAI schema (top_k, min_p, repetition_penalty, ...), so the endpoint drops every sampling
field the reference sets beyond temperature, top_p and max_tokens; the smoke plan runs it greedy.
"""

from __future__ import annotations

from typing import Any, ClassVar

from tasks.engines.smoke.llm import UNSUPPORTED_FIELDS, SmokeBackend


class SmokeVlmBackend(SmokeBackend):
    name = "smoke-vlm"
    serve_flags = ()
    ready_path = "/v1/chat/completions"
    ready_body: ClassVar[dict[str, Any]] = {"max_tokens": 1, "messages": [{"role": "user", "content": "the"}]}
    drop_fields = UNSUPPORTED_FIELDS | {"presence_penalty", "frequency_penalty"}


BACKEND = SmokeVlmBackend()
