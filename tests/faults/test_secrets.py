"""A planted S3 secret and a planted engine env value never appear in any output of a run, and the S3 server Podium
starts listens on 127.0.0.1 only.

The test starts a SeaweedFS (tasks.storage.s3server, on its own data folder) whose secret key is a recognisable string,
and runs a plan whose storage is that server as a non-embedded endpoint: the credentials reach Podium only through
boto3's default chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY). The plan's engine has a recognisable HF_TOKEN in
its `options.env`, which the engine's process must start with. Then it searches every output for both: the CLI's
stdout and stderr, every file of the workspace (run folder, tree, loadgen folders, staged copies), each member of the
submission tarball, every object in the bucket (tarballs opened too), every log, artifact and flow or task run the
Prefect server holds, every command line `ps` listed while the run went on, and the plan's dry run. The access key id
and a presigned URL's marks (X-Amz-Credential, X-Amz-Signature) appear nowhere either: a run keeps no download link
(tasks/storage/links.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tasks.storage import objects as storage
from tasks.storage import s3server
from tests.faults.conftest import fault_plan
from tests.faults.procs import LOOPBACK, group_pids, listening
from tests.secret_search import CommandLines, blobs_of, files_under, leaks, prefect_texts

pytestmark = [pytest.mark.integration, pytest.mark.faults]

REPO = Path(__file__).parents[2]


def test_a_planted_secret_appears_nowhere(prefect_server: None, smoke_store: Path, tmp_path: Path) -> None:
    from prefect.settings import PREFECT_API_URL

    secret = "PlantedS3cret" + secrets.token_hex(12)
    hf_token = "hf_PlantedEngineEnv" + secrets.token_hex(12)
    access_key = "PODIUMPLANTED" + secrets.token_hex(4).upper()
    data_dir = tmp_path / "external-s3"
    data_dir.mkdir()
    (data_dir / s3server.CREDENTIALS_FILE).write_text(json.dumps({"access_key": access_key, "secret_key": secret}))
    server = s3server.start(data_dir)
    try:
        bound = listening(group_pids(server.pid))
        plan = _plan_with_token(tmp_path / "plan.yaml", smoke_store, server.endpoint_url, hf_token)
        ws = tmp_path / "ws"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env |= {"AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret, "PYTHONPATH": str(REPO),
                "PREFECT_API_URL": PREFECT_API_URL.value(), "AWS_EC2_METADATA_DISABLED": "true"}
        cli = [sys.executable, "-c", "from flows.cli import main; main()"]
        with CommandLines(watch=lambda args: " serve " in args and str(ws) in args) as ps:   # the staged model's engine
            result = subprocess.run([*cli, "run", str(plan), "--workspace", str(ws)], capture_output=True, env=env,
                                    cwd=REPO, timeout=600)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        dry = [subprocess.run([*cli, "launch", str(plan), "--dry-run", *json_flag, "--workspace", str(tmp_path / "d")],
                              capture_output=True, env=env, cwd=REPO, timeout=300) for json_flag in ([], ["--json"])]
        assert all(d.returncode == 0 for d in dry), dry[0].stderr[-2000:] + dry[1].stderr[-2000:]
        last = result.stdout.decode().strip().splitlines()[-1]   # `podium run` ends with its final state's line
        assert re.fullmatch(r"[\w-]+: 1/1 runs VALID, .*checker 0 errors, .*; s3://podium/runs/\S+/", last), last

        cfg = storage.StorageConfig(server.endpoint_url, "podium", "", "us-east-1", access_key, secret)
        s3 = storage.client(cfg)
        keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket="podium")
                for o in page.get("Contents", [])]
        objects = [(f"s3://podium/{k}", s3.get_object(Bucket="podium", Key=k)["Body"].read()) for k in keys]
    finally:
        s3server.stop(server)

    assert bound and all(addr in LOOPBACK for addr, _ in bound), bound   # every port of the S3 server: loopback
    assert any(k.endswith("submission.tar.gz") for k in keys) and any(k.endswith("manifest.json") for k in keys)
    engines = list(ps.environ.values())   # the engine's process, read while it ran: it has the value
    assert engines and all(e["HF_TOKEN"] == hf_token for e in engines)
    assert "HF_TOKEN=<set>" in dry[0].stdout.decode() and '"HF_TOKEN": "<set>"' in dry[1].stdout.decode()
    blobs = _outputs(result, dry, ws, objects)
    assert len(blobs) > 100 and any("submission.tar.gz!" in name for name, _ in blobs)
    assert leaks(blobs, secret) == []
    assert leaks([("planted", f"x{secret}x".encode())], secret) == ["planted"]   # the search finds it when there
    assert any(" serve " in line and str(ws) in line for line in ps.seen)   # ps listed the engine
    assert leaks(blobs + ps.blobs(), hf_token) == []
    link = storage.presign(cfg, keys[0])   # what the search would find of a presigned URL, had a run kept one
    assert leaks([("a link", link.encode())], "X-Amz-Credential", "X-Amz-Signature", access_key) == ["a link"]
    # no link, no access key id; the tree's copy of Podium's own source names the marks (tasks/storage/links.py)
    assert leaks([b for b in blobs if "/src/podium/" not in b[0]], "X-Amz-Credential", "X-Amz-Signature") == []
    assert leaks(blobs, access_key) == []
    print(f"searched {len(blobs)} outputs ({sum(len(d) for _, d in blobs):,} bytes) and {len(ps.seen)} command lines "
          "for the planted secrets: none")


def _plan_with_token(path: Path, smoke_store: Path, endpoint_url: str, hf_token: str) -> Path:
    """The fault suite's smoke plan on the external S3 server, its engine given `HF_TOKEN` in options.env."""
    plan = fault_plan(path, smoke_store, scenarios=("Offline",),
                      storage={"bucket": "podium", "prefix": "runs", "endpoint_url": endpoint_url, "embedded": False})
    data = yaml.safe_load(plan.read_text())
    assert data["storage"]["embedded"] is False
    data["benchmarks"][0]["engine"]["options"] = {"env": {"HF_TOKEN": hf_token}}
    plan.write_text(yaml.safe_dump(data, sort_keys=False))
    return plan


def _outputs(result: subprocess.CompletedProcess, dry: list[subprocess.CompletedProcess], ws: Path,
             objects: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """Everything the run and its dry runs left to read: their output, the workspace's files, every stored object
    (archives opened) and Prefect's records."""
    blobs = [("stdout", result.stdout), ("stderr", result.stderr), ("dry run", dry[0].stdout + dry[0].stderr),
             ("dry run --json", dry[1].stdout + dry[1].stderr)]
    blobs += files_under(ws)
    for name, data in objects:
        blobs += blobs_of(name, data)
    return blobs + asyncio.run(prefect_texts())


def test_dev_up_services_listen_on_loopback_only(tmp_path: Path) -> None:
    """`podium dev up`: the Prefect server, its worker and the S3 server listen on 127.0.0.1 and nowhere else."""
    from tasks.ops import devstack
    from tasks.workspace import Workspace

    ws = Workspace.at(tmp_path / "ws")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")} | {"PYTHONPATH": str(REPO)}
    cli = [sys.executable, "-c", "from flows.cli import main; main()", "dev"]
    try:
        up = subprocess.run([*cli, "up", "--workspace", str(ws.root), "--port", "0", "--no-deploy"],
                            capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
        state = json.loads((devstack.dev_dir(ws) / devstack.STATE).read_text())
        s3 = s3server.running(ws.s3)
        assert s3 is not None
        bound = {name: listening(group_pids(pid)) for name, pid in
                 (("prefect server", state["server"]["pid"]), ("worker", state["worker"]["pid"]),
                  ("s3 server", s3.pid))}
    finally:
        down = subprocess.run([*cli, "down", "--workspace", str(ws.root)], capture_output=True, text=True, env=env,
                              cwd=REPO, timeout=120)
    assert down.returncode == 0, down.stderr
    assert bound["prefect server"] and bound["s3 server"], bound
    outside = {name: [b for b in ports if b[0] not in LOOPBACK] for name, ports in bound.items()}
    assert outside == {"prefect server": [], "worker": [], "s3 server": []}, bound
