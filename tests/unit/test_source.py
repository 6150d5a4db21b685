"""submission.tree.source: Podium's own source as a tree's src/podium/ holds it, from a real git checkout made here
(git archive of the run's commit, the uncommitted changes as a diff that `git apply` takes) and from a folder that is
not one (the files the packages were imported from); and the same sources merged into a curated tree."""

from __future__ import annotations

import gzip
import hashlib
import subprocess
import tarfile
from pathlib import Path

import pytest

from submission.tree import source

FILES = {"flows/__init__.py": "", "tasks/steps.py": "STEP = 1\n", "submission/rules.py": "RULE = 2\n",
         "pyproject.toml": "[project]\nname = 'podium'\n", ".gitignore": "ignored/\n__pycache__/\n",
         "docs/index.md": "# Podium\n"}


def git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
                          capture_output=True, check=True).stdout


def checkout(repo: Path) -> str:
    """A git checkout holding FILES in one commit; returns the commit."""
    for rel, text in FILES.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "one")
    return git(repo, "rev-parse", "HEAD").decode().strip()


def members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}   # type: ignore[union-attr]


def test_a_clean_checkout_gives_git_archive_of_the_commit(tmp_path: Path) -> None:
    commit = checkout(tmp_path / "repo")
    code = source.snapshot(tmp_path / "out", commit[:12], root=tmp_path / "repo")
    name = f"podium-{commit[:12]}"
    assert (code.origin, code.commit, code.archive.name) == ("git", commit, f"{name}.tar.gz")
    archive = tmp_path / "out" / code.archive.name
    tar = git(tmp_path / "repo", "archive", "--format=tar", f"--prefix={name}/", commit)
    assert gzip.decompress(archive.read_bytes()) == tar   # the commit's own archive, byte for byte
    assert code.tar_sha256 == hashlib.sha256(tar).hexdigest() and code.archive.sha256 == hashlib.sha256(
        archive.read_bytes()).hexdigest()
    assert members(archive) == {f"{name}/{rel}": text.encode() for rel, text in FILES.items()}   # dotfiles too
    assert (code.uncommitted, code.diff) == ([], None)
    again = source.snapshot(tmp_path / "again", commit, root=tmp_path / "repo")
    assert again.archive == code.archive   # the same commit, the same bytes
    readme = "\n".join(source.readme([code]))
    assert f"`git archive` of Podium's commit `{commit}`" in readme and code.archive.sha256 in readme
    assert f"--prefix={name}/ {commit} | sha256sum` gives `{code.tar_sha256}`" in readme


def test_uncommitted_changes_come_as_a_diff_that_rebuilds_the_checkout(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    commit = checkout(repo)
    (repo / "tasks" / "steps.py").write_text("STEP = 3   # changed, not committed\n")
    (repo / "tasks" / "new.py").write_bytes(b"NEW = b'\\x00'\n\x00binary\n")   # untracked, not ignored
    (repo / "ignored").mkdir()
    (repo / "ignored" / "big.bin").write_bytes(b"x" * 1000)
    (repo / "docs" / "index.md").unlink()
    (repo / "token.env").write_text("HF_TOKEN=hf_planted\n")   # untracked, outside the packages: named, not sent
    status = git(repo, "status", "--porcelain")
    code = source.snapshot(tmp_path / "out", f"{commit[:12]}+dirty", root=repo)
    assert code.uncommitted == ["docs/index.md", "tasks/new.py", "tasks/steps.py"] and code.diff is not None
    assert code.note == "1 untracked file(s) outside flows/, tasks/, submission/ are left out: token.env"
    assert b"hf_planted" not in (tmp_path / "out" / code.diff.name).read_bytes()
    assert git(repo, "status", "--porcelain") == status   # the checkout is as it was
    unpacked = tmp_path / "unpacked"
    with tarfile.open(tmp_path / "out" / code.archive.name) as tar:
        tar.extractall(unpacked, filter="data")
    rebuilt = unpacked / f"podium-{commit[:12]}"
    subprocess.run(["git", "apply", str(tmp_path / "out" / code.diff.name)], cwd=rebuilt, check=True)
    for rel in ("tasks/steps.py", "tasks/new.py", "submission/rules.py"):
        assert (rebuilt / rel).read_bytes() == (repo / rel).read_bytes(), rel
    assert not (rebuilt / "docs" / "index.md").exists() and not (rebuilt / "ignored").exists()
    assert not (rebuilt / "token.env").exists()
    readme = "\n".join(source.readme([code]))
    assert "uncommitted changes when the tree was written, 3 file(s): `docs/index.md`" in readme
    assert f"`{code.diff.name}` (sha256 `{code.diff.sha256}`) holds them: `git apply` it" in readme
    assert "are left out: token.env." in readme


def test_a_diff_over_the_file_limit_stays_out_and_the_readme_says_so(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    commit = checkout(repo)
    (repo / "tasks" / "steps.py").write_text("STEP = 4\n" * 100)
    monkeypatch.setattr(source, "FILE_LIMIT", 200)
    code = source.snapshot(tmp_path / "out", commit, root=repo)
    assert code.uncommitted == ["tasks/steps.py"] and code.diff is None
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [code.archive.name]
    assert "1 file(s): `tasks/steps.py`; their diff is over 0 MB and is not in the tree." in "\n".join(
        source.readme([code]))


@pytest.mark.parametrize("where", ["no git checkout", "an unknown commit", "a commit git lacks", "a subfolder"])
def test_without_the_commit_the_installed_files_go_and_say_why(tmp_path: Path, where: str) -> None:
    repo = tmp_path / "repo"
    commit = checkout(repo)
    (repo / "tasks" / "__pycache__").mkdir()
    (repo / "tasks" / "__pycache__" / "steps.cpython-311.pyc").write_bytes(b"\x00")
    root, given, why = {"no git checkout": (tmp_path / "plain", commit, "git could not give commit"),
                        "an unknown commit": (repo, "unknown", "the run's commit is unknown"),
                        "a commit git lacks": (repo, "0" * 40, "git could not give commit"),
                        "a subfolder": (repo / "docs", commit, "is not the top of its git checkout")}[where]
    if where == "no git checkout":
        for rel, text in FILES.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
    code = source.snapshot(tmp_path / "out", given, root=root)
    assert code.origin == "installed" and why in code.note and code.commit == ""
    packaged = {"flows/__init__.py", "tasks/steps.py", "submission/rules.py", "pyproject.toml"} if where != \
        "a subfolder" else set()   # docs/ holds none of the packages
    assert members(tmp_path / "out" / code.archive.name) == {f"podium-{code.version}/{rel}": FILES[rel].encode()
                                                             for rel in packaged}
    assert code.archive.name == f"podium-{code.version}-{code.tar_sha256[:8]}.tar.gz"   # named by its content
    again = source.snapshot(tmp_path / "again", given, root=root)
    assert again.archive == code.archive   # the same files, the same bytes
    assert f"not `git archive` of a commit: {code.note}" in "\n".join(source.readme([code]))


def test_place_copies_each_source_once_and_read_gives_them_back(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    first = checkout(repo)
    one = source.snapshot(tmp_path / "a", first, root=repo)   # two runs, each at the checkout's commit then
    (repo / "tasks" / "steps.py").write_text("STEP = 5\n")
    git(repo, "commit", "-qam", "two")
    second = git(repo, "rev-parse", "HEAD").decode().strip()
    two = source.snapshot(tmp_path / "b", second, root=repo)
    tree = tmp_path / "tree" / "src" / "podium"
    placed = source.place([one, two, one], tree)
    assert [c.commit for c in placed] == [first, second]
    assert sorted(p.name for p in tree.iterdir()) == sorted([one.archive.name, two.archive.name, source.RECORD])
    back = source.read(tree)
    assert [c.model_dump() for c in back] == [c.model_dump() for c in placed] and back[0].folder == tree
    assert source.read(tmp_path / "nothing") == [] and source.readme([]) == []
    assert (tree / one.archive.name).read_bytes() == (tmp_path / "a" / one.archive.name).read_bytes()
