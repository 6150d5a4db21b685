"""The base of every schema Podium reads or records (plans, engine options, rules, run records): unknown keys are
errors, with the field's path, and a parsed value never changes. What a person writes (the plan and each of its
sections) is `Input`: every number in it is finite as well, and a value may carry an upper bound (`AtMost`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic_core import core_schema


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Input(Strict):
    """A schema a person writes: every float in it, at any depth of a field's type, refuses `inf` and `nan` (YAML
    `.inf`, `.nan`, or a string such as "1e999"); no rate, duration or fraction of a run is one. Records of measurements
    stay `Strict`: a measurement may be nan."""

    model_config = ConfigDict(allow_inf_nan=False)


@dataclass(frozen=True)
class AtMost:
    """`Annotated[int, AtMost(most, why)]`: a value over `most` is refused with `why` (what no real system has) and
    the fix; the JSON schema, and so the plan reference, shows `most` as the maximum."""

    most: float
    why: str

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> dict[str, Any]:
        return {**handler(schema), "maximum": self.most}

    def _check(self, value: float) -> float:
        if value > self.most:
            raise ValueError(f"{_shown(value)} is over {_shown(self.most)}, {self.why}; give the real value")
        return value


def _shown(number: float) -> str:
    """A number as a plan writes it: an integer in full, a float short (1e+308)."""
    return f"{number:g}" if isinstance(number, float) else str(number)


def reason(error: Any) -> str:
    """A pydantic error's message in Podium's words, without its field (the caller names the field)."""
    if error["type"] == "finite_number":
        return f"{error['input']!r} is not a finite number; give a number (inf and nan are refused)"
    return str(error["msg"]).removeprefix("Value error, ")
