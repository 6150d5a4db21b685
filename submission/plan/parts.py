"""A plan made of plans: a fleet plan's `plans:` list names other plan files, each with the work pool its systems run
on, and stands for their systems and benchmarks together (docs/fleet.md):

    name: round-v6.1-fleet
    round: v6.1
    division: closed
    profile: submission
    submitter: Podium
    plans:
      - file: gpt-oss-120b-trtllm-k8s.yaml     # relative to this file
        work_pool: gb200-k8s
    storage: {bucket: mlperf-submissions, prefix: runs}

Each part keeps every fact of its system and benchmarks in its own file; the fleet adds only where they run. The parts
share the fleet's round, division, profile and submitter (a part that differs is refused, naming the field), their
systems' names are distinct, and their `fetch` destinations do not clash. A part is a plain plan: one with a `plans:`
list of its own is refused. The fleet's own `systems` and `benchmarks`, when it has any, come first. A fleet that does
not validate is checked part by part (`submission.plan.model.load`), so an error in a part names the part's file and
its own field, not the merged plan's index.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from submission.base.errors import PlanError

FIELD = "plans"
SHARED = ("round", "division", "profile", "submitter")   # the tree's top: one per submission
FIX = "a fleet's plans: entries are {file: PLAN.yaml, work_pool: POOL} (deployments/plans/round-v6.1-fleet.yaml)"


def files(data: Any, path: Path) -> list[Path]:
    """The part files a fleet's `plans:` names (none for a plain plan), each relative to the fleet's `path`."""
    entries = data.get(FIELD) if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return []
    return [path.parent / e["file"] for e in entries if isinstance(e, dict) and isinstance(e.get("file"), str)]


def expand(data: Any, path: Path, read: Callable[[Path], Any]) -> Any:
    """`data` (a plan file's YAML, read from `path`) with its `plans:` parts read (by `read`) and merged in; data
    without them as it is."""
    if not isinstance(data, dict) or FIELD not in data:
        return data
    parts = data[FIELD]
    if not isinstance(parts, list) or not parts:
        raise PlanError(f"{FIELD}: a list of plan files, at least one", where=str(path), fix=FIX)
    out = {k: v for k, v in data.items() if k != FIELD}
    systems, benchmarks = list(out.get("systems") or []), list(out.get("benchmarks") or [])
    fetch = dict(out.get("fetch") or {})
    for i, entry in enumerate(parts):
        where = f"{path}: {FIELD}[{i}]"
        if not isinstance(entry, dict) or set(entry) - {"file", "work_pool"} or not isinstance(entry.get("file"), str):
            raise PlanError(f"{FIELD}[{i}]: {entry!r} is not {{file, work_pool}}", where=str(path), fix=FIX)
        file = path.parent / entry["file"]
        part = read(file)
        if not isinstance(part, dict):
            raise PlanError("not a plan (a YAML mapping)", where=f"{where} ({file})", fix=FIX)
        if FIELD in part:
            raise PlanError(f"a part of a fleet has {FIELD}: of its own", where=f"{where} ({file})",
                            fix="list that plan's parts in the fleet itself")
        for name in SHARED:
            if part.get(name) != data.get(name):
                raise PlanError(f"{name} {part.get(name)!r} differs from the fleet's {data.get(name)!r}",
                                where=f"{where} ({file})", fix=f"one submission has one {name}: make them equal")
        for system in part.get("systems") or []:
            if entry.get("work_pool") and isinstance(system, dict):
                system = {**system, "work_pool": entry["work_pool"]}
            systems.append(system)
        benchmarks += part.get("benchmarks") or []
        for dest, source in (part.get("fetch") or {}).items():
            if dest in fetch and fetch[dest] != source:
                raise PlanError(f"fetch destination {dest} is given two sources", where=f"{where} ({file})",
                                fix="give each fetched source a destination of its own")
            fetch[dest] = source
    names = [s.get("name") for s in systems if isinstance(s, dict)]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise PlanError(f"system {twice[0]} is in two parts of the fleet", where=str(path),
                        fix="name each system once (a system is one tree folder)")
    return out | {"systems": systems, "benchmarks": benchmarks} | ({"fetch": fetch} if fetch else {})
