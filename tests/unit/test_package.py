"""submission.tree.package: a reproducible tarball, its sha256 file, a manifest of every file, and what it refuses."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from submission.base.errors import PlanError
from submission.tree.package import package, verify, write_tarball


def make_tree(root: Path) -> dict[str, bytes]:
    files = {"closed/Org/systems/sys1.json": b'{"status": "available"}\n',
             "closed/Org/results/sys1/gpt-oss-120b/Offline/user.conf": b"*.Offline.target_qps = 10\n",
             "closed/Org/src/README.md": b"", "closed/Org/documentation/calibration.md": b"# none\n" * 500}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def test_package_contents_manifest_and_checksum(tmp_path: Path) -> None:
    files = make_tree(tmp_path / "submission")
    pkg = package(tmp_path / "submission")
    assert pkg.folder == tmp_path / "submission.package" and pkg.name == "submission"
    assert pkg.files == len(files) and pkg.bytes == sum(len(d) for d in files.values())
    assert pkg.sha256 == hashlib.sha256(pkg.tarball.read_bytes()).hexdigest()
    assert pkg.sha256_file.read_text() == f"{pkg.sha256}  submission.tar.gz\n"
    done = subprocess.run(["sha256sum", "-c", pkg.sha256_file.name], cwd=pkg.folder, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads(pkg.manifest_file.read_text())
    assert manifest["files"] == {rel: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()}
                                 for rel, d in files.items()}
    size = pkg.tarball.stat().st_size
    assert manifest["tarball"] == {"file": "submission.tar.gz", "sha256": pkg.sha256, "size": size}
    with tarfile.open(pkg.tarball) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert {f"submission/{rel}" for rel in files} <= set(members)
        assert all(m.uid == 0 and m.mtime == 0 for m in members.values())
        assert tar.extractfile(members["submission/closed/Org/systems/sys1.json"]).read() == files[
            "closed/Org/systems/sys1.json"]
    assert verify(pkg.manifest_file) == []


def test_same_tree_same_sha256(tmp_path: Path) -> None:
    make_tree(tmp_path / "a" / "submission")
    make_tree(tmp_path / "b" / "submission")
    os.utime(tmp_path / "b" / "submission" / "closed" / "Org" / "src" / "README.md", (1, 1))  # times do not count
    first, second = package(tmp_path / "a" / "submission"), package(tmp_path / "b" / "submission")
    assert first.sha256 == second.sha256
    again = package(tmp_path / "a" / "submission")  # re-packing into its own folder is allowed
    assert again.sha256 == first.sha256


def test_verify_finds_a_changed_tarball(tmp_path: Path) -> None:
    make_tree(tmp_path / "submission")
    pkg = package(tmp_path / "submission")
    data = json.loads(pkg.manifest_file.read_text())
    data["files"]["closed/Org/src/README.md"]["sha256"] = "0" * 64
    data["files"]["closed/Org/gone.txt"] = {"size": 1, "sha256": "1" * 64}
    pkg.manifest_file.write_text(json.dumps(data))
    assert verify(pkg.manifest_file) == ["closed/Org/src/README.md: sha256 differs from the manifest",
                                         "closed/Org/gone.txt: in the manifest, not in the tarball"]
    pkg.tarball.write_bytes(pkg.tarball.read_bytes() + b"x")
    assert "submission.tar.gz: sha256 differs" in verify(pkg.manifest_file)


def test_refusals(tmp_path: Path) -> None:
    make_tree(tmp_path / "submission")
    with pytest.raises(PlanError, match="inside the tree"):
        package(tmp_path / "submission", tmp_path / "submission" / "pkg")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "other.txt").write_text("x")
    with pytest.raises(PlanError, match="holds other files"):
        package(tmp_path / "submission", busy)
    with pytest.raises(PlanError, match="package name"):
        package(tmp_path / "submission", name="../up")
    (tmp_path / "submission" / "link").symlink_to(tmp_path / "busy")
    with pytest.raises(PlanError, match="symbolic link"):
        package(tmp_path / "submission")
    with pytest.raises(PlanError, match="not a folder"):
        package(tmp_path / "nothing")


def test_cli_checks_before_packing(tmp_path: Path) -> None:
    make_tree(tmp_path / "submission")
    refused = CliRunner().invoke(app, ["package", str(tmp_path / "submission")])
    assert refused.exit_code == 6 and "nothing was packed" in refused.output
    assert not (tmp_path / "submission.package").exists()
    packed = CliRunner().invoke(app, ["package", str(tmp_path / "submission"), "--no-check", "--out",
                                      str(tmp_path / "pkg"), "--name", "org-v6.1"])
    assert packed.exit_code == 0, packed.output
    assert (tmp_path / "pkg" / "org-v6.1.tar.gz").is_file() and "sha256 " in packed.output
    no_server = CliRunner().invoke(app, ["package", str(tmp_path / "submission"), "--no-check", "--out",
                                         str(tmp_path / "pkg"), "--name", "org-v6.1", "--embedded",
                                         "--workspace", str(tmp_path / "ws")])
    assert no_server.exit_code == 5 and "podium dev up" in no_server.output


def _full_disk_at(call: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """tarfile's addfile fails at its `call`-th entry, as a disk filling up would."""
    real, calls = tarfile.TarFile.addfile, []

    def addfile(self: tarfile.TarFile, *args: object, **kwargs: object) -> None:
        calls.append(1)
        if len(calls) == call:
            raise OSError(28, "No space left on device")
        real(self, *args, **kwargs)   # type: ignore[arg-type]

    monkeypatch.setattr(tarfile.TarFile, "addfile", addfile)


def test_a_tarball_is_written_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that fails half-way leaves the previous tarball byte for byte and no partial file beside it."""
    tree = tmp_path / "tree"
    make_tree(tree)
    target = write_tarball(tree, [tree], tmp_path / "out" / "submission.tar.gz", top="submission")
    before = target.read_bytes()
    (tree / "closed" / "Org" / "new.txt").write_text("new\n")
    _full_disk_at(3, monkeypatch)
    with pytest.raises(OSError, match="No space left"):
        write_tarball(tree, [tree], target, top="submission")
    assert target.read_bytes() == before and sorted(os.listdir(target.parent)) == ["submission.tar.gz"]


def test_the_run_tarball_is_reproducible_and_written_whole_or_not_at_all(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """tasks/tree.py's `<run folder>/submission.tar.gz`: the tree under `submission/`, the same bytes for the same
    tree; a failure half-way leaves the previous one whole."""
    from tasks.tree import TARBALL, assemble_tree
    from tests.unit.test_curation import _records, make_plan

    plan = make_plan()
    folder = tmp_path / "run"
    records = _records(folder, "r1", plan, "Offline", 1.0, valid=True, accuracy=True, ended=None)
    systems = {"cpu-smoke": {"division": "open", "submitter": "Podium", "system_name": "cpu-smoke"}}
    root = Path(assemble_tree.fn(plan, records, systems, str(folder), "unknown"))
    tarball = folder / TARBALL
    before = tarball.read_bytes()
    assert before == write_tarball(root, [root], tmp_path / "again.tar.gz", top="submission").read_bytes()
    with tarfile.open(tarball) as tar:
        names = {m.name for m in tar if m.isfile()}
    assert names == {f"submission/{p.relative_to(root).as_posix()}" for p in root.rglob("*") if p.is_file()}
    _full_disk_at(5, monkeypatch)
    with pytest.raises(OSError, match="No space left"):
        assemble_tree.fn(plan, records, systems, str(folder), "unknown")
    assert tarball.read_bytes() == before and sorted(p.name for p in folder.iterdir() if p.is_file()) == [TARBALL]
