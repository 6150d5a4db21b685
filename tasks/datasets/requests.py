"""Request builders: what the harness sends for sample `i` of a benchmark's data set, the way the reference does.

    builder = build_requests("gpt-oss-120b", "acc/acc_eval_inputs.parquet", "accuracy")
    builder.path, builder.body(0)   # "/v1/completions", {"prompt": [token ids], "max_tokens": 32768, ...}

Text benchmarks send their pre-tokenized prompts as token ids on `/v1/completions`; Qwen3-VL sends a chat request
whose user message holds the product text and the original image as a base64 data URL. Sampling settings are the
reference's (`submission/rules/generation.yaml`); a plan may override max_tokens and temperature (the smoke
profile does). Bodies are engine-neutral: the client adds `model` and `stream`, turns token ids into text for
engines that take text only (recording that it re-tokenizes), and drops the fields an engine rejects.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from submission.base.errors import PlanError
from submission.rules.generation import Mode, Sampling, benchmark_generation
from tasks.datasets.prompts import PromptSet, read_prompts
from tasks.datasets.shopify import Product, ProductSet, read_products

PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


# As the reference's model (multimodal/qwen3-vl schema.py `ProductMetadata`): these three fields, typed, and no other
# key. The docstring is the schema's description, which the system prompt and response_format send to the model.
class ProductMetadata(BaseModel):
    """What Qwen3-VL must answer for a product: the JSON the evaluator validates."""

    model_config = ConfigDict(extra="forbid")

    category: str = Field(description="the single most specific correct category, copied from the candidates")
    brand: str = Field(description="the brand of the product")
    is_secondhand: bool = Field(description="true when the product is used or second-hand")


SYSTEM_PROMPT = (
    "You read a product listing: its title, its description, a picture of it and a list of candidate categories.\n"
    "Answer with one JSON object that has exactly these fields: category, brand, is_secondhand.\n"
    "For category, pick exactly one of the candidate categories: the most specific one that is correct.\n"
    "Descriptions sometimes wrap the product facts in source code (HTML, CSS, JavaScript and the like): use the "
    "facts and ignore the code.\n"
    "Reply with the JSON object alone: no code fence, no text around it. It must match this JSON schema:\n"
    "{schema}\n"
)


class RequestBuilder(Protocol):
    path: str
    output: Literal["token_ids", "text"]
    sampling: Sampling

    def __len__(self) -> int: ...

    def body(self, index: int) -> dict[str, Any]: ...


class CompletionRequests:
    """Token-id prompts on `/v1/completions`; the accuracy log carries the output token ids as int32."""

    path = PATHS["completions"]
    output: Literal["token_ids", "text"] = "token_ids"

    def __init__(self, prompts: PromptSet, sampling: Sampling) -> None:
        self.prompts = prompts
        self.sampling = sampling
        self._fields = sampling.request_fields()

    def __len__(self) -> int:
        return len(self.prompts)

    def body(self, index: int) -> dict[str, Any]:
        return {"prompt": list(self.prompts.prompts[index]), **self._fields}


class ChatImageRequests:
    """Qwen3-VL: a system message with the task and the answer's JSON schema, then the product text and image."""

    path = PATHS["chat"]
    output: Literal["token_ids", "text"] = "text"

    def __init__(self, products: ProductSet, sampling: Sampling, system_prompt: str | None = None,
                 response_format: dict[str, Any] | None = None) -> None:
        self.products = products
        self.sampling = sampling
        schema = json.dumps(ProductMetadata.model_json_schema(), indent=2)
        self.system = (system_prompt or SYSTEM_PROMPT).replace("{schema}", schema)
        self._fields = sampling.request_fields() | ({"response_format": response_format} if response_format else {})

    def __len__(self) -> int:
        return len(self.products)

    def user_text(self, product: Product) -> str:
        return (f"Title:\n{product.title}\n\nDescription:\n{product.description}\n\n"
                f"Candidate categories (JSON):\n{json.dumps(list(product.categories), ensure_ascii=False)}\n")

    def body(self, index: int) -> dict[str, Any]:
        product = self.products.products[index]
        messages = [
            {"role": "system", "content": self.system},
            {"role": "user", "content": [
                {"type": "text", "text": self.user_text(product)},
                {"type": "image_url", "image_url": {"url": product.data_url()}},
            ]},
        ]
        return {"messages": messages, **self._fields}


def response_format(benchmark: str) -> dict[str, Any]:
    """The reference's guided-decoding `response_format` (task.py `formulate_loaded_sample`): a JSON schema named
    and marked strict as `rules/generation.yaml` says, the schema being the answer model's (no other key allowed)."""
    guided = benchmark_generation(benchmark).guided_decoding
    if guided is None:
        raise PlanError(f"{benchmark} has no guided decoding in its reference", fix="set guided_decoding: false")
    return {"type": "json_schema", "json_schema": {"name": guided.name, "schema": ProductMetadata.model_json_schema(),
                                                   "strict": guided.strict}}


def build_requests(benchmark: str, dataset: str | Path, mode: Mode, *, max_tokens: int | None = None,
                   temperature: float | None = None, system_prompt: str | None = None,
                   guided_decoding: bool = False) -> RequestBuilder:
    """The request builder of `benchmark` over `dataset` for a performance or accuracy run; with `guided_decoding`
    every request carries the answer schema as `response_format` (Qwen3-VL)."""
    generation = benchmark_generation(benchmark)
    sampling = generation.sampling(mode).merged(max_tokens=max_tokens, temperature=temperature)
    fmt = response_format(benchmark) if guided_decoding else None
    if generation.prompt == "chat_image":
        return ChatImageRequests(read_products(dataset), sampling, system_prompt, fmt)
    if fmt is not None:
        raise PlanError(f"guided decoding needs a chat benchmark; {benchmark} sends completions")
    return CompletionRequests(read_prompts(benchmark, dataset), sampling)
