"""What a test reads about processes from /proc: the TCP ports a process group listens on, pid files."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path


def group_pids(pgid: int) -> list[int]:
    """Live processes of a process group."""
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if os.getpgid(int(proc.name)) == pgid:
                    out.append(int(proc.name))
            except ProcessLookupError:
                continue
    return out


def _socket_inodes(pids: list[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    return inodes


def _address(hex_addr: str) -> str:
    if len(hex_addr) == 8:   # IPv4, little-endian
        return ".".join(str(int(hex_addr[i:i + 2], 16)) for i in (6, 4, 2, 0))
    words = [hex_addr[i:i + 8] for i in range(0, 32, 8)]   # IPv6: four little-endian 32-bit words
    raw = b"".join(bytes.fromhex(w)[::-1] for w in words)
    if raw[:12] == b"\0" * 10 + b"\xff\xff":
        return ".".join(str(b) for b in raw[12:])
    return ":".join(raw[i:i + 2].hex() for i in range(0, 16, 2))


def listening(pids: list[int]) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket these processes listen on, from /proc/net/tcp and tcp6."""
    inodes = _socket_inodes(pids)
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:   # 0A: LISTEN
                addr, port = fields[1].split(":")
                found.append((_address(addr), int(port, 16)))
    return found


LOOPBACK = {"127.0.0.1", "0000:0000:0000:0000:0000:0000:0000:0001"}


def recorded_engines(pid_dir: Path) -> list[dict]:
    """The local launcher's pid files: {pid, name, argv0} (not the Slurm launcher's `slurm-*.json` records)."""
    return [json.loads(p.read_text()) for p in sorted(pid_dir.glob("*.json")) if not p.name.startswith("slurm-")]


def local_engine(ws) -> int | None:
    """The process group of the engine the local launcher started in the workspace `ws`, once it has one."""
    engines = recorded_engines(ws.pids)
    return engines[0]["pid"] if engines else None


def slurm(conf: Path, *argv: str) -> str:
    env = {**os.environ, "SLURM_CONF": str(conf)}
    return subprocess.run(list(argv), env=env, capture_output=True, text=True, check=True, timeout=60).stdout


def step_tasks(conf: Path, step_id: str) -> tuple[str, list[int]]:
    """The node of a Slurm step and the pids of its tasks there, as `scontrol listpids` (asked on that node's
    slurmd) lists them: the processes the step's slurmstepd started, not srun on the submitting side."""
    listed = slurm(conf, "squeue", "--noheader", "--steps", "--format=%i|%N").split()
    node = dict(line.split("|", 1) for line in listed)[step_id]
    rows = [line.split() for line in slurm(conf, "scontrol", "listpids", step_id, node).splitlines()[1:]]
    return node, [int(row[0]) for row in rows if row[3] != "-"]   # LOCALID "-": not one of the step's tasks


def slurm_engine(conf: Path, seen: dict) -> Callable[[object], int | None]:
    """A finder for act_mid_run: the process group of the engine's task on its node, found through the step the
    Slurm launcher recorded in the workspace's state folder; `seen` gets the step id, its node and its pids."""
    def find(ws) -> int | None:
        for record in ws.pids.glob("slurm-*.json"):
            steps = json.loads(record.read_text())["steps"]
            if steps:
                seen["step"] = steps[0][0]
                seen["node"], seen["pids"] = step_tasks(conf, seen["step"])
                return os.getpgid(seen["pids"][0])
        return None
    return find


def kill_group(pgid: int) -> None:
    os.killpg(pgid, signal.SIGKILL)


def act_mid_run(ws, seen: dict, stop, act, after_s: float = 3.0,
                find: Callable[[object], int | None] = local_engine) -> None:
    """Once loadgen has been issuing for `after_s` in the workspace `ws` (a tasks.workspace.Workspace), call
    `act(pgid)` on the engine's process group (`find(ws)`: the local launcher's by default); `seen` gets the run
    folder, the pgid and the time. Ends when `stop` (a threading.Event) is set first."""
    while not stop.is_set():
        started = list((ws.work / "runs").glob("*/mlperf_log_detail.txt"))
        if started and find(ws) is not None:
            time.sleep(after_s)
            seen["pgid"], seen["run_dir"] = find(ws), started[0].parent
            act(seen["pgid"])
            seen["at"] = time.time()
            return
        time.sleep(0.2)


@contextlib.contextmanager
def fault_mid_run(ws, act: Callable[[int], object], seen: dict,
                  find: Callable[[object], int | None] = local_engine) -> Iterator[dict]:
    """While the body runs a flow in workspace `ws`, `act_mid_run` acts on the engine from a thread; the thread is
    stopped and joined on the way out, whatever the flow did. Yields `seen`."""
    stop = threading.Event()
    actor = threading.Thread(target=act_mid_run, args=(ws, seen, stop, act), kwargs={"find": find}, daemon=True)
    actor.start()
    try:
        yield seen
    finally:
        stop.set()
        actor.join()
