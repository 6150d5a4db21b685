"""The start-up of an engine of replicas (`engine.replicas`), before any run is timed: which replicas serve, that
they all serve the same thing, and who is left out and why.

Every replica that serves has answered its readiness probe with a real generation (the launcher's
`start_replicas`, tasks/launchers/replicas.py) and its warm-up (tasks/serving/warmup.py). At start-up each one also
says what it serves, and they must agree (`check_identical`): its engine version, `GET /version` (vLLM
`vllm/entrypoints/serve/instrumentator/basic.py` answers `{"version": VLLM_VERSION}`; trtllm-serve's
`OpenAIServer.version` answers `{"version": tensorrt_llm.version.__version__}`), and its checkpoint, the last part
of the served model's folder in `GET /v1/models` (vLLM's model card has `root`, the model path it loaded; trtllm-serve's
card has only `id`, the model folder's name when it was given a folder). A staged model folder is named
`<name>-<first 12 hex digits of its manifest's sha256>` (tasks/staging/stage.py) and a node's local copy keeps that
name (tasks/launchers/slurm_stage.py), so a replica serving another staging of the model differs there. A replica
that answers neither route reports `?`: replicas that all answer `?` agree; one `?` among answers is odd. The odd
ones (those outside the largest group that agrees) stop the launch before timing, each named with what it serves.

A run needs `Layout.ready_needed(performance)` replicas (the plan's `min_ready` for accuracy runs and audits,
`performance_min_ready` for performance runs): `LeftOut` keeps every replica that does not serve (never ready, its
warm-up failed, or its process ended since), with why, so a refusal names them all.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

from submission.base.errors import LaunchError
from submission.plan.replicas import Layout
from tasks.engines import Endpoint, Replica
from tasks.launchers.replicas import Readiness
from tasks.serving.warmup import WarmUp, warm_up

UNKNOWN = "?"
AT_ONCE = 64          # replicas asked at a time
ASK_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Identity:
    version: str
    checkpoint: str

    def __str__(self) -> str:
        return f"engine version {self.version}, checkpoint {self.checkpoint}"


def checkpoint_of(models: dict, model: str) -> str:
    """The checkpoint a `/v1/models` answer names: the card of `model` (else the first), its `root` or else its
    `id`, the last part of that path."""
    cards = [c for c in models.get("data") or () if isinstance(c, dict)]
    card = next((c for c in cards if c.get("id") == model), cards[0] if cards else {})
    name = str(card.get("root") or card.get("id") or UNKNOWN).rstrip("/")
    return name.rsplit("/", 1)[-1] or UNKNOWN


async def _ask(client: httpx.AsyncClient, replica: Replica, model: str, gate: asyncio.Semaphore) -> Identity:
    async def get(path: str) -> dict | None:
        try:
            r = await client.get(replica.base_url.rstrip("/") + path)
            return r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    async with gate:
        version, models = await get("/version"), await get("/v1/models")
    return Identity(str((version or {}).get("version") or UNKNOWN),
                    checkpoint_of(models, model) if isinstance(models, dict) else UNKNOWN)


def identities(replicas: tuple[Replica, ...], model: str) -> dict[str, Identity]:
    """What each replica says it serves, by name."""
    async def every() -> list[Identity]:
        gate = asyncio.Semaphore(AT_ONCE)
        async with httpx.AsyncClient(timeout=ASK_TIMEOUT_S) as client:
            return await asyncio.gather(*(_ask(client, r, model, gate) for r in replicas))

    return dict(zip((r.name for r in replicas), asyncio.run(every()), strict=True))


def check_identical(found: dict[str, Identity], replicas: tuple[Replica, ...]) -> Identity:
    """The identity every replica shares; LaunchError naming each odd one (and where it runs) otherwise."""
    groups = collections.Counter(found.values())
    (common, most), *rest = groups.most_common()
    if not rest:
        return common
    tie = rest[0][1] == most
    nodes = {r.name: (r.node or urlsplit(r.base_url).netloc) for r in replicas}
    odd = [name for name, ident in found.items() if tie or ident != common]
    lines = [f"- {name} on {nodes[name]}: {found[name]}" for name in odd]
    majority = "" if tie else f"; the other {most} serve {common}"
    raise LaunchError(f"the replicas do not all serve the same checkpoint and engine version{majority}:\n"
                      + "\n".join(lines),
                      fix="stop what serves an older image or model on those nodes (or pods) and launch again; every "
                          "replica must run the same engine build and the same staged model")


@dataclass
class LeftOut:
    """The replicas of a launch that do not serve, by name, with why (a line that names where each runs)."""

    why: dict[str, str] = field(default_factory=dict)
    tails: dict[str, str] = field(default_factory=dict)   # the last lines of their logs, where known
    ended: list[str] = field(default_factory=list)        # those that served, and whose process ended since

    def add(self, name: str, why: str, tail: str = "") -> None:
        self.why[name] = why
        if tail:
            self.tails[name] = tail

    def end(self, replica: Replica, why: str) -> None:
        """A replica that served, whose process has ended since (`Launcher.down`)."""
        if replica.name not in self.ended:
            self.ended.append(replica.name)
            self.add(replica.name, f"{replica.name} on {replica.node}: served, then {why}")

    def report(self) -> str:
        return "\n".join(f"- {why}" + (f"; last lines of its log:\n{self.tails[name]}" if name in self.tails else "")
                         for name, why in self.why.items())

    def require(self, serving: int, needed: int, purpose: str) -> None:
        """LaunchError naming every replica left out when fewer than `needed` serve."""
        if serving >= needed:
            return
        raise LaunchError(f"{serving} of {serving + len(self.why)} replicas serve, {purpose} needs {needed}; left "
                          f"out:\n{self.report()}",
                          fix="read the replicas' logs above; or let fewer serve (engine.replicas.min_ready for "
                              "accuracy runs and audits, performance_min_ready for performance runs), or raise "
                              "engine.ready_timeout_s")


def admit(engine: str, endpoint: Endpoint, readiness: Readiness, warm: WarmUp | None, layout: Layout,
          logger: logging.Logger | logging.LoggerAdapter) -> tuple[Endpoint, LeftOut]:
    """After a launch: check the ready replicas serve the same thing (`check_identical`, raising), warm each of them,
    and return the endpoint of those that serve with the replicas `LeftOut` (never ready, or their warm-up failed),
    naming them in the log."""
    left = LeftOut()
    for straggler in readiness.missing:
        left.add(straggler.name, straggler.line(), straggler.log_tail)
    common = check_identical(identities(endpoint.replicas, endpoint.model), endpoint.replicas)
    failed = warm_up(engine, endpoint, warm, logger) if warm is not None else {}
    nodes = {r.name: r.node for r in endpoint.replicas}
    for name, why in failed.items():
        left.add(name, f"{name} on {nodes[name]}: {why}")
    kept = tuple(r for r in endpoint.replicas if r.name not in failed)
    if not kept:
        raise LaunchError(f"engine {engine}: no replica serves; left out:\n{left.report()}",
                          fix="read the replicas' logs above")
    endpoint = dataclasses.replace(endpoint, replicas=kept, base_url=kept[0].base_url)
    counts = (f"{len(kept)} of {layout.count} replicas serve {common} (performance runs need "
              f"{layout.performance_min_ready}, accuracy runs and audits {layout.min_ready})")
    if left.why:
        logger.warning("engine %s: %s; left out:\n%s", engine, counts, left.report())
    else:
        logger.info("engine %s: %s", engine, counts)
    return endpoint, left
