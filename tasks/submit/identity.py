"""The submitter id MLCommons gives an organisation, from where `podium submit` may take it: an environment variable
(`MLPERF_SUBMITTER_ID` by default) or a Prefect Secret block (`mlperf-submitter-id` by default), in that order. Never
from the command line, which shells and process lists keep; the value travels as a SecretStr and nothing writes it
down."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pydantic import SecretStr

from submission.base.errors import PlanError

DEFAULT_ENV = "MLPERF_SUBMITTER_ID"
DEFAULT_BLOCK = "mlperf-submitter-id"


@dataclass(frozen=True)
class SubmitterId:
    value: SecretStr
    source: str  # where it came from, e.g. "environment variable MLPERF_SUBMITTER_ID"


def find(env_var: str, block: str, environ: Mapping[str, str],
         load: Callable[[str], str | None] | None = None) -> SubmitterId:
    """The id from `environ[env_var]`, else from the Secret block `block` (read by `load`, default
    `tasks.steps.secret_text`); PlanError naming both when neither has one."""
    if environ.get(env_var, "").strip():
        return SubmitterId(SecretStr(environ[env_var].strip()), f"environment variable {env_var}")
    if load is None:
        from tasks.steps import secret_text  # Prefect: imported in the flow run, never when the CLI starts

        load = functools.partial(secret_text, instead=f"export {env_var} instead")
    value = (load(block) or "").strip()
    if value:
        return SubmitterId(SecretStr(value), f"Prefect Secret block {block!r}")
    raise PlanError(f"no submitter id: the environment variable {env_var} is not set and there is no Prefect Secret "
                    f"block {block!r}",
                    fix=f"save the id MLCommons gave you as a Secret block named {block} (the Prefect UI: Blocks, "
                        f"Secret; or docs/submission.md), or export {env_var} where the flow runs; never pass it "
                        "on the command line")
