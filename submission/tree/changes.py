"""What one tree changed into another, file by file (`podium submit` shows what the round's preprocess_submission.py
did to a copy of the tree): the files added, removed and changed (by sha256), counted per scenario folder."""

from __future__ import annotations

from collections import Counter
from pathlib import Path, PurePosixPath

from pydantic import BaseModel

from submission.tree.package import manifest

FOLDER_DEPTH = 6  # division/org/results/system/benchmark/scenario: the folder a result's files are counted under


class Changes(BaseModel):
    added: list[str]
    removed: list[str]
    changed: list[str]
    unchanged: int

    def lines(self) -> list[str]:
        """One line of counts, then one per folder and kind: `removed closed/Org/results/sys/bench/Server (9 files)`."""
        head = (f"{len(self.added)} file(s) added, {len(self.removed)} removed, {len(self.changed)} changed, "
                f"{self.unchanged} unchanged")
        out = [head]
        for kind, paths in (("added", self.added), ("removed", self.removed), ("changed", self.changed)):
            folders = Counter(str(PurePosixPath(*PurePosixPath(p).parts[:FOLDER_DEPTH])) for p in paths)
            out += [f"{kind} {folder} ({n} file{'s' if n > 1 else ''})" for folder, n in sorted(folders.items())]
        return out


def compare(before: Path, after: Path) -> Changes:
    """The files of `after` against those of `before` (paths relative to each)."""
    old, new = manifest(Path(before)), manifest(Path(after))
    common = old.keys() & new.keys()
    changed = sorted(p for p in common if old[p]["sha256"] != new[p]["sha256"])
    return Changes(added=sorted(new.keys() - old.keys()), removed=sorted(old.keys() - new.keys()), changed=changed,
                   unchanged=len(common) - len(changed))
