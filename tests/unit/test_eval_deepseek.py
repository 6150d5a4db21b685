"""deepseek-r1 exact match and tokens per sample on a hand-made log (special tokens skipped when decoding)."""

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
    ("math500", "\\frac{1}{2}", "thus \\boxed{\\dfrac{1}{2}}"),                  # yes (normalised)
    ("math500", "3", "no boxed answer at all"),                                  # no
    ("livecodebench", "q1", "```python\nprint(input())\n```\n```python\nprint(0)\n```"),   # yes: FIRST block
]


def test_exact_match_and_tokens_per_sample(tmp_path: Path) -> None:
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
                                tokenizer, benchmark="deepseek-r1")
    assert result.metrics["exact_match"] == pytest.approx(100 * 5 / 6)
    assert result.metrics["TOKENS_PER_SAMPLE"] == pytest.approx(tokens / 6)
    assert f"'exact_match': {100 * 5 / 6:.4f}, 'tokens_per_sample': {tokens / 6:.4f}" in text
    verdict = {m.metric: m for m in result.verdict.metrics}
    assert verdict["exact_match"].passed   # 83.33 >= 80.5446
    assert not verdict["TOKENS_PER_SAMPLE"].passed   # far under 0.9 x 3886.2274


def test_unknown_source_dataset(tmp_path: Path) -> None:
    tokenizer = byte_tokenizer(tmp_path / "tok", ["x"])
    pd.DataFrame({"dataset": ["trivia"], "ground_truth": ["x"], "tok_input": [[1]]}).to_pickle(tmp_path / "ds.pkl")
    with pytest.raises(PlanError, match="no deepseek-r1 scoring rule for data set 'trivia'"):
        evaluate_log("deepseek-r1", write_log(tmp_path / "log.json", [(0, [1])]), tmp_path / "ds.pkl", tokenizer)
