"""Dataset readers: the prompts a QSL serves, read once and validated.

gpt-oss-120b ships parquet files with pre-tokenized prompts (`input_tokens`, or `tok_input` in older files), a
`dataset` column naming the source set and, in the accuracy files, `ground_truth`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from submission.errors import PlanError

PROMPT_COLUMNS = ("input_tokens", "tok_input")


@dataclass(frozen=True)
class PromptSet:
    path: str
    prompts: tuple[tuple[int, ...], ...]
    ground_truth: tuple[str, ...] | None

    def __len__(self) -> int:
        return len(self.prompts)


def read_token_prompts(path: str | Path, *, need_ground_truth: bool = False) -> PromptSet:
    """Read a parquet file of pre-tokenized prompts (the gpt-oss-120b schema)."""
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as e:
        raise PlanError(f"cannot read the dataset: {e}", where=str(path),
                        fix="point the dataset at a parquet file (`podium dev smoke-assets` builds one)") from None
    columns = set(table.column_names)
    prompt_column = next((c for c in PROMPT_COLUMNS if c in columns), None)
    if prompt_column is None:
        raise PlanError(f"no prompt column: expected one of {', '.join(PROMPT_COLUMNS)}; found {sorted(columns)}",
                        where=str(path), fix="use the MLCommons gpt-oss-120b parquet files")
    if need_ground_truth and "ground_truth" not in columns:
        raise PlanError(f"no ground_truth column (found {sorted(columns)})", where=str(path),
                        fix="the accuracy run needs the accuracy file, e.g. acc/acc_eval_inputs.parquet")
    prompts = tuple(tuple(int(t) for t in row) for row in table.column(prompt_column).to_pylist())
    if not prompts:
        raise PlanError("the dataset has no rows", where=str(path))
    empty = [i for i, p in enumerate(prompts) if not p]
    if empty:
        raise PlanError(f"rows {empty[:5]} have empty prompts", where=str(path))
    truth = tuple(str(t) for t in table.column("ground_truth").to_pylist()) if "ground_truth" in columns else None
    return PromptSet(str(path), prompts, truth)
