"""`podium package --embedded` against a real SeaweedFS S3 server on 127.0.0.1: the three package files arrive
whole, with the storage manifest, and the downloaded tarball verifies against its own manifest."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from submission.tree.package import verify
from tasks.storage import objects as storage
from tasks.storage import s3server

pytestmark = pytest.mark.integration


def test_package_and_upload(tmp_path: Path) -> None:
    tree = tmp_path / "submission"
    (tree / "closed" / "Org" / "src").mkdir(parents=True)
    (tree / "closed" / "Org" / "src" / "README.md").write_text("how to reproduce\n")
    (tree / "closed" / "Org" / "systems").mkdir()
    (tree / "closed" / "Org" / "systems" / "sys1.json").write_text("{}\n")
    workspace = tmp_path / "ws"
    server = s3server.start(workspace / "s3")
    try:
        out = CliRunner().invoke(app, ["package", str(tree), "--no-check", "--embedded", "--bucket", "podium-pkg",
                                       "--prefix", "packages", "--workspace", str(workspace)])
        assert out.exit_code == 0, out.output
        sha = hashlib.sha256((tmp_path / "submission.package" / "submission.tar.gz").read_bytes()).hexdigest()
        cfg = storage.StorageConfig(server.endpoint_url, "podium-pkg", "packages", "us-east-1",
                                    server.credentials.access_key, server.credentials.secret_key)
        prefix = f"submission/{sha[:16]}"
        keys = sorted(storage.list_keys(cfg, prefix))
        assert keys == [f"packages/{prefix}/{name}" for name in
                        ("manifest.json", "submission.manifest.json", "submission.tar.gz", "submission.tar.gz.sha256")]
        assert f"s3://podium-pkg/packages/{prefix}/submission.tar.gz" in out.output
        assert storage.verify_manifest(cfg, prefix) == []
        storage.get_tree(cfg, prefix, tmp_path / "down")
        assert verify(tmp_path / "down" / "submission.manifest.json") == []
        assert hashlib.sha256((tmp_path / "down" / "submission.tar.gz").read_bytes()).hexdigest() == sha
    finally:
        s3server.stop(server)
