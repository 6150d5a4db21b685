"""Speculative decoding as a plan states it (`engine.options.speculative` of the engines that have it: sglang), and the
round's rule for it (`serving.speculative_decoding` in rules/<round>.yaml), checked when a closed submission plan
loads.

Speculative decoding changes only how fast tokens come, yet MLPerf allows it for few benchmark/scenario pairs and only
in the reference's form (inference_rules.adoc, appendix-speculative-decoding): the reference MTP head at the precision
provided, the reference algorithm and configuration. The engine runs it only for the scenarios the plan names
(`scenarios`: the engine is launched without it for the others, `EngineOptions.for_scenario`).

    speculative_problems(rules.benchmark("deepseek-r1"), options, "fp8")
    # [("engine.options.speculative.num_steps", "speculative_decoding", "2 is not the appendix's 3",
    #   "set num_steps: 3")]
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from submission.base.schema import Input

if TYPE_CHECKING:
    from submission.rules import BenchmarkRules

ScenarioName = Literal["Offline", "Server", "Interactive"]
RULE = "speculative_decoding"
FIELD = "engine.options.speculative"


class Speculative(Input):
    """One engine's speculative decoding: the algorithm, its draft steps, the draft tree's top-k, the tokens verified
    per step, the draft model (None: the served checkpoint's own MTP head), and the scenarios whose engine runs it."""

    algorithm: str = Field(description="the engine's speculative algorithm, e.g. SGLang's EAGLE (NEXTN: its alias)")
    num_steps: int = Field(ge=1, description="draft steps per verification (SGLang --speculative-num-steps)")
    eagle_topk: int = Field(1, ge=1, description="draft tokens kept per step (--speculative-eagle-topk): 1 is a chain")
    num_draft_tokens: int | None = Field(None, ge=1, description="tokens verified per step "
                                         "(--speculative-num-draft-tokens); None: the engine's (num_steps + 1 at top-k "
                                         "1)")
    draft_model_path: str | None = Field(None, description="a separate draft model; None: the MTP head of the served "
                                         "checkpoint (--speculative-draft-model-path)")
    scenarios: tuple[ScenarioName, ...] = Field(("Interactive",), min_length=1, description="the scenarios whose "
                                                "engine runs it; the others' engine is launched without it")


def speculative_problems(rules: BenchmarkRules, options: Any, weight_type: str) -> Iterator[tuple[str, str, str, str]]:
    """(plan field under the benchmark, rule, what is wrong, the fix) for each way `options.speculative` breaks the
    benchmark's speculative-decoding rule; `weight_type`: the plan's model.weight_data_types, the precision the served
    checkpoint (and so its MTP head) holds."""
    spec: Speculative | None = getattr(options, "speculative", None)
    if spec is None:
        return
    rule = rules.serving.speculative_decoding if rules.serving else None
    if rule is None:
        yield (FIELD, RULE, f"{rules.name} allows no speculative decoding", "remove speculative")
        return
    outside = [s for s in spec.scenarios if s not in rule.scenarios]
    if outside:
        yield (f"{FIELD}.scenarios", RULE, f"{', '.join(outside)} may not use it (only {', '.join(rule.scenarios)})",
               f"set scenarios: [{', '.join(rule.scenarios)}]")
    if spec.algorithm not in rule.algorithms:
        yield (f"{FIELD}.algorithm", RULE, f"{spec.algorithm} is not the reference's {rule.style}",
               f"set algorithm: {rule.algorithms[0]}")
    for name, want in (("num_steps", rule.num_steps), ("eagle_topk", rule.eagle_topk)):
        if getattr(spec, name) != want:
            yield (f"{FIELD}.{name}", RULE, f"{getattr(spec, name)} is not the appendix's {want}",
                   f"set {name}: {want}")
    if spec.num_draft_tokens is not None and spec.num_draft_tokens != rule.num_draft_tokens:
        yield (f"{FIELD}.num_draft_tokens", RULE, f"{spec.num_draft_tokens} is not the {rule.num_draft_tokens} the "
               f"appendix's configuration implies (num_steps + 1 at top-k 1)",
               f"set num_draft_tokens: {rule.num_draft_tokens} or remove it")
    if spec.draft_model_path is not None:
        yield (f"{FIELD}.draft_model_path", RULE, f"{spec.draft_model_path} is another head than the reference's "
               f"({rule.mtp_head}: the served checkpoint's own)", "remove draft_model_path")
    quantization = getattr(options, "quantization", None)
    if weight_type.split()[0].lower() != rule.precision or quantization not in (None, rule.precision):
        given = f"options.quantization {quantization}" if quantization not in (None, rule.precision) else \
            f"model.weight_data_types {weight_type}"
        yield (f"{FIELD}", RULE, f"the MTP head would not be at the reference's precision ({rule.precision}, as "
               f"{rule.mtp_head} provides it): {given}", f"serve the {rule.precision} reference checkpoint with no "
               "quantization override, or remove speculative")
