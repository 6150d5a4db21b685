"""The run summary's GPU time (tasks.reporting.gpu_time): each measured run's time x its engine's GPUs beside the
dry run's prediction, from the one helper both take their GPUs and lengths from (submission.budget.cost)."""

from __future__ import annotations

from pathlib import Path

from submission.budget import slurm_time
from submission.plan import model as plans
from submission.results.runs import RunRecord, phase_rows
from tasks.reporting import artifacts, gpu_time

PLAN = Path(__file__).parents[2] / "deployments" / "plans" / "qwen3-vl-dynamo-50-50.yaml"
B = "qwen3-vl-235b-a22b"


def record(scenario: str, wall_s: float | None, **extra) -> RunRecord:
    return RunRecord(key=f"k-{scenario}", system="gb200-nvl72", benchmark=B, scenario=scenario, mode="performance",
                     run_dir=f"/r/{scenario}", harness="endpoints", valid=True, validity="VALID", wall_s=wall_s,
                     **extra)


def test_the_prediction_is_the_dry_runs_own() -> None:
    plan = plans.load(PLAN)
    bench = plan.benchmarks[0]
    expected = gpu_time.predicted(plan)
    need = slurm_time.need(plan, bench)
    assert sorted(expected) == sorted(f"{bench.system}/{B}/{s}/performance" for s in ("Offline", "Server",
                                                                                      "Interactive"))
    offline = expected[f"{bench.system}/{B}/Offline/performance"]
    assert offline == (need.per_run[0].length.seconds, 16)                    # 193156 samples at 230 q/s, 16 GPUs
    assert need.per_run[0].gpu_hours == 3.732 == round(offline[0] * 16 / 3600, 3)


def test_each_measured_run_costs_its_time_times_its_gpus_beside_the_prediction_and_a_total() -> None:
    system = plans.load(PLAN).benchmarks[0].system
    records = [r.model_copy(update={"system": system}) for r in (
        *phase_rows(record("Offline", 900.0, accuracy_metric="F1", accuracy=0.8)),   # one run, two rows
        record("Server", 1800.0), record("Interactive", None))]
    rows = gpu_time.rows(records, gpu_time.predicted(plans.load(PLAN)))
    assert [r["run"] for r in rows] == [f"{system}/{B}/{s}/performance" for s in ("Offline", "Server",
                                                                                  "Interactive")] + ["total"]
    offline, server, interactive, total = rows
    assert (offline["seconds"], offline["gpus"], offline["gpu_hours"]) == (900.0, 16, 4.0)
    assert (server["gpu_hours"], server["predicted_s"]) == (8.0, 990.8)   # 193156 samples at 200 q/s, 2 x 12 s drain
    assert server["predicted_gpu_hours"] == round(990.8258 * 16 / 3600, 3)
    assert interactive["gpu_hours"] is None and interactive["predicted_s"] == 1007.4   # not measured: no cost
    assert total["seconds"] == 2700.0 and total["gpu_hours"] == 12.0
    assert total["predicted_gpu_hours"] == round(offline["predicted_gpu_hours"] + server["predicted_gpu_hours"]
                                                 + interactive["predicted_gpu_hours"], 3)
    text = artifacts.markdown("p", "submission", [], None, {}, [], gpu_time=rows)
    assert "## GPU time" in text and "| total | 2,700.00 | — | 12.00 |" in text and "No run held a GPU" not in text


def test_a_run_the_plan_does_not_predict_and_a_cpu_engine_say_so() -> None:
    rows = gpu_time.rows([record("Offline", 10.0)], {"x/y/Offline/performance": (12.0, 0)})
    assert rows[0]["gpus"] is None and rows[0]["gpu_hours"] is None and rows[0]["predicted_s"] is None
    cpu = gpu_time.rows([record("Offline", 10.0)], {f"gb200-nvl72/{B}/Offline/performance": (12.0, 0)})
    assert cpu[0]["gpu_hours"] == 0 and cpu[-1]["gpu_hours"] == 0
    assert gpu_time.markdown(cpu)[-1] == "No run held a GPU (a CPU engine): 0 GPU-hours."
