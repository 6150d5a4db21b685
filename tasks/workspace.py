"""Where Podium keeps its state on this host, resolved once at the edge and passed to tasks as plain paths."""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

from submission.tree.source import ROOT as PODIUM_ROOT


@dataclass(frozen=True)
class Workspace:
    root: Path

    @classmethod
    def at(cls, root: str | Path) -> Workspace:
        return cls(Path(root).resolve())

    @property
    def prefect_home(self) -> Path:
        return self.root / "prefect"

    @property
    def store(self) -> Path:
        """The embedded 'shared store' that the smoke plan stages from."""
        return self.root / "store"

    @property
    def stage(self) -> Path:
        """Local copies of models and datasets (the node's NVMe on a cluster)."""
        return self.root / "stage"

    @property
    def work(self) -> Path:
        """Content-addressed loadgen run folders: `work/runs/<run key>/`."""
        return self.root / "work"

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    @property
    def s3(self) -> Path:
        return self.root / "s3"

    @property
    def inference(self) -> Path:
        """mlcommons/inference sources for the official checks, one folder per commit (`podium fetch-inference`)."""
        return self.root / "inference"

    @property
    def builds(self) -> Path:
        """Engine builds, one content-addressed folder each (tasks/serving/build.py)."""
        return self.root / "builds"

    @property
    def pids(self) -> Path:
        """The engine processes and `gpu-<node>` leases of this node's flows, `pids/<node>/` (tasks.launchers.nodes
        `this_node`): one engine runs per node, so what an earlier run left here is stale and may be ended. Two
        pools on one host (the local fleet) share a workspace, never this folder."""
        from tasks.launchers.nodes import this_node

        return self.root / "pids" / this_node()

    def run_folder(self, run_id: str, *, latest: bool = True) -> Path:
        """`runs/<run id>/`, and `runs/latest` pointing at it (not for a fleet member's folder: `latest` is the
        plan's run a person started)."""
        folder = self.runs / run_id
        folder.mkdir(parents=True, exist_ok=True)
        if not latest:
            return folder
        tmp = self.runs / ".latest.tmp"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(run_id)
        tmp.replace(self.runs / "latest")
        return folder


def folder_key(path: str | Path) -> str:
    """A short, stable key of a folder's absolute path: part of every cache key whose result points into it, so
    that a cached record never names logs in a workspace that was deleted or moved."""
    return hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()[:12]


def git_commit(cwd: Path | None = None) -> str:
    """The commit of the checkout Podium runs from (its modules' folder, wherever the command started), with
    `+dirty` when it has changes; `unknown` outside git."""
    cwd = cwd or PODIUM_ROOT
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=cwd, capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")
