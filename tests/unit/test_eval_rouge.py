"""ROUGE for llama3.1-8b and llama2-70b: hand-computed scores with stemming, gen_len, tokens per sample, the
printed dict and the verdict against every target and upper limit."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tasks.accuracy import evaluate_log
from tasks.accuracy.rouge import postprocess, rouge_means, sentence_splitter
from tests.accuracy_logs import write_log

# "The cats are running." vs "the cat runs": stemmed tokens [the cat are run] / [the cat run]
# ROUGE-1: 3 overlap, P 3/3, R 3/4 -> F 6/7; ROUGE-2: bigram "the cat" only, P 1/2, R 1/3 -> F 0.4;
# ROUGE-L: LCS 3 -> 6/7
R1 = round(100 * (6 / 7 + 0) / 2, 4)   # 42.8571 (the second sample's empty answer scores 0)
R2 = round(100 * (0.4 + 0) / 2, 4)     # 20.0


def test_rouge_with_stemming_by_hand() -> None:
    scores = rouge_means(["the cat runs", ""], ["The cats are running.", "Dogs bark loudly."])
    assert scores == {"rouge1": R1, "rouge2": R2, "rougeL": R1, "rougeLsum": R1}
    assert rouge_means([], []) == {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0, "rougeLsum": 0.0}


def test_sentences_on_their_own_lines() -> None:
    split, _ = sentence_splitter()
    assert postprocess("  One thing here. Two things there!  ", split) == "One thing here.\nTwo things there!"


@pytest.fixture()
def tokenizer(tmp_path: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate(["<unk>", "</s>", "the", "cat", "runs"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")   # joins words with spaces
    tok.add_special_tokens(["</s>"])
    tok.save(str(tmp_path / "tokenizer.json"))
    return tmp_path / "tokenizer.json"


def _log(tmp_path: Path) -> Path:
    # sample 0: "the cat runs" + EOS (skipped when decoding); sample 1: EOS only (an empty answer); a repeat of 0
    return write_log(tmp_path / "log.json", [(0, [2, 3, 4, 1]), (1, [1]), (0, [4, 4, 4])])


def test_llama31_8b(tmp_path: Path, tokenizer: Path) -> None:
    records = [{"input": "a1", "tok_input": [5], "output": "The cats are running."},
               {"input": "a2", "tok_input": [6], "output": "Dogs bark loudly."}]
    (tmp_path / "cnn_eval.json").write_text(json.dumps(records))
    result, text = evaluate_log("llama3.1-8b", _log(tmp_path), tmp_path / "cnn_eval.json", tokenizer,
                                benchmark="llama3.1-8b")
    assert result.metrics["ROUGE1"] == R1 and result.metrics["ROUGE2"] == R2 and result.samples == 2
    assert result.metrics["GEN_LEN"] == len("the cat runs")
    assert "'rouge1': '42.8571'" in text and "'gen_len': 12, 'gen_num': 2" in text
    assert "tokens_per_sample" not in text
    verdict = {m.metric: m for m in result.verdict.metrics}
    assert [verdict[k].passed for k in ("ROUGE1", "ROUGE2", "ROUGEL", "ROUGELSUM")] == [True] * 4
    assert verdict["GEN_LEN"].value == 12 and not verdict["GEN_LEN"].passed   # under 0.9 x 8167644
    assert not result.verdict.passed


def test_llama2_70b_tokens_per_sample(tmp_path: Path, tokenizer: Path) -> None:
    pd.DataFrame({"tok_input": [[5], [6]], "output": ["The cats are running.", "Dogs bark loudly."]}).to_pickle(
        tmp_path / "orca.pkl")
    result, text = evaluate_log("llama2-70b-99.9", _log(tmp_path), tmp_path / "orca.pkl", tokenizer,
                                benchmark="llama2-70b-99.9", scenario="Server")
    assert result.metrics["TOKENS_PER_SAMPLE"] == 2.5   # (4 + 1) output tokens over 2 samples
    assert "'rouge1': 42.8571," in text and "'gen_tok_len': 5, 'tokens_per_sample': 2.5" in text
    verdict = {m.metric: m for m in result.verdict.metrics}
    assert verdict["ROUGE1"].value == R1 and not verdict["ROUGE1"].passed   # under 44.3868
    assert verdict["TOKENS_PER_SAMPLE"].value == 2.5 and not verdict["TOKENS_PER_SAMPLE"].passed


def test_tokens_per_sample_upper_limit() -> None:
    from tasks.accuracy import judge

    text = "{'rouge1': 44.5, 'rouge2': 22.1, 'rougeL': 28.7, 'rougeLsum': 42.0, 'gen_len': 1, 'gen_num': 1, " \
           "'gen_tok_len': 1, 'tokens_per_sample': 330.0}"
    verdict = {m.metric: m for m in judge(text, "llama2-70b-99.9").metrics}
    assert verdict["ROUGE1"].passed and not verdict["TOKENS_PER_SAMPLE"].passed   # above 1.1 x 294.45
