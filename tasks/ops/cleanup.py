"""What a killed run leaves on this host, ended: the engine process groups recorded under a workspace's `pids/<node>/`
(every node folder: the local fleet's pools share a workspace) and the workspace's embedded S3 server, each only
while its record still names a process Podium started. `podium dev down` ends them with the rest of the local stack;
the GPU acceptance script runs this module after every leg, finished or killed at its limit:

    python -m tasks.ops.cleanup WORKSPACE   # one line per thing ended; exit 1 when something is still alive after

Free of Prefect and boto3 until an S3 server is on record, so it runs where neither is installed (the carried leg).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from submission.base.errors import PodiumError
from tasks.launchers.local import reap_stale

log = logging.getLogger("podium.cleanup")


def end_engines(root: Path) -> list[str]:
    """The engine process groups recorded under `<root>/pids/*/`, ended and waited for."""
    out = []
    for node in sorted(p for p in (root / "pids").glob("*") if p.is_dir()):
        ended = reap_stale(node, log)
        if ended:
            out.append(f"ended {ended} engine process group(s) recorded for node {node.name}")
    return out


def end_s3_server(root: Path) -> list[str]:
    """The workspace's S3 server, when its record names a weed process serving that folder (answering or hung)."""
    if not (root / "s3" / "server.json").is_file():
        return []
    from tasks.storage import s3server  # boto3: only where an S3 server was started

    pid = s3server.stop_recorded(root / "s3", grace_s=3)
    return [f"stopped the S3 server (pid {pid}) of {root / 's3'}"] if pid else []


def end_leftovers(root: Path) -> list[str]:
    """Everything a run left in workspace `root`: engines first (they may be writing to the S3 server), then the
    S3 server. Raises a PodiumError naming what is still alive."""
    return end_engines(root) + end_s3_server(root)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    if len(argv) != 1:
        print("usage: python -m tasks.ops.cleanup WORKSPACE", file=sys.stderr)
        return 2
    try:
        done = end_leftovers(Path(argv[0]))
    except PodiumError as e:
        print(f"clean-up failed: {e}")
        return 1
    print("\n".join(done) if done else f"nothing left running in {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
