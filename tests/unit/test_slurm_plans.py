"""What a production Slurm plan must hold before any GPU time: time limits derived from what it runs (refused at load
when an allocation of its own is shorter), host memory and CPUs per GPU in the step argv, and a closed submission's
system description free of fields nothing can tell (refused with the list and the fix)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from submission.base.errors import PlanError
from submission.budget import slurm_time
from submission.budget.run_length import schedule_s
from submission.plan import model as plans
from submission.plan.slurm_options import SlurmSettings
from submission.rules import load_rules
from submission.tree.systems import describe_sourced, gaps
from tasks.engines import ProcessSpec
from tasks.launchers import slurm_cli as cli
from tasks.ops.inputs import check_capacity
from tasks.ops.prerequisites import describe_systems, require_description_sources

PLANS = Path(__file__).parents[2] / "deployments" / "plans"
QWEN = PLANS / "qwen3-vl-dynamo-50-50.yaml"


@pytest.mark.parametrize(("value", "secs"), [("30", 1800), ("5:30", 330), ("1:00:00", 3600), ("2-3", 183600),
                                             ("2-03:04", 183840), ("1-00:00:01", 86401), ("UNLIMITED", None)])
def test_slurm_times_in_every_form_sbatch_accepts(value: str, secs: int | None) -> None:
    assert slurm_time.seconds(value) == secs


def test_the_qwen3_vl_allocation_covers_what_it_runs() -> None:
    """3 client runs (--mode both) of whole passes (submission/budget/run_length.py): Offline 144867 + 48289 samples
    at the expected 230 q/s, Server 144867 + 48289 on the client's schedule at 200 q/s and Interactive 32000 + 8000 at
    40 q/s, each phase then its p99 bound (12 s, 1.5 s); x 1.5 + ready 2400 s + warm-up 600 s + stop 60 s. The dry
    run states each run's samples, seconds and GPU-hours."""
    plan = plans.load(QWEN)
    need = slurm_time.need(plan, plan.benchmarks[0])
    assert need.runs == 3
    seed = load_rules("v6.1").seeds.schedule_rng_seed
    server, interactive = schedule_s(seed, 200.0, 144867, 48289), schedule_s(seed, 40.0, 32000, 8000)
    assert need.measuring_s == pytest.approx((193156 / 230 + sum(server) + 2 * 12 + sum(interactive) + 2 * 1.5) * 1.5)
    assert slurm_time.slurm_time(need.allocation_s) == "02:02:00"
    assert slurm_time.seconds(plan.benchmarks[0].engine.slurm_settings().time_limit) >= need.allocation_s
    assert slurm_time.slurm_time(slurm_time.job_need(plan)) == "02:47:00"   # + staging 30 min + tail 15 min
    [offline, *_] = need.lines()
    assert offline == ("  predicted Offline/performance with accuracy: 144867 + 48289 accuracy samples (3 pass(es) "
                       "over its data set), 840 s, 3.732 GPU-hours")


def test_the_dry_run_prints_the_sbatch_of_the_plans_allocation(tmp_path: Path) -> None:
    """The job Podium runs in asks for what engine.slurm says (memory included), for the time the plan needs."""
    from tasks.serving import launch

    [review] = launch.reviews(plans.load(QWEN), tmp_path / "ws")
    sbatch = review["slurm_time"]["sbatch"]
    assert sbatch[:2] == ["sbatch", "--nodes=4"] and "--gpus-per-node=4" in sbatch and "--mem=0" in sbatch
    assert sbatch[-4:] == ["--time=02:47:00", "deployments/slurm/podium.sbatch", "run", "PLAN.yaml"]
    assert f"with engine.slurm's allocation: {' '.join(sbatch)}" in launch.render([review])
    script = (PLANS.parent / "slurm" / "podium.sbatch").read_text()
    assert "#SBATCH --mem=0" in script   # the script's default is the shipped plans' (all of each node's memory)


def test_the_dry_run_lists_a_gpu_sampler_step_on_every_engine_node(tmp_path: Path) -> None:
    """Beside the engine's steps, a launch starts one GPU sampler step per engine node (tasks/launchers/
    gpu_sampler.py), overlapping the GPUs the engine holds there; the dry run lists each with its srun."""
    from tasks.serving import launch

    [review] = launch.reviews(plans.load(QWEN), tmp_path / "ws")
    samplers = review["slurm"]["samplers"]
    assert list(samplers) == ["node0", "node1", "node2", "node3"]
    for node, argv in samplers.items():
        assert argv[:7] == ["srun", "--jobid=$JOB", f"--job-name=podium-<launch>-gpus-{node}", "--nodes=1",
                            f"--nodelist={node}", "--ntasks=1", "--overlap"]
        assert "--gpus=4" in argv and argv[-3:] == list(cli.gpu_sampler.NVIDIA_SMI)
    assert set(review["slurm"]["srun"]) == {p["name"] for p in review["processes"]}
    text = launch.render([review])
    for node, argv in samplers.items():
        assert f"  GPU sampler on {node}: {shlex.join(argv[:argv.index('-c') + 1])} '<" in text


def test_an_allocation_shorter_than_its_runs_stops_before_the_flow(tmp_path: Path) -> None:
    """`podium run` and preflight (check_capacity), and the dry run, refuse it naming the field and the need."""
    data = yaml.safe_load(QWEN.read_text())
    data["benchmarks"][0]["engine"]["slurm"] |= {"allocation": "new", "time_limit": "02:00:00"}
    plan = plans.parse(data)
    with pytest.raises(PlanError) as e:
        check_capacity(plan)
    assert ("benchmarks.0.engine.slurm.time_limit: 02:00:00 is shorter than what gb200x16-slurm/qwen3-vl-235b-a22b "
            "runs, 02:02:00") in str(e.value)
    assert 'set time_limit: "02:02:00" or more' in str(e.value)
    data["benchmarks"][0]["engine"]["slurm"]["allocation"] = "auto"   # inside a job: preflight checks the job's time
    check_capacity(plans.parse(data))


def test_gpu_steps_get_host_memory_and_the_allocation_all_of_it() -> None:
    settings = SlurmSettings(gpus_per_node=4, cpus_per_gpu=32, mem="0", mem_per_gpu="200G")
    spec = ProcessSpec(role="prefill", name="prefill-0", argv=("python3",), gpus=2)
    assert cli.srun_argv(settings, "7", spec, ["gpu1"], "p")[6:10] == \
        ["--exact", "--gpus=2", "--cpus-per-gpu=32", "--mem-per-gpu=200G"]
    assert "--mem=0" in cli.salloc_argv(settings, 4, "p")
    with pytest.raises(ValueError, match="mem_per_gpu"):
        SlurmSettings(mem_per_gpu="200 GB")


def test_a_closed_plan_missing_what_no_node_tells_is_refused_before_the_flow() -> None:
    plan = plans.load(QWEN)   # ships without the site's networking fields
    with pytest.raises(PlanError) as e:
        require_description_sources(plan)
    text = str(e.value)
    assert "systems.0.description.host_networking\n" in text and "systems.0.description.host_networking_topology" \
        in text
    assert "cooling" not in text and "host_memory_capacity" not in text   # given by the plan; detected on the node
    assert "give each one in the plan" in text


def test_a_closed_plan_takes_no_guess_from_what_its_node_did_not_tell() -> None:
    data = yaml.safe_load(QWEN.read_text())
    data["systems"][0]["description"] |= {"host_networking": "InfiniBand NDR 400 Gb/s",
                                          "host_networking_topology": "fat tree"}
    data["benchmarks"][0]["engine"]["options"]["version"] = "1.6.1"   # Dynamo is not installed on this host
    plan = plans.parse(data)
    require_description_sources(plan)   # nothing left that only the plan can give
    node = {"host_processor_model_name": "Neoverse-V2", "host_processors_per_node": "2",
            "host_processor_core_count": "72", "host_memory_capacity": "960 GB", "host_storage_capacity": "3.5 TB",
            "host_storage_type": "NVMe SSD", "operating_system": "Ubuntu 24.04", "host_network_card_count": "4",
            "other_software_stack": "Python 3.12"}
    with pytest.raises(PlanError) as e:
        describe_systems(plan, {"gb200x16-slurm": {k: v for k, v in node.items() if k != "host_storage_type"}})
    assert "a closed submission needs a real value for 1 field(s) that nothing detected: host_storage_type (now " \
           "'unknown', unset)" in str(e.value)
    assert "systems.0.description" in str(e.value)
    assert describe_systems(plan, {"gb200x16-slurm": node})["gb200x16-slurm"]["host_storage_type"] == "NVMe SSD"
    desc, sources = describe_sourced(division="closed", submitter="Podium", system_name="s", status="available",
                                     system_type="datacenter", number_of_nodes=4, framework="dynamo 1.6.1",
                                     overrides=plan.systems[0].description, host=node)
    assert gaps(desc, sources) == []
    assert sources["cooling"] == "plan" and sources["host_memory_capacity"] == "detected"
    del node["host_processor_core_count"]   # the default would be the flow host's core count: a guess
    desc, sources = describe_sourced(division="closed", submitter="Podium", system_name="s", status="available",
                                     system_type="datacenter", number_of_nodes=4, framework="dynamo 1.6.1",
                                     overrides=plan.systems[0].description, host=node)
    assert gaps(desc, sources) == ["host_processor_core_count"]


def test_a_job_too_short_for_the_plan_is_told_the_whole_sbatch(monkeypatch: pytest.MonkeyPatch) -> None:
    from tasks.ops import slurm_checks

    plan = plans.load(QWEN)
    monkeypatch.setattr(slurm_checks, "job_time_left", lambda env, job: 3600)
    [short] = slurm_checks._job_time(plan, plan.benchmarks[0].engine.slurm_settings(), 4, {}, "42")
    assert isinstance(short, PlanError)
    assert "Slurm job 42 has 01:00:00 left, but this plan needs 02:47:00" in str(short)
    assert short.fix and "--gpus-per-node=4 --mem=0 --exclusive --time=02:47:00 deployments/slurm/podium.sbatch run" \
        in short.fix
    monkeypatch.setattr(slurm_checks, "job_time_left", lambda env, job: None)   # unlimited
    assert slurm_checks._job_time(plan, plan.benchmarks[0].engine.slurm_settings(), 4, {}, "42") == []


def test_the_dry_run_lists_the_models_copy_on_each_node_that_reads_it(tmp_path: Path) -> None:
    """With engine.slurm.local_stage, a launch first copies the model onto each node whose processes read it (a step
    per node), and their argv names that copy; the dry run lists the steps and shows the argv as launched."""
    from tasks.serving import launch

    data = yaml.safe_load(QWEN.read_text())
    data["benchmarks"][0]["engine"]["slurm"]["local_stage"] = "/local/nvme/podium"
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(data))
    [review] = launch.reviews(plans.load(plan_file), tmp_path / "ws")
    model = data["benchmarks"][0]["model"]["source"]
    local = f"/local/nvme/podium/{Path(model).name}"
    copies = review["slurm"]["local_stage"]
    assert list(copies) == ["node0", "node1", "node2", "node3"]   # every node runs a worker that reads it
    for node, argv in copies.items():
        assert argv[:7] == ["srun", "--jobid=$JOB", "--job-name=podium-<launch>-local-stage", "--nodes=1",
                            f"--nodelist={node}", "--ntasks=1", "--overlap"]
        assert argv[-2:] == [model, local]
    workers = [p for p in review["processes"] if p["role"] in ("prefill", "decode")]
    assert workers and all(local in p["argv"] and model not in p["argv"] for p in workers)
    assert all(local in argv for name, argv in review["slurm"]["srun"].items()
               if name in {p["name"] for p in workers})
    text = launch.render([review])
    assert "  model copied onto node3 (verified against its manifest) before the engine starts: srun" in text
