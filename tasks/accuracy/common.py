"""What every evaluator does the same way: read the accuracy log once per sample, decode token ids to text."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from submission.base.errors import PlanError
from submission.results.logs import AccuracyEntry, parse_accuracy_log

Decoder = Callable[[list[int]], str]
_log = logging.getLogger(__name__)


def unique_entries(accuracy_log: Path, dataset_size: int, dataset: Path) -> list[AccuracyEntry]:
    """The first entry of each qsl_idx, in log order (the ROUGE and deepseek-r1 evaluators; the gpt-oss and Qwen3-VL
    references count every entry: `log_entries`). An index outside the data set is an error naming both files."""
    seen: set[int] = set()
    out = []
    for entry in log_entries(accuracy_log, dataset_size, dataset)[0]:
        if entry.qsl_idx not in seen:
            seen.add(entry.qsl_idx)
            out.append(entry)
    return out


def log_entries(accuracy_log: Path, dataset_size: int, dataset: Path) -> tuple[list[AccuracyEntry], list[int]]:
    """Every entry in log order, as `eval_mlperf_accuracy.py` (gpt-oss) and `evaluation.py` (Qwen3-VL) read them (a
    repeated qsl_idx is scored each time), and the repeated indices, sorted. An index outside the data set means the
    log belongs to another data set: an error naming both files."""
    entries = parse_accuracy_log(accuracy_log)
    counts = Counter(entry.qsl_idx for entry in entries)
    for idx in counts:
        if not 0 <= idx < dataset_size:
            raise PlanError(f"accuracy log entry qsl_idx {idx} is outside the data set "
                            f"({dataset_size} rows in {dataset})", where=str(accuracy_log),
                            fix="score the log against the data set the run served")
    return entries, sorted(idx for idx, n in counts.items() if n > 1)


def repeat_note(repeated: list[int], accuracy_log: Path) -> tuple[str, ...]:
    """A warning (logged and returned as a note) naming repeated qsl_idx: loadgen's accuracy mode writes each sample
    once, so repeats mean a broken harness. The score counts them, as the reference does."""
    if not repeated:
        return ()
    shown = ", ".join(map(str, repeated[:20])) + (f" and {len(repeated) - 20} more" if len(repeated) > 20 else "")
    text = (f"WARNING: qsl_idx {shown} appear(s) more than once in {Path(accuracy_log).name}; loadgen writes each "
            "sample once in an accuracy run, so the harness is broken; scored as the reference does (every entry "
            "counted): fix the harness and rerun the accuracy run")
    _log.warning(text)
    return (text,)


def subset_kind(subset: str, kinds: tuple[str, ...], benchmark: str, column: str = "the dataset column") -> str:
    """The first of `kinds` that the data set name `subset` contains, lower-cased (how the references pick a scoring
    rule per source data set); a name containing none is an error."""
    name = subset.lower()
    for kind in kinds:
        if kind in name:
            return kind
    raise PlanError(f"no {benchmark} scoring rule for data set {subset!r}",
                    fix=f"{column} holds names containing one of {', '.join(kinds)}")


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
