"""Dataset readers: the prompts a QSL serves and the references an evaluator scores against, read once, validated.

One reader per format MLCommons ships (column and key names as the reference implementations read them):

| benchmark | file | prompts | references (accuracy) |
|---|---|---|---|
| gpt-oss-120b | parquet (or pickle) | `input_tokens` (older files: `tok_input`) | `ground_truth`, `dataset` |
| llama3.1-8b | `cnn_eval.json`, a JSON list of records | `tok_input` | `output` |
| llama2-70b-99.9 | OpenOrca pickle (DataFrame) | `tok_input` | `output` |
| deepseek-r1 | pickle (pandas DataFrame) | `tok_input` | `ground_truth` (`gt_output`), `dataset` (`metric`) |
| deepseek-r1 | pickle (DataFrame) | `tok_input` | `ground_truth` (or `gt_output`), `dataset` (or `metric`) |

Every reader names the missing column or key and the file. Pickles are read with pandas, which runs code from the
file: read only the files MLCommons publishes (their checksums are in the stage manifest).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from submission.base.errors import PlanError, did_you_mean

PROMPT_COLUMNS = ("input_tokens", "tok_input")


@dataclass(frozen=True)
class PromptSet:
    """Pre-tokenized prompts and, for accuracy files, one reference per prompt (and its source set, if named)."""

    path: str
    prompts: tuple[tuple[int, ...], ...]
    ground_truth: tuple[str, ...] | None
    subsets: tuple[str, ...] | None = None   # per row: aime25, gpqa_diamond, livecodebench_v6, math500, ...

    def __len__(self) -> int:
        return len(self.prompts)


def _fail(path: Path, message: str, fix: str) -> PlanError:
    return PlanError(message, where=str(path), fix=fix)


def _frame(path: Path, fix: str) -> Any:
    """A pandas DataFrame from a parquet or pickle file (by suffix; parquet first when the suffix says neither)."""
    import pandas as pd

    try:
        if path.suffix in (".pkl", ".pickle"):
            frame = pd.read_pickle(path)
        elif path.suffix == ".parquet":
            frame = pd.read_parquet(path)
        else:
            try:
                frame = pd.read_parquet(path)
            except (OSError, ValueError):
                frame = pd.read_pickle(path)
    except Exception as e:  # pandas/pyarrow/pickle raise many kinds; all mean "not a readable table"
        raise _fail(path, f"cannot read the dataset: {type(e).__name__}: {e}", fix) from None
    if not isinstance(frame, pd.DataFrame):
        raise _fail(path, f"holds a {type(frame).__name__}, not a pandas DataFrame", fix)
    return frame


def _column(frame: Any, path: Path, names: Sequence[str], what: str, fix: str) -> str:
    found = next((c for c in names if c in frame.columns), None)
    if found is None:
        raise _fail(path, f"no {what} column: expected {' or '.join(repr(n) for n in names)}; "
                          f"found {sorted(map(str, frame.columns))}", fix)
    return found


def _token_rows(values: Sequence[Any], path: Path, column: str) -> tuple[tuple[int, ...], ...]:
    prompts = []
    for i, row in enumerate(values):
        try:
            ids = tuple(int(t) for t in row)
        except (TypeError, ValueError):
            raise _fail(path, f"row {i}: {column} is not a list of token ids ({type(row).__name__})",
                        "regenerate the file with the reference preprocessing") from None
        if not ids:
            raise _fail(path, f"row {i}: {column} is empty", "drop or fix the row")
        prompts.append(ids)
    if not prompts:
        raise _fail(path, "the dataset has no rows", "point at the full data file")
    return tuple(prompts)


def _texts(values: Sequence[Any]) -> tuple[str, ...]:
    return tuple("" if v is None or v != v else str(v) for v in values)   # NaN != NaN


def _table_reader(prompt_columns: Sequence[str], truth_columns: Sequence[str], subset_columns: Sequence[str],
                  fix: str) -> Callable[[Path, bool], PromptSet]:
    def read(path: Path, accuracy: bool) -> PromptSet:
        frame = _frame(path, fix)
        prompt = _column(frame, path, prompt_columns, "prompt", fix)
        prompts = _token_rows(frame[prompt].tolist(), path, prompt)
        truth = subsets = None
        if accuracy:
            truth_col = _column(frame, path, truth_columns, "reference answer", fix)
            truth = _texts(frame[truth_col].tolist())
            if subset_columns:
                subset_col = _column(frame, path, subset_columns, "source data set", fix)
                subsets = _texts(frame[subset_col].tolist())
        return PromptSet(str(path), prompts, truth, subsets)

    return read


read_gpt_oss = _table_reader(PROMPT_COLUMNS, ("ground_truth",), ("dataset",),
                             "use the MLCommons gpt-oss-120b parquet files (perf/perf_eval_ref.parquet, "
                             "acc/acc_eval_inputs.parquet)")
read_open_orca = _table_reader(("tok_input",), ("output",), (),
                               "use open_orca_gpt4_tokenized_llama.sampled_24576.pkl from the MLCommons download")
read_deepseek = _table_reader(("tok_input",), ("ground_truth", "gt_output"), ("dataset", "metric"),
                              "use mlperf_deepseek_r1_dataset_4388_fp8_eval.pkl from the MLCommons download")


def read_cnn_eval(path: Path, accuracy: bool) -> PromptSet:
    """llama3.1-8b `cnn_eval.json`: a JSON list of records with `tok_input` (and `output`, the reference summary)."""
    fix = "use cnn_eval.json from the MLCommons CNN-DailyMail download"
    try:
        records = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise _fail(path, f"cannot read the dataset: {e}", fix) from None
    if not isinstance(records, list):
        raise _fail(path, f"expected a JSON list of records, found a {type(records).__name__}", fix)
    keys = ("tok_input", "output") if accuracy else ("tok_input",)
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            raise _fail(path, f"record {i} is a {type(record).__name__}, not an object", fix)
        missing = [k for k in keys if k not in record]
        if missing:
            raise _fail(path, f"record {i} has no {', '.join(repr(k) for k in missing)} key "
                              f"(keys: {sorted(record)})", fix)
    prompts = _token_rows([r["tok_input"] for r in records], path, "tok_input")
    truth = _texts([r["output"] for r in records]) if accuracy else None
    return PromptSet(str(path), prompts, truth)


TOKEN_READERS: dict[str, Callable[[Path, bool], PromptSet]] = {
    "gpt-oss-120b": read_gpt_oss,
    "llama3.1-8b": read_cnn_eval,
    "llama2-70b-99.9": read_open_orca,
    "deepseek-r1": read_deepseek,
}


def read_prompts(benchmark: str, path: str | Path, *, accuracy: bool = False) -> PromptSet:
    """The pre-tokenized prompts of a text benchmark's file; with `accuracy`, its references too."""
    if benchmark not in TOKEN_READERS:
        raise PlanError(f"no token-prompt reader for benchmark {benchmark!r}",
                        fix=did_you_mean(benchmark, TOKEN_READERS))
    return TOKEN_READERS[benchmark](Path(path), accuracy)


def longest_prompts(benchmark: str, paths: dict[str, str]) -> dict[str, int]:
    """The longest prompt, in tokens, of each data set (plan source -> local file) of a token-prompt benchmark; files
    not here, and benchmarks whose prompts are chat messages with images, are left out."""
    if benchmark not in TOKEN_READERS:
        return {}
    return {source: max(map(len, read_prompts(benchmark, path).prompts), default=0)
            for source, path in paths.items() if Path(path).is_file()}


def read_token_prompts(path: str | Path, *, need_ground_truth: bool = False) -> PromptSet:
    """A parquet file of pre-tokenized prompts in the gpt-oss-120b schema (`ground_truth` only when asked for)."""
    path = Path(path)
    fix = "point the dataset at a parquet file (`podium dev smoke-assets` builds one)"
    frame = _frame(path, fix)
    prompt = _column(frame, path, PROMPT_COLUMNS, "prompt", "use the MLCommons gpt-oss-120b parquet files")
    prompts = _token_rows(frame[prompt].tolist(), path, prompt)
    if need_ground_truth and "ground_truth" not in frame.columns:
        raise _fail(path, f"no ground_truth column (found {sorted(map(str, frame.columns))})",
                    "the accuracy run needs the accuracy file, e.g. acc/acc_eval_inputs.parquet")
    truth = _texts(frame["ground_truth"].tolist()) if "ground_truth" in frame.columns else None
    return PromptSet(str(path), prompts, truth)
