"""The S3 server is stopped for 30 s in the middle of publishing, then restarted on the same data folder.

The publish task (tasks.storage.publish: botocore's standard retries inside, the task's own retries with growing
delays outside) rides out the outage and completes; its retries and their delays are in Prefect's logs; every local
file stays in the run folder, and the manifest in S3 verifies against what was uploaded.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

import pytest

from tasks.storage import objects as storage
from tasks.storage import s3server

pytestmark = [pytest.mark.integration, pytest.mark.faults]

OUTAGE_S = 30.0


def _run_folder(root: Path) -> dict[str, str]:
    """A run folder of 400 small files and one of 4 MiB; returns sha256 per relative path."""
    for i in range(400):
        path = root / "logs" / "runs" / f"run-{i // 40}" / f"file-{i}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"line {i}\n" * 50)
    (root / "submission.tar.gz").write_bytes(os.urandom(4 << 20))
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _outage(data_dir: Path, cfg: storage.StorageConfig, key_prefix: str, server: s3server.S3Server,
            seen: dict) -> None:
    """Once the first object of the run is in S3, stop the server for OUTAGE_S, then start it again."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not storage.list_keys(cfg, key_prefix):
        time.sleep(0.05)
    seen["objects_before"] = len(storage.list_keys(cfg, key_prefix))
    s3server.stop(server)
    seen["down_at"] = time.monotonic()
    time.sleep(OUTAGE_S)
    seen["server"] = s3server.start(data_dir)
    seen["up_at"] = time.monotonic()


def test_publish_rides_out_a_30s_outage(prefect_server: None, tmp_path: Path) -> None:
    import asyncio

    from prefect import flow, get_client

    from tasks.storage.publish import publish

    data_dir = tmp_path / "s3"
    server = s3server.start(data_dir)
    seen: dict = {}
    try:
        cfg = storage.StorageConfig(server.endpoint_url, "podium", "runs", "us-east-1",
                                    server.credentials.access_key, server.credentials.secret_key)
        storage.ensure_bucket(cfg)
        folder = tmp_path / "run-folder"
        files = _run_folder(folder)
        outage = threading.Thread(target=_outage, args=(data_dir, cfg, "plan/run-1", server, seen), daemon=True)

        @flow(name="publish-under-outage")
        def publishing() -> list[str]:
            outage.start()
            return publish(cfg, str(folder), "plan/run-1", {"flow-run-id": "run-1"})

        started = time.monotonic()
        state = publishing(return_state=True)
        finished = time.monotonic()
        outage.join()
        assert state.is_completed(), state.message
        uploaded = state.result()
    finally:
        s3server.stop(seen.get("server", server))

    assert "down_at" in seen and seen["objects_before"] < len(files), "the outage did not hit the upload"
    assert seen["server"].endpoint_url == server.endpoint_url   # same data folder, same port
    assert finished > seen["up_at"]                             # it finished only after the server came back
    # everything uploaded, the manifest verifies, and the local copy is all still there, unchanged
    assert sorted(uploaded) == sorted(files)
    restarted = s3server.start(data_dir)
    try:
        assert storage.verify_manifest(cfg, "plan/run-1") == []
    finally:
        s3server.stop(restarted)
    assert {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()} == files

    async def _retries() -> list[tuple[float, str]]:
        from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

        flow_run = state.state_details.flow_run_id
        async with get_client() as client:
            logs = await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run])))
        return sorted((log.timestamp.timestamp(), log.message) for log in logs if "will start" in log.message)

    retries = asyncio.run(_retries())
    assert retries, "no task retry was logged"
    assert "Retry 1/3 will start 5" in retries[0][1]
    print(f"outage {OUTAGE_S:.0f} s: publish finished {finished - started:.0f} s after it began, "
          f"{finished - seen['up_at']:.0f} s after the server came back; retries: "
          + "; ".join(m.split(" - ")[-1] for _, m in retries))
