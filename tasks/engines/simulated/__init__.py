"""The simulated engine: `tasks.engines.simulated.server`, an OpenAI-compatible streaming server over a queueing model
whose capacity is known exactly (`tasks.engines.simulated.queueing`). It needs no model and no GPU; the peak-QPS
search, the prefill:decode sweep and the scaling check run against it on the CPU, and their tests know the right answer.

Options (`submission.plan.engine_options.SimulatedOptions`) are the model's (prefill_workers, prefill_ms,
decode_workers,
decode_slots, tpot_ms, tpot_load, output_tokens), `chunk_tokens` (tokens per streamed event after the first),
`answers` (data sets with known answers it serves at their lengths: tasks.engines.simulated.answers) and
`nodes`: that many copies of the per-node workers behind the one endpoint, as a deployment spread over nodes would
be, each added node slowing prefill and decode by `node_efficiency` (1.0: perfect scaling).
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

from submission.plan.engine_options import OptionsLike, SimulatedOptions, parse_options
from tasks import clock
from tasks.engines import Endpoint, EngineBackend, HttpProbe, Placement, ProcessSpec
from tasks.engines.simulated.queueing import SimConfig

MODEL_NAME = "simulated"   # the served model name; the server (run as a module, never imported here) takes it from here
VERSION = "podium-simulated 1"   # what `version()` says and the server's `GET /version` answers


def config(options: OptionsLike) -> SimConfig:
    """The model behind `options` (`submission.plan.engine_options.SimulatedOptions`): the per-node workers times
    `nodes`, with prefill and decode times stretched by 1 / node_efficiency ** (nodes - 1)."""
    o: SimulatedOptions = parse_options("simulated", options)
    slow = 1 / o.node_efficiency ** (o.nodes - 1)
    return SimConfig(prefill_workers=o.prefill_workers * o.nodes, prefill_ms=o.prefill_ms * slow,
                     decode_workers=o.decode_workers * o.nodes, decode_slots=o.decode_slots, tpot_ms=o.tpot_ms * slow,
                     tpot_load=o.tpot_load, output_tokens=o.output_tokens)


def server_args(options: OptionsLike) -> list[str]:
    """The server's command-line flags for `options` (`python -m tasks.engines.simulated.server --port N ...`)."""
    argv = []
    for name, value in asdict(config(options)).items():
        argv += ["--" + name.replace("_", "-"), str(value)]
    parsed: SimulatedOptions = parse_options("simulated", options)
    # the server's folder is the checkout, so a path relative to where Podium runs is made absolute here
    known = [arg for path in parsed.answers for arg in ("--answers", str(Path(path).resolve()))]
    return [*argv, "--chunk-tokens", str(parsed.chunk_tokens), *known]


class SimulatedBackend(EngineBackend):
    name = "simulated"
    ports_needed = 1

    def version(self, options: OptionsLike | None = None) -> str:
        return VERSION

    def processes(self, options: OptionsLike, model_dir: Path, placement: Placement,
                  build_dir: Path | None = None) -> list[ProcessSpec]:
        port = placement.ports[0]
        argv = clock.wrap([sys.executable, "-m", "tasks.engines.simulated.server", "--host", placement.bind_host(0),
                           "--port", str(port), *server_args(options)])   # on the client's clock (tasks.clock)
        probe = HttpProbe("/v1/completions", {"model": MODEL_NAME, "prompt": [1, 2, 3], "max_tokens": 1})
        return [ProcessSpec(role="server", name="simulated-server", argv=tuple(argv),
                            cwd=str(Path(__file__).resolve().parents[3]), host=placement.address(0, "simulated-server"),
                            port=port, probes=(HttpProbe("/health"), probe), bind=placement.bind)]

    def endpoint(self, options: OptionsLike, model_dir: Path, processes: list[ProcessSpec]) -> Endpoint:
        server = processes[0]
        return Endpoint(base_url=f"http://{server.host}:{server.port}", model=MODEL_NAME, accepts_token_ids=True,
                        returns_token_ids=True)


BACKEND = SimulatedBackend()
