"""A known-answer gpt-oss-120b case: subset names in other letter cases and repeated qsl_idx. The tests score it with
Podium and with mlcommons/inference `language/gpt-oss-120b/eval_mlperf_accuracy.py` at the round's pin
(tests/references.py) and assert they agree; `write_case` writes a tokenizer folder with a tokenizer_config.json, so
the reference's AutoTokenizer loads it."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tests.accuracy_logs import byte_tokenizer, encoder, write_log
from tests.unit.test_answers import harmony

ROWS = [  # (dataset as written in the parquet, ground truth, model output)
    ("AIME25", "42", harmony("so \\boxed{42}")),       # correct
    ("AIME25", "7", harmony("so \\boxed{8}")),         # wrong
    ("aime25", "3", harmony("Answer: 3")),             # correct (the Answer: fallback)
    ("GPQA_Diamond", "C", harmony("C")),               # correct
    ("gpqa_diamond", "B", harmony("D")),               # wrong
]
REPEATS = [(3, harmony("C")), (1, harmony("so \\boxed{7}"))]   # a broken harness wrote qsl_idx 3 and 1 twice


def write_case(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    texts = [text for _, _, text in ROWS] + [text for _, text in REPEATS]
    tokenizer = byte_tokenizer(folder / "tok", texts)
    (folder / "tok" / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    encode = encoder(tokenizer)
    pq.write_table(pa.table({
        "dataset": [d for d, _, _ in ROWS], "ground_truth": [g for _, g, _ in ROWS],
        "input_tokens": pa.array([[1, 2]] * len(ROWS), type=pa.list_(pa.int32()))}), folder / "acc.parquet")
    answers = [(i, encode(text)) for i, (_, _, text) in enumerate(ROWS)] + [(i, encode(t)) for i, t in REPEATS]
    log = write_log(folder / "mlperf_log_accuracy.json", answers)
    return {"log": log, "data": folder / "acc.parquet", "tokenizer": tokenizer}
