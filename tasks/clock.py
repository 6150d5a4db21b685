"""The measuring client's clock: one seam that runs the client and the engine on an accelerated clock.

`podium rehearse` sets `PODIUM_CLOCK=x10` in its own environment; the three places that start a process whose clock
measures a run (the loadgen harness child, the endpoints client, the simulated engine) pass their argv through
`wrap`, which puts it under libfaketime (`faketime -f "+0 x10"`, as tests/checker_corpus.py does): every clock and
every sleep of that process and its children runs ten times faster, so a 600 s run lasts 600 s on the client's clock
and a minute on the wall. Prefect, object storage, the evaluators and the timeouts of the steps that wait for those
processes stay on the real clock. Unset (every real run), `wrap` returns argv unchanged.

The fall-back. On a busy machine a real millisecond the client waits for a CPU counts ten times on its clock, so a
rehearsal run can miss its latency limits for no fault of the pipeline. A performance run or compliance audit that
comes out INVALID for its latency alone (tasks.measuring.on_slower_clocks; each client says what counts as latency)
runs again with the client on the next slower clock of `LADDER` (x10, then x5, then x2, then it stands as measured),
and its record says which clock measured it (`RunRecord.clock`, `AuditRecord.clock`; listed in rehearsal.md). Only
the client falls back: the simulated engine keeps the clock it was launched on, so on a slower client clock it looks
faster (its x10 second lasts half a second of an x5 client's clock). That is fine for a rehearsal, which tests the
pipeline, not the engine's numbers. A real run (the real clock) is measured once, as ever.
"""

from __future__ import annotations

import os
import re
import shutil

from submission.base.errors import PlanError

ENV = "PODIUM_CLOCK"   # "x10": the speed-up; unset or "real": the real clock
# The client's clocks, fastest first: a run starts on PODIUM_CLOCK's and falls back to each slower one in turn
LADDER = (100.0, 50.0, 20.0, 10.0, 5.0, 2.0)


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


def slower(factor: float) -> tuple[float, ...]:
    """The clocks of `LADDER` slower than `factor`, in the order a run falls back to them (x10: x5, x2)."""
    return tuple(f for f in LADDER if f < factor)


def ladder() -> tuple[float | None, ...]:
    """The clocks a performance run may be measured on, in order: the one `PODIUM_CLOCK` asks for, then each slower
    one (x10: x10, x5, x2). The real clock: only itself (None), a real run is never measured again."""
    first = speed()
    return (None,) if first is None else (first, *slower(first))


def label(factor: float | None) -> str:
    """`x5` for a clock of `ladder()`, `real` for the real clock (None)."""
    return "real" if factor is None else f"x{factor:g}"


def own_speed() -> float:
    """How many times faster than the real one this process's clock runs: the speed-up of the FAKETIME setting
    libfaketime's `faketime` gives the processes it starts ("+0 x10": 10), else 1."""
    found = re.search(r"\bx([0-9.]+)", os.environ.get("FAKETIME", ""))
    return float(found.group(1)) if found else 1.0


def real(seconds: float, factor: float | None = None) -> float:
    """A budget of `seconds` of real time on this process's clock, or on the clock `factor` of a client this process
    starts (tasks.clock.ladder) and writes the budget for. A client's connect and stall timeouts guard against a real
    engine that does not answer: under x50 a 10 s connect timeout would give up after 0.2 real seconds, which a busy
    2-core machine overruns while the engine accepts a thousand connections at once; the endpoints client's start-up
    limits bound imports and a tokenizer load, which no clock speeds up."""
    return seconds * (factor or own_speed())


def wrap(argv: list[str], factor: float | None = None) -> list[str]:
    """`argv` under the accelerated clock `factor` (tasks.clock.ladder; None: the one `PODIUM_CLOCK` asks for), else
    unchanged. faketime runs the command as its child (the command's parent is faketime, not the caller)."""
    factor = factor or speed()
    if factor is None:
        return list(argv)
    binary = shutil.which("faketime")
    if binary is None:
        raise PlanError("the accelerated clock needs libfaketime's `faketime` command",
                        fix="install it (apt-get install faketime; deployments/ci/system-deps.sh does), or pass "
                            "--clock real")
    return [binary, "-f", f"+0 x{factor:g}", *argv]
