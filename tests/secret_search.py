"""Searching everything a run leaves for a planted secret (tests/faults/test_secrets.py: an S3 secret key and an
engine env value; tests/integration/test_smoke_flow.py: a submitter id): files and their tarball members, what the
Prefect server keeps (logs, artifacts, flow runs with their parameters, task runs with their state messages), and
every command line `ps` shows while the run goes on (`CommandLines`)."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import tarfile
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType


def blobs_of(name: str, data: bytes) -> list[tuple[str, bytes]]:
    """The bytes, and for a tarball or gzip file the bytes of each member too."""
    out = [(name, data)]
    if data[:2] == b"\x1f\x8b":
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
                for member in tar.getmembers():
                    handle = tar.extractfile(member) if member.isfile() else None
                    out.append((f"{name}!{member.name}", handle.read() if handle else member.name.encode()))
        except tarfile.TarError:
            out.append((f"{name}!gunzip", gzip.decompress(data)))
    return out


def files_under(*folders: Path) -> list[tuple[str, bytes]]:
    """Every plain file under the folders, tarballs opened."""
    out = []
    for folder in folders:
        for path in sorted(p for p in Path(folder).rglob("*") if p.is_file() and not p.is_symlink()):
            out += blobs_of(str(path), path.read_bytes())
    return out


def leaks(blobs: list[tuple[str, bytes]], *words: str) -> list[str]:
    needles = {form for w in words for form in (w.encode(), w.encode().hex().encode())}
    return [name for name, data in blobs if any(n in data for n in needles)]


async def prefect_texts() -> list[tuple[str, bytes]]:
    from prefect import get_client

    out = []
    async with get_client() as client:
        offset = 0
        while batch := await client.read_logs(limit=200, offset=offset):
            out += [(f"prefect log {log.id}", log.message.encode()) for log in batch]
            offset += len(batch)
        offset = 0
        while batch := await client.read_artifacts(limit=200, offset=offset):
            out += [(f"prefect artifact {artifact.key}", json.dumps(artifact.data, default=str).encode()
                     + str(artifact.description).encode()) for artifact in batch]
            offset += len(batch)
        offset = 0
        while batch := await client.read_flow_runs(limit=200, offset=offset):
            out += [(f"flow run {run.name}", json.dumps(run.parameters, default=str).encode()
                     + str(run.state.message if run.state else "").encode()) for run in batch]
            offset += len(batch)
        offset = 0
        while batch := await client.read_task_runs(limit=200, offset=offset):
            out += [(f"task run {run.name}", str(run.state.message if run.state else "").encode()
                     + json.dumps(run.task_inputs, default=str).encode()) for run in batch]
            offset += len(batch)
    return out


class CommandLines:
    """While the `with` body runs, every process's command line as `ps -eww -o pid=,args=` lists it, sampled every
    `every_s` from a thread (stopped and joined on the way out): `seen` holds each distinct line, `blobs()` them for
    `leaks`, and `environ` the environment of each process `watch(args)` picked out (read while it ran)."""

    def __init__(self, watch: Callable[[str], bool] | None = None, every_s: float = 0.3) -> None:
        self.watch = watch   # picks, by its command line, the processes whose environment to keep
        self.every_s = every_s
        self.seen: set[str] = set()
        self.environ: dict[int, dict[str, str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            listed = subprocess.run(["ps", "-eww", "-o", "pid=,args="], capture_output=True, text=True, check=False)
            for line in listed.stdout.splitlines():
                self.seen.add(line.strip())
                pid, _, args = line.strip().partition(" ")
                if self.watch and int(pid) not in self.environ and self.watch(args):
                    try:
                        raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
                    except OSError:   # ended meanwhile
                        continue
                    self.environ[int(pid)] = dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)
            self._stop.wait(self.every_s)

    def __enter__(self) -> CommandLines:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def blobs(self) -> list[tuple[str, bytes]]:
        return [(f"ps: {line[:80]}", line.encode()) for line in sorted(self.seen)]
