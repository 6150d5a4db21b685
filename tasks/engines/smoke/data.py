"""The smoke data set: prompts cut from the smoke corpus, in the gpt-oss-120b parquet schema, with reference answers.

Prompts are pre-tokenized (`input_tokens`, int32 ids of the tiny model's tokenizer). The accuracy file's
`ground_truth` is the tiny model's own greedy answer, made offline with `model.generate`; served greedy answers
match it exactly, so the smoke evaluator expects 100 % exact match and any drop means the serving path changed
an answer.

`acc_answers.parquet` holds the same references as the simulated engine's known answers (its `answers` option,
tasks/engines/simulated/answers.py: each prompt answered with its reference's token ids), so a plan of simulated
replicas (deployments/plans/scale-sim-64.yaml) passes its accuracy runs through the same evaluator.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from submission.base.files import replace_atomic, temporary
from tasks.engines.smoke.model import CORPUS

SEED = 1
PERF_FILE, ACC_FILE, ANSWERS_FILE = "perf_eval_ref.parquet", "acc_eval_inputs.parquet", "acc_answers.parquet"


def _prompts(count: int, rng: np.random.Generator, min_words: int = 6, max_words: int = 40) -> list[str]:
    words = CORPUS.read_text().split()
    out = []
    for _ in range(count):
        length = int(rng.integers(min_words, max_words + 1))
        start = int(rng.integers(0, len(words) - length))
        out.append(" ".join(words[start:start + length]))
    return out


def _references(model_dir: Path, prompts: list[list[int]], max_tokens: int) -> list[str]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    answers = []
    with torch.no_grad():
        for ids in prompts:
            out = model.generate(torch.tensor([ids]), max_new_tokens=max_tokens, min_new_tokens=max_tokens,
                                 do_sample=False)
            answers.append(tokenizer.decode(out[0][len(ids):].tolist()))
    return answers


def build(model_dir: Path, out_dir: Path, *, performance_count: int = 32, accuracy_count: int = 16,
          max_tokens: int = 16) -> dict[str, Path]:
    """Write both parquet files (atomically); return their paths."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    rng = np.random.default_rng(SEED)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, count, with_refs in ((PERF_FILE, performance_count, False), (ACC_FILE, accuracy_count, True)):
        texts = _prompts(count, rng)
        ids = [tokenizer.encode(t).ids for t in texts]
        columns = {
            "dataset": pa.array(["smoke"] * count),
            "question": pa.array(texts),
            "input_tokens": pa.array(ids, type=pa.list_(pa.int32())),
        }
        if with_refs:
            columns["ground_truth"] = pa.array(_references(model_dir, ids, max_tokens))
            columns["reference_output_tokens"] = pa.array([max_tokens] * count, type=pa.int32())
        tmp = temporary(out_dir / name)
        pq.write_table(pa.table(columns), tmp)
        replace_atomic(tmp, out_dir / name)
        paths[name] = out_dir / name
    paths[ANSWERS_FILE] = build_answers(model_dir, out_dir)
    return paths


def build_answers(model_dir: Path, out_dir: Path) -> Path:
    """`acc_answers.parquet` from the accuracy file in `out_dir`: each prompt with its reference's token ids as the
    simulated engine's known answer (atomically); its path."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    from tasks.engines.simulated.answers import ANSWER_TOKENS, OUTPUT_TOKENS, PROMPT_COLUMN

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    rows = pq.read_table(out_dir / ACC_FILE, columns=[PROMPT_COLUMN, "ground_truth"]).to_pylist()
    answers = [tokenizer.encode(r["ground_truth"], add_special_tokens=False).ids for r in rows]
    table = pa.table({PROMPT_COLUMN: pa.array([r[PROMPT_COLUMN] for r in rows], type=pa.list_(pa.int32())),
                      ANSWER_TOKENS: pa.array(answers, type=pa.list_(pa.int32())),
                      OUTPUT_TOKENS: pa.array([len(a) for a in answers], type=pa.int32())})
    tmp = temporary(out_dir / ANSWERS_FILE)
    pq.write_table(table, tmp)
    return replace_atomic(tmp, out_dir / ANSWERS_FILE)
