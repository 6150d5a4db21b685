"""Whether the MLCommons endpoints client (`inference-endpoint`, Python >= 3.12) is installed in its own virtualenv at
the commit the round's rules pin (`endpoints_client` in submission/rules/<round>.yaml); `make venv-endpoints`
installs it there from ENDPOINTS_SRC (docs/benchmarks.md, "Installing the endpoints client").

The commit is read from what pip recorded at install time, `direct_url.json` in the client's dist-info (PEP 610):
- a git install records the commit itself (`vcs_info.commit_id`);
- an archive install records the archive's URL and sha256 (`archive_info`). A `git archive` of a commit carries that
  commit in its pax global header (`comment`); it is read from the same file, after its sha256 is checked against
  the recorded one, so a file changed or replaced since the install is not taken for the one installed.
Anything else (a folder, a wheel, an index) says nothing about the commit, and the check fails rather than guess.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path
from urllib.parse import unquote, urlparse

from submission.base.errors import LaunchError
from submission.rules import load_rules
from tasks.staging.fetch_http import tar_commit

DIST_INFO = "inference_endpoint-*.dist-info"    # the wheel name of the distribution `inference-endpoint`
COMMAND = "inference-endpoint"
DEFAULT_VENV = Path(__file__).resolve().parents[2] / ".venv-endpoints"   # where `make venv-endpoints` puts it
MIN_PYTHON = (3, 12)   # inference-endpoint's requires-python (its pyproject.toml); the Makefile's ENDPOINTS_PYTHON


def install_fix(commit: str, repository: str) -> str:
    return (f"run `make venv-endpoints` (after `rm -rf .venv-endpoints` if one is there); it installs from "
            f"ENDPOINTS_SRC, by default git+{repository}@{commit}, or a local archive of that commit "
            f"(`git archive {commit[:7]}`)")


def require_client(round: str, venv: Path | None = None) -> Path:
    """The `inference-endpoint` command of `venv` (default DEFAULT_VENV), checked installed at the commit `round`'s
    rules pin on a Python >= 3.12; LaunchError (naming the make target and ENDPOINTS_SRC) when it is missing, on an
    older Python, at another commit, or at a commit it cannot tell."""
    venv = venv or DEFAULT_VENV
    pin = load_rules(round).endpoints_client
    if pin is None:
        raise LaunchError(f"round {round} pins no endpoints client (its rules have no endpoints_client)",
                          fix="measure this round's benchmarks with loadgen")
    fix = install_fix(pin.commit, pin.repository)
    command = venv / "bin" / COMMAND
    if not command.exists():
        raise LaunchError(f"the endpoints client is not installed: {command} is missing", fix=fix)
    python = python_version(venv)
    if python is not None and python < MIN_PYTHON:
        raise LaunchError(f"the endpoints client in {venv} runs on Python {'.'.join(map(str, python))}, but it needs "
                          f"Python >= {'.'.join(map(str, MIN_PYTHON))}",
                          fix=f"rm -rf {venv}, then `make venv-endpoints ENDPOINTS_PYTHON=python3.12` (any Python "
                              f">= 3.12 on this host)")
    found = installed_commit(venv)
    if found != pin.commit:
        raise LaunchError(f"the endpoints client in {venv} is at commit {found[:12]}, but the {round} rules pin "
                          f"{pin.commit[:12]} ({pin.repository})", fix=fix)
    return command


def python_version(venv: Path) -> tuple[int, int] | None:
    """(major, minor) of the Python the client is installed for, from its site-packages folder
    (lib/pythonX.Y/site-packages); None when no install is there."""
    for info in sorted(venv.glob(f"lib/python*/site-packages/{DIST_INFO}")):
        major, _, minor = info.parents[1].name.removeprefix("python").partition(".")
        if major.isdigit() and minor.isdigit():
            return int(major), int(minor)
    return None


def installed_commit(venv: Path) -> str:
    """The commit of mlcommons/endpoints installed in `venv`, from its `direct_url.json` (see the module's doc)."""
    record = _direct_url(venv)
    fix = "reinstall it with `make venv-endpoints` from a git URL or a `git archive` of the pinned commit"
    if "vcs_info" in record:
        return record["vcs_info"]["commit_id"]
    url = urlparse(record.get("url", ""))
    if "archive_info" not in record or url.scheme != "file":
        raise LaunchError(f"cannot tell which commit of the endpoints client is installed in {venv}: it was not "
                          f"installed from git or a local archive ({record.get('url', 'no URL recorded')})", fix=fix)
    archive = Path(unquote(url.path))
    recorded = record["archive_info"].get("hashes", {}).get("sha256")
    if not archive.is_file() or recorded != _sha256(archive):
        raise LaunchError(f"cannot tell which commit of the endpoints client is installed in {venv}: the archive it "
                          f"was installed from, {archive}, is gone or has changed since", fix=fix)
    return archive_commit(archive)


def archive_commit(archive: Path) -> str:
    """The commit a `git archive` tar (or tar.gz) was made from: its pax global header's `comment`."""
    try:
        commit = tar_commit(archive)
    except (tarfile.TarError, OSError) as error:
        raise LaunchError(f"{archive} is not a readable tar archive: {error}") from error
    if commit is None:
        raise LaunchError(f"{archive} names no commit (no pax `comment` header: not made by `git archive <commit>`)",
                          fix="make the archive with `git archive --format=tar.gz <commit>`")
    return commit


def _direct_url(venv: Path) -> dict:
    infos = sorted(venv.glob(f"lib/python*/site-packages/{DIST_INFO}"))
    if len(infos) != 1:
        raise LaunchError(f"{venv} has {len(infos)} installs of inference-endpoint, not one",
                          fix="recreate it: rm -rf the virtualenv, then `make venv-endpoints`")
    path = infos[0] / "direct_url.json"
    if not path.is_file():
        raise LaunchError(f"cannot tell which commit of the endpoints client is installed in {venv}: {infos[0].name} "
                          "has no direct_url.json (installed from an index or a wheel)",
                          fix="reinstall it with `make venv-endpoints` from a git URL or a `git archive`")
    return json.loads(path.read_text())


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
