"""Parse every engine command of a `podium launch PLAN --dry-run --json` review with the engines' own argument parsers.

    .venv-gpu/bin/python deployments/gpu/check_argv.py REVIEW.json [REVIEW.json ...] [--engine-config]

Runs in the engines' virtualenv (vLLM and ai-dynamo importable) and starts nothing: `vllm serve` argv through vLLM's
serve parser (`make_arg_parser`, `validate_parsed_serve_args`, `AsyncEngineArgs.from_cli_args`), `python -m
dynamo.vllm` argv through Dynamo's `dynamo.vllm.args.parse_args` (the same parse, validation and vLLM-flag hand-over a
worker does before it loads anything; the process's environment is set around it, since the NIXL side-channel host
comes from there), and `python -m dynamo.frontend` through `dynamo.frontend.main.parse_args`. A flag an engine does not
know, or a value it refuses, fails here in seconds instead of in a launch. With `--engine-config` (on a GPU host) vLLM
also resolves its whole engine config from the model folder, as a launch would before it touches the GPU.

Prints one line per process and exits 1 when any command is refused. On a host without a GPU the CUDA build of vLLM
cannot pick a platform; run with VLLM_TARGET_DEVICE=cpu there (the acceptance script does).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """The process's own environment for the duration of a parse, then the old one back."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def vllm_serve(args: list[str], engine_config: bool) -> str:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    ns = make_arg_parser(FlexibleArgumentParser(prog="vllm serve")).parse_args(args)
    validate_parsed_serve_args(ns)
    if ns.model_tag is not None:
        ns.model = ns.model_tag
    engine = AsyncEngineArgs.from_cli_args(ns)
    if engine_config:
        engine.create_engine_config()
    return (f"vllm serve: model {engine.model}, dtype {engine.dtype}, max_model_len {engine.max_model_len}, "
            f"gpu_memory_utilization {engine.gpu_memory_utilization}, enforce_eager {engine.enforce_eager}")


def dynamo_worker(args: list[str], engine_config: bool) -> str:
    from dynamo.vllm.args import parse_args

    config = parse_args(args)
    engine = config.engine_args
    if engine_config:
        engine.create_engine_config()
    kv = engine.kv_transfer_config
    return (f"dynamo.vllm: mode {config.disaggregation_mode}, component {config.component}, discovery "
            f"{config.discovery_backend}, kv {kv.kv_connector if kv else None}/{kv.kv_role if kv else None}, dtype "
            f"{engine.dtype}, kv_cache_memory_bytes {engine.kv_cache_memory_bytes}, gpu_memory_utilization "
            f"{engine.gpu_memory_utilization}, NIXL side channel {os.environ.get('VLLM_NIXL_SIDE_CHANNEL_HOST')}:"
            f"{os.environ.get('VLLM_NIXL_SIDE_CHANNEL_PORT')}")


def dynamo_frontend(args: list[str]) -> str:
    from dynamo.frontend.main import parse_args

    saved = sys.argv
    sys.argv = ["dynamo.frontend", *args]
    try:
        config, _, _ = parse_args()
    finally:
        sys.argv = saved
    return f"dynamo.frontend: router {config.router_mode}, discovery {config.discovery_backend}"


def check(process: dict, engine_config: bool) -> str | None:
    """What the engine's parser made of one process's argv (None: not an engine command this knows); raises
    (SystemExit included) when the parser refuses it."""
    argv = process["argv"]
    with environment(process["env"]):
        if argv[:2] == ["vllm", "serve"]:
            return vllm_serve(argv[2:], engine_config)
        if argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]:
            return vllm_serve(argv[3:], engine_config)
        if argv[1:3] == ["-m", "dynamo.vllm"]:
            return dynamo_worker(argv[3:], engine_config)
        if argv[1:3] == ["-m", "dynamo.frontend"]:
            return dynamo_frontend(argv[3:])
    return None


def main(paths: list[str], engine_config: bool) -> int:
    failed = 0
    for path in paths:
        for review in json.loads(Path(path).read_text()):
            for process in review["processes"]:
                name = f"{review['benchmark']} {process['name']}"
                said = io.StringIO()   # argparse prints its whole usage before the error line: keep the error line
                try:
                    with contextlib.redirect_stderr(said):
                        parsed = check(process, engine_config)
                    print(f"ok   {name}: {parsed}" if parsed else f"skip {name}: not a vLLM or Dynamo command",
                          flush=True)
                except (Exception, SystemExit) as error:   # argparse exits on a bad flag; report it and go on
                    failed += 1
                    last = [line for line in said.getvalue().splitlines() if line.strip()][-1:]
                    print(f"FAIL {name}: {type(error).__name__}: {error} {' '.join(last)}\n"
                          f"     argv: {process['argv']}", flush=True)
    print(f"{failed} command(s) refused" if failed else "every command parsed")
    return 1 if failed else 0


if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(main([a for a in args if a != "--engine-config"], "--engine-config" in args))
