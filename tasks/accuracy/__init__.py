"""Accuracy evaluators: one per benchmark (or smoke reference set), looked up by name.

An evaluator reads a loadgen accuracy log and the data set, returns the metric values and writes `accuracy.txt`
in the format the checker's ACC_PATTERN reads. `judge` then reads that text back with the round's patterns, as
the checker does, and compares every metric with its target and upper limit: the verdict a submitter sees the
moment the accuracy run ends.

`evaluator(benchmark)` finds the reference evaluator of each benchmark; `smoke-exact-match` scores the smoke leg.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from submission.base.errors import PlanError, did_you_mean


@dataclass(frozen=True)
class MetricVerdict:
    metric: str
    value: float | None            # as read back from accuracy.txt with the checker's pattern
    target: float | None
    upper_limit: float | None
    passed: bool

    def describe(self) -> str:
        bounds = []
        if self.target is not None:
            bounds.append(f">= {self.target:g}")
        if self.upper_limit is not None:
            bounds.append(f"<= {self.upper_limit:g}")
        shown = "missing" if self.value is None else f"{self.value:g}"
        return f"{self.metric} {shown} (target {' and '.join(bounds) or 'none'}): {'PASS' if self.passed else 'FAIL'}"


@dataclass(frozen=True)
class Verdict:
    benchmark: str
    scenario: str
    round: str
    metrics: tuple[MetricVerdict, ...]

    @property
    def passed(self) -> bool:
        return all(m.passed for m in self.metrics)

    def lines(self) -> list[str]:
        return [m.describe() for m in self.metrics]


@dataclass(frozen=True)
class AccuracyResult:
    metrics: dict[str, float]      # keyed by the checker's metric names (exact_match, ROUGE1, F1_HIERARCHICAL, ...)
    samples: int
    notes: tuple[str, ...] = field(default_factory=tuple)
    verdict: Verdict | None = None
    reported: dict[str, float] = field(default_factory=dict)   # not gated, under the reference's names


class Evaluator(Protocol):
    name: str

    def evaluate(self, accuracy_log: Path, dataset: Path, tokenizer: Path | None) -> AccuracyResult: ...

    def accuracy_txt(self, result: AccuracyResult) -> str: ...


EVALUATORS = {
    "smoke-exact-match": "tasks.accuracy.smoke",
    "smoke-vlm-exact-match": "tasks.accuracy.smoke_vlm",
    "gpt-oss-120b": "tasks.accuracy.gpt_oss",
    "qwen3-vl-235b-a22b": "tasks.accuracy.qwen3_vl",
    "llama3.1-8b": "tasks.accuracy.rouge:LLAMA3_1_8B",
    "llama2-70b-99.9": "tasks.accuracy.rouge:LLAMA2_70B",
    "deepseek-r1": "tasks.accuracy.deepseek_r1",
}


def evaluator(name: str, **options: Any) -> Evaluator:
    """The evaluator registered under `name` (a benchmark's reference one, or smoke-exact-match); `options` (e.g.
    lcb_tests for the evaluators that run LiveCodeBench code) go to its `with_options`."""
    if name not in EVALUATORS:
        raise PlanError(f"unknown accuracy evaluator {name!r}", fix=did_you_mean(name, EVALUATORS))
    module, _, attr = EVALUATORS[name].partition(":")
    found = getattr(importlib.import_module(module), attr or "EVALUATOR")
    options = {k: v for k, v in options.items() if v is not None}
    if options:
        if not hasattr(found, "with_options"):
            raise PlanError(f"evaluator {name!r} takes no options, got {sorted(options)}")
        found = found.with_options(**options)
    return found


def judge(text: str, benchmark: str, scenario: str = "Offline", round: str = "v6.1") -> Verdict:
    """Read every metric of the round's accuracy targets from accuracy.txt text (the checker's patterns) and
    compare it with its target and upper limit. A metric with a target that is absent fails."""
    from submission.rules import load_rules

    targets = load_rules(round).benchmark(benchmark).scenario(scenario).accuracy
    metrics = []
    for target in targets:
        value = target.read(text)
        passed = target.passes(value) if value is not None else not target.required
        metrics.append(MetricVerdict(target.metric, value, target.target, target.upper_limit, passed))
    return Verdict(benchmark, scenario, round, tuple(metrics))


def evaluate_log(name: str, accuracy_log: Path, dataset: Path, tokenizer: Path | None, *,
                 benchmark: str | None = None, scenario: str = "Offline", round: str = "v6.1",
                 **options: Any) -> tuple[AccuracyResult, str]:
    """Score one accuracy log: the result (with its verdict when `benchmark` is given) and accuracy.txt's text."""
    ev = evaluator(name, **options)
    result = ev.evaluate(Path(accuracy_log), Path(dataset), tokenizer and Path(tokenizer))
    text = ev.accuracy_txt(result)
    if benchmark is not None:
        result = replace(result, verdict=judge(text, benchmark, scenario, round))
    return result, text


def score(name: str, run_dir: Path, dataset: Path, tokenizer: Path | None, *, benchmark: str | None = None,
          scenario: str = "Offline", round: str = "v6.1", **options: Any) -> AccuracyResult:
    """Score the accuracy log of a loadgen run folder and write its accuracy.txt there. With `benchmark`, the
    result carries the verdict against that benchmark's targets in `scenario` of `round`."""
    result, text = evaluate_log(name, run_dir / "mlperf_log_accuracy.json", dataset, tokenizer, benchmark=benchmark,
                                scenario=scenario, round=round, **options)
    (run_dir / "accuracy.txt").write_text(text)
    return result
