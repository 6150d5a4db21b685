"""What every evaluator does the same way: read the accuracy log once per sample, decode token ids to text."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from submission.errors import PlanError
from submission.logs import AccuracyEntry, parse_accuracy_log

Decoder = Callable[[list[int]], str]


def unique_entries(accuracy_log: Path, dataset_size: int, dataset: Path) -> list[AccuracyEntry]:
    """The first entry of each qsl_idx (the reference scripts dedupe the same way), in log order. An index
    outside the data set means the log belongs to another data set: an error naming both files."""
    seen: set[int] = set()
    out = []
    for entry in parse_accuracy_log(accuracy_log):
        if entry.qsl_idx in seen:
            continue
        if not 0 <= entry.qsl_idx < dataset_size:
            raise PlanError(f"accuracy log entry qsl_idx {entry.qsl_idx} is outside the data set "
                            f"({dataset_size} rows in {dataset})", where=str(accuracy_log),
                            fix="score the log against the data set the run served")
        seen.add(entry.qsl_idx)
        out.append(entry)
    return out


def entry_text(entry: AccuracyEntry) -> str:
    """A text-output entry (Qwen3-VL): the data bytes as UTF-8 (invalid bytes replaced)."""
    return bytes.fromhex(entry.data).decode("utf-8", errors="replace")


def decoder(tokenizer: Path | None, *, skip_special_tokens: bool, benchmark: str) -> Decoder:
    """Token ids -> text with the model's tokenizer: a `tokenizer.json` file, or a model folder holding one.
    Podium decodes with the fast (Rust) tokenizer; the references that load `use_fast=False` can differ in
    rare whitespace details (docs/benchmarks.md)."""
    if tokenizer is None:
        raise PlanError(f"the {benchmark} evaluator needs the model's tokenizer",
                        fix="pass --tokenizer MODEL_DIR (or its tokenizer.json)")
    path = Path(tokenizer)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise PlanError("no tokenizer.json there", where=str(path),
                        fix="point at the model folder (with tokenizer.json) or the file itself")
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    return lambda ids: tok.decode(ids, skip_special_tokens=skip_special_tokens)
