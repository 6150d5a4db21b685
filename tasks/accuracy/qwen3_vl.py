"""Qwen3-VL hierarchical F1 over product categories, as `multimodal/qwen3-vl/.../evaluation.py` defines it.

Each log entry's data is the UTF-8 answer, validated as the reference's `ProductMetadata` (schema.py): a JSON object
with exactly `category` (str), `brand` (str) and `is_secondhand` (bool), no other key (`extra="forbid"`), pydantic's
JSON parsing (no null for a field, no code fence around the object; a duplicate key keeps its last value). An answer
that fails is scored as a category of pad levels, as many as the true path has: it adds to the predicted and true
lengths and matches nothing. Paths split on " > ", each level stripped; per sample the intersection is the longest
common prefix (counting stops at the first mismatch, so a right leaf under a wrong parent scores nothing):

    hP = sum(inter) / sum(pred_len),  hR = sum(inter) / sum(true_len),  hF1 = 2 hP hR / (hP + hR)   (0 when both 0)

Every log entry counts, a repeated qsl_idx too (with a warning naming it), as the reference does. Only hF1 is gated
(F1_HIERARCHICAL); "Brand F1 Score" and "Is_secondhand F1 Score" are reported under the reference's names
(`qwen3_vl_fields`). accuracy.txt holds `{"f1": <hF1>}` on one line, which the checker's pattern reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from submission.rules.evaluation import evaluation_constant
from tasks.accuracy import AccuracyResult
from tasks.accuracy.common import entry_text, log_entries, repeat_note
from tasks.accuracy.qwen3_vl_fields import binary_f1, brand_f1, rejected_secondhand
from tasks.datasets.requests import ProductMetadata
from tasks.datasets.shopify import read_products

BENCHMARK = "qwen3-vl-235b-a22b"
PAD = "<|pred-category-pad|>"
BRAND_PAD = "<|__PRED_BRAND_PAD__|>"   # evaluation.py _PRED_BRAND_PAD: a rejected answer's brand


def prefix_components(predicted: str, true: str, separator: str) -> tuple[int, int, int]:
    """(intersection, predicted length, true length) of two category paths."""
    pred = [level.strip() for level in predicted.split(separator)]
    truth = [level.strip() for level in true.split(separator)]
    inter = 0
    for p, t in zip(pred, truth, strict=False):
        if p != t:
            break
        inter += 1
    return inter, len(pred), len(truth)


def hierarchical_f1(pairs: list[tuple[str, str]], separator: str = " > ") -> float:
    inter = pred_len = true_len = 0
    for predicted, true in pairs:
        i, p, t = prefix_components(predicted, true, separator)
        inter, pred_len, true_len = inter + i, pred_len + p, true_len + t
    hp = inter / pred_len if pred_len else 0.0
    hr = inter / true_len if true_len else 0.0
    return 0.0 if hp + hr == 0 else 2 * hp * hr / (hp + hr)


def parse_answer(text: str | bytes) -> ProductMetadata | None:
    """The answer as the reference validates it (`ProductMetadata.model_validate_json`), or None when it fails."""
    try:
        return ProductMetadata.model_validate_json(text)
    except ValidationError:
        return None


@dataclass(frozen=True)
class Qwen3VLCategoryF1:
    name: str = BENCHMARK

    def evaluate(self, accuracy_log: Path, dataset: Path, tokenizer: Path | None) -> AccuracyResult:
        products = read_products(dataset, accuracy=True).products
        separator = evaluation_constant(BENCHMARK, "category_separator")
        entries, repeated = log_entries(accuracy_log, len(products), Path(dataset))
        truths = [products[entry.qsl_idx] for entry in entries]
        answers = [parse_answer(entry_text(entry)) for entry in entries]
        drawn = rejected_secondhand([a is not None for a in answers], [t.categories for t in truths],
                                    seed=evaluation_constant(BENCHMARK, "random_seed"),
                                    workers=evaluation_constant(BENCHMARK, "chunk_workers"))
        categories, brands, secondhand = [], [], []
        for answer, truth, draw in zip(answers, truths, drawn, strict=True):
            levels = len(truth.category.split(separator))
            categories.append((answer.category if answer else separator.join([PAD] * levels), truth.category))
            brands.append((answer.brand if answer else BRAND_PAD, truth.brand or ""))
            secondhand.append((answer.is_secondhand if answer else bool(draw), bool(truth.is_secondhand)))
        threshold = evaluation_constant(BENCHMARK, "brand_match_ratio")
        reported = {"Brand F1 Score": brand_f1(brands, threshold), "Is_secondhand F1 Score": binary_f1(secondhand)}
        rejected = answers.count(None)
        notes = (*repeat_note(repeated, accuracy_log),
                 f"{rejected} of {len(entries)} answer(s) did not validate against the schema (scored as pad "
                 "categories, pad brands and random is_secondhand, as the reference does)",
                 *(f"{name}: {value:.6f} (reported, not gated)" for name, value in reported.items()))
        return AccuracyResult({"F1_HIERARCHICAL": hierarchical_f1(categories, separator)}, len(entries), notes,
                              reported=reported)

    def accuracy_txt(self, result: AccuracyResult) -> str:
        return "\n".join(["Results", "", json.dumps({"f1": result.metrics["F1_HIERARCHICAL"]}), "", *result.notes,
                          f"num_samples: {result.samples}"]) + "\n"


EVALUATOR = Qwen3VLCategoryF1()
