"""The round's serving rules for a benchmark (`serving:` in `rules/<round>.yaml`), checked when a closed-division
submission plan loads: prefix caching off, no image-budget override of the multimodal processor, the reference's
sampling and guided-decoding choice, speculative decoding only as the round's appendix allows it
(submission/plan/speculative.py).

    serving_problems("benchmarks.0", rules.benchmark(b.benchmark), b.engine.config(), b.generation, "fp8")
    # ["benchmarks.0.engine.options.enable_prefix_caching: not set ..., which breaks the serving rule ...; set ..."]

Each problem names the plan field, the rule with its source, and the fix. The smoke profile (a tiny model decoding
greedily on a CPU, never a valid submission) and the open division are not checked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from submission.plan.engine_options import EngineOptions
from submission.plan.speculative import speculative_problems
from submission.rules.generation import reference_generation

if TYPE_CHECKING:
    from submission.rules import BenchmarkRules, ServingRules


class Generation(Protocol):
    """What the checks read of a plan's `generation` section."""

    temperature: float
    guided_decoding: bool


MM_FLAG = "--mm-processor-kwargs"


def serving_problems(where: str, rules: BenchmarkRules, options: EngineOptions, generation: Generation,
                     weight_type: str = "") -> list[str]:
    """Everything in a plan's benchmark entry (at plan field `where`: its typed engine options, its generation
    section and its model.weight_data_types) that breaks the benchmark's serving rules."""
    serving = rules.serving
    speculative = [f"{where}.{field}: {problem}, which breaks the serving rule {rule} of {rules.name} (source: "
                   f"{_speculative_source(rules)}); {fix}"
                   for field, rule, problem, fix in speculative_problems(rules, options, weight_type)]
    if serving is None:
        return speculative
    return [f"{where}.{field}: {problem}, which breaks the serving rule {rule} of {rules.name} "
            f"(source: {serving.source}); {fix}" for field, rule, problem, fix in (
                *_prefix_caching(options, serving), *_image_budget(options, serving),
                *_sampling(rules.name, generation, serving))] + speculative


def _speculative_source(rules: BenchmarkRules) -> str:
    rule = rules.serving.speculative_decoding if rules.serving else None
    return rule.source if rule else "inference_rules.adoc appendix-speculative-decoding, which does not name it"


Problem = tuple[str, str, str, str]   # plan field (under the benchmark), rule, what is wrong, the fix


def _prefix_caching(options: EngineOptions, serving: ServingRules) -> Iterator[Problem]:
    if serving.prefix_caching is None or not hasattr(options, "enable_prefix_caching"):
        return   # engines without vLLM's switch (TensorRT-LLM, external, smoke, simulated) are not checked here
    if options.enable_prefix_caching is not serving.prefix_caching:
        want = str(serving.prefix_caching).lower()
        given = "not set (vLLM's and Dynamo's default is on)" if options.enable_prefix_caching is None else \
            str(options.enable_prefix_caching).lower()
        yield ("engine.options.enable_prefix_caching", f"prefix_caching: {want}", given,
               f"set enable_prefix_caching: {want}")


def _image_budget(options: EngineOptions, serving: ServingRules) -> Iterator[Problem]:
    if not serving.image_budget_keys:
        return
    overrides: list[tuple[str, Any]] = []
    if getattr(options, "mm_processor_kwargs", None):
        overrides.append(("engine.options.mm_processor_kwargs", options.mm_processor_kwargs))
    for field, args in options.free_args().items():
        overrides += [(f"engine.options.{field}", value) for value in _mm_flag_values(args)]
    for field, value in overrides:
        keys = sorted(set(_keys(value)) & set(serving.image_budget_keys)) if isinstance(value, dict) else None
        if keys is None:
            yield (field, "image_budget_keys", f"{MM_FLAG} {value!r} is not a JSON object Podium can read",
                   "remove it: images reach the model as the data set has them")
        elif keys:
            yield (field, "image_budget_keys", f"the multimodal processor override sets {', '.join(keys)} (an "
                   "image or its visual-token count changes)", f"remove {'them' if len(keys) > 1 else 'it'}")


def _mm_flag_values(args: tuple[str, ...]) -> Iterator[Any]:
    """The values `--mm-processor-kwargs` gets in an argv fragment: `F JSON`, `F=JSON`, or vLLM's dotted
    `F.key value` / `F.key=value` (one key each)."""
    for i, arg in enumerate(args):
        name, eq, inline = arg.partition("=")
        value = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
        if name == MM_FLAG:
            try:
                yield json.loads(value)
            except ValueError:
                yield value
        elif name.startswith(MM_FLAG + "."):
            yield {name.removeprefix(MM_FLAG + ".").split(".")[0]: value}


def _keys(value: Any) -> Iterator[str]:
    """Every key of a nested mapping (a processor override may nest them, e.g. images_kwargs: {max_pixels: ...})."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield str(key)
            yield from _keys(inner)


def _sampling(benchmark: str, generation: Generation, serving: ServingRules) -> Iterator[Problem]:
    if serving.reference_sampling:
        reference = reference_generation(benchmark, "performance")
        if reference.temperature is not None and generation.temperature != reference.temperature:
            sampling = ", ".join(f"{k} {v:g}" for k, v in reference.request_fields().items() if k != "max_tokens")
            yield ("generation.temperature", "reference_sampling",
                   f"{generation.temperature:g} is not the reference's sampling ({sampling}: "
                   "submission/rules/generation.yaml)", f"set temperature: {reference.temperature:g}")
    if serving.guided_decoding is not None and generation.guided_decoding != serving.guided_decoding:
        want = str(serving.guided_decoding).lower()
        yield ("generation.guided_decoding", f"guided_decoding: {want}",
               f"{str(generation.guided_decoding).lower()}", f"set guided_decoding: {want}")
