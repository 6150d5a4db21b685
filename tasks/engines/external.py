"""An external engine: an OpenAI-compatible endpoint that someone else launched. Podium probes it (health, model
listed, one-token request) and benchmarks it; it never starts or stops it. The launcher gets no process to start:
`attach()` is the whole of its readiness, and `launched()` in tasks/launchers uses it instead of a launcher.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx

from submission.base.errors import LaunchError
from submission.plan.engine_options import OptionsLike
from tasks.engines import Endpoint, EngineBackend, HttpProbe, Placement, ProcessSpec
from tasks.engines.common import ready_probes

# How each engine family returns output token ids (see the backends): request fields, then where they stream.
TOKEN_IDS = {"vllm": ({"return_token_ids": True}, "choice"), "trtllm": ({"detokenize": False}, "choice"),
             "dynamo": ({"nvext": {"extra_fields": ["completion_token_ids"]}}, "nvext")}


class ExternalBackend(EngineBackend):
    name = "external"
    ports_needed = 0
    external = True   # launchers start nothing for it


    def version(self, options: OptionsLike | None = None) -> str:
        return f"external ({self.options(options).version})" if options else "external"

    def probes(self, options: OptionsLike) -> tuple[HttpProbe, ...]:
        o = self.options(options)
        probes = ready_probes(o.served_model_name)
        return probes if o.health_path == "/health" else \
            ((HttpProbe(o.health_path),) if o.health_path else ()) + probes[1:]

    def processes(self, options: OptionsLike, model_dir: Path, placement: Placement,
                  build_dir: Path | None = None) -> list[ProcessSpec]:
        return []   # nothing to start

    def endpoint(self, options: OptionsLike, model_dir: Path, processes: list[ProcessSpec]) -> Endpoint:
        o = self.options(options)
        tokenizer = Path(o.tokenizer) if o.tokenizer else model_dir / "tokenizer.json"
        fields, where = TOKEN_IDS.get(o.returns_token_ids, ({}, "choice"))
        return Endpoint(base_url=o.base_url.rstrip("/"), model=o.served_model_name,
                        accepts_token_ids=o.accepts_token_ids, returns_token_ids=o.returns_token_ids != "none",
                        tokenizer=str(tokenizer) if tokenizer.is_file() else None,
                        drop_fields=frozenset(o.drop_fields), request_fields=fields, token_ids_in=where)

    def attach(self, options: OptionsLike, timeout_s: float) -> None:
        """Wait until the endpoint passes every probe; it may still be starting. Never touches its processes."""
        o = self.options(options)
        base = o.base_url.rstrip("/")
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        with httpx.Client(timeout=30.0) as client:
            for probe in self.probes(options):
                while True:
                    try:
                        r = client.get(base + probe.path) if probe.body is None else \
                            client.post(base + probe.path, json=probe.body)
                        if probe.accepts(r.status_code, r.text):
                            break
                        last = f"HTTP {r.status_code}: {r.text[:200]}"
                    except httpx.HTTPError as e:
                        last = f"{type(e).__name__}: {e}"
                    if time.monotonic() > deadline:
                        what = probe.path + (f" {json.dumps(probe.body)}" if probe.body else "")
                        raise LaunchError(f"the external endpoint {base} did not pass {what} within "
                                          f"{timeout_s:.0f} s; last: {last}",
                                          fix="check that it runs and serves options.served_model_name; Podium "
                                              "never starts an external engine")
                    time.sleep(0.5)


BACKEND = ExternalBackend()
