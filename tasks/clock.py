"""The measuring client's clock: one seam that runs the client and the engine on an accelerated clock.

`podium rehearse` sets `PODIUM_CLOCK=x10` in its own environment; the three places that start a process whose clock
measures a run (the loadgen harness child, the endpoints client, the simulated engine) pass their argv through
`wrap`, which puts it under libfaketime (`faketime -f "+0 x10"`, as tests/checker_corpus.py does): every clock and
every sleep of that process and its children runs ten times faster, so a 600 s run lasts 600 s on the client's clock
and a minute on the wall. Prefect, object storage, the evaluators and the timeouts of the steps that wait for those
processes stay on the real clock. Unset (every real run), `wrap` returns argv unchanged.
"""

from __future__ import annotations

import os
import shutil

from submission.errors import PlanError

ENV = "PODIUM_CLOCK"   # "x10": the speed-up; unset or "real": the real clock


def speed() -> float | None:
    """The speed-up `PODIUM_CLOCK` asks for, None for the real clock."""
    value = os.environ.get(ENV, "").strip().lower()
    if value in ("", "real", "x1"):
        return None
    try:
        factor = float(value.removeprefix("x"))
    except ValueError:
        factor = 0.0
    if factor <= 0:
        raise PlanError(f"{ENV}={value!r} is not a clock", fix="use xN (e.g. x10) or real")
    return factor


def wrap(argv: list[str]) -> list[str]:
    """`argv` under the accelerated clock `PODIUM_CLOCK` asks for, else unchanged. faketime runs the command as its
    child (the command's parent is faketime, not the caller)."""
    factor = speed()
    if factor is None:
        return list(argv)
    binary = shutil.which("faketime")
    if binary is None:
        raise PlanError("the accelerated clock needs libfaketime's `faketime` command",
                        fix="install it (apt-get install faketime; deployments/ci/system-deps.sh does), or pass "
                            "--clock real")
    return [binary, "-f", f"+0 x{factor:g}", *argv]
