"""What of a plan is secret: the value of every entry of an engine's `options.env` (a Hugging Face token, a licence
key, or anything else the plan hands its engine).

Such a value reaches the engine's processes through their environment alone. Wherever Podium shows or passes a plan
or its engine's options (logs, dry runs, the Kubernetes objects it writes to disk, the plan the tree keeps, a fleet
member's parameters) the variable is named with SHOWN in place of its value: `HF_TOKEN=<set>`. The launchers go
further and keep every value of a process's environment off command lines and manifests, the backend's own
(addresses, ports, GPU ids) included, since they cannot tell one from the other; the dry run's process view shows
those derived values as they are. docs/engines.md, "The engine's environment".
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

SHOWN = "<set>"


def shown_env(env: Mapping[str, str], names: Iterable[str] | None = None) -> dict[str, str]:
    """`env` with the value of each of `names` (every name when None) as SHOWN."""
    hidden = set(env) if names is None else set(names)
    return {k: SHOWN if k in hidden else v for k, v in env.items()}


def shown_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """An engine's options as the plan gives them, each value of `env` as SHOWN."""
    out = dict(options)
    if isinstance(out.get("env"), Mapping):
        out["env"] = shown_env(out["env"])
    return out


def values_digest(env: Mapping[str, str]) -> str:
    """sha256 (16 hex digits) of the values: what tells two settings apart where they are shown as SHOWN (a run's
    engine identity, so that a changed value makes its runs new). A token's value cannot be read back from it; a
    flag's "0" or "1" could be guessed, as from the plan's behaviour."""
    return hashlib.sha256(json.dumps(dict(env), sort_keys=True).encode()).hexdigest()[:16]


def with_values(options: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """An engine's options as `shown_options` gives them (a subflow's parameters) with the values of `env`, the
    plan's, put back."""
    out = dict(options)
    if out.get("env"):
        out["env"] = {name: env[name] for name in out["env"]}
    return out


def _engines(data: Mapping[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(index, engine section) of each benchmark of a plan's JSON form."""
    return [(i, b["engine"]) for i, b in enumerate(data.get("benchmarks") or []) if isinstance(b.get("engine"), dict)]


def env_values(data: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """The engine env of each benchmark of a plan's JSON form that has one, by the benchmark's index (as text)."""
    return {str(i): dict(env) for i, engine in _engines(data) if (env := (engine.get("options") or {}).get("env"))}


def shown_plan(data: Mapping[str, Any]) -> dict[str, Any]:
    """A plan's JSON form (`Plan.model_dump(mode="json")`) with every engine env value as SHOWN."""
    out = copy.deepcopy(dict(data))
    for _, engine in _engines(out):
        if engine.get("options"):
            engine["options"] = shown_options(engine["options"])
    return out


def with_env(data: Mapping[str, Any], values: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    """`shown_plan`'s output with the values of `env_values` put back."""
    out = copy.deepcopy(dict(data))
    engines = dict(_engines(out))
    for index, env in values.items():
        engines[int(index)].setdefault("options", {})["env"] = dict(env)
    return out
