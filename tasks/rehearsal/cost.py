"""What the real round of a plan would take on its own hardware, at its target rates: one function, `real_round`,
kept small and apart (a shared cost model, submission/cost.py, is to replace it).

Each performance run lasts the longer of the round's min duration and its samples over the target rate; an accuracy
run issues the accuracy set at the Offline rate (longer answers are not modelled: a lower bound); TEST07 and TEST09
issue their audit.config min_query_count at the scenario's rate (Server audits at compliance.server_qps_factor).
GPU-hours: the sum over runs, times the system's GPUs (nodes x accelerators_per_node).
"""

from __future__ import annotations

from typing import Any

from submission.plan import Plan
from submission.rules import load_rules


def real_round(plan: Plan) -> dict[str, Any]:
    rules = load_rules(plan.round)
    minimum = rules.min_duration_ms / 1000
    runs: dict[str, float] = {}
    gpus = 0
    for b in plan.benchmarks:
        system = plan.system(b.system)
        gpus = max(gpus, system.nodes * int(system.description.get("accelerators_per_node", "1") or 1))
        bench = rules.benchmark(b.benchmark)
        offline = (b.scenarios.get("Offline") or next(iter(b.scenarios.values()))).target_qps or 1.0
        for name, sc in b.scenarios.items():
            qps = sc.target_qps or offline
            samples = bench.performance_sample_count
            runs[f"{b.key}/{name}/performance"] = max(minimum, samples / qps)
            runs[f"{b.key}/{name}/accuracy"] = bench.scenario(name).accuracy_sample_count / offline
            audit_qps = qps if name == "Offline" else qps * plan.compliance.server_qps_factor
            for test in bench.compliance_tests if plan.audits_enabled else ():
                count = rules.audit(test).values(b.benchmark).get("min_query_count", samples)
                runs[f"{b.key}/{name}/{test}"] = count / audit_qps
    seconds = sum(runs.values())
    return {"runs": runs, "hours": seconds / 3600, "gpus": gpus, "gpu_hours": seconds / 3600 * gpus}
