"""Parses `python -m sglang.launch_server` argv lists with SGLang's own parser (`ServerArgs.add_cli_args` on an argparse
parser), in the SGLang virtualenv (`make venv-sglang`), without Podium on the path:

    .venv-sglang/bin/python tests/integration/sglang_argv.py IN.json OUT.json

IN holds {"argv": {name: argv}, "config_dir": a folder with a DeepSeek-V3 config.json}. OUT gets, per name, the
server arguments SGLang made of the flags (its `from_cli_args` names) or the parser's error; where the argv turns on
speculative decoding, also what SGLang's own `_handle_speculative_decoding` resolves it to, run on those arguments with
the model path pointed at `config_dir` (it reads the architecture there). Nothing is started and nothing listens.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import sys
from pathlib import Path

KEPT = ("model_path", "served_model_name", "host", "port", "tp_size", "pp_size", "dp_size", "ep_size",
        "enable_dp_attention", "mem_fraction_static", "chunked_prefill_size", "cuda_graph_max_bs", "cuda_graph_bs",
        "max_running_requests", "context_length", "dtype", "kv_cache_dtype", "quantization", "attention_backend",
        "trust_remote_code", "random_seed", "enable_metrics", "speculative_algorithm", "speculative_num_steps",
        "speculative_eagle_topk", "speculative_num_draft_tokens", "speculative_draft_model_path")
SPECULATIVE = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
               "speculative_num_draft_tokens", "speculative_draft_model_path", "model_path")


def parse(argv: list[str], config_dir: str) -> dict:
    from sglang.srt.server_args import ServerArgs

    if argv[1:3] != ["-m", "sglang.launch_server"]:
        return {"error": f"not a launch_server command: {argv[:3]}"}
    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    ServerArgs.add_cli_args(parser)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(argv[3:])
    except SystemExit:
        return {"error": err.getvalue().strip().splitlines()[-1]}
    # as ServerArgs.from_cli_args names them, without constructing it (its __post_init__ asks the GPUs); newer
    # SGLang parses into these names directly
    for short, long in (("tp_size", "tensor_parallel_size"), ("pp_size", "pipeline_parallel_size"),
                        ("dp_size", "data_parallel_size"), ("ep_size", "expert_parallel_size")):
        if hasattr(args, long):
            setattr(args, short, getattr(args, long))
    out = {name: getattr(args, name, None) for name in KEPT}   # a name a newer SGLang dropped: None
    if args.speculative_algorithm:
        server = object.__new__(ServerArgs)   # its fields only; SGLang's own speculative step then runs on them
        for field in dataclasses.fields(ServerArgs):
            setattr(server, field.name, getattr(args, field.name))
        server.model_path = config_dir
        server._handle_speculative_decoding()
        out["resolved"] = {name: getattr(server, name) for name in SPECULATIVE}
    return out


def main(src: str, dst: str) -> None:
    spec = json.loads(Path(src).read_text())
    parsed = {name: parse(argv, spec["config_dir"]) for name, argv in spec["argv"].items()}
    Path(dst).write_text(json.dumps(parsed, indent=1, default=str))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
