"""Upload a submission package (`submission.tree.package`) to object storage: the tarball, its sha256 file and the
manifest, then the storage manifest, then a check of every object against it (tasks.storage.objects does each step)."""

from __future__ import annotations

from submission.base.errors import StorageError
from submission.tree.package import Package
from tasks.storage import objects as storage


def upload(cfg: storage.StorageConfig, pkg: Package, key_prefix: str) -> list[str]:
    """Put the package's folder under `key_prefix`; return the full keys written. Raises StorageError when an
    uploaded object does not match what was sent."""
    uploaded = storage.put_tree(cfg, pkg.folder, key_prefix, tags={"package-sha256": pkg.sha256})
    storage.put_manifest(cfg, key_prefix, uploaded)
    problems = storage.verify_manifest(cfg, key_prefix)
    if problems:
        raise StorageError(f"uploaded package does not match its manifest: {'; '.join(problems[:5])}",
                           fix="upload it again (podium package ... re-uploads)")
    return [storage.object_key(cfg, key_prefix, rel) for rel in sorted(uploaded["objects"])]
