"""What every plot shares: a matplotlib Figure on the Agg canvas (object API: no pyplot, no display, no global
state, imported only when a plot is drawn), written atomically as a PNG, and the colours."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from submission.base.files import replace_atomic, temporary

DPI = 110
VALID, INVALID, LIMIT = "#2b7bba", "#d95f02", "#7f7f7f"


def figure(width: float = 7.5, height: float = 4.2, rows: int = 1, cols: int = 1, **subplots: Any) -> tuple[Any, Any]:
    """A figure and its axes as a rows x cols grid (always two-dimensional)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    return fig, fig.subplots(rows, cols, squeeze=False, **subplots)


def save(fig: Any, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary(path)
    fig.savefig(tmp, format="png")
    return replace_atomic(tmp, path)
