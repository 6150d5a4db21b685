"""Helpers for evaluator tests: loadgen accuracy logs written by hand, and a tiny byte-level tokenizer that
decodes back to exactly the text it encoded (harmony markers included)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np

HARMONY = ("<|start|>", "<|channel|>", "<|message|>", "<|return|>", "<|end|>", "<|endoftext|>")


def write_log(path: Path, answers: Iterable[tuple[int, list[int] | bytes]], *, loadgen_layout: bool = False) -> Path:
    """mlperf_log_accuracy.json with one entry per (qsl_idx, int32 token ids or raw bytes), in the given order; with
    `loadgen_layout`, one entry a line between `[` and `]` lines, as loadgen writes it (what the deepseek-r1
    reference's reader expects)."""
    entries = []
    for seq, (idx, data) in enumerate(answers):
        raw = data if isinstance(data, bytes) else np.asarray(data, dtype="<i4").tobytes()
        entry = {"seq_id": seq, "qsl_idx": idx, "data": raw.hex().upper()}
        if not isinstance(data, bytes):
            entry["token_count"] = len(data)
        entries.append(entry)
    if loadgen_layout:
        path.write_text("[\n" + ",\n".join(json.dumps(e) for e in entries) + "\n]\n")
    else:
        path.write_text(json.dumps(entries))
    return path


def byte_tokenizer(folder: Path, corpus: list[str]) -> Path:
    """A byte-level BPE tokenizer.json (special tokens: the harmony markers); returns the file."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=list(HARMONY), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    return folder / "tokenizer.json"


def encoder(tokenizer_json: Path):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_json))
    return lambda text: tok.encode(text, add_special_tokens=False).ids
