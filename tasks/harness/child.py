"""What a run's child processes (the loadgen runner, tasks/harness/runner.py, and its sample-serving workers,
tasks/harness/workers.py) build from the run's setup (its spec and endpoint as JSON, as in run.json and
endpoint.json), and how each dies with the process that started it. The engine's warm-up
(tasks/serving/warmup.py) builds its requests and client with the same `requests_of` and `client_of`."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal

from submission.results.runs import RunSpec
from tasks.engines import Endpoint

PR_SET_PDEATHSIG = 1   # linux/prctl.h


def requests_of(spec: RunSpec):
    """The request builder of run `spec`: its benchmark's requests over its data set, with its sampling settings."""
    from tasks.datasets.requests import build_requests

    return build_requests(spec.benchmark, spec.dataset, spec.mode, max_tokens=spec.max_tokens,
                          temperature=spec.temperature, guided_decoding=spec.guided_decoding)


def client_of(spec: RunSpec, endpoint: Endpoint, max_concurrency: int):
    """The streaming client of run `spec` on `endpoint` with at most `max_concurrency` requests in flight."""
    from tasks.harness.client import CompletionClient

    return CompletionClient(endpoint, max_tokens=spec.max_tokens, temperature=spec.temperature,
                            max_concurrency=max_concurrency)


def requests_for(setup: dict):
    """The request builder of one run (`setup`: its spec and endpoint as JSON, as in run.json and endpoint.json)."""
    return requests_of(RunSpec.model_validate_json(setup["spec"]))


def client_for(setup: dict, max_concurrency: int):
    """The streaming client of one run with at most `max_concurrency` requests in flight: the run's own, or one
    worker's share."""
    endpoint = Endpoint.from_client(json.loads(setup["endpoint"]))
    return client_of(RunSpec.model_validate_json(setup["spec"]), endpoint, max_concurrency)


def die_with_parent(parent: int) -> None:
    """Have the kernel SIGKILL this process when its parent dies; exit now if it already has (`parent` 0: whoever
    the parent is, e.g. faketime under the accelerated clock)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent and os.getppid() != parent:
        os._exit(1)
