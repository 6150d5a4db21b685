"""How each benchmark's reference asks for generations, as data: `rules/generation.yaml`, read into frozen models.

    reference_generation("gpt-oss-120b", "accuracy").max_tokens   # 32768

The API (`completions` with token-id prompts, or `chat` with image parts), what the accuracy log must hold
(`token_ids` as int32, or UTF-8 `text`) and the sampling settings of each mode. A smoke plan may override
max_tokens and temperature (`Sampling.merged`); everything else is the reference's.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ValidationError

from submission.base.errors import PlanError, did_you_mean
from submission.base.schema import Strict

_FILE = Path(__file__).parent / "generation.yaml"
Mode = Literal["performance", "accuracy"]
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "min_tokens", "repetition_penalty",
                   "presence_penalty", "frequency_penalty")
GREEDY_IGNORED = ("top_p", "top_k", "min_p")


class Sampling(Strict):
    max_tokens: int
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    min_tokens: int | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    reasoning_effort: Literal["low", "medium", "high"] | None = None  # baked into pre-tokenized prompts; not sent

    def request_fields(self) -> dict[str, float | int]:
        """The fields a request carries: max_tokens and every sampling value the reference sets. Under greedy
        decoding (temperature 0) the truncation knobs top_p/top_k/min_p change nothing and are not sent."""
        greedy = self.temperature == 0
        fields: dict[str, float | int] = {"max_tokens": self.max_tokens}
        fields.update({k: getattr(self, k) for k in SAMPLING_FIELDS
                       if getattr(self, k) is not None and not (greedy and k in GREEDY_IGNORED)})
        return fields

    def merged(self, *, max_tokens: int | None = None, temperature: float | None = None) -> Sampling:
        """These settings with a plan's max_tokens / temperature in place of the reference's."""
        update = {k: v for k, v in (("max_tokens", max_tokens), ("temperature", temperature)) if v is not None}
        return self.model_copy(update=update)


class GuidedDecoding(Strict):
    """The reference's `response_format` for guided decoding (its JSON schema is the answer model's)."""

    name: str
    strict: bool


class EngineGuidance(Strict):
    applies: Literal["request", "llm_api"]
    key: str | None = None      # llm_api: the LLM-API YAML key that turns it on
    example: str | None = None


class BenchmarkGeneration(Strict):
    api: Literal["completions", "chat"]
    prompt: Literal["token_ids", "chat_image"]
    output: Literal["token_ids", "text"]
    performance: Sampling
    accuracy: Sampling
    guided_decoding: GuidedDecoding | None = None

    def sampling(self, mode: Mode) -> Sampling:
        return self.performance if mode == "performance" else self.accuracy


class GenerationRules(Strict):
    rounds: tuple[str, ...]
    guided_decoding_engines: dict[str, EngineGuidance]
    guided_decoding_unsupported: dict[str, str]
    guided_decoding_clients_unsupported: dict[str, str]
    benchmarks: dict[str, BenchmarkGeneration]


@functools.lru_cache(maxsize=1)
def load_generation() -> GenerationRules:
    try:
        return GenerationRules.model_validate(yaml.safe_load(_FILE.read_text(encoding="utf-8")))
    except (yaml.YAMLError, ValidationError) as error:
        raise PlanError(f"invalid generation rules: {error}", where=str(_FILE)) from error


def benchmark_generation(benchmark: str) -> BenchmarkGeneration:
    table = load_generation().benchmarks
    if benchmark not in table:
        raise PlanError(f"no generation settings for benchmark {benchmark!r}", where=str(_FILE),
                        fix=did_you_mean(benchmark, table))
    return table[benchmark]


def reference_generation(benchmark: str, mode: Mode) -> Sampling:
    """The reference's sampling settings of `benchmark` in `mode` (performance or accuracy)."""
    return benchmark_generation(benchmark).sampling(mode)


def guided_decoding_problem(benchmark: str, engine: str, options: dict[str, Any]) -> str | None:
    """Why `generation.guided_decoding: true` cannot work for this benchmark and engine, or None when it can."""
    rules = load_generation()
    guided = [name for name, b in rules.benchmarks.items() if b.guided_decoding is not None]
    if benchmark in rules.benchmarks and rules.benchmarks[benchmark].guided_decoding is None:
        return (f"generation.guided_decoding: {benchmark}'s reference has no guided decoding (only "
                f"{', '.join(guided)}); remove it")
    if engine in rules.guided_decoding_unsupported:
        return (f"generation.guided_decoding: the {engine} engine cannot constrain decoding to the answer schema "
                f"({rules.guided_decoding_unsupported[engine]}); set guided_decoding: false or use "
                f"{' / '.join(rules.guided_decoding_engines)}")
    how = rules.guided_decoding_engines.get(engine)
    if how is None:
        return f"generation.guided_decoding: no guided decoding rule for engine {engine!r} in {_FILE.name}"
    if "response_format" in (options.get("drop_fields") or ()):
        return "generation.guided_decoding: engine.options.drop_fields drops response_format; remove it from there"
    if engine == "dynamo" and options.get("worker") == "mocker":
        return "generation.guided_decoding: Dynamo's mocker worker generates no text; use worker: vllm"
    if how.applies == "llm_api" and how.key and not (options.get("llm_api_options") or {}).get(how.key):
        return (f"generation.guided_decoding: {engine} applies response_format only with a guided decoding backend: "
                f"set engine.options.llm_api_options.{how.key}: {how.example}")
    return None
