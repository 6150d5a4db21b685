"""The endpoints client check (tasks/endpoints/install.py): the commit read back from what pip recorded, for git
and archive installs, against the rules' pin; and the Makefile's default source at that same commit."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from submission.base.errors import LaunchError
from submission.rules import load_rules
from tasks.endpoints.install import installed_commit, require_client

PIN = load_rules("v6.1").endpoints_client.commit
OTHER = "381d13b" + "0" * 33   # the commit the v6.1 README names, padded: any other commit
REPO = Path(__file__).parents[2]


def fake_venv(root: Path, direct_url: dict | None) -> Path:
    """A virtualenv as pip leaves it after installing inference-endpoint: the console script and the dist-info,
    with `direct_url` as its direct_url.json (None: none, as from an index)."""
    info = root / "lib" / "python3.12" / "site-packages" / "inference_endpoint-0.1.0.dist-info"
    info.mkdir(parents=True)
    (root / "bin").mkdir()
    (root / "bin" / "inference-endpoint").write_text("#!/bin/sh\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
    return root


def git_archive(path: Path, commit: str) -> dict:
    """A tar.gz as `git archive <commit>` makes it (the commit in the pax global header's comment); pip's record."""
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT, pax_headers={"comment": commit}) as tar:
        data = b"[project]\nname = 'inference-endpoint'\n"
        entry = tarfile.TarInfo("endpoints/pyproject.toml")
        entry.size = len(data)
        tar.addfile(entry, io.BytesIO(data))
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    return {"archive_info": {"hash": f"sha256={sha}", "hashes": {"sha256": sha}}, "url": path.as_uri()}


def git_install(commit: str) -> dict:
    return {"url": "https://github.com/mlcommons/endpoints", "vcs_info": {"vcs": "git", "commit_id": commit,
                                                                          "requested_revision": commit}}


def test_a_git_install_at_the_pin_passes_and_at_another_commit_fails(tmp_path: Path) -> None:
    assert require_client("v6.1", fake_venv(tmp_path / "ok", git_install(PIN))) == \
        tmp_path / "ok" / "bin" / "inference-endpoint"
    with pytest.raises(LaunchError, match=f"at commit {OTHER[:12]}, but the v6.1 rules pin {PIN[:12]}") as error:
        require_client("v6.1", fake_venv(tmp_path / "old", git_install(OTHER)))
    assert "make venv-endpoints" in error.value.fix and "ENDPOINTS_SRC" in error.value.fix and PIN in error.value.fix


def test_an_archive_install_is_read_from_the_archive_it_was_installed_from(tmp_path: Path) -> None:
    assert installed_commit(fake_venv(tmp_path / "ok", git_archive(tmp_path / "pin.tar.gz", PIN))) == PIN
    other = fake_venv(tmp_path / "old", git_archive(tmp_path / "other.tar.gz", OTHER))
    with pytest.raises(LaunchError, match=f"at commit {OTHER[:12]}"):
        require_client("v6.1", other)
    git_archive(tmp_path / "other.tar.gz", PIN)          # the file replaced since the install: its hash differs
    with pytest.raises(LaunchError, match="is gone or has changed since"):
        installed_commit(other)


def test_no_commit_no_pass(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match=r"\.venv-endpoints/bin/inference-endpoint is missing") as error:
        require_client("v6.1", tmp_path / ".venv-endpoints")
    assert "make venv-endpoints" in error.value.fix
    with pytest.raises(LaunchError, match=r"no direct_url\.json"):
        require_client("v6.1", fake_venv(tmp_path / "index", None))
    with pytest.raises(LaunchError, match="not installed from git or a local archive"):
        require_client("v6.1", fake_venv(tmp_path / "dir", {"url": "file:///src/endpoints", "dir_info": {}}))
    plain = tmp_path / "plain.tar.gz"                   # a tar with no commit in it (not made by git archive)
    with tarfile.open(plain, "w:gz"):
        pass
    sha = hashlib.sha256(plain.read_bytes()).hexdigest()
    with pytest.raises(LaunchError, match="names no commit"):
        installed_commit(fake_venv(tmp_path / "plain", {"archive_info": {"hashes": {"sha256": sha}},
                                                        "url": plain.as_uri()}))
    with pytest.raises(LaunchError, match="pins no endpoints client"):
        require_client("v6.0", fake_venv(tmp_path / "v60", git_install(PIN)))


def test_the_makefile_installs_the_pinned_commit_by_default() -> None:
    # a make that runs this test (`make test ENDPOINTS_SRC=...`, as .ci/run) hands its variables down in MAKEFLAGS
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")
           and not k.startswith("ENDPOINTS_")}
    out = subprocess.run(["make", "-n", "venv-endpoints", "ENDPOINTS_VENV=/nonexistent/v"], cwd=REPO, env=env,
                         capture_output=True, text=True, check=True).stdout
    assert re.search(rf"pip install --quiet 'git\+https://github\.com/mlcommons/endpoints@{PIN}'", out)

