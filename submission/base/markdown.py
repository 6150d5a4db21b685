"""Text that is shown as Markdown (report.md, Prefect's table and markdown artifacts), written so that every value
renders as written.

A table cell of a Prefect table artifact is rendered as a Markdown document of its own, so a value that starts like
a block (`>= 60.698` a quote, `-` a bullet, `1. x` a list, `# x` a heading) loses its first characters there;
inside a pipe table a `|` ends the cell. `cell` writes bounds with `≥` and `≤`, an empty value as `—`, and
escapes the rest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

NONE = "—"   # an empty cell: a lone "-" would be a bullet
_SIGNS = (("≥", re.compile(r"^>=\s*")), ("≤", re.compile(r"^<=\s*")))
_BLOCK = re.compile(r"^(?:[>#]|[-+*](?:\s|$)|\d{1,9}[.)](?:\s|$)|([-*_=])(?:\s*\1){2,}\s*$|```|~~~|<[A-Za-z/!?])")


def cell(value: object) -> str:
    """One value as a table cell (None: `—`; floats with two decimals and thousands separators)."""
    if value is None:
        return NONE
    if isinstance(value, float):
        return f"{value:,.2f}"
    text = " ".join(str(value).split())   # one line, no indented code block
    if text == "-":
        return NONE
    for sign, pattern in _SIGNS:
        text = pattern.sub(f"{sign} ", text)
    text = text.replace("|", "\\|")
    if _BLOCK.match(text):
        digits = re.match(r"\d+", text)
        at = digits.end() if digits else 0   # "1. x": the "." makes the list, so it is the one escaped
        text = f"{text[:at]}\\{text[at:]}"
    return text


def table(columns: Sequence[str], rows: Iterable[Mapping[str, object] | Sequence[object]]) -> list[str]:
    """A pipe table: the header, the rule, one line per row (a mapping by column, or values in column order)."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        values = [row.get(c) for c in columns] if isinstance(row, Mapping) else list(row)
        lines.append("| " + " | ".join(cell(v) for v in values) + " |")
    return lines
