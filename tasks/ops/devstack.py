"""`podium dev up` / `podium dev down`: a local Prefect server with its UI, a process worker and the S3 server,
all on 127.0.0.1, with their state under the workspace.

`<workspace>/prefect/` is PREFECT_HOME (the server's database), `<workspace>/dev/` holds `state.json` (pids with
their start times, the API URL), the `server.log` / `worker.log` files and the `prefect.yaml` it deploys,
`<workspace>/s3/` the S3 server. `up()` then registers what the deployments need (tasks.ops.registration) and
deploys `deployments/prefect.yaml`, its schedules paused unless asked (a laptop's stack) or as the user left them.
`down()` stops only the processes `up()` recorded, each by its process group; the worker gets SIGTERM, and a
second SIGTERM ten seconds later (Prefect's worker turns the first into a graceful SIGINT that an idle worker can
sit on; the second is its own SIGKILL, stack.md 1b).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from submission.base.errors import LaunchError, PodiumError
from submission.base.files import tail, write_atomic
from tasks.launchers import nodes as gpu_nodes
from tasks.ops import cleanup, registration
from tasks.storage import objects as storage
from tasks.storage import s3server
from tasks.workspace import Workspace

HOST = "127.0.0.1"
DEFAULT_PORT = 4200
POOL = "podium-process"
STATE = "state.json"
SERVER_START_S = 180.0
WORKER_START_S = 120.0


@dataclass(frozen=True)
class Stack:
    api_url: str
    ui_url: str
    s3_endpoint: str
    server_pid: int
    worker_pid: int | None
    deployed: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    schedules: tuple[str, ...] = ()   # "nightly (schedule nightly): paused", one per deployed schedule
    pool_workers: dict[str, int] = field(default_factory=dict)   # `--pool` name -> its worker's pid


def dev_dir(ws: Workspace) -> Path:
    return ws.root / "dev"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


# The server streams flow-run logs to subscribers, so `prefect deployment run ... --watch` prints each run's log
# lines (its progress, its final line) between the events, not only the events (off by default in Prefect 3).
LOG_STREAMING = {"PREFECT_SERVER_LOGS_STREAM_OUT_ENABLED": "true",
                 "PREFECT_SERVER_LOGS_STREAM_PUBLISHING_ENABLED": "true"}


def base_env(ws: Workspace, api_url: str) -> dict[str, str]:
    """What every process of the stack (and every flow run the worker starts) sees."""
    return {**os.environ, "PREFECT_HOME": str(ws.prefect_home), "PREFECT_API_URL": api_url,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_WORKER_WEBSERVER_HOST": HOST,
            "PODIUM_REPO": str(registration.REPO), "PREFECT_LOGGING_EXTRA_LOGGERS": "podium",
            **gpu_nodes.LEASE_STORAGE}   # a restarted server still knows the leases on its nodes' slots


def up(ws: Workspace, *, port: int = DEFAULT_PORT, webhook: str | None = None, nodes: Sequence[str] = (),
       deploy: bool = True, worker: bool = True, query_seconds: float = 2.0, schedules: bool | None = None,
       pools: Sequence[str] = (), member_watch_s: float = registration.MEMBER_WATCH_S) -> Stack:
    """Start (or find running) the S3 server, the Prefect server and a worker; register and deploy. `schedules`:
    turn every deployment schedule on (True) or off (False); None keeps each as it is, a new one paused. `pools`:
    a process pool and its worker each, standing for a cluster of its own (docs/fleet.md); `member_watch_s`: how
    long a fleet member may send no heartbeat before it is marked Crashed."""
    folder = dev_dir(ws)
    folder.mkdir(parents=True, exist_ok=True)
    ws.prefect_home.mkdir(parents=True, exist_ok=True)
    s3 = s3server.running(ws.s3) or s3server.start(ws.s3)
    state = _read(folder)
    api_url = state.get("api_url") if _alive(state.get("server")) else None
    if api_url is None:
        port = port or free_port()
        api_url = f"http://{HOST}:{port}/api"
        env = base_env(ws, api_url) | {"PREFECT_UI_API_URL": api_url} | LOG_STREAMING
        state["server"] = _spawn([*registration.prefect_cli(), "server", "start", "--host", HOST, "--port", str(port)],
                                 env, folder / "server.log")
        state["api_url"] = api_url
        _write(folder, state)
        _wait_healthy(api_url, state["server"], folder / "server.log")
    env = base_env(ws, api_url)
    cfg = s3.storage("podium", "runs")
    deployed, skipped, scheduled = register(api_url, cfg, webhook=webhook, nodes=nodes or [socket.gethostname()],
                                            deploy=deploy, env=env, schedules=schedules,
                                            prefect_file=folder / "prefect.yaml", pools=pools,
                                            member_watch_s=member_watch_s)
    env |= {"PREFECT_WORKER_QUERY_SECONDS": f"{query_seconds:g}"}
    if worker and not _alive(state.get("worker")):
        state["worker"] = _spawn(_worker_argv(POOL), env, folder / "worker.log")
        _write(folder, state)
        _wait_worker(api_url, POOL, state["worker"], folder / "worker.log")
    for pool in pools:
        _pool_worker(ws, state, pool, env, api_url)
    return Stack(api_url=api_url, ui_url=api_url.removesuffix("/api"), s3_endpoint=s3.endpoint_url,
                 server_pid=state["server"]["pid"], worker_pid=(state.get("worker") or {}).get("pid"),
                 pool_workers={name: r["pid"] for name, r in state.get("pools", {}).items() if _alive(r)},
                 deployed=tuple(deployed), skipped=tuple(f"{k}: {v}" for k, v in skipped.items()),
                 schedules=tuple(f"{name} (schedule {slug}): {'active' if on else 'paused'}"
                                 for (name, slug), on in scheduled.items()))


def register(api_url: str, cfg: storage.StorageConfig, *, webhook: str | None, nodes: Sequence[str], deploy: bool,
             env: dict[str, str], schedules: bool | None, prefect_file: Path, pools: Sequence[str] = (),
             member_watch_s: float = registration.MEMBER_WATCH_S,
             ) -> tuple[list[str], dict[str, str], dict[tuple[str, str], bool]]:
    """Pools, the bucket and result-storage block, the gpu-<node> limits, the automations (notifications, the fleet
    members' watch), the deployments (from a copy of prefect.yaml at `prefect_file` whose schedules say active or
    paused: `registration.with_schedules`).
    Returns what was deployed, what was left out and why, and whether each deployed schedule is active."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from tasks.ops import notifications

    storage.ensure_bucket(cfg)
    ready, skipped = registration.deployable() if deploy else ([], {})
    with temporary_settings(updates={PREFECT_API_URL: api_url}):
        registration.create_pools()
        registration.create_pools({pool: "process" for pool in pools})
        registration.watch_members(member_watch_s)
        registration.save_result_storage(cfg)
        gpu_nodes.ensure_limits(nodes)
        if webhook:
            notifications.register(webhook)
        states = registration.schedule_states(ready)
    if not ready:
        return ready, skipped, {}
    chosen = registration.with_schedules(prefect_file, states, schedules)
    registration.deploy(ready, env, prefect_file)
    return ready, skipped, {key: on for key, on in chosen.items() if key[0] in ready}


def _worker_argv(pool: str, name: str | None = None) -> list[str]:
    return [*registration.prefect_cli(), "worker", "start", "--pool", pool, "--type", "process",
            "--name", name or f"podium-{socket.gethostname()}"]


def _pool_worker(ws: Workspace, state: dict, pool: str, env: dict[str, str], api_url: str) -> None:
    """The worker of a `--pool`: one more process worker on this host, standing for a cluster of its own. Its flow
    runs use this workspace (PODIUM_WORKSPACE) and take the `gpu-<host>-<pool>` limit (PODIUM_NODE), not the host's,
    so two pools' members run at once as two clusters' would."""
    workers = state.setdefault("pools", {})
    if _alive(workers.get(pool)):
        return
    log = dev_dir(ws) / f"worker-{pool}.log"
    node = f"{socket.gethostname()}-{pool}"
    workers[pool] = _spawn(_worker_argv(pool, f"podium-{node}"),
                           env | {"PODIUM_NODE": node, "PODIUM_WORKSPACE": str(ws.root)}, log)
    _write(dev_dir(ws), state)
    _wait_worker(api_url, pool, workers[pool], log)


def down(ws: Workspace) -> list[str]:
    """Stop what up() started (the workers, the server, the S3 server, answering or hung) and the engines a killed
    run left in the workspace. Returns what it stopped."""
    folder = dev_dir(ws)
    state = _read(folder)
    workers = [(f"worker of pool {pool}", r) for pool, r in state.get("pools", {}).items()]
    stopped = []
    for what, record in [("worker", state.get("worker")), *workers]:
        if _alive(record):
            _stop(record, [(signal.SIGTERM, 10.0), (signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)])
            stopped.append(f"{what} (pid {record['pid']})")
    if _alive(state.get("server")):
        _stop(state["server"], [(signal.SIGTERM, 20.0), (signal.SIGKILL, 5.0)])
        stopped.append(f"Prefect server (pid {state['server']['pid']})")
    if folder.is_dir():
        _write(folder, {k: v for k, v in state.items() if k not in ("server", "worker", "pools")})
    stopped += cleanup.end_engines(ws.root)   # engines a killed run left: they hold GPUs and ports
    pid = s3server.stop_recorded(ws.s3)
    if pid is not None:
        stopped.append(f"S3 server (pid {pid})")
    return stopped


def status(ws: Workspace) -> dict[str, object]:
    state = _read(dev_dir(ws))
    return {"api_url": state.get("api_url"), "server": _alive(state.get("server")),
            "worker": _alive(state.get("worker")), "s3": s3server.running(ws.s3) is not None,
            "pools": {pool: _alive(record) for pool, record in state.get("pools", {}).items()}}


# ----- processes -----------------------------------------------------------------------------------------------


def _spawn(argv: list[str], env: dict[str, str], log: Path) -> dict:
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, cwd=registration.REPO, env=env, stdin=subprocess.DEVNULL,  # noqa: S603
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return {"pid": proc.pid, "started": _start_time(proc.pid), "argv": argv, "log": str(log)}


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot: with the pid, it names one process for good."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _alive(record: dict | None) -> bool:
    """The recorded process still runs (same pid *and* start time: not a reused pid) and is not a zombie."""
    if not record or not isinstance(record.get("pid"), int):
        return False
    try:
        fields = Path(f"/proc/{record['pid']}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z" and _start_time(record["pid"]) == record.get("started")


def _stop(record: dict, steps: list[tuple[signal.Signals, float]]) -> None:
    pid = record["pid"]
    for sig, wait_s in steps:
        if not _alive(record):
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)   # start_new_session: the group id is the pid
        deadline = time.monotonic() + wait_s
        while _alive(record) and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)   # reap it when this process started it
            time.sleep(0.2)
    if _alive(record):
        raise PodiumError(f"pid {pid} ({' '.join(record['argv'][:3])}) did not stop", fix=f"kill -9 {pid}")


def _wait_healthy(api_url: str, record: dict, log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if not _alive(record):
            raise LaunchError(f"the Prefect server exited while starting; see {log}:\n{tail(log)}",
                              fix="a port may be in use: pass --port")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{api_url}/health", timeout=2).json() is True:
                return
        time.sleep(0.5)
    raise LaunchError(f"the Prefect server did not answer at {api_url} within {SERVER_START_S:.0f} s; see {log}",
                      fix="read the log; a slow machine may need more time")


def _wait_worker(api_url: str, pool: str, record: dict, log: Path) -> None:
    """Until the worker has polled its pool once (it then shows in the pool's workers)."""
    deadline = time.monotonic() + WORKER_START_S
    while time.monotonic() < deadline:
        if not _alive(record):
            raise LaunchError(f"the Prefect worker exited while starting; see {log}:\n{tail(log)}")
        with contextlib.suppress(httpx.HTTPError, ValueError):
            workers = httpx.post(f"{api_url}/work_pools/{pool}/workers/filter", json={}, timeout=5).json()
            if any(w.get("name") == record["argv"][-1] and w.get("status") == "ONLINE" for w in workers):
                return
        time.sleep(0.5)
    raise LaunchError(f"the Prefect worker did not come online within {WORKER_START_S:.0f} s; see {log}")


def _read(folder: Path) -> dict:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads((folder / STATE).read_text())
        if isinstance(data, dict):
            return data
    return {}


def _write(folder: Path, state: dict) -> None:
    write_atomic(folder / STATE, json.dumps(state, indent=2))


@contextlib.contextmanager
def running(ws: Workspace, **kwargs: object) -> Iterator[Stack]:
    """`up()` for the length of a block, then `down()` (tests, scripts)."""
    try:
        yield up(ws, **kwargs)  # type: ignore[arg-type]
    finally:
        down(ws)
