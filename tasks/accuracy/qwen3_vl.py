"""Qwen3-VL hierarchical F1 over product categories, as `multimodal/qwen3-vl/.../evaluation.py` defines it.

Each log entry's data is the UTF-8 answer. It must be a JSON object matching {category: str, brand: str,
is_secondhand: bool}; one that is not (malformed JSON, a missing field, a wrong type, an empty answer) is scored
as a category of pad levels, as many as the true path has: it adds to the predicted and true lengths and matches
nothing. Paths split on " > ", each level stripped; per sample the intersection is the longest common prefix
(counting stops at the first mismatch, so a right leaf under a wrong parent scores nothing). Over all samples:

    hP = sum(inter) / sum(pred_len),  hR = sum(inter) / sum(true_len),  hF1 = 2 hP hR / (hP + hR)   (0 when both 0)

Only hF1 is gated (F1_HIERARCHICAL); brand (fuzzy ratio > 90) and is_secondhand accuracy are reported in the
notes. accuracy.txt holds `{"f1": <hF1>}` on one line, which the checker's pattern reads.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from submission.evaluation import evaluation_constant
from tasks.accuracy import AccuracyResult
from tasks.accuracy.common import entry_text, unique_entries
from tasks.harness.requests import ProductMetadata
from tasks.harness.shopify import read_products

BENCHMARK = "qwen3-vl-235b-a22b"
PAD = "<|pred-category-pad|>"


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


def parse_answer(text: str) -> ProductMetadata | None:
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
        threshold = evaluation_constant(BENCHMARK, "brand_match_ratio")
        entries = unique_entries(accuracy_log, len(products), Path(dataset))
        pairs, unparsable, brands, secondhand = [], 0, 0, 0
        for entry in entries:
            truth = products[entry.qsl_idx]
            answer = parse_answer(entry_text(entry))
            if answer is None:
                unparsable += 1
                levels = len(truth.category.split(separator))
                pairs.append((separator.join([PAD] * levels), truth.category))
                continue
            pairs.append((answer.category, truth.category))
            ratio = 100 * difflib.SequenceMatcher(None, answer.brand.strip().lower(),
                                                  (truth.brand or "").strip().lower()).ratio()
            brands += ratio > threshold
            secondhand += answer.is_secondhand == truth.is_secondhand
        f1 = hierarchical_f1(pairs, separator)
        n = len(entries)
        notes = (f"{unparsable} of {n} answer(s) did not validate against the schema (scored as pad categories)",
                 f"brand match (ratio > {threshold}): {brands} of {n}; is_secondhand equal: {secondhand} of {n} "
                 f"(reported, not gated)")
        return AccuracyResult({"F1_HIERARCHICAL": f1}, n, notes)

    def accuracy_txt(self, result: AccuracyResult) -> str:
        return "\n".join(["Results", "", json.dumps({"f1": result.metrics["F1_HIERARCHICAL"]}), "", *result.notes,
                          f"num_samples: {result.samples}"]) + "\n"


EVALUATOR = Qwen3VLCategoryF1()
