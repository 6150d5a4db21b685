"""The publish step: a run folder to object storage, its manifest last, every object then verified against it."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from tasks.storage import objects as storage


@task(name="publish", retries=3, retry_delay_seconds=[5, 15, 30])
def publish(cfg: storage.StorageConfig, folder: str, key_prefix: str, tags: dict[str, str]) -> list[str]:
    """Upload the run folder, then the manifest, then verify every object against it."""
    manifest = storage.put_tree(cfg, Path(folder), key_prefix, tags=tags)
    storage.put_manifest(cfg, key_prefix, manifest)
    problems = storage.verify_manifest(cfg, key_prefix)
    if problems:
        raise storage.StorageError(f"uploaded objects do not match the manifest: {'; '.join(problems[:5])}")
    return sorted(manifest["objects"])
