"""Parses the argv Podium generates for a Dynamo deployment with Dynamo 1.6.1's own parsers (`dynamo.vllm` worker
on top of vLLM's engine arguments, `dynamo.frontend`), from the vLLM virtualenv with the Dynamo one on PYTHONPATH:

    PYTHONPATH=<repo>:<.venv-dynamo site-packages> .venv-vllm/bin/python -m tests.integration.dynamo_argv PLAN OUT

Writes what the parsers made of each process to OUT (JSON). No process is started and nothing listens.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(plan_path: str, out: str) -> None:
    from dynamo.frontend.main import parse_args as frontend_args
    from dynamo.vllm.args import _parse_cli_args as worker_args
    from vllm.config.multimodal import MultiModalConfig

    from submission.plan import model as plans
    from tasks.engines import backend
    from tasks.serving import launch as engine_launch

    plan = plans.load(plan_path)
    bench = plan.benchmarks[0]
    placement = engine_launch.review_placement(bench.engine, Path("/nonexistent"))
    specs = backend("dynamo").processes(bench.engine.options, Path(bench.model.source), placement, Path("/b"))
    parsed: dict[str, dict] = {}
    for spec in specs:
        if spec.role in ("prefill", "decode"):
            config, engine = worker_args(list(spec.argv[3:]))
            events = engine.kv_events_config
            media = MultiModalConfig(limit_per_prompt=engine.limit_mm_per_prompt)   # vLLM's items per prompt
            parsed[spec.name] = {"mode": str(config.disaggregation_mode), "tp": engine.tensor_parallel_size,
                                 "kv_events": events and {"enabled": events.enable_kv_cache_events,
                                                          "publisher": events.publisher, "endpoint": events.endpoint},
                                 "kv_transfer": engine.kv_transfer_config.kv_connector,
                                 "max_model_len": engine.max_model_len, "port": spec.side_ports.get("kv_events"),
                                 "prefix_caching": engine.enable_prefix_caching,
                                 "mm_limits": {m: media.get_limit_per_prompt(m) for m in ("image", "video", "audio")}}
        elif spec.role == "frontend":
            sys.argv = list(spec.argv[2:])
            config, _, _ = frontend_args()
            router = config.kv_router_kwargs()   # after the load-aware preset, as the frontend builds its router
            parsed[spec.name] = {"router_mode": str(config.router_mode), "use_kv_events": router["use_kv_events"],
                                 "overlap_credit": router["overlap_score_credit"],
                                 "assume_kv_reuse": router["router_assume_kv_reuse"],
                                 "track_active_blocks": router["router_track_active_blocks"],
                                 "http_host": config.http_host}
    Path(out).write_text(json.dumps(parsed, indent=1, default=str))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
