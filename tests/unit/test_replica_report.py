"""What a run served by replicas leaves behind: its record lists each replica (tasks/harness/dispatch.py rows), the
report's `## Replicas` section has one row per replica summing to the samples issued and flags a share more than
10 % off the mean, and assembling the tree refuses a performance result that fewer replicas served than the system
describes unless the plan says `package_fewer`."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from submission.base.errors import RuleViolation
from submission.plan import model as plans
from submission.results.runs import ReplicaRow, RunRecord
from submission.tree import served
from tasks.harness.measure import log_losses
from tasks.reporting import artifacts
from tasks.reporting import replicas as report

SMOKE = Path(__file__).parents[2] / "deployments" / "plans" / "smoke.yaml"
LOST = {"replica": "replica-2", "node": "node1", "at": "2026-01-02T03:04:05.678+00:00", "after_s": 12.3,
        "why": "stopped accepting connections", "in_flight": 3}


def rows(samples: list[int], lost: int | None = None) -> list[dict]:
    """Harness rows (sut_stats.json "replicas") of replicas that answered `samples`; replica `lost` was lost."""
    return [{"replica": f"replica-{i}", "node": f"node{i // 2}", "samples": n, "output_tokens": 8 * n, "errors": 0,
             "ttft_p99_ms": 12.5, "tpot_p99_ms": 3.25, "latency_p99_ms": None, "moved": 3 if i == lost else 0,
             "moved_indices": [4, 9, 11] if i == lost else [], "lost": LOST if i == lost else None}
            for i, n in enumerate(samples)]


def run(samples: list[int], lost: int | None = None, scenario: str = "Server") -> RunRecord:
    system, benchmark = plan().benchmarks[0].system, plan().benchmarks[0].benchmark
    return RunRecord(key="k", system=system, benchmark=benchmark, scenario=scenario, mode="performance",
                     run_dir="/runs/k", valid=True, validity="VALID",
                     replicas=tuple(ReplicaRow.of(r) for r in rows(samples, lost)))


def plan(package_fewer: bool = False) -> plans.Plan:
    data = yaml.safe_load(SMOKE.read_text())
    data["systems"][0] |= {"nodes": 2, "description": {}}
    data["benchmarks"][0]["engine"] = {"name": "simulated", "launcher": "local",
                                       "replicas": {"per_node": 2, "package_fewer": package_fewer}}
    return plans.parse(data, "plan.yaml")


def test_the_record_keeps_each_replicas_row_and_when_one_was_lost() -> None:
    rec = run([30, 31, 29, 30], lost=2)
    assert [r.replica for r in rec.replicas] == ["replica-0", "replica-1", "replica-2", "replica-3"]
    assert rec.replicas[2].lost_at == LOST["at"] and rec.replicas[2].lost_why == LOST["why"]
    assert rec.replicas[2].moved == 3 and rec.replicas[0].lost_at is None
    assert RunRecord.model_validate_json(rec.model_dump_json()) == rec   # as results.json and the cache keep it


def test_the_report_has_a_row_per_replica_and_flags_a_share_over_ten_percent_off_the_mean() -> None:
    rec = run([100, 100, 85, 115])   # mean 100: 85 and 115 are 15 % off; 100 is not
    assert report.flagged(rec) == ["replica-2", "replica-3"]
    assert report.flagged(run([100, 100, 91, 109])) == []   # 9 % off: within
    text = artifacts.markdown("p", "smoke", [], None, {}, [], records=[rec])
    section = text.split("## Replicas", 1)[1].split("\n## ", 1)[0]
    assert f"### {rec.label}" in section
    assert "400 samples over 4 replicas (the rows sum to the samples issued), 2 flagged." in section
    table = [line for line in section.splitlines() if line.startswith("| replica-")]
    assert len(table) == 4 and sum(int(line.split(" | ")[2]) for line in table) == 400
    assert table[2].startswith("| replica-2 | node1 | 85 | -15.0% | 680 |")
    assert table[2].endswith("| share 15% under the mean |") and table[3].endswith("| share 15% over the mean |")
    assert table[0].endswith("| — |")
    assert "## Replicas" not in artifacts.markdown("p", "smoke", [], None, {}, [], records=[
        rec.model_copy(update={"replicas": ()})])   # one serving instance: no section


def test_shares_are_not_judged_on_a_few_samples_a_replica() -> None:
    """16 accuracy samples over 4 replicas (4 each on average, 0 to 8 by chance): no flag, and the line says why."""
    rec = run([8, 0, 4, 4])
    assert report.flagged(rec) == [] and report.flagged(run([99, 101, 90, 110])) == []   # mean 100: judged, within
    assert report.flagged(run([99, 101, 80, 120])) == ["replica-2", "replica-3"]
    section = artifacts.markdown("p", "smoke", [], None, {}, [], records=[rec]).split("## Replicas", 1)[1]
    assert "16 samples over 4 replicas (the rows sum to the samples issued), shares not judged (4 a replica on " \
           "average, under 100)." in section


def test_the_report_names_a_replica_lost_mid_run_and_the_samples_moved() -> None:
    section = "\n".join(report.markdown([run([40, 40, 12, 48], lost=2)]))
    assert (f"- replica-2 on node1 was lost at {LOST['at']}: stopped accepting connections; 3 sample(s) moved to "
            "live replicas") in section


def test_a_result_fewer_replicas_served_is_refused_at_assembly_unless_the_plan_says_so() -> None:
    served.check(plan(), [run([25, 25, 25, 25])])   # all four served the whole run
    with pytest.raises(RuleViolation) as e:
        served.check(plan(), [run([34, 33, 33])])   # replica-3 never served
    assert "3 of the system's 4 replicas served the whole run (not serving at the start: replica-3)" in str(e.value)
    assert "engine.replicas.package_fewer: true" in str(e.value)
    with pytest.raises(RuleViolation, match=r"lost during the run: replica-2 \(lost at 2026-01-02T03:04:05"):
        served.check(plan(), [run([40, 40, 12, 48], lost=2)])
    served.check(plan(package_fewer=True), [run([34, 33, 33])])   # the operator said so


def test_the_flow_log_names_a_lost_replica_the_time_and_the_samples_moved(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="podium.harness")
    log_losses("s/b/Server/performance", {"replicas": rows([40, 40, 12, 48], lost=2)})
    [line] = caplog.messages
    assert line == ("s/b/Server/performance: replica-2 on node1 stopped accepting connections at "
                    f"{LOST['at']} (12.3 s into the run); its 3 sample(s) in flight go to the live replicas; 3 "
                    "sample(s) moved to live replicas (data-set indices 4, 9, 11); the run went on")
