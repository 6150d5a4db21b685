"""One engine per GPU node: a Prefect global concurrency limit `gpu-<node>` (one slot) held while an engine runs.

`NodeSlot` takes one slot of every node's limit before the engine launches and gives them back when it stops, so
two flows (deployments, schedules, ad-hoc runs) never share a node. The slot is a lease the server forgets if the
holder dies; a thread renews it while it is held. A limit that does not exist yet is created on the fly with one
slot, so the same code works against a production server (where `podium dev up` or the operator created the
limits) and against the ephemeral API of a plain `podium run` (where the limit lives in the local database).
The slot is held by this object, not by a Prefect task context, so it can span many tasks of one flow.

A flow killed with SIGKILL cannot give its slot back; the next `NodeSlot` in the same workspace ends the lease
(`release_dead_holders`). The server looks the lease up in its lease storage, which Prefect keeps in the server's
memory unless told otherwise. A plain `podium run` or `podium rehearse` starts a temporary server of its own on the
workspace's database, so the next command's server knew no lease of the killed one's: it released nothing, and the
slot stayed taken for good (a temporary server never expires leases). The servers Podium starts keep their leases in
files under PREFECT_HOME instead (`LEASE_STORAGE`, set by flows.cli_common.prefect_env and `podium dev up`).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

from submission.base.errors import LaunchError

PREFIX = "gpu-"
LEASE_S = 300.0
RENEW_FRACTION = 0.5
POLL_S = (1.0, 15.0)   # first and longest wait between attempts while the node is taken
LOCKED = 423
# Prefect's own file-backed lease storage (`<PREFECT_HOME>/concurrency_leases/`), for every server Podium starts
LEASE_STORAGE = {"PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": "prefect.server.concurrency.lease_storage.filesystem"}

log = logging.getLogger("podium.nodes")


def this_node() -> str:
    """The node this process runs on, as its `gpu-<node>` limit names it: PODIUM_NODE when the worker sets it (the
    local stack's pools stand for clusters of their own on one host, docs/fleet.md), else the host name."""
    return os.environ.get("PODIUM_NODE") or socket.gethostname()


def limit_name(node: str) -> str:
    """`gpu-<node>` with anything but letters, digits, '.', '_' and '-' replaced by '-'."""
    return PREFIX + re.sub(r"[^A-Za-z0-9._-]", "-", node)


def ensure_limits(nodes: Sequence[str], slots: int = 1) -> list[str]:
    """Create `gpu-<node>` limits that do not exist yet (existing ones keep their settings); returns the names."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    names = [limit_name(n) for n in nodes]
    with get_client(sync_client=True) as client:
        for name in names:
            try:
                client.read_global_concurrency_limit_by_name(name)
            except ObjectNotFound:
                with contextlib.suppress(ObjectAlreadyExists):   # another flow created it first
                    client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=slots))
    return names


class NodeSlot:
    """Hold one slot of `gpu-<node>` for each node, from `acquire()` until `release()`."""

    def __init__(self, nodes: Sequence[str], timeout_s: float | None = None, lease_s: float = LEASE_S,
                 holder: str = "podium engine", record_dir: Path | None = None) -> None:
        self.nodes, self.timeout_s, self.lease_s, self.holder = list(nodes), timeout_s, lease_s, holder
        self.record_dir = record_dir   # where leases are recorded, so a run after a killed one can end theirs
        self.names = [limit_name(n) for n in self.nodes]
        self.lease_id: UUID | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    @property
    def held(self) -> bool:
        return self.lease_id is not None

    def acquire(self) -> None:
        if self.held or not self.names:
            return
        import httpx
        from prefect.client.orchestration import get_client

        ensure_limits(self.nodes)
        began, wait = time.monotonic(), POLL_S[0]
        with get_client(sync_client=True) as client:
            if self.record_dir is not None:
                release_dead_holders(self.record_dir, client)
            while True:
                try:
                    response = client.increment_concurrency_slots_with_lease(
                        names=self.names, slots=1, mode="concurrency", lease_duration=self.lease_s)
                    break
                except httpx.HTTPStatusError as exc:
                    if exc.response.status_code != LOCKED:
                        raise LaunchError(f"could not take {', '.join(self.names)}: {exc}",
                                          fix="check that the Prefect API answers (PREFECT_API_URL)") from exc
                    retry_after = _float(exc.response.headers.get("Retry-After"), wait)
                if self.timeout_s is not None and time.monotonic() - began > self.timeout_s:
                    raise LaunchError(f"{', '.join(self.names)} stayed taken for {self.timeout_s:.0f} s: another "
                                      f"flow is using the node", fix="wait for it to finish, or cancel it in the UI")
                log.info("waiting for %s (another flow holds the node)", ", ".join(self.names))
                time.sleep(min(max(retry_after, wait), POLL_S[1]))
                wait = min(wait * 2, POLL_S[1])
        self.lease_id = UUID(str(response.json()["lease_id"]))
        if self.record_dir is not None:
            self.record_dir.mkdir(parents=True, exist_ok=True)
            (self.record_dir / f"{self.lease_id}.json").write_text(
                json.dumps({"lease_id": str(self.lease_id), "pid": os.getpid(), "host": socket.gethostname(),
                            "names": self.names}))
        self._stop.clear()
        context = contextvars.copy_context()   # the renewal talks to the same API as the caller
        self._renewer = threading.Thread(target=context.run, args=(self._renew,), name=f"renew-{self.names[0]}",
                                         daemon=True)
        self._renewer.start()
        log.info("holding %s (lease %s)", ", ".join(self.names), self.lease_id)

    def release(self) -> None:
        if self.lease_id is None:
            return
        from prefect.client.orchestration import get_client

        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=10)
        try:
            with get_client(sync_client=True) as client:
                client.release_concurrency_slots_with_lease(lease_id=self.lease_id)
        except Exception as exc:   # the lease expires by itself; never hide the caller's own error
            log.warning("could not release %s (it expires within %.0f s): %s", self.names, self.lease_s, exc)
        finally:
            if self.record_dir is not None:
                (self.record_dir / f"{self.lease_id}.json").unlink(missing_ok=True)
            self.lease_id = None

    def _renew(self) -> None:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            while not self._stop.wait(self.lease_s * RENEW_FRACTION):
                try:
                    client.renew_concurrency_lease(lease_id=self.lease_id, lease_duration=self.lease_s)
                except Exception as exc:  # keep trying until the lease would expire
                    log.warning("renewing the lease on %s failed: %s", self.names, exc)

    def __enter__(self) -> NodeSlot:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def release_dead_holders(record_dir: Path, client: Any) -> int:
    """Release the leases recorded in `record_dir` by processes of this host that no longer exist (a flow killed
    with SIGKILL cannot release its own; the server would keep the node taken until the lease expires)."""
    released = 0
    for record in sorted(record_dir.glob("*.json")):
        try:
            data = json.loads(record.read_text())
            pid, lease = int(data["pid"]), UUID(str(data["lease_id"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if data.get("host") != socket.gethostname() or Path(f"/proc/{pid}").exists():
            continue
        with contextlib.suppress(Exception):   # already expired or released: nothing to do
            client.release_concurrency_slots_with_lease(lease_id=lease)
        log.warning("released %s, held by pid %s of an earlier run that no longer exists",
                    ", ".join(data.get("names", [])), pid)
        record.unlink(missing_ok=True)
        released += 1
    return released


def _float(value: str | None, default: float) -> float:
    try:
        return float(value) if value is not None else default
    except ValueError:
        return default
