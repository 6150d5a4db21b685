"""Accuracy evaluators: one per benchmark (or smoke reference set), looked up by name.

An evaluator reads a loadgen accuracy log and the data set, returns the metric values and writes `accuracy.txt`
in the format the checker's ACC_PATTERN reads.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from submission.errors import PlanError, did_you_mean


@dataclass(frozen=True)
class AccuracyResult:
    metrics: dict[str, float]
    samples: int
    notes: tuple[str, ...] = field(default_factory=tuple)


class Evaluator(Protocol):
    name: str

    def evaluate(self, accuracy_log: Path, dataset: Path, tokenizer: Path | None) -> AccuracyResult: ...

    def accuracy_txt(self, result: AccuracyResult) -> str: ...


EVALUATORS = {"smoke-exact-match": "tasks.accuracy.smoke"}


def evaluator(name: str) -> Evaluator:
    if name not in EVALUATORS:
        raise PlanError(f"unknown accuracy evaluator {name!r}", fix=did_you_mean(name, EVALUATORS))
    return importlib.import_module(EVALUATORS[name]).EVALUATOR


def score(name: str, run_dir: Path, dataset: Path, tokenizer: Path | None) -> AccuracyResult:
    """Score the accuracy log of a loadgen run folder and write its accuracy.txt there."""
    ev = evaluator(name)
    result = ev.evaluate(run_dir / "mlperf_log_accuracy.json", dataset, tokenizer)
    (run_dir / "accuracy.txt").write_text(ev.accuracy_txt(result))
    return result
