"""A performance result is packaged as the system that served it: a run of an engine of replicas
(`engine.replicas`) that fewer than its R replicas served to the end (some left out at start-up under
`performance_min_ready`, or lost during the run under `max_lost`) is refused when the tree is assembled, naming the
replicas that did not serve, unless the plan says `engine.replicas.package_fewer: true`. The run's record lists the
replicas that served it (`RunRecord.replicas`, with when each lost one was lost)."""

from __future__ import annotations

from collections.abc import Sequence

from submission.base.errors import RuleViolation
from submission.plan.model import Plan
from submission.results.runs import RunRecord


def shortfall(record: RunRecord, names: Sequence[str]) -> str | None:
    """What of replicas `names` (the system's) did not serve `record` to the end; None when every one did."""
    served = {r.replica for r in record.replicas}
    missing = [n for n in names if n not in served]
    lost = [f"{r.replica} (lost at {r.lost_at})" for r in record.replicas if r.lost_at]
    if not (missing or lost):
        return None
    parts = ([f"not serving at the start: {', '.join(missing)}"] if missing else []) + \
        ([f"lost during the run: {', '.join(lost)}"] if lost else [])
    return (f"{record.label}: {len(names) - len(missing) - len(lost)} of the system's {len(names)} replicas served "
            f"the whole run ({'; '.join(parts)})")


def check(plan: Plan, records: Sequence[RunRecord]) -> None:
    """RuleViolation naming every performance result that fewer replicas served than its system describes."""
    found = []
    for bench in plan.benchmarks:
        layout = bench.engine.replica_layout()
        if layout is None or (bench.engine.replicas and bench.engine.replicas.package_fewer):
            continue
        names = [layout.name(i) for i in range(layout.count)]
        for r in records:
            if (r.system, r.benchmark, r.mode) == (bench.system, bench.benchmark, "performance") and r.replicas:
                found += [line] if (line := shortfall(r, names)) else []
    if found:
        raise RuleViolation("a result measured with fewer replicas than its system describes is not packaged as "
                            "that system:\n" + "\n".join(f"- {line}" for line in found),
                            fix="measure those runs again with every replica serving (`podium run PLAN --only "
                                "SYSTEM/BENCHMARK/SCENARIO`), or set engine.replicas.package_fewer: true to package "
                                "them as they are")
