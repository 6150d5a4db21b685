"""`podium package TREE`: the submission tarball, its sha256 and a manifest of every file in it.

The tarball is reproducible: entries in sorted order, owner 0, fixed mode and time, no gzip timestamp, so the same
tree always gives the same sha256. The three files go into a folder of their own (by default `<tree>.package/`
beside the tree), which `tasks.storage.uploads.upload` puts into object storage as it is.

    <name>.tar.gz                 everything under TREE, inside a top folder <name>/
    <name>.tar.gz.sha256          "<sha256>  <name>.tar.gz" (sha256sum -c reads it)
    <name>.manifest.json          every file: path, size, sha256; and the tarball's

`final_tarball` is the other layout: the one the MLCommons Submission UI takes (`podium submit`), the division
folders at the top of the tarball and nothing else beside them.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import tarfile
from pathlib import Path

from pydantic import BaseModel

from submission.base.errors import PlanError
from submission.base.files import replace_atomic, sha256_file, temporary, write_atomic
from submission.plan.model import check_name
from submission.tree import rehearsal_marker
from submission.tree.paths import DIVISIONS

MTIME = 0  # every entry's time: the tarball depends on the content only


class Package(BaseModel):
    name: str
    folder: Path
    tarball: Path
    sha256: str
    sha256_file: Path
    manifest_file: Path
    files: int
    bytes: int

    def outputs(self) -> list[Path]:
        return [self.tarball, self.sha256_file, self.manifest_file]


def _files(tree: Path) -> list[Path]:
    links = sorted(p for p in tree.rglob("*") if p.is_symlink())
    if links:
        raise PlanError(f"{len(links)} symbolic link(s) in the tree, e.g. {links[0]}",
                        fix="copy the files in place of the links; a submission holds plain files only")
    return sorted((p for p in tree.rglob("*") if p.is_file()), key=lambda p: p.relative_to(tree).as_posix())


def _dirs(tree: Path) -> list[Path]:
    return sorted((p for p in tree.rglob("*") if p.is_dir()), key=lambda p: p.relative_to(tree).as_posix())


def manifest(tree: Path) -> dict[str, dict[str, int | str]]:
    """Every file under `tree`: relative path -> size and sha256."""
    return {p.relative_to(tree).as_posix(): {"size": p.stat().st_size, "sha256": sha256_file(p)} for p in _files(tree)}


def tar_entry(name: str, *, size: int = 0, directory: bool = False) -> tarfile.TarInfo:
    """A tar entry that depends on its name and size alone: owner 0, fixed mode, time `MTIME`."""
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    info.mode, info.size, info.mtime = (0o755 if directory else 0o644), size, MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def write_tarball(tree: Path, roots: list[Path], target: Path, top: str | None = None) -> Path:
    """Every folder and file under `roots` (folders of `tree`, each included) by its path in `tree`, under a top
    folder `top` when given, in sorted order, written atomically: a reader sees the old tarball or the whole new one,
    and a failure leaves the old one and no partial file."""
    entries = [(p, True) for p in roots if p != tree]
    for root in roots:
        entries += [(p, True) for p in _dirs(root)] + [(p, False) for p in _files(root)]
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = temporary(target, "partial")
    try:
        with partial.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=MTIME) as zipped, \
                tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar:
            if top:
                tar.addfile(tar_entry(top, directory=True))
            for path, directory in sorted(entries, key=lambda e: e[0].relative_to(tree).as_posix()):
                arcname = "/".join(filter(None, (top, path.relative_to(tree).as_posix())))
                if directory:
                    tar.addfile(tar_entry(arcname, directory=True))
                else:
                    with path.open("rb") as stream:
                        tar.addfile(tar_entry(arcname, size=path.stat().st_size), stream)
        return replace_atomic(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def package(tree: Path, out: Path | None = None, *, name: str | None = None) -> Package:
    """Write the tarball, its sha256 file and the manifest into `out` (default `<tree>.package`)."""
    tree = Path(tree).resolve()
    if not tree.is_dir():
        raise PlanError(f"{tree} is not a folder", fix="pass the submission tree (the folder holding closed/ ...)")
    rehearsal_marker.refuse(tree)
    name = name or tree.name
    try:
        check_name(name)
    except ValueError as error:
        raise PlanError(f"package name: {error}", fix="pass --name with a plain name, e.g. submission") from None
    out = Path(out).resolve() if out else tree.with_name(f"{tree.name}.package")
    if out == tree or tree in out.parents:
        raise PlanError(f"the package folder {out} is inside the tree", fix="choose a folder outside the tree")
    ours = {f"{name}.tar.gz", f"{name}.tar.gz.sha256", f"{name}.manifest.json"}
    strangers = sorted(p.name for p in out.iterdir() if p.name not in ours) if out.is_dir() else []
    if strangers:
        raise PlanError(f"the package folder {out} holds other files ({', '.join(strangers[:3])})",
                        fix="choose an empty folder: it is uploaded as it is")
    out.mkdir(parents=True, exist_ok=True)
    files = manifest(tree)
    tarball = out / f"{name}.tar.gz"
    write_tarball(tree, [tree], tarball, top=name)
    digest = sha256_file(tarball)
    sha_file = out / f"{tarball.name}.sha256"
    write_atomic(sha_file, f"{digest}  {tarball.name}\n")
    total = sum(int(entry["size"]) for entry in files.values())
    manifest_file = out / f"{name}.manifest.json"
    write_atomic(manifest_file, json.dumps({
        "name": name, "tarball": {"file": tarball.name, "sha256": digest, "size": tarball.stat().st_size},
        "file_count": len(files), "total_bytes": total, "files": files}, indent=2, sort_keys=True) + "\n")
    return Package(name=name, folder=out, tarball=tarball, sha256=digest, sha256_file=sha_file,
                   manifest_file=manifest_file, files=len(files), bytes=total)


def verify(manifest_file: Path) -> list[str]:
    """Problems found (empty when good): the tarball's sha256, and every file in it against the manifest."""
    data = json.loads(Path(manifest_file).read_text(encoding="utf-8"))
    tarball = Path(manifest_file).with_name(data["tarball"]["file"])
    if not tarball.is_file():
        return [f"{tarball}: missing"]
    problems = [] if sha256_file(tarball) == data["tarball"]["sha256"] else [f"{tarball.name}: sha256 differs"]
    seen = set()
    with tarfile.open(tarball, "r:gz") as tar:
        for member in tar:
            if not member.isfile():
                continue
            rel = member.name.split("/", 1)[1] if "/" in member.name else member.name
            seen.add(rel)
            want = data["files"].get(rel)
            stream = tar.extractfile(member)
            got = hashlib.sha256(stream.read() if stream else b"").hexdigest()
            if want is None:
                problems.append(f"{rel}: in the tarball, not in the manifest")
            elif got != want["sha256"]:
                problems.append(f"{rel}: sha256 differs from the manifest")
    problems += [f"{rel}: in the manifest, not in the tarball" for rel in sorted(set(data["files"]) - seen)]
    return problems


class FinalTarball(BaseModel):
    path: Path
    sha256: str
    size: int
    files: int
    divisions: list[str]


def final_tarball(tree: Path, target: Path) -> FinalTarball:
    """The tarball the Submission UI takes, and its `<name>.sha256` beside it: the tree's division folders (closed/,
    open/, network/) at the top and nothing else, reproducible as `package`'s is. It is what the MLCommons automation
    uploads (mlcommons/mlperf-automations `run-mlperf-inference-submission-checker` runs `tar-my-folder` with
    `MLC_TAR_SUB_FOLDERS_TO_INCLUDE: closed,open,network`: `tar --directory TREE -czf OUT closed open network`), so a
    file at the top of the tree (a smoke or rehearsal marker) is not in it."""
    tree, target = Path(tree).resolve(), Path(target).resolve()
    roots = [tree / d for d in DIVISIONS if (tree / d).is_dir()]
    if not roots:
        raise PlanError(f"{tree} holds none of {', '.join(d + '/' for d in DIVISIONS)}",
                        fix="pass the submission tree (the folder holding closed/ ...)")
    if tree in target.parents:
        raise PlanError(f"the tarball {target} is inside the tree", fix="choose a folder outside the tree")
    target.parent.mkdir(parents=True, exist_ok=True)
    write_tarball(tree, roots, target)
    digest = sha256_file(target)
    write_atomic(target.with_name(f"{target.name}.sha256"), f"{digest}  {target.name}\n")
    return FinalTarball(path=target, sha256=digest, size=target.stat().st_size,
                        files=sum(len(_files(root)) for root in roots), divisions=[r.name for r in roots])
