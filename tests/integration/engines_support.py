"""What the real-engine tests share: their virtualenvs (made by `make venv-vllm venv-dynamo venv-endpoints`), a loadgen
run spec over the smoke data set, simulated servers (one, or replicas over several processes), the listening sockets
of a process group, and a driver (or any command) run in a session of its own."""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from submission.results.runs import RunSpec
from tasks.engines import Endpoint, Replica
from tasks.launchers.local import free_port

REPO = Path(__file__).parents[2]
BENCH = "gpt-oss-120b"
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1   # linux/sockios.h, linux/if.h


def engine_python(venv: str, target: str) -> Path:
    """The interpreter of a real engine's virtualenv; `make test` requires it, a plain pytest skips without it."""
    python = REPO / venv / "bin" / "python"
    if not python.exists():
        message = f"{python} is missing; run `make {target}`"
        if os.environ.get("PODIUM_REQUIRE_ENGINES"):
            pytest.fail(message)
        pytest.skip(message)
    return python


def offline_spec(dataset: Path, mode: str, *, samples: int, max_tokens: int, engine: str,
                 qps: int | None = None) -> RunSpec:
    """A short Offline run of the smoke data set over `samples` prompts; a performance run's one query holds about
    1.1 x `qps` samples, which must take the engine over the 1 s minimum duration for a VALID result."""
    conf = [(f"{BENCH}.Offline.target_qps", str(qps or samples)), (f"{BENCH}.Offline.min_duration", "1000"),
            (f"{BENCH}.*.performance_sample_count_override", str(samples))]
    if mode == "accuracy":
        conf.append((f"{BENCH}.*.accuracy_sample_count_override", str(samples)))
    return RunSpec(plan="engines", profile="smoke", round="v6.1", system="cpu", benchmark=BENCH, scenario="Offline",
                   mode=mode, loadgen_model=BENCH, loadgen_scenario="Offline", user_conf=tuple(conf),
                   dataset=str(dataset), dataset_sha256="-", model_sha256="-", engine=engine,
                   max_tokens=max_tokens, temperature=0.0, max_concurrency=8)


def server_spec(dataset: Path, *, qps: float, duration_ms: int, workers: int, engine: str,
                min_queries: int | None = None) -> RunSpec:
    """A Server performance run of the smoke data set (16 prompts, 8 tokens) at `qps` for `duration_ms`, served by
    `workers` harness processes."""
    conf = [(f"{BENCH}.Server.target_qps", str(qps)), (f"{BENCH}.Server.min_duration", str(duration_ms)),
            (f"{BENCH}.*.performance_sample_count_override", "16")]
    if min_queries is not None:
        conf.append((f"{BENCH}.Server.min_query_count", str(min_queries)))
    return offline_spec(dataset, "performance", samples=16, max_tokens=8, engine=engine).model_copy(update={
        "scenario": "Server", "loadgen_scenario": "Server", "user_conf": tuple(conf), "harness_workers": workers})


@contextlib.contextmanager
def simulated_engine(options: dict | None = None,
                     speed: float | None = None) -> Iterator[tuple[subprocess.Popen, Endpoint]]:
    """The simulated server (tasks.engines.simulated.server) in a session of its own on 127.0.0.1, so a test can kill
    or stop it; yields the process and its Endpoint, and always ends its group (a stopped one is continued first).
    `options`: the simulated engine's plan options (its defaults without them); `speed`: the accelerated clock it runs
    on (tasks.clock.wrap: under faketime, whose child the server is), the real clock without it."""
    from tasks import clock
    from tasks.engines.simulated import server_args

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    flags = server_args(options) if options is not None else []
    argv = [sys.executable, "-m", "tasks.engines.simulated.server", "--port", str(port), *flags]
    server = subprocess.Popen(clock.wrap(argv, speed) if speed else argv, stdout=subprocess.PIPE, text=True, cwd=REPO,
                              start_new_session=True)
    try:
        assert "listening" in server.stdout.readline()
        yield server, Endpoint(f"http://127.0.0.1:{port}", "simulated", accepts_token_ids=True,
                               returns_token_ids=True)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGCONT)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        server.wait()


@contextlib.contextmanager
def replica_servers(groups: list[list[str]]) -> Iterator[tuple[list[subprocess.Popen], tuple[Replica, ...]]]:
    """Simulated servers in processes of their own on 127.0.0.1, one per group (each group: that process's flags,
    and one replica per `--port` it gets: a group of ["--port", "0"] twice serves two). Yields the processes and the
    replicas, named replica-<i> in order, each on node `node<process>`; every process is killed on the way out."""
    procs, replicas = [], []
    try:
        for g, flags in enumerate(groups):
            argv = [sys.executable, "-m", "tasks.engines.simulated.server"]
            ports = []
            for i, flag in enumerate(flags):
                if flag == "0" and flags[i - 1] == "--port":
                    ports.append(free_port())
                    flag = str(ports[-1])
                argv.append(flag)
            proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, text=True, start_new_session=True)
            procs.append(proc)
            assert "listening" in proc.stdout.readline()
            replicas += [Replica(f"replica-{len(replicas) + k}", f"http://127.0.0.1:{p}", node=f"node{g}")
                         for k, p in enumerate(ports)]
        yield procs, tuple(replicas)
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def endpoint_of(replicas: tuple[Replica, ...]) -> Endpoint:
    """The simulated engine's endpoint over `replicas` (the first one's URL as its own)."""
    return Endpoint(replicas[0].base_url, "simulated", accepts_token_ids=True, returns_token_ids=True,
                    replicas=replicas)


def shopify_store(base: Path, rows: int) -> dict[str, Path]:
    """What the endpoints client tests stage: a tokenizer folder (the tiny smoke Llama's, `tokenizer`) and a
    Shopify-catalogue parquet file of `rows` products with 8x8 PNG images (`data`); `data_dir`: where the runner
    converts it for the client."""
    import io

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    from tasks.engines.smoke import model

    model.build(base / "model")
    rng, products = np.random.default_rng(0), []
    for i in range(rows):
        image = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(image, format="PNG")
        products.append({"product_title": f"product {i}", "product_description": "a thing",
                         "potential_product_categories": ["Home > Lamps", "Home > Pots"],
                         "product_image": {"bytes": image.getvalue(), "path": None},
                         "ground_truth_category": "Home > Lamps", "ground_truth_brand": "Contoso",
                         "ground_truth_is_secondhand": False})
    pq.write_table(pa.Table.from_pylist(products), base / "shopify.parquet")
    return {"tokenizer": base / "model", "data": base / "shopify.parquet", "data_dir": base / "converted"}


def listening(pgids: set[int]) -> list[str]:
    """`address:port` of every TCP socket a process of these process groups listens on, read from /proc (each
    process's own network namespace), so no `ss` is needed."""
    pids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) in pgids:
            pids.add(int(stat.parent.name))
    found = set()
    for pid in pids:
        try:
            inodes = {os.readlink(fd)[8:-1] for fd in Path(f"/proc/{pid}/fd").iterdir()
                      if os.readlink(fd).startswith("socket:[")}
            tables = [(Path(f"/proc/{pid}/net/tcp").read_text(), False),
                      (Path(f"/proc/{pid}/net/tcp6").read_text(), True)]
        except OSError:
            continue
        for table, v6 in tables:
            for row in table.splitlines()[1:]:
                cols = row.split()
                if cols[3] == "0A" and cols[9] in inodes:   # 0A: LISTEN
                    found.add(_address(cols[1], v6))
    return sorted(found)


def _address(hex_address: str, v6: bool) -> str:
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    if v6:
        words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
        return f"[{ipaddress.IPv6Address(words)}]:{int(port, 16)}"
    return f"{ipaddress.IPv4Address(raw[::-1])}:{int(port, 16)}"


def loopback_up() -> None:
    """`ip link set lo up` without iproute2: set IFF_UP on lo (SIOCGIFFLAGS / SIOCSIFFLAGS)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH", b"lo", 0)))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


def system_command(name: str, package: str) -> str:
    """The path of a Debian package's command a real-engine test needs (`make system-deps` installs it); `make test`
    requires it, a plain pytest skips without it."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is missing; run `make system-deps` (Debian package {package})"
        if os.environ.get("PODIUM_REQUIRE_ENGINES"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def run_driver(prefix: Sequence[str], module: str, spec: dict, work: Path, *, timeout_s: float,
               env: dict[str, str] | None = None, term_grace_s: float | None = None) -> tuple[int, str]:
    """Write `spec` to `work`/spec.json and run `python -m module` on it behind `prefix` (`unshare -n`,
    `local-cluster.sh run`), from the repository root, in a session of its own; its exit status and its output
    (stdout and stderr). A driver still running at the end (past `timeout_s`, or the test interrupted) is ended with
    its process group: SIGKILL at once, or SIGTERM first and SIGKILL `term_grace_s` seconds later."""
    spec_file = work / "spec.json"
    spec_file.write_text(json.dumps(spec))
    return run_group([*prefix, sys.executable, "-m", module, str(spec_file)], cwd=REPO, timeout_s=timeout_s, env=env,
                     term_grace_s=term_grace_s)


def run_group(argv: Sequence[str], *, cwd: Path, timeout_s: float, env: dict[str, str] | None = None,
              term_grace_s: float | None = None) -> tuple[int, str]:
    """Run `argv` in `cwd` in a session of its own; its exit status and output (stdout and stderr). Still running at
    the end (past `timeout_s`, or the test interrupted), it is ended with its whole process group (see run_driver)."""
    child = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        output, _ = child.communicate(timeout=timeout_s)
    finally:
        if child.poll() is None:
            _end_group(child, term_grace_s)
    return child.returncode, output.decode(errors="replace")


def _end_group(child: subprocess.Popen, term_grace_s: float | None) -> None:
    """End `child`'s process group (it leads its session): SIGTERM and `term_grace_s` to stop, then SIGKILL."""
    if term_grace_s is not None:
        os.killpg(child.pid, signal.SIGTERM)
        try:
            child.wait(timeout=term_grace_s)
            return
        except subprocess.TimeoutExpired:
            pass
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
