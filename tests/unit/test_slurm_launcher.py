"""The Slurm launcher's pure parts: the exact salloc/srun argv it builds from settings and process specs, the
environment of Slurm's commands, the translation of Slurm's messages, and the validation of `engine.slurm`."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from submission.base.errors import LaunchError, PlanError
from submission.plan.model import EngineSpec
from submission.plan.slurm_options import SlurmSettings, settings_problems
from tasks.engines import HttpProbe, ProcessSpec
from tasks.launchers import launcher, slurm_stage
from tasks.launchers import slurm_cli as cli
from tasks.launchers.slurm import SlurmLauncher

PLANTED = "hf_plantedSrun0123456789"
SERVER = ProcessSpec(role="server", name="vllm-server", argv=("vllm", "serve", "/models/m", "--port", "8000"),
                     env={"VLLM_NIXL_SIDE_CHANNEL_PORT": "5601", "UCX_TLS": "rc,cuda_copy", "HF_TOKEN": PLANTED},
                     port=8000)


def test_a_process_without_gpus_overlaps_the_others() -> None:
    """The environment goes by name: every value (a token, a port, one holding a comma) stays off the command line;
    srun reads it from its own environment, which the launcher sets (tests/integration/test_slurm.py)."""
    argv = cli.srun_argv(SlurmSettings(), "42", SERVER, ["node3"], "podium-1a2b-vllm-server")
    assert argv == ["srun", "--jobid=42", "--job-name=podium-1a2b-vllm-server", "--nodes=1", "--nodelist=node3",
                    "--ntasks=1", "--overlap", "--immediate=120", "--unbuffered", "--kill-on-bad-exit=1",
                    "--export=ALL,HF_TOKEN,UCX_TLS,VLLM_NIXL_SIDE_CHANNEL_PORT",
                    "vllm", "serve", "/models/m", "--port", "8000"]
    review = cli.review(SlurmSettings(), [SERVER])   # what the dry run shows of the step
    assert review["srun"]["vllm-server"][10] == "--export=ALL,HF_TOKEN,UCX_TLS,VLLM_NIXL_SIDE_CHANNEL_PORT"
    assert PLANTED not in repr(review)


def test_a_gpu_process_takes_its_own_gpus() -> None:
    spec = ProcessSpec(role="prefill", name="prefill-1", argv=("python3", "-m", "dynamo.vllm"), gpus=2,
                       gpu_ids=(2, 3), env={"CUDA_VISIBLE_DEVICES": "2,3"}, node_index=1)
    argv = cli.srun_argv(SlurmSettings(cpus_per_gpu=8, step_timeout_s=30.5), "7", spec, ["gpu2"], "p-prefill-1")
    assert argv[6:12] == ["--exact", "--gpus=2", "--cpus-per-gpu=8", "--immediate=31", "--unbuffered",
                          "--kill-on-bad-exit=1"]
    assert "--overlap" not in argv
    assert argv[12] == "--export=ALL,CUDA_VISIBLE_DEVICES"   # by name, from srun's environment


def test_a_server_of_mpi_ranks_over_two_nodes() -> None:
    spec = ProcessSpec(role="server", name="trtllm-server", argv=("trtllm-llmapi-launch", "trtllm-serve", "/m"),
                       gpus=8, mpi_ranks=8, nodes=2)
    argv = cli.srun_argv(SlurmSettings(), "9", spec, ["n1", "n2"], "x")
    assert argv[3:11] == ["--nodes=2", "--nodelist=n1,n2", "--ntasks=8", "--ntasks-per-node=4", "--mpi=pmix",
                          "--exact", "--gpus-per-node=4", "--immediate=120"]


def test_pyxis_options_go_on_every_step() -> None:
    settings = SlurmSettings(container_image="nvcr.io#nvidia/tensorrt-llm/release:1.2.0",
                             container_mounts=("/lustre/models:/models:ro", "/scratch:/scratch"),
                             container_workdir="/work", container_name="trtllm", srun_args=("--network=sn_all",))
    spec = ProcessSpec(role="server", name="s", argv=("trtllm-serve", "/models/m"), cwd="/work")
    argv = cli.srun_argv(settings, "1", spec, ["n1"], "x")
    assert argv[argv.index("--export=ALL") + 1:] == [
        "--chdir=/work", "--container-image=nvcr.io#nvidia/tensorrt-llm/release:1.2.0",
        "--container-mounts=/lustre/models:/models:ro,/scratch:/scratch", "--container-workdir=/work",
        "--container-name=trtllm", "--container-readonly", "--no-container-mount-home", "--network=sn_all",
        "trtllm-serve", "/models/m"]


def test_the_allocation() -> None:
    settings = SlurmSettings(partition="gpu", account="mlperf", qos="high", constraint="h200",
                             nodelist=("gpu[01-04]",), gpus_per_node=4, time_limit="1-00:00:00",
                             allocation_timeout_s=300, salloc_args=("--switches=1",))
    assert cli.salloc_argv(settings, 4, "podium-1a2b") == [
        "salloc", "--no-shell", "--job-name=podium-1a2b", "--nodes=4", "--time=1-00:00:00", "--immediate=300",
        "--partition=gpu", "--account=mlperf", "--qos=high", "--constraint=h200", "--nodelist=gpu[01-04]",
        "--gpus-per-node=4", "--exclusive", "--switches=1"]


def test_sbatch_and_salloc_ask_for_the_same_allocation() -> None:
    """Podium inside one job (sbatch of podium.sbatch) holds what a login-node launch would salloc, memory included."""
    settings = SlurmSettings(partition="gb200", account="mlperf", gpus_per_node=4, mem="0", time_limit="02:15:00")
    sbatch = cli.sbatch_argv(settings, 4, "02:47:00", ["run", "plan.yaml"])
    assert sbatch == ["sbatch", "--nodes=4", "--partition=gb200", "--account=mlperf", "--gpus-per-node=4", "--mem=0",
                      "--exclusive", "--time=02:47:00", "deployments/slurm/podium.sbatch", "run", "plan.yaml"]
    salloc = cli.salloc_argv(settings, 4, "podium-1a2b")
    assert [a for a in salloc if a.startswith(("--nodes", "--partition", "--account", "--gpus", "--mem", "--excl"))] \
        == sbatch[1:7]
    assert "--mem=200G" in cli.sbatch_argv(settings.model_copy(update={"mem": "200G"}), 1, "60", [])
    assert not any(a.startswith("--mem") for a in cli.sbatch_argv(SlurmSettings(), 1, "60", []))


def test_slurm_commands_ignore_the_job_environment_podium_runs_in() -> None:
    base = {"PATH": "/usr/bin", "SLURM_JOB_ID": "5", "SLURM_NTASKS": "8", "SALLOC_PARTITION": "debug",
            "SRUN_CPUS_PER_TASK": "4", "SLURM_CONF": "/etc/slurm/site.conf"}
    assert cli.client_env(SlurmSettings(), base) == {"PATH": "/usr/bin", "SLURM_CONF": "/etc/slurm/site.conf"}
    assert cli.client_env(SlurmSettings(slurm_conf="/x/slurm.conf"), base)["SLURM_CONF"] == "/x/slurm.conf"


@pytest.mark.parametrize(("stderr", "what"), [
    ("salloc: error: Job submit/allocate failed: Node count specification invalid", "more nodes than"),
    ("salloc: error: Job submit/allocate failed: Requested node configuration is not available", "no node has"),
    ("srun: error: Unable to create step for job 6: Requested nodes are busy", "taken by other steps"),
    ("salloc: error: Unable to allocate resources: Requested nodes are busy", "not free in time"),
    ("slurmstepd-n1: error: execve(): /opt/x/trtllm-serve: No such file or directory", "could not run"),
    ("srun: error: Unable to create step for job 3: Job/step already completing or completed", "has ended"),
    ("squeue: error: Unable to contact slurm controller (connect failure)", "does not answer"),
    ("salloc: error: invalid partition specified: gpu-h200", "partition does not exist"),
])
def test_slurm_messages_become_what_to_fix(stderr: str, what: str) -> None:
    known = cli.explain(stderr)
    assert known is not None and what in known[0] and known[1]


def test_an_unknown_message_is_left_to_the_reader() -> None:
    assert cli.explain("Traceback (most recent call last):\nValueError: bad dtype") is None


def test_settings_errors_name_the_field_and_the_fix() -> None:
    problems = settings_problems({"nodes": 0, "time_limit": "4h", "contaner_image": "x",
                                  "srun_args": ["-N 2"], "container_mounts": ["/a"]}, "slurm")
    text = "\n".join(problems)
    assert "slurm.nodes: Input should be greater than or equal to 1" in text
    assert "slurm.time_limit: '4h' is not a Slurm time; use minutes, HH:MM:SS or D-HH:MM:SS" in text
    assert "slurm.contaner_image: unknown setting; did you mean 'container_image'?" in text
    assert "slurm.srun_args: Value error" not in text and "'-N 2': give long options" in text
    assert "'/a': a mount is SRC:DST[:FLAGS]" in text
    assert settings_problems({"nodes": 2}, "local") == [
        "slurm: only the slurm launcher reads it; set launcher: slurm or remove it"]


def test_the_plan_checks_the_slurm_section_when_it_loads() -> None:
    ok = EngineSpec(name="smoke", launcher="slurm", slurm={"partition": "gpu", "container_image": "img"})
    assert ok.slurm["partition"] == "gpu"
    with pytest.raises(ValueError, match=re.escape("slurm.exclusiv: unknown setting; did you mean 'exclusive'")):
        EngineSpec(name="smoke", launcher="slurm", slurm={"exclusiv": False})


def test_the_allocation_podium_runs_in(tmp_path: Path) -> None:
    inside = SlurmLauncher(tmp_path, {"allocation": "auto"}, environ={"SLURM_JOB_ID": "77", "PATH": "/usr/bin"})
    assert inside.inherited == "77" and "SLURM_JOB_ID" not in inside.env
    assert SlurmLauncher(tmp_path, {"allocation": "new"}, environ={"SLURM_JOB_ID": "77"}).inherited is None
    assert SlurmLauncher(tmp_path, {}, environ={}).inherited is None
    with pytest.raises(PlanError, match="does not run inside a Slurm job"):
        SlurmLauncher(tmp_path, {"allocation": "inherit"}, environ={})


def test_the_registry_and_bad_settings(tmp_path: Path) -> None:
    assert launcher("slurm", state_dir=tmp_path).name == "slurm"
    with pytest.raises(PlanError) as e:
        launcher("slurm", state_dir=tmp_path, settings={"gpus_per_nod": 4})
    assert "slurm.gpus_per_nod: unknown setting; did you mean 'gpus_per_node'?" in str(e.value)
    assert e.value.fix == "see docs/slurm.md for every engine.slurm field"
    assert HttpProbe("/health").accepts(200, "")   # the launcher judges probes as every launcher does


def test_the_review_shows_every_command_a_launch_would_run() -> None:
    worker = ProcessSpec(role="decode", name="decode-0", argv=("python3", "-m", "dynamo.vllm"), gpus=1, node_index=3)
    plan = cli.review(SlurmSettings(gpus_per_node=4, partition="gpu"), [SERVER, worker])
    assert plan["salloc"] == ["salloc", "--no-shell", "--job-name=podium-<launch>", "--nodes=4", "--time=04:00:00",
                              "--immediate=600", "--partition=gpu", "--gpus-per-node=4", "--exclusive"]
    steps = plan["srun"]
    assert isinstance(steps, dict) and list(steps) == ["vllm-server", "decode-0"]
    assert steps["decode-0"][:8] == ["srun", "--jobid=$JOB", "--job-name=podium-<launch>-decode-0", "--nodes=1",
                                     "--nodelist=node3", "--ntasks=1", "--exact", "--gpus=1"]
    assert cli.review(SlurmSettings(allocation="inherit"), [SERVER])["salloc"] is None


def _node_probe(host: str, count: int, environ: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The step a launch runs on each node to learn its address and free ports, run here as srun would run it."""
    argv = cli.port_finder_argv(SlurmSettings(), "1", "n", host, count, set(), "probe", 32767)
    script = argv[argv.index("-c") + 1:]
    env = {"PATH": os.environ["PATH"], **(environ or {})}
    return subprocess.run([sys.executable, "-c", *script], capture_output=True, text=True, env=env, check=False,
                          timeout=30)


def test_each_node_reports_its_ipv4_address_before_its_free_ports() -> None:
    done = _node_probe("127.0.0.1", 3)
    ip, *ports = done.stdout.split()
    assert done.returncode == 0 and ip == "127.0.0.1" and len(set(ports)) == 3
    assert all(20000 <= int(p) <= 32767 for p in ports)
    # a name is resolved on the node, to an address of its own: localhost, as srun runs it (the submitting host's
    # address in SLURM_LAUNCH_NODE_IPADDR names the route when the name resolves to loopback only)
    named = _node_probe("localhost", 0, {"SLURM_LAUNCH_NODE_IPADDR": "127.0.0.1"})
    assert (named.returncode, named.stdout.split()) == (0, ["127.0.0.1"])


def test_a_node_address_that_is_not_the_nodes_own_is_refused() -> None:
    other = _node_probe("192.0.2.7", 1)   # TEST-NET-1: on no interface here
    assert other.returncode != 0 and "192.0.2.7 is not an IPv4 address of this node" in other.stderr
    nowhere = _node_probe("no-such-node.invalid", 1)
    assert nowhere.returncode != 0 and "no IPv4 address of this node for no-such-node.invalid" in nowhere.stderr


def test_local_stage_settings_name_the_field_and_the_fix() -> None:
    assert SlurmSettings(local_stage="/local/nvme/{node}/").local_stage == "/local/nvme/{node}"
    text = "\n".join(settings_problems({"local_stage": "nvme/podium"}, "slurm")
                     + settings_problems({"local_stage": "/nvme/{host}"}, "slurm")
                     + settings_problems({"local_stage": "/local/nvme", "container_image": "img",
                                          "container_mounts": ["/local:/mnt"]}, "slurm"))
    assert "slurm.local_stage: 'nvme/podium' is not an absolute path" in text
    assert "slurm.local_stage: '/nvme/{host}': the only placeholder is {node}" in text
    assert ("slurm.local_stage: /local/nvme is not mounted in the engine's container at the same path; add it to "
            "container_mounts, e.g. /local/nvme:/local/nvme") in text
    assert not settings_problems({"local_stage": "/local/nvme/{node}", "container_image": "img",
                                  "container_mounts": ["/local:/local:rw"]}, "slurm")


def test_local_stage_substitutes_the_model_folder_per_node_and_refuses_one_process_on_two_folders() -> None:
    model = Path("/shared/stage/models/tiny-0123456789ab")
    argv = ("serve", str(model), "--tokenizer", f"{model}/tok", "--other", f"{model}x")
    specs = [ProcessSpec(role="server", name="a", argv=argv), ProcessSpec(role="server", name="b", argv=argv,
                                                                          node_index=1)]
    same = SlurmSettings(local_stage="/nvme")
    out = slurm_stage.localised(same, specs, model, ["n1", "n2"])
    assert out[1].argv == ("serve", "/nvme/tiny-0123456789ab", "--tokenizer", "/nvme/tiny-0123456789ab/tok",
                           "--other", f"{model}x")
    per_node = SlurmSettings(local_stage="/nvme/{node}")
    assert slurm_stage.localised(per_node, specs, model, ["n1", "n2"])[1].argv[1] == "/nvme/n2/tiny-0123456789ab"
    wide = [dataclasses.replace(specs[0], nodes=2, mpi_ranks=8)]
    assert slurm_stage.localised(same, wide, model, ["n1", "n2"])[0].argv[1] == "/nvme/tiny-0123456789ab"
    with pytest.raises(LaunchError, match=re.escape("a spans nodes n1, n2, and engine.slurm.local_stage=/nvme/{node} "
                                                    "names another folder on each")) as err:
        slurm_stage.localised(per_node, wide, model, ["n1", "n2"])
    assert "the same on every node (without {node})" in str(err.value)
