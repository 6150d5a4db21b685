"""What makes a dress rehearsal's tree impossible to pass for a submission (`podium rehearse`).

A rehearsal's plan and systems are named `rehearsal-...` (the system_name in systems/*.json says so), its tree carries
`REHEARSAL.txt` at its top (beside closed/, where the official checker looks at nothing), and `podium package` refuses
a tree with that file. The marker's text says what the rehearsal replaced.
"""

from __future__ import annotations

from pathlib import Path

from submission.base.errors import PlanError
from submission.base.files import write_atomic

PREFIX = "rehearsal-"           # plan and system names of a rehearsal
MARKER = "REHEARSAL.txt"        # at the top of a rehearsal's tree
NOTICE = ("DRESS REHEARSAL, NOT A SUBMISSION: a simulated engine served synthetic data on an accelerated clock; "
          "no result here is a measurement of any system.")


def is_rehearsal(plan_name: str) -> bool:
    return plan_name.startswith(PREFIX)


def mark(tree: Path) -> Path:
    """Write the marker at the top of `tree`."""
    return write_atomic(Path(tree) / MARKER, NOTICE + "\n")


def refuse(tree: Path) -> None:
    """PlanError when `tree` is a rehearsal's (`podium package` calls this before packing)."""
    if (Path(tree) / MARKER).exists():
        raise PlanError(f"{tree} is a dress rehearsal's tree ({MARKER} is there): it is not a submission and is not "
                        "packaged", fix="run the real plan with `podium run PLAN` to make a submission")
