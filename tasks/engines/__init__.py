"""What runs: an engine backend turns engine options and a model folder into process specs and an endpoint.

Where it runs is the launchers' business (`tasks.launchers`). Backends never import their engine; they build argv
for its CLI. Look one up with `backend(name)`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from submission.errors import PlanError, did_you_mean


@dataclass(frozen=True)
class HttpProbe:
    """Ready when `POST path` with `body` (or `GET path` when body is None) answers 200."""

    path: str
    body: dict[str, Any] | None = None


@dataclass(frozen=True)
class ProcessSpec:
    """One OS process, Slurm job step or pod."""

    role: str                      # server | frontend | prefill | decode | router | etcd | nats
    name: str                      # unique within a deployment; names the log file
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    host: str = "127.0.0.1"
    port: int | None = None
    gpus: int = 0
    node_index: int = 0
    probes: tuple[HttpProbe, ...] = ()


@dataclass(frozen=True)
class Endpoint:
    """What the load generator talks to."""

    base_url: str
    model: str                     # the `model` field of every request
    accepts_token_ids: bool        # prompt may be a list of token ids
    returns_token_ids: bool        # the response carries output token ids
    tokenizer: str | None = None   # local tokenizer.json, for engines that take and return text only
    drop_fields: frozenset[str] = frozenset()   # request fields the engine rejects


@dataclass(frozen=True)
class Placement:
    """Where the launcher puts a deployment: the bind host and the ports it reserved."""

    host: str
    ports: tuple[int, ...]


class EngineBackend(Protocol):
    name: str
    ports_needed: int

    def version(self) -> str: ...

    def processes(self, options: dict[str, Any], model_dir: Path, placement: Placement) -> list[ProcessSpec]: ...

    def endpoint(self, options: dict[str, Any], model_dir: Path, processes: list[ProcessSpec]) -> Endpoint: ...


BACKENDS = {"smoke": "tasks.engines.smoke"}


def backend(name: str) -> EngineBackend:
    """The backend registered under `name`."""
    if name not in BACKENDS:
        raise PlanError(f"unknown engine {name!r}", fix=did_you_mean(name, BACKENDS))
    return importlib.import_module(BACKENDS[name]).BACKEND
