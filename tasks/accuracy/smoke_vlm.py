"""Exact match of the VLM smoke leg: each served answer (UTF-8 in the accuracy log) against the tiny LLaVA's own
greedy answer to the same request (`reference_answer` in the smoke parquet, made by `engines/smoke/vlm_data.py`).

Prints `'exact_match': X` like the text smoke evaluator. 100 means every image reached the model intact.
"""

from __future__ import annotations

from pathlib import Path

from submission.base.errors import PlanError
from tasks.accuracy import AccuracyResult
from tasks.accuracy.common import entry_text, unique_entries


def references(dataset: Path) -> list[str]:
    import pyarrow.parquet as pq

    table = pq.read_table(dataset)
    if "reference_answer" not in table.column_names:
        raise PlanError(f"no reference_answer column (found {sorted(table.column_names)})", where=str(dataset),
                        fix="build the VLM smoke data set with tasks.engines.smoke.vlm_data")
    return [str(v or "") for v in table.column("reference_answer").to_pylist()]


class SmokeVlmExactMatch:
    name = "smoke-vlm-exact-match"

    def evaluate(self, accuracy_log: Path, dataset: Path, tokenizer: Path | None) -> AccuracyResult:
        refs = references(Path(dataset))
        entries = unique_entries(accuracy_log, len(refs), Path(dataset))
        correct = sum(entry_text(e).strip() == refs[e.qsl_idx].strip() for e in entries)
        value = 100.0 * correct / len(entries) if entries else 0.0
        return AccuracyResult({"exact_match": value}, len(entries),
                              (f"{correct} of {len(entries)} answers equal the offline greedy references",))

    def accuracy_txt(self, result: AccuracyResult) -> str:
        return (f"VLM smoke exact match against the tiny LLaVA's greedy references; {result.notes[0]}\n"
                f"{{'exact_match': {result.metrics['exact_match']:.3f}, 'num_samples': {result.samples}}}\n")


EVALUATOR = SmokeVlmExactMatch()
