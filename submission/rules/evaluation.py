"""Constants that define the reference accuracy metrics, as data: `rules/evaluation.yaml` (each cites its source)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

from submission.base.errors import PlanError

_FILE = Path(__file__).parent / "evaluation.yaml"


@functools.lru_cache(maxsize=1)
def _load() -> dict[str, Any]:
    try:
        data = yaml.safe_load(_FILE.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise PlanError(f"invalid evaluation rules: {error}", where=str(_FILE)) from error
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), dict):
        raise PlanError("expected a mapping with a `benchmarks` mapping", where=str(_FILE))
    return data["benchmarks"]


def evaluation_constant(benchmark: str, name: str) -> Any:
    """A named constant of `benchmark`'s reference accuracy script, e.g. ("gpt-oss-120b", "dataset_repeats")."""
    try:
        return _load()[benchmark][name]
    except KeyError:
        raise PlanError(f"no evaluation constant {name!r} for {benchmark!r}", where=str(_FILE),
                        fix="add it, citing the reference script it comes from") from None
