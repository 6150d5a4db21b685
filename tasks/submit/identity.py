"""The submitter id MLCommons gives an organisation, from where `podium submit` may take it: an environment variable
(`MLPERF_SUBMITTER_ID` by default) or a Prefect Secret block (`mlperf-submitter-id` by default), in that order. Never
from the command line, which shells and process lists keep; the value travels as a SecretStr and nothing writes it
down."""

from __future__ import annotations

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


def secret_block(name: str) -> str | None:
    """The value of the Prefect Secret block `name` on the Prefect server, None when there is no such block."""
    from prefect.blocks.system import Secret

    try:
        block = Secret.load(name)
    except ValueError:   # Prefect: "Unable to find block document named ..."
        return None
    value = block.get()
    if not isinstance(value, str):
        raise PlanError(f"the Prefect Secret block {name!r} holds a {type(value).__name__}, not the id's text",
                        fix="save the submitter id as the block's whole value (a string)")
    return value


def find(env_var: str, block: str, environ: Mapping[str, str],
         load: Callable[[str], str | None] = secret_block) -> SubmitterId:
    """The id from `environ[env_var]`, else from the Secret block `block`; PlanError naming both when neither has
    one."""
    if environ.get(env_var, "").strip():
        return SubmitterId(SecretStr(environ[env_var].strip()), f"environment variable {env_var}")
    value = (load(block) or "").strip()
    if value:
        return SubmitterId(SecretStr(value), f"Prefect Secret block {block!r}")
    raise PlanError(f"no submitter id: the environment variable {env_var} is not set and there is no Prefect Secret "
                    f"block {block!r}",
                    fix=f"save the id MLCommons gave you as a Secret block named {block} (the Prefect UI: Blocks, "
                        f"Secret; or docs/submission.md), or export {env_var} where the flow runs; never pass it "
                        "on the command line")
