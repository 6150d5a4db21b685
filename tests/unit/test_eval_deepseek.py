"""deepseek-r1 exact match and tokens per sample on a hand-made log (special tokens skipped when decoding; MATH-500 by
the fetched PRM800K grader). The round's own script beside Podium: tests/unit/test_eval_deepseek_reference.py."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from submission.base.errors import PlanError
from tasks.accuracy import evaluate_log
from tests.accuracy_logs import byte_tokenizer, encoder, write_log

ROWS = [  # (dataset, ground truth, output): correct?
    ("aime", "17", "<|start|>so the answer is \\boxed{17}<|end|>"),               # yes (specials skipped)
    ("gpqa", "B", "ANSWER: A, no wait. FINAL ANSWER: B"),                        # yes (the last tagged answer)
    ("mmlu_pro", "H", "I think the answer is H"),                                # yes (standalone letter)
    ("math500", "\\frac{1}{2}", "thus \\boxed{0.5}"),                            # yes (the grader: equal)
    ("math500", "\\frac{3}{8}", "thus \\boxed{6/16}"),                             # no (the grader: unreduced)
    ("math500", "3", "no boxed answer at all"),                                  # no
    ("livecodebench", "q1", "```python\nprint(input())\n```\n```python\nprint(0)\n```"),   # yes: FIRST block
]


def test_exact_match_and_tokens_per_sample(tmp_path: Path, prm800k_src: Path) -> None:
    tokenizer = byte_tokenizer(tmp_path / "tok", [t for _, _, t in ROWS])
    encode = encoder(tokenizer)
    pd.DataFrame({"dataset": [d for d, _, _ in ROWS], "ground_truth": [g for _, g, _ in ROWS],
                  "question": ["q"] * len(ROWS), "tok_input": [[1]] * len(ROWS)}).to_pickle(tmp_path / "ds.pkl")
    (tmp_path / "livecodebench_tests.jsonl").write_text(
        '{"question_id": "q1", "public_test_cases": "[{\\"input\\": \\"echo\\", \\"output\\": \\"echo\\", '
        '\\"testtype\\": \\"stdin\\"}]", "private_test_cases": "[]", "metadata": "{}"}\n')
    answers = [(i, encode(t)) for i, (_, _, t) in enumerate(ROWS)]
    tokens = sum(len(ids) for _, ids in answers)
    result, text = evaluate_log("deepseek-r1", write_log(tmp_path / "log.json", answers), tmp_path / "ds.pkl",
                                tokenizer, benchmark="deepseek-r1", math_grader=prm800k_src)
    assert result.metrics["exact_match"] == 100 * 5 / 7
    assert result.metrics["TOKENS_PER_SAMPLE"] == tokens / 7
    assert text.splitlines()[-1] == f"{{'exact_match': {100 * 5 / 7!r}, 'tokens_per_sample': {tokens / 7!r}, " \
                                    "'num-samples': 7}"
    assert "math500: 1 of 3 correct" in text and result.reported["exact_match[math500]"] == 100 / 3
    verdict = {m.metric: m for m in result.verdict.metrics}
    assert not verdict["exact_match"].passed   # 71.4 < 80.5446
    assert not verdict["TOKENS_PER_SAMPLE"].passed   # far under 0.9 x 3886.2274


def test_unknown_source_dataset(tmp_path: Path) -> None:
    tokenizer = byte_tokenizer(tmp_path / "tok", ["x"])
    pd.DataFrame({"dataset": ["trivia"], "ground_truth": ["x"], "tok_input": [[1]]}).to_pickle(tmp_path / "ds.pkl")
    with pytest.raises(PlanError, match="no deepseek-r1 scoring rule for data set 'trivia'"):
        evaluate_log("deepseek-r1", write_log(tmp_path / "log.json", [(0, [1])]), tmp_path / "ds.pkl", tokenizer)


def test_math500_without_the_grader_is_an_error_naming_the_fetch(tmp_path: Path) -> None:
    tokenizer = byte_tokenizer(tmp_path / "tok", ["\\boxed{1}"])
    pd.DataFrame({"dataset": ["math500"], "ground_truth": ["1"], "tok_input": [[1]]}).to_pickle(tmp_path / "ds.pkl")
    log = write_log(tmp_path / "log.json", [(0, encoder(tokenizer)("\\boxed{1}"))])
    with pytest.raises(PlanError, match="PRM800K grader") as raised:
        evaluate_log("deepseek-r1", log, tmp_path / "ds.pkl", tokenizer)
    assert "podium fetch-grader" in str(raised.value)
    with pytest.raises(PlanError, match=r"no prm800k/grading/grader\.py there"):
        evaluate_log("deepseek-r1", log, tmp_path / "ds.pkl", tokenizer, math_grader=tmp_path)
