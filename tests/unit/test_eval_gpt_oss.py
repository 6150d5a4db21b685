"""gpt-oss-120b exact match end to end on a hand-made log: decoding, per-data-set rules, LiveCodeBench in the
sandbox, the repeat weighting, the printed line and the verdict; and the official eval_mlperf_accuracy.py run on the
same logs, its score and per-data-set counts equal to Podium's (tests/references.py)."""

from __future__ import annotations

import base64
import json
import pickle
import re
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from submission.base.errors import PlanError
from tasks.accuracy import AccuracyResult, evaluate_log, evaluator, judge
from tasks.accuracy.gpt_oss import weighted_score
from tests import references
from tests.accuracy_logs import byte_tokenizer, encoder, write_log
from tests.unit.test_answers import ANALYSIS, harmony

ROWS = [  # (dataset, ground truth, model output)
    ("aime25", "42", harmony("Two candidates, \\boxed{41} and finally \\boxed{42}")),   # correct (last box)
    ("aime25", "42", ANALYSIS + " and then it stopped"),          # no final channel, no box but \\boxed{7}: wrong
    ("gpqa_diamond", "C", harmony("C")),                          # correct
    ("gpqa_diamond", "B", harmony("**Answer: D**")),               # wrong letter
    ("gpqa_diamond", "A", harmony("A) because ...")),              # correct
    ("livecodebench_v6", "q-add", harmony("```python\na, b = map(int, input().split())\nprint(a + b)\n```")),
    ("livecodebench_v6", "q-add", harmony("```python\nprint(0)\n```")),   # runs, wrong output
]
# hand computed: aime 1/2 (r=8), gpqa 2/3 (r=5), livecodebench 1/2 (r=3)
EXPECTED = 100 * (1 / 8 + 2 / 5 + 1 / 3) / (2 / 8 + 3 / 5 + 2 / 3)   # 56.593..., raw accuracy would be 57.14


def _compressed(cases: list[dict]) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()


@pytest.fixture()
def case(tmp_path: Path) -> dict[str, Path]:
    tokenizer = byte_tokenizer(tmp_path / "tok", [text for _, _, text in ROWS])
    (tmp_path / "tok" / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    encode = encoder(tokenizer)
    pq.write_table(pa.table({
        "dataset": [d for d, _, _ in ROWS], "ground_truth": [g for _, g, _ in ROWS],
        "input_tokens": pa.array([[1, 2]] * len(ROWS), type=pa.list_(pa.int32()))}), tmp_path / "acc.parquet")
    tests = {"question_id": "q-add", "metadata": "{}",
             "public_test_cases": json.dumps([{"input": "2 3\n", "output": "5\n", "testtype": "stdin"}]),
             "private_test_cases": _compressed([{"input": "-4 10\n", "output": "6\n", "testtype": "stdin"}])}
    (tmp_path / "livecodebench_tests.jsonl").write_text(json.dumps(tests) + "\n")
    answers = [(i, encode(text)) for i, (_, _, text) in enumerate(ROWS)]
    log = write_log(tmp_path / "mlperf_log_accuracy.json", answers)
    return {"log": log, "data": tmp_path / "acc.parquet", "tokenizer": tokenizer, "dir": tmp_path}


def test_weighted_score_by_hand() -> None:
    assert weighted_score({"aime25": (1, 2), "gpqa_diamond": (2, 3), "livecodebench_v6": (1, 2)},
                          {"aime25": 8, "gpqa_diamond": 5, "livecodebench_v6": 3}) == pytest.approx(EXPECTED)
    assert weighted_score({}, {}) == 0.0
    assert weighted_score({"other": (1, 4)}, {}) == 25.0   # a data set without repeats weighs 1


def test_exact_match_and_verdict(case: dict[str, Path]) -> None:
    result, text = evaluate_log("gpt-oss-120b", case["log"], case["data"], case["tokenizer"],
                                benchmark="gpt-oss-120b", scenario="Offline")
    assert result.metrics["exact_match"] == pytest.approx(EXPECTED) and result.samples == 7
    assert f"'exact_match': {EXPECTED:.3f}" in text and "56.593" in text
    assert "livecodebench_v6: 1 of 2 correct (repeats 3)" in result.notes
    assert any("1 output(s) had no harmony final channel" in n for n in result.notes)
    verdict = result.verdict
    assert verdict is not None and not verdict.passed
    exact = verdict.metrics[0]
    assert (exact.metric, exact.value, exact.target) == ("exact_match", 56.593, 82.2987)
    tokens = verdict.metrics[1]   # the upper-limit-only metric the script does not print: absent, not failing
    assert tokens.metric == "TOKENS_PER_SAMPLE" and tokens.value is None and tokens.passed


def _agree(reference: references.GptOssReference, result: AccuracyResult, text: str) -> None:
    """Podium's score is the reference's: the full-precision score, the line printed for the checker, and each data
    set's correct and total with its repeats."""
    assert result.metrics["exact_match"] == pytest.approx(reference.summary["final_score_percentage"], rel=1e-12)
    ours = re.findall(r"'exact_match': [\d.]+", text)
    assert ours == [reference.printed]
    assert result.samples == reference.summary["total_samples"]
    subsets = reference.summary["per_dataset"]
    assert subsets and {n.split(":")[0] for n in result.notes if " correct (repeats " in n} == set(subsets)
    for subset, n in subsets.items():
        assert f"{subset}: {n['correct']} of {n['total']} correct (repeats {n['repeats']})" in result.notes


def test_reference_value_with_subset_case_and_repeats(inference_src: Path, tmp_path: Path) -> None:
    """tests/gpt_oss_cases.py (subsets in two letter cases, qsl_idx 1 and 3 twice) scored by the official
    eval_mlperf_accuracy.py and by Podium."""
    from tests.gpt_oss_cases import write_case

    case = write_case(tmp_path)
    reference = references.gpt_oss(inference_src, case["log"], case["data"], case["tokenizer"].parent,
                                   tmp_path / "reference")
    result, text = evaluate_log("gpt-oss-120b", case["log"], case["data"], case["tokenizer"])
    _agree(reference, result, text)
    assert set(reference.summary["per_dataset"]) == {"aime25", "gpqa_diamond"}   # AIME25 and aime25 are one subset
    assert result.notes[0].startswith("WARNING: qsl_idx 1, 3 appear(s) more than once")


def test_subset_names_are_lower_cased(inference_src: Path, tmp_path: Path) -> None:
    """The same case without the repeated entries."""
    from tests.gpt_oss_cases import ROWS, write_case

    case = write_case(tmp_path)
    unique = json.loads(case["log"].read_text())[:len(ROWS)]
    case["log"].write_text(json.dumps(unique))
    reference = references.gpt_oss(inference_src, case["log"], case["data"], case["tokenizer"].parent,
                                   tmp_path / "reference")
    result, text = evaluate_log("gpt-oss-120b", case["log"], case["data"], case["tokenizer"])
    _agree(reference, result, text)
    assert reference.summary["per_dataset"]["aime25"]["total"] == 3
    assert not any("more than once" in note for note in result.notes)


def test_reference_on_the_hand_made_outputs(inference_src: Path, case: dict[str, Path]) -> None:
    """The hand-made AIME and GPQA outputs above (a last box among two, no final channel, bold and parenthesised
    letters) scored by the official script and by Podium (its LiveCodeBench rows need the LiveCodeBench submodule,
    which the round's sources do not hold)."""
    entries = json.loads(case["log"].read_text())
    kept = [e for e in entries if ROWS[e["qsl_idx"]][0] != "livecodebench_v6"]
    case["log"].write_text(json.dumps(kept))
    reference = references.gpt_oss(inference_src, case["log"], case["data"], case["tokenizer"].parent,
                                   case["dir"] / "reference")
    result, text = evaluate_log("gpt-oss-120b", case["log"], case["data"], case["tokenizer"])
    _agree(reference, result, text)
    assert reference.summary["total_samples"] == 5 and any("no harmony final channel" in n for n in result.notes)


def test_verdict_passes_above_the_target() -> None:
    verdict = judge("{'exact_match': 83.500, 'num_samples': 4395}", "gpt-oss-120b", "Interactive")
    assert verdict.passed and verdict.lines()[0] == "exact_match 83.5 (target >= 82.2987): PASS"


def test_lcb_tests_are_required_and_can_be_given(case: dict[str, Path], tmp_path: Path) -> None:
    moved = case["dir"] / "elsewhere.jsonl"
    (case["dir"] / "livecodebench_tests.jsonl").rename(moved)
    with pytest.raises(PlanError, match="LiveCodeBench samples but no LiveCodeBench tests"):
        evaluate_log("gpt-oss-120b", case["log"], case["data"], case["tokenizer"])
    result, _ = evaluate_log("gpt-oss-120b", case["log"], case["data"], case["tokenizer"], lcb_tests=moved)
    assert result.metrics["exact_match"] == pytest.approx(EXPECTED)


def test_log_from_another_dataset_and_missing_tokenizer(case: dict[str, Path]) -> None:
    write_log(case["dir"] / "other.json", [(99, [1, 2])])
    with pytest.raises(PlanError, match="qsl_idx 99 is outside the data set"):
        evaluator("gpt-oss-120b").evaluate(case["dir"] / "other.json", case["data"], case["tokenizer"])
    with pytest.raises(PlanError, match="needs the model's tokenizer"):
        evaluator("gpt-oss-120b").evaluate(case["log"], case["data"], None)


def test_unknown_evaluator_and_option() -> None:
    with pytest.raises(PlanError, match="did you mean 'gpt-oss-120b'"):
        evaluator("gpt-oss-12b")
    with pytest.raises(PlanError, match="takes no options"):
        evaluator("qwen3-vl-235b-a22b", lcb_tests=Path("x"))
