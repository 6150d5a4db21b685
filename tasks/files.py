"""sha256 of files, read in blocks: the one checksum Podium records for models, datasets and uploads."""

from __future__ import annotations

import hashlib
from pathlib import Path

BLOCK = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()
