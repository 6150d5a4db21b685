"""The Qwen3-VL fields besides the category, as `multimodal/qwen3-vl/.../evaluation.py` computes them (reported under
its names, not gated): "Brand F1 Score" and "Is_secondhand F1 Score".

- Brand (`calculate_brand_f1_score`): both strings stripped and lower-cased, rapidfuzz `fuzz.ratio` > 90 is a match;
  the score is matches / entries. A rejected answer's brand is a pad string (no match).
- is_secondhand (`calculate_secondhand_f1`): scikit-learn's binary `f1_score(truth, predicted)`, True the positive
  class, 0 when there is no true or predicted positive. A rejected answer's is_secondhand is a random draw
  (`_process_chunk`): the log is cut into consecutive chunks of max(n // workers, 1) entries, a master
  `numpy.random.default_rng(seed)` draws one seed per chunk (`integers(0, 2**32)`), and each chunk's Generator draws,
  per entry in order, `choice([True, False], size=1)` for a rejected answer, then the random-baseline category and
  is_secondhand draws. Podium replays the same draws so its value is the reference's (seed 12345, 4 workers).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from rapidfuzz import fuzz

_BOOLS = [True, False]


def brand_f1(pairs: Sequence[tuple[str, str]], threshold: float) -> float:
    """matches / entries, a match being fuzz.ratio(truth, predicted) > threshold on stripped, lower-cased text (a
    rejected answer's brand is the pad string)."""
    if not pairs:
        return 0.0
    hits = sum(fuzz.ratio(truth.strip().lower(), pred.strip().lower()) > threshold for pred, truth in pairs)
    return hits / len(pairs)


def binary_f1(pairs: Sequence[tuple[bool, bool]]) -> float:
    """F1 of the positive class (True): 2TP / (2TP + FP + FN); 0 when that is 0/0 (scikit-learn's zero_division)."""
    tp = sum(pred and truth for pred, truth in pairs)
    fp = sum(pred and not truth for pred, truth in pairs)
    fn = sum(truth and not pred for pred, truth in pairs)
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0


def rejected_secondhand(valid: Sequence[bool], candidates: Sequence[Sequence[str]], *, seed: int,
                        workers: int) -> list[bool | None]:
    """Per log entry (in log order): the reference's random is_secondhand for a rejected answer, None for a valid one.
    `candidates` are each entry's potential_product_categories (their count drives one draw per entry)."""
    master = np.random.default_rng(seed)
    size = max(len(valid) // workers, 1)
    starts = range(0, len(valid), size)
    seeds = master.integers(0, 2**32, size=len(starts))
    drawn: list[bool | None] = []
    for start, chunk_seed in zip(starts, seeds, strict=True):
        rng = np.random.default_rng(chunk_seed)
        for ok, cats in zip(valid[start:start + size], candidates[start:start + size], strict=True):
            drawn.append(None if ok else bool(rng.choice(_BOOLS, size=1).tolist()[0]))
            rng.choice(list(cats))   # the reference's random-category baseline
            rng.choice(_BOOLS)       # the reference's random is_secondhand baseline
    return drawn
