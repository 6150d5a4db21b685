"""Exact match against the smoke data set's references (the tiny model's own greedy answers).

Prints the metric as gpt-oss-120b's evaluator does (`'exact_match': 100.000`), so the checker's pattern reads it.
"""

from __future__ import annotations

from pathlib import Path

from submission.base.errors import PlanError
from submission.results.logs import parse_accuracy_log
from tasks.accuracy import AccuracyResult
from tasks.datasets.prompts import read_token_prompts


class SmokeExactMatch:
    name = "smoke-exact-match"

    def evaluate(self, accuracy_log: Path, dataset: Path, tokenizer: Path | None) -> AccuracyResult:
        from tokenizers import Tokenizer

        if tokenizer is None:
            raise PlanError("the smoke evaluator needs the model's tokenizer.json")
        tok = Tokenizer.from_file(str(tokenizer))
        references = read_token_prompts(dataset, need_ground_truth=True).ground_truth or ()
        entries = parse_accuracy_log(accuracy_log)
        seen: set[int] = set()
        correct = 0
        for entry in entries:
            if entry.qsl_idx in seen:
                continue
            seen.add(entry.qsl_idx)
            text = tok.decode(entry.tokens())
            correct += text.strip() == references[entry.qsl_idx].strip()
        total = len(seen)
        value = 100.0 * correct / total if total else 0.0
        notes = (f"{correct} of {total} answers equal their reference",)
        return AccuracyResult({"exact_match": value}, total, notes)

    def accuracy_txt(self, result: AccuracyResult) -> str:
        return (f"smoke exact match against the tiny model's greedy references; {result.notes[0]}\n"
                f"{{'exact_match': {result.metrics['exact_match']:.3f}, 'num_samples': {result.samples}}}\n")


EVALUATOR = SmokeExactMatch()
