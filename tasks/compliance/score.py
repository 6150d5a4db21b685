"""Score an accuracy log with a Podium evaluator and print what the evaluator writes to accuracy.txt.

The official TEST07 run_verification.py takes the accuracy script as a command; Podium passes this one:

    python -m tasks.compliance.score --evaluator smoke-exact-match --dataset SET --log LOG [--tokenizer TOK]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from submission.base.errors import PodiumError
from tasks.accuracy import evaluator


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evaluator", required=True)
    parser.add_argument("--dataset", required=True, type=Path)
    parser.add_argument("--log", required=True, type=Path)
    parser.add_argument("--tokenizer", type=Path)
    args = parser.parse_args(argv)
    try:
        ev = evaluator(args.evaluator)
        print(ev.accuracy_txt(ev.evaluate(args.log, args.dataset, args.tokenizer)), end="")
    except PodiumError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
