"""Qwen3-VL hierarchical F1: hand-computed cases, the unparsable answers, and accuracy.txt read as the checker does;
the official evaluation.py and its answer schema run on the known-answer cases, their values equal to Podium's
(tests/references.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.accuracy import evaluate_log
from tasks.accuracy.qwen3_vl import hierarchical_f1, parse_answer, prefix_components
from tests import references
from tests.accuracy_logs import write_log
from tests.qwen3_vl_cases import LOG, write_case
from tests.unit.test_datasets import _png


def answer(category: str, brand: str = "Acme", secondhand: bool = False) -> bytes:
    return json.dumps({"category": category, "brand": brand, "is_secondhand": secondhand}).encode()


CASES = [  # (true category, answer bytes): inter, pred_len, true_len
    ("A > B > C", answer("A > B > C")),                          # exact: 3, 3, 3
    ("A > B > C", answer("A > B")),                              # partial prefix: 2, 2, 3
    ("A > B > C", answer("X > B > C")),                          # right leaf, wrong parent: 0, 3, 3
    ("D > E", b'{category: "D > E", brand: "Acme"}'),            # malformed JSON: pad x2: 0, 2, 2
    ("F", b""),                                                  # empty output: pad x1: 0, 1, 1
    ("G > H", b'{"category": "G > H", "brand": "Acme"}'),        # missing is_secondhand: pad x2: 0, 2, 2
    ("A > B", answer("A > B > C > D", "acme", True)),            # deeper than the truth: 2, 4, 2
]
EXPECTED = 98 / 231   # inter 7, predicted 17, true 16: hP 7/17, hR 7/16


def test_prefix_rule() -> None:
    assert prefix_components("A > B > C", "A > B > C", " > ") == (3, 3, 3)
    assert prefix_components("A > X > C", "A > B > C", " > ") == (1, 3, 3)   # counting stops at the mismatch
    assert prefix_components(" A  >  B ", "A > B", " > ") == (2, 2, 2)      # levels are stripped
    assert hierarchical_f1([]) == 0.0 and hierarchical_f1([("X", "Y")]) == 0.0


def test_schema_validation() -> None:
    assert parse_answer(answer("A")).category == "A"
    assert parse_answer('{"category": "A", "brand": "b", "is_secondhand": "maybe"}') is None   # wrong type
    assert parse_answer('```json\n{"category": "A", "brand": "b", "is_secondhand": false}\n```') is None
    assert parse_answer("") is None


@pytest.fixture()
def case(tmp_path: Path) -> dict[str, Path]:
    n = len(CASES)
    pq.write_table(pa.table({
        "product_title": [f"p{i}" for i in range(n)], "product_description": ["d"] * n,
        "potential_product_categories": [[c] for c, _ in CASES],
        "product_image": [{"bytes": _png((i, i, i)), "path": None} for i in range(n)],
        "ground_truth_category": [c for c, _ in CASES], "ground_truth_brand": ["Acme"] * n,
        "ground_truth_is_secondhand": [False] * n}), tmp_path / "shopify.parquet")
    log = write_log(tmp_path / "log.json", [(i, a) for i, (_, a) in enumerate(CASES)])
    return {"log": log, "data": tmp_path / "shopify.parquet"}


def test_hierarchical_f1_by_hand(case: dict[str, Path]) -> None:
    result, text = evaluate_log("qwen3-vl-235b-a22b", case["log"], case["data"], None,
                                benchmark="qwen3-vl-235b-a22b", scenario="Offline")
    assert result.metrics["F1_HIERARCHICAL"] == pytest.approx(EXPECTED)
    assert result.notes[0].startswith("3 of 7 answer(s) did not validate")
    assert result.reported["Brand F1 Score"] == pytest.approx(4 / 7)   # the 4 valid answers name Acme
    assert text.splitlines()[:3] == ["Results", "", json.dumps({"f1": EXPECTED})]
    verdict = result.verdict
    assert verdict is not None and verdict.metrics[0].value == pytest.approx(EXPECTED) and not verdict.passed


def test_interactive_target_differs(tmp_path: Path) -> None:
    from tasks.accuracy import judge

    text = 'Results\n\n{"f1": 0.781}\n'
    assert not judge(text, "qwen3-vl-235b-a22b", "Offline").passed         # 0.781 < 0.782397
    assert judge(text, "qwen3-vl-235b-a22b", "Interactive").passed         # 0.781 >= 0.779922


def test_reference_values_on_tricky_answers(inference_src: Path, tmp_path: Path) -> None:
    """tests/qwen3_vl_cases.py scored by the official run_evaluation and by Podium: the f1 line of accuracy.txt to the
    last digit, the three printed scores as printed, the count of rejected answers, and the is_secondhand drawn for
    each rejected answer."""
    from submission.results.logs import parse_accuracy_log
    from tasks.accuracy.common import entry_text
    from tasks.accuracy.qwen3_vl_fields import rejected_secondhand
    from tasks.datasets.shopify import read_products

    case = write_case(tmp_path, _png((1, 2, 3)))
    reference = references.qwen3_vl(inference_src, case["log"], tmp_path, tmp_path / "reference")
    result, text = evaluate_log("qwen3-vl-235b-a22b", case["log"], case["data"], None)
    assert text.splitlines()[:3] == reference.accuracy_txt.splitlines()[:3]   # Results, "", {"f1": ...}
    ours = {"Category hierarchical F1 Score": result.metrics["F1_HIERARCHICAL"], **result.reported}
    assert {name: format(value, "g") for name, value in ours.items()} == reference.table   # tabulate's "g"
    assert f"{reference.rejected} of {result.samples} answer(s) did not validate" in text
    assert result.samples == len(LOG) and "qsl_idx 2 appear(s) more than once" in result.notes[0]
    entries = parse_accuracy_log(case["log"])
    products = read_products(case["data"], accuracy=True).products
    drawn = rejected_secondhand([parse_answer(entry_text(e)) is not None for e in entries],
                                [products[e.qsl_idx].categories for e in entries], seed=12345, workers=4)
    assert [(e.qsl_idx, d) for e, d in zip(entries, drawn, strict=True) if d is not None] == reference.drawn
    assert len(reference.drawn) == reference.rejected and {d for _, d in reference.drawn} == {True, False}


def test_schema_as_the_reference_model() -> None:
    ok = {"category": "A", "brand": "b", "is_secondhand": False}
    assert parse_answer(json.dumps(ok)) is not None
    assert parse_answer(json.dumps({**ok, "confidence": 0.9})) is None          # extra key (extra="forbid")
    assert parse_answer(json.dumps({**ok, "brand": None})) is None              # null
    assert parse_answer(json.dumps({**ok, "category": 5})) is None              # a number is not a string
    assert parse_answer('{"category": "X", "brand": "b", "is_secondhand": 0, "category": "A"}').category == "A"
    assert parse_answer(' {"category": "A", "brand": "b", "is_secondhand": "true"}\n').is_secondhand is True


def test_brand_ratio_and_secondhand_f1() -> None:
    from tasks.accuracy.qwen3_vl_fields import binary_f1, brand_f1

    # rapidfuzz ratio 92.3 (> 90: a match); difflib's ratio is 87.2 on the same pair
    assert brand_f1([("Abercromebei & Fitch", "Abercrombie & Fitch")], 90) == 1.0
    assert brand_f1([(" ACME ", "acme"), ("Adidas", "Nike")], 90) == 0.5
    assert binary_f1([(True, True), (True, False), (False, True), (False, False)]) == pytest.approx(0.5)
    assert binary_f1([(False, False)]) == 0.0   # no positive at all: scikit-learn's zero_division value


# Answers the schema must judge as the reference's ProductMetadata.model_validate_json does (schema.py at the round's
# pin, run by `reference_schema`): accepted with these fields, or rejected (scored as padding).
SCHEMA_TEXTS = [
    '{"category": "A", "brand": "b", "is_secondhand": false}',
    '{"category": "A", "brand": "b", "is_secondhand": false,}',             # trailing comma
    '{"category": "A", "brand": "b", "is_secondhand": "yes"}',              # lax bool strings
    '{"category": "A", "brand": "b", "is_secondhand": "1"}',
    '{"category": "A", "brand": "b", "is_secondhand": 1.0}',
    '{"category": "A", "brand": "b", "is_secondhand": 2}',
    '{"category": "A", "brand": "b", "is_secondhand": "maybe"}',
    '{"category": "A\\u00e9", "brand": "b", "is_secondhand": false}',
    '[{"category": "A", "brand": "b", "is_secondhand": false}]',           # an array
    '{"category": "A", "brand": {"name": "b"}, "is_secondhand": false}',    # an object for a string
    '{"category": "A", "brand": "b", "is_secondhand": false} trailing',     # text after the object
    '\ufeff{"category": "A", "brand": "b", "is_secondhand": false}',        # a byte-order mark
    "   ",
    "",
    '{"category": "A", "brand": "b", "is_secondhand": NaN}',
    '{"Category": "A", "brand": "b", "is_secondhand": false}',              # field names are exact
    '{"category": ["A"], "brand": "b", "is_secondhand": false}',
    '{"category": "A", "brand": "b", "is_secondhand": null}',
    '{"category": "A", "brand": "b", "is_secondhand": false}\n\n',
    '{"category": "A", "brand": "b", "is_secondhand": false, "confidence": 0.9}',   # an extra key
    '{"category": "A", "brand": null, "is_secondhand": false}',                     # a null
    '{"category": 5, "brand": "b", "is_secondhand": false}',                        # a number for a string
    ' {"category": "A", "brand": "b", "is_secondhand": "true"}\n',                  # spaces around, "true"
    '{"category": "X", "brand": "b", "is_secondhand": 0, "category": "A"}',        # a duplicate key
    '```json\n{"category": "A", "brand": "b", "is_secondhand": false}\n```',       # a code fence
]


@pytest.fixture(scope="module")
def reference_schema(inference_src: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple | None]:
    verdicts = references.qwen3_vl_schema(inference_src, SCHEMA_TEXTS, tmp_path_factory.mktemp("schema"))
    return dict(zip(SCHEMA_TEXTS, verdicts, strict=True))


@pytest.mark.parametrize("text", SCHEMA_TEXTS)
def test_schema_verdicts_of_the_reference(reference_schema: dict[str, tuple | None], text: str) -> None:
    answer = parse_answer(text)
    assert (None if answer is None else (answer.category, answer.brand, answer.is_secondhand)) == reference_schema[text]


def test_the_schema_cases_cover_both_verdicts(reference_schema: dict[str, tuple | None]) -> None:
    verdicts = list(reference_schema.values())
    assert verdicts.count(None) >= 10 and sum(v is not None for v in verdicts) >= 6
