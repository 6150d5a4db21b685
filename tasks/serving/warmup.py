"""The engine's warm-up: after each launch (a relaunch too) and before the first measured request, a few requests of
the benchmark's own kind, all in flight at once.

An engine may compile or set up on the first request that needs it what its readiness probe (one greedy token of a
short text prompt) never needed: the vision encoder at real image sizes, the guided-decoding grammar of the answer
schema, batched sampling. vLLM 0.31.0 samples top-k/top-p with FlashInfer by default (`VLLM_USE_FLASHINFER_SAMPLER`,
vllm/envs.py:869-876; `TopKTopPSampler.__init__`, vllm/v1/sample/ops/topk_topp_sampler.py:218-226) and
flashinfer-python 0.7.0.post1 ships no prebuilt kernels: compiling them took 87 s, 38 s and 12 s on a CPU. vLLM's
own start-up profile run samples once with top-k/top-p (`_dummy_sampler_run`,
vllm/v1/worker/gpu_model_runner.py:6203-6250, from `profile_run`), so with that version the compile falls inside the
readiness wait; the warm-up makes sure that whatever an engine still compiles on first use is compiled here, not in
the first timed run (a Server run would turn INVALID on latency).

So the warm-up sends the first `requests` samples of the session's first run, built by the harness's own request
builder and client (`tasks.harness.child.requests_of`, `client_of`): the same data set (an image with each
Qwen3-VL sample), sampling settings, max_tokens and guided decoding. It writes nothing: no run folder, no record.
MLPerf Inference places the SUT's start-up before LoadGen starts its clock (inference_rules.adoc, "LoadGen
Operation": "2. SUT starts up and signals readiness. 3. LoadGen starts clock and begins generating queries.").

An engine of replicas (`Endpoint.replicas`) is warmed replica by replica: each gets the same requests, straight to
its own address (no replica is warmed through another), up to `AT_ONCE` replicas at a time, each within
`timeout_s`, and the log counts each replica's answered requests on a line of its own. A replica whose warm-up fails
is returned with why, for the session to leave out (tasks/serving/startup.py); the others serve.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from time import monotonic
from typing import TYPE_CHECKING

from submission.base.errors import LaunchError
from submission.plan.model import EngineSpec
from submission.results.runs import RunSpec
from tasks.engines import Endpoint, Replica
from tasks.harness.child import client_of, requests_of
from tasks.harness.wire import HttpPool

if TYPE_CHECKING:
    from tasks.datasets.requests import RequestBuilder
    from tasks.harness.client import CompletionClient

AT_ONCE = 64   # replicas warmed at a time


@dataclass(frozen=True)
class WarmUp:
    """What an engine is warmed up with after each launch: the first `requests` samples of run `spec` (the plan's
    `engine.warmup_requests`; 0: none), within `timeout_s` (`engine.warmup_timeout_s`)."""

    spec: RunSpec
    requests: int
    timeout_s: float


async def _send(builder: RequestBuilder, client: CompletionClient, count: int,
                pool: HttpPool | None = None) -> list[str | None]:
    """Send the first `count` samples at once (to `pool`, default the client's endpoint); each one's error, None
    for an answer."""
    try:
        answers = await asyncio.gather(*(client.send(builder.path, builder.body(i % len(builder)), pool=pool)
                                         for i in range(count)))
    finally:
        await (pool or client).aclose()
    return [a.error for a in answers]


def _what(warm: WarmUp, builder: RequestBuilder) -> str:
    sampling = json.dumps(builder.sampling.request_fields(), sort_keys=True)
    return f"{warm.requests} {warm.spec.benchmark} request(s) at once with the run's sampling {sampling}"


def warm_up(engine: str, endpoint: Endpoint, warm: WarmUp,
            logger: logging.Logger | logging.LoggerAdapter) -> dict[str, str]:
    """Send the warm-up and wait for every answer; LaunchError when one fails or they take over `timeout_s`. With
    replicas, each is warmed (`warm_replicas`) and those that failed are returned by name with why."""
    if warm.requests == 0:
        return {}
    if endpoint.replicas:
        return warm_replicas(engine, endpoint, warm, logger)
    builder = requests_of(warm.spec)
    what = _what(warm, builder)
    started = monotonic()
    try:
        errors = asyncio.run(asyncio.wait_for(_send(builder, client_of(warm.spec, endpoint, warm.requests),
                                                    warm.requests), warm.timeout_s))
    except TimeoutError:
        raise LaunchError(f"engine {engine}: the warm-up ({what}) was not answered within {warm.timeout_s:g} s",
                          fix="read the engine log; raise engine.warmup_timeout_s in the plan if its first requests "
                              "compile kernels for longer, or set engine.warmup_requests: 0") from None
    failed = [e for e in errors if e is not None]
    if failed:
        raise LaunchError(f"engine {engine}: {len(failed)} of the warm-up's {what} failed; the first: {failed[0]}",
                          fix="read the engine log: the runs would send the same requests")
    logger.info("engine %s warmed up: %s answered in %.1f s", engine, what, monotonic() - started)
    return {}


def warm_replicas(engine: str, endpoint: Endpoint, warm: WarmUp,
                  logger: logging.Logger | logging.LoggerAdapter) -> dict[str, str]:
    """Warm each replica of `endpoint` with the same requests, `AT_ONCE` replicas at a time, each within
    `timeout_s`; one log line per replica warmed, with its count. Returns the replicas whose warm-up failed, by
    name, with why."""
    builder = requests_of(warm.spec)
    client = client_of(warm.spec, endpoint, warm.requests)   # one client (one tokenizer); a pool per replica
    what = _what(warm, builder)

    async def one(replica: Replica, gate: asyncio.Semaphore) -> str | None:
        async with gate:
            started = monotonic()
            pool = HttpPool(replica.base_url, max_connections=warm.requests)
            try:
                errors = await asyncio.wait_for(_send(builder, client, warm.requests, pool), warm.timeout_s)
            except TimeoutError:
                return f"its warm-up ({what}) was not answered within {warm.timeout_s:g} s"
            failed = [e for e in errors if e is not None]
            if failed:
                return f"{len(failed)} of its warm-up's {what} failed; the first: {failed[0]}"
            logger.info("engine %s: %s warmed up: %d request(s) answered in %.1f s", engine, replica.name,
                        warm.requests, monotonic() - started)
            return None

    async def every() -> list[str | None]:
        gate = asyncio.Semaphore(AT_ONCE)
        try:
            return await asyncio.gather(*(one(r, gate) for r in endpoint.replicas))
        finally:
            await client.aclose()

    found = dict(zip((r.name for r in endpoint.replicas), asyncio.run(every()), strict=True))
    logger.info("engine %s: %d of %d replicas warmed up, %s each", engine, sum(e is None for e in found.values()),
                len(found), what)
    return {name: why for name, why in found.items() if why is not None}


def planned(engine: EngineSpec, specs: list[RunSpec]) -> WarmUp | None:
    """The warm-up the plan's `engine` section asks for, with the requests of the first of `specs` (the first run
    the session serves); None when it asks for none or there is no run."""
    if not specs or engine.warmup_requests == 0:
        return None
    return WarmUp(specs[0], engine.warmup_requests, engine.warmup_timeout_s)
