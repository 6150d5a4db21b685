"""The base of every schema Podium reads or records (plans, engine options, rules, run records): unknown keys are
errors, with the field's path, and a parsed value never changes."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
