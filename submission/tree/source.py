"""Podium's own source in the tree, `<division>/<submitter>/src/podium/`: the code that produced the results, so that a
reviewer can rebuild the harness. One archive per source that ran, named so that the archives of several runs never
collide (`podium assemble` merges them, `submission.tree.curated`), each described in `src/podium/README.md` and in
`src/podium/source.json`:

    podium-<commit>.tar.gz                     `git archive` of the run's commit: the repository whole at that commit
    podium-<commit>-uncommitted-<sha8>.diff    what the checkout held beyond that commit when the tree was written
                                               (changed files, new files in the packages), as `git apply` takes
                                               them; only if any. Other untracked files are named, never included
    podium-<version>-<sha8>.tar.gz             not a git checkout (an image without .git, a wheel): the files Podium's
                                               packages were imported from, and pyproject.toml beside them

An archive rather than the files: it holds the commit byte for byte, dotfiles included, which a tree may not hold as
files (submission_checker_old.py refuses names that start with "."); one sha256 ties it to the commit; the sources of
several runs sit side by side. About 1.6 MB, far under the 50 MB a file of a tree may have (`FILE_LIMIT`).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import subprocess
import tarfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, TypeAdapter

from submission.base.files import sha256_file, write_atomic
from submission.tree.package import tar_entry

ROOT = Path(__file__).resolve().parents[2]  # the folder holding flows/, tasks/ and submission/
PACKAGES = ("flows", "tasks", "submission")
RECORD = "source.json"
DIRTY = "+dirty"  # tasks.workspace.git_commit's mark of a checkout with changes
FILE_LIMIT = 50 * 1024 * 1024  # submission_checker_old.py FILE_SIZE_LIMIT_MB: a tree with a bigger file is refused
LISTED = 20  # uncommitted files named in the README; source.json has them all
GIT_TIMEOUT_S = 120


class CodeFile(BaseModel):
    name: str
    sha256: str
    size: int


class Code(BaseModel):
    """One source that ran, as src/podium/ holds it. `folder`: where its files are now (not recorded)."""

    origin: Literal["git", "installed"]
    commit: str = ""  # the full commit (git)
    version: str  # the installed package's version
    archive: CodeFile
    tar_sha256: str  # the archive's tar, uncompressed: for git, what `git archive --format=tar` of the commit gives
    uncommitted: list[str] = Field(default_factory=list)  # files the checkout changed or added beyond the commit
    diff: CodeFile | None = None
    note: str = ""  # why something is not in the tree
    folder: Path | None = Field(default=None, exclude=True)

    def files(self) -> list[CodeFile]:
        return [self.archive, *([self.diff] if self.diff else [])]


def snapshot(out: Path, commit: str, root: Path = ROOT) -> Code:
    """Podium's source at `root` into the folder `out`: `git archive` of `commit` (the run's, as
    `tasks.workspace.git_commit` gives it, `+dirty` included) where `root` is the top of a git checkout that has it,
    else the files Podium's packages were imported from (said in the record)."""
    out.mkdir(parents=True, exist_ok=True)
    why = "the run's commit is unknown"
    if commit.removesuffix(DIRTY) not in ("", "unknown"):
        try:
            if Path(_git(root, "rev-parse", "--show-toplevel").decode().strip()).resolve() != root.resolve():
                raise OSError(f"{root} is not the top of its git checkout")
            full = _git(root, "rev-parse", "--verify", "--quiet", f"{commit.removesuffix(DIRTY)}^{{commit}}")
            return _from_git(out, root, full.decode().strip())
        except (OSError, subprocess.SubprocessError) as error:
            why = f"git could not give commit {commit}: {str(error).strip()[:200]}"
    return _installed(out, root, why)


def _git(root: Path, *args: str, ok: tuple[int, ...] = (0,)) -> bytes:
    """git's stdout; an exit code outside `ok` raises. Optional locks off: nothing in the checkout is written."""
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True,  # noqa: S603 git, argv of ours
                          timeout=GIT_TIMEOUT_S, check=False, env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
    if done.returncode not in ok:
        raise subprocess.SubprocessError(f"git {args[0]} exited {done.returncode}: "
                                         f"{done.stderr.decode(errors='replace')}")
    return done.stdout


def _gzip(out: Path, name: str, tar: bytes) -> CodeFile:
    """`tar` gzipped into `out/name` with no timestamp: the same tar gives the same bytes."""
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0) as zipped:
        zipped.write(tar)
    path = write_atomic(out / name, buffer.getvalue())
    return CodeFile(name=name, sha256=sha256_file(path), size=path.stat().st_size)


def _from_git(out: Path, root: Path, commit: str) -> Code:
    name = f"podium-{commit[:12]}"
    tar = _git(root, "archive", "--format=tar", f"--prefix={name}/", commit)
    code = Code(origin="git", commit=commit, version=_version(), archive=_gzip(out, f"{name}.tar.gz", tar),
                tar_sha256=hashlib.sha256(tar).hexdigest(), folder=out)
    changed = [p for p in _git(root, "diff", "--name-only", "-z", commit, "--").decode().split("\0") if p]
    untracked = [p for p in _git(root, "ls-files", "--others", "--exclude-standard", "-z").decode().split("\0") if p]
    added = [p for p in untracked if p.split("/")[0] in PACKAGES]   # code Podium may have imported
    code.uncommitted = sorted(changed + added)
    if left := sorted(set(untracked) - set(added)):   # a stray file (a token in an .env) stays out, named only
        code.note = (f"{len(left)} untracked file(s) outside {', '.join(p + '/' for p in PACKAGES)} are left out: "
                     f"{', '.join(left[:LISTED])}{' ...' if len(left) > LISTED else ''}")
    if not code.uncommitted:
        return code
    over = f"their diff is over {FILE_LIMIT >> 20} MB and is not in the tree"
    if sum((root / p).stat().st_size for p in added) > FILE_LIMIT:
        return code.model_copy(update={"note": "; ".join(filter(None, [over, code.note]))})
    diff = _git(root, "diff", "--binary", commit, "--") + b"".join(
        _git(root, "diff", "--binary", "--no-index", "--", os.devnull, p, ok=(0, 1)) for p in added)
    if len(diff) > FILE_LIMIT:
        return code.model_copy(update={"note": "; ".join(filter(None, [over, code.note]))})
    diff_name = f"{name}-uncommitted-{hashlib.sha256(diff).hexdigest()[:8]}.diff"
    path = write_atomic(out / diff_name, diff)
    code.diff = CodeFile(name=diff_name, sha256=sha256_file(path), size=len(diff))
    return code


def _version() -> str:
    try:
        return metadata.version("podium")
    except metadata.PackageNotFoundError:
        return "unknown"


def _installed(out: Path, root: Path, why: str) -> Code:
    """The files of Podium's packages under `root` (no caches) and its pyproject.toml, as a reproducible tar."""
    files = sorted(p for package in PACKAGES for p in (root / package).rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
    files += [root / "pyproject.toml"] if (root / "pyproject.toml").is_file() else []
    version = _version()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
            data = path.read_bytes()
            tar.addfile(tar_entry(f"podium-{version}/{path.relative_to(root).as_posix()}", size=len(data)),
                        io.BytesIO(data))
    data = buffer.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    return Code(origin="installed", version=version, tar_sha256=digest, folder=out, note=why,
                archive=_gzip(out, f"podium-{version}-{digest[:8]}.tar.gz", data))


def place(codes: Sequence[Code], folder: Path) -> list[Code]:
    """Copy each code's files into `folder` (a tree's src/podium/) and list them in its source.json; a code already
    there (the same archive and diff) is listed once. No codes: nothing is written."""
    placed: list[Code] = []
    for code in codes:
        if any(c.files() == code.files() for c in placed):
            continue
        for file in code.files():
            if code.folder is None:
                raise ValueError(f"{file.name}: the record says where it is not")
            write_atomic(folder / file.name, (code.folder / file.name).read_bytes())
        placed.append(code.model_copy(update={"folder": folder}))
    if placed:
        write_atomic(folder / RECORD, "[\n" + ",\n".join(c.model_dump_json(indent=2) for c in placed) + "\n]\n")
    return placed


def read(folder: Path) -> list[Code]:
    """The codes a tree's src/podium/ holds (none when it has no source.json: a tree written without them)."""
    path = folder / RECORD
    if not path.is_file():
        return []
    return [c.model_copy(update={"folder": folder})
            for c in TypeAdapter(list[Code]).validate_json(path.read_bytes())]


def readme(codes: Sequence[Code]) -> list[str]:
    """The README's section on the source: each archive, its sha256, how to check it and how to rebuild from it."""
    if not codes:
        return []
    lines = ["## Podium's source", ""]
    for code in codes:
        a = code.archive
        folder = a.name.removesuffix(".tar.gz")
        if code.origin == "git":
            lines += [f"- `{a.name}` ({a.size:,} bytes, sha256 `{a.sha256}`): `git archive` of Podium's commit "
                      f"`{code.commit}`, the repository whole. In a clone, `git archive --format=tar "
                      f"--prefix={folder}/ {code.commit} | sha256sum` gives `{code.tar_sha256}`, as `gzip -dc "
                      f"{a.name} | sha256sum` does. `make install` in the unpacked `{folder}/` installs Podium and "
                      "its pinned dependencies."]
        else:
            lines += [f"- `{a.name}` ({a.size:,} bytes, sha256 `{a.sha256}`): the files Podium's packages "
                      f"({', '.join(p + '/' for p in PACKAGES)}) were imported from, version {code.version}, and "
                      f"pyproject.toml where it was beside them; not `git archive` of a commit: {code.note}."]
        if code.uncommitted:
            names = ", ".join(f"`{p}`" for p in code.uncommitted[:LISTED])
            more = f" and {len(code.uncommitted) - LISTED} more (source.json lists them)" \
                if len(code.uncommitted) > LISTED else ""
            held = (f"`{code.diff.name}` (sha256 `{code.diff.sha256}`) holds them: `git apply` it in the unpacked "
                    f"`{folder}/` for the code as it was" if code.diff else "")
            lines += [f"  The checkout held uncommitted changes when the tree was written, "
                      f"{len(code.uncommitted)} file(s): {names}{more}; {'; '.join(filter(None, [held, code.note]))}."]
        elif code.origin == "git" and code.note:
            lines += [f"  {code.note[0].upper()}{code.note[1:]}."]
    return [*lines, ""]
