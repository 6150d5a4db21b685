"""Slurm's command line as the Slurm launcher uses it: argv for `salloc` and `srun` built from the typed settings and
process specs, the query commands, and Slurm's error messages translated into errors that say what to fix.

Facts measured on Slurm 22.05 (Debian 12) with the local cluster of deployments/slurm, which back the choices here:
- `srun --overlap --gpus=N` shares GPUs between steps: two such steps on one node both got GPUs 0,1. A GPU step
  therefore runs with `--exact --gpus=N` (not `--overlap`): Slurm then gives concurrent steps distinct GPUs (0,1
  and 2,3) and refuses a step when none are left. Steps without GPUs run with `--overlap`.
- Slurm sets CUDA_VISIBLE_DEVICES in every step that holds GPUs, over any value passed with `--export` (on AMD nodes
  ROCR_VISIBLE_DEVICES, as gres.conf says: submission/plan/platforms.py `slurm_env`).
- `--export=ALL,NAME` passes NAME's value from srun's own environment. Every value of a process's environment
  goes that way, named on the command line and set in srun's environment, so no value shows in `ps` or a log
  (submission/plan/secret_env.py); `--export` would also split a value holding a comma.
"""

from __future__ import annotations

import math
import re
import subprocess
from collections.abc import Mapping, Sequence

from submission.base.errors import CommandError, LaunchError
from submission.plan.platforms import NVIDIA, Platform
from submission.plan.slurm_options import SlurmSettings
from tasks.engines import ProcessSpec
from tasks.launchers import gpu_sampler

QUERY_TIMEOUT_S = 60
# Inputs srun/salloc read from the environment (SLURM_*, SALLOC_*, SRUN_*): inside a job they would silently change
# the options Podium gives. They are dropped from the commands' environment; SLURM_CONF is kept.
SCRUBBED = ("SLURM_", "SALLOC_", "SRUN_", "SBATCH_")

# (pattern in Slurm's stderr, what it means, what to do): the first match wins.
KNOWN: tuple[tuple[str, str, str], ...] = (
    (r"Unable to contact slurm controller|Zero Bytes were transmitted|Connection refused",
     "the Slurm controller does not answer",
     "check slurm_conf (SLURM_CONF) and that slurmctld runs (`scontrol ping`); for the local test cluster run "
     "deployments/slurm/local-cluster.sh up"),
    (r"Could not establish a configuration source", "the Slurm commands here find no slurm.conf",
     "set engine.slurm.slurm_conf (or SLURM_CONF) to the cluster's slurm.conf, or run Podium on a host of the "
     "cluster"),
    (r"DUE TO TIME LIMIT|already completing or completed|Invalid job id specified",
     "the allocation has ended", "raise engine.slurm.time_limit; a later launch takes a new allocation"),
    (r"Unable to create step.*busy|step creation temporarily disabled",
     "the step's GPUs or CPUs on its node are taken by other steps",
     "give the processes distinct GPUs, or allocate more (engine.slurm.gpus_per_node)"),
    (r"Node count specification invalid",
     "the allocation asks for more nodes than the partition has",
     "lower engine.slurm.nodes (or the topology's nodes), or pick a larger partition (`sinfo -s`)"),
    (r"Requested node configuration is not available",
     "no node has what was asked (GPUs, CPUs, features)",
     "check engine.slurm.gpus_per_node, constraint and partition against `sinfo -o '%P %D %c %G %f'`"),
    (r"Invalid node name specified",
     "a node in the node list does not exist",
     "fix engine.slurm.nodelist (`sinfo -N` lists the nodes)"),
    (r"[Ii]nvalid partition", "the partition does not exist", "fix engine.slurm.partition (`sinfo -s`)"),
    (r"Invalid account", "the account is unknown or may not use this partition",
     "fix engine.slurm.account (`sacctmgr show assoc user=$USER`)"),
    (r"Invalid qos|QOSMax|violates accounting/QOS policy", "the request breaks a QOS or association limit",
     "lower nodes, GPUs or time_limit, or use another engine.slurm.qos"),
    (r"Requested time limit is invalid", "the time limit is beyond the partition's",
     "lower engine.slurm.time_limit (`sinfo -o '%P %l'`)"),
    (r"Invalid generic resource|Invalid GRES|gres.*not configured",
     "the cluster has no such GPUs (GRES) on these nodes",
     "set engine.slurm.gpus_per_node to what `sinfo -o '%N %G'` shows, or 0 on CPU nodes"),
    (r"Unable to allocate resources|Requested nodes are busy|queued and waiting",
     "the nodes were not free in time",
     "wait for free nodes or raise engine.slurm.allocation_timeout_s; `squeue` shows who holds them"),
    (r"pyxis|enroot|container-image", "pyxis could not start the container",
     "check engine.slurm.container_image (pullable from the nodes) and that pyxis is installed"),
    (r"execve\(\)", "the command could not run on the node",
     "install the engine on every node (or in engine.slurm.container_image) and check its path"),
)


def explain(text: str) -> tuple[str, str] | None:
    """(what it means, what to do) for the first known Slurm error in `text`."""
    for pattern, what, fix in KNOWN:
        if re.search(pattern, text):
            return what, fix
    return None


def client_env(settings: SlurmSettings, base: Mapping[str, str]) -> dict[str, str]:
    """The environment of Slurm's commands: `base` without the option-changing SLURM_* inputs, with SLURM_CONF."""
    env = {k: v for k, v in base.items() if not k.startswith(SCRUBBED)}
    conf = settings.slurm_conf or base.get("SLURM_CONF")
    if conf:
        env["SLURM_CONF"] = conf
    return env


def run(argv: Sequence[str], env: Mapping[str, str], timeout_s: float = QUERY_TIMEOUT_S) -> str:
    """stdout of a Slurm command; a failure raises CommandError with Slurm's message and the fix."""
    try:
        done = subprocess.run(list(argv), env=dict(env), capture_output=True, text=True,  # noqa: S603
                              timeout=timeout_s, check=False)
    except FileNotFoundError:
        raise LaunchError(f"{argv[0]} is not installed here",
                          fix="run Podium on a host with the Slurm client commands (slurm-client)") from None
    except subprocess.TimeoutExpired:
        raise CommandError(argv, -1, f"no answer in {timeout_s:.0f} s",
                           fix="check that slurmctld answers (`scontrol ping`)") from None
    if done.returncode != 0:
        known = explain(done.stderr)
        raise CommandError(argv, done.returncode, done.stderr.strip()[-2000:],
                           fix=f"{known[0]}: {known[1]}" if known else "read Slurm's message above")
    return done.stdout


def hostnames(nodelist: str, env: Mapping[str, str]) -> list[str]:
    """`node[1-3],gpu7` -> its node names, in Slurm's order."""
    return run(["scontrol", "show", "hostnames", nodelist], env).split()


SBATCH_SCRIPT = "deployments/slurm/podium.sbatch"   # Podium inside one job (docs/slurm.md)


def allocation_fields(settings: SlurmSettings, nodes: int) -> list[tuple[str, str]]:
    """What an allocation holds, each option with the `engine.slurm` field it comes from ("nodes": `nodes`), the same
    for `salloc` (a launch from a login node) and `sbatch` (Podium inside a job): nodes, where (partition, account,
    ...), GPUs and memory per node, exclusive nodes."""
    s = settings
    fields = [("nodes", f"--nodes={nodes}")]
    for flag, value in (("partition", s.partition), ("account", s.account), ("qos", s.qos),
                        ("reservation", s.reservation), ("constraint", s.constraint)):
        if value:
            fields.append((flag, f"--{flag}={value}"))
    if s.nodelist:
        fields.append(("nodelist", f"--nodelist={','.join(s.nodelist)}"))
    if s.gpus_per_node:
        fields.append(("gpus_per_node", f"--gpus-per-node={s.gpus_per_node}"))
    if s.mem is not None:
        fields.append(("mem", f"--mem={s.mem}"))
    if s.exclusive:
        fields.append(("exclusive", "--exclusive"))
    return fields


def allocation_args(settings: SlurmSettings, nodes: int) -> list[str]:
    """The options of `allocation_fields`."""
    return [arg for _, arg in allocation_fields(settings, nodes)]


def salloc_argv(settings: SlurmSettings, nodes: int, job_name: str) -> list[str]:
    s = settings
    base = allocation_args(s, nodes)
    return ["salloc", "--no-shell", f"--job-name={job_name}", base[0], f"--time={s.time_limit}",
            f"--immediate={s.allocation_timeout_s}", *base[1:], *s.salloc_args]


def sbatch_argv(settings: SlurmSettings, nodes: int, time: str, podium_args: Sequence[str]) -> list[str]:
    """`sbatch` of deployments/slurm/podium.sbatch for a plan whose engine runs in the job (`allocation: auto` or
    `inherit`): the engine's allocation options, and `time` (what the whole plan needs of the job). Given on the
    command line, they win over the script's #SBATCH defaults."""
    return ["sbatch", *allocation_args(settings, nodes), f"--time={time}", SBATCH_SCRIPT, *podium_args]


def export_arg(env: Mapping[str, str]) -> str:
    """`--export=ALL,NAME,...`: the names alone; srun reads each value from its own environment, where the launcher
    puts the process's env."""
    return "--export=" + ",".join(["ALL", *sorted(env)])


def container_args(s: SlurmSettings) -> list[str]:
    """The pyxis options of every step (none without `container_image`)."""
    if not s.container_image:
        return []
    argv = [f"--container-image={s.container_image}"]
    if s.container_mounts:
        argv.append(f"--container-mounts={','.join(s.container_mounts)}")
    if s.container_workdir:
        argv.append(f"--container-workdir={s.container_workdir}")
    if s.container_name:
        argv.append(f"--container-name={s.container_name}")
    argv.append("--container-writable" if s.container_writable else "--container-readonly")
    argv.append("--container-mount-home" if s.container_mount_home else "--no-container-mount-home")
    return argv


def srun_argv(settings: SlurmSettings, job_id: str, spec: ProcessSpec, nodes: Sequence[str],
              step_name: str) -> list[str]:
    """The `srun` job step of one process spec on its node(s) of the allocation."""
    ranks = max(1, spec.mpi_ranks)
    argv = ["srun", f"--jobid={job_id}", f"--job-name={step_name}", f"--nodes={len(nodes)}",
            f"--nodelist={','.join(nodes)}", f"--ntasks={ranks}"]
    if ranks > 1:
        argv += [f"--ntasks-per-node={math.ceil(ranks / len(nodes))}", f"--mpi={settings.mpi}"]
    if spec.gpus > 0:
        # not --overlap: overlapping steps share GPUs (see the module docstring); --exact takes only what it asks
        argv.append("--exact")
        argv.append(f"--gpus-per-node={math.ceil(spec.gpus / len(nodes))}" if len(nodes) > 1
                    else f"--gpus={spec.gpus}")
        if settings.cpus_per_gpu:
            argv.append(f"--cpus-per-gpu={settings.cpus_per_gpu}")
        if settings.mem_per_gpu:
            argv.append(f"--mem-per-gpu={settings.mem_per_gpu}")
    else:
        argv.append("--overlap")
    # a step Slurm cannot create in time (its GPUs taken) fails with Slurm's reason instead of waiting for ever
    argv += [f"--immediate={math.ceil(settings.step_timeout_s)}", "--unbuffered", "--kill-on-bad-exit=1",
             export_arg(spec.env)]
    if spec.cwd:
        argv.append(f"--chdir={spec.cwd}")
    return argv + container_args(settings) + list(settings.srun_args) + list(spec.argv)


# Run on a node (bare, not in the container): bind N ports on the node's address, skipping ones already handed out,
# and print them; under max_port (> 0) when the engine cannot take a higher one, else the kernel's choice. The sockets
# stay bound until all N are found, so the N differ.
# Runs on a node (as a short step there): prints the node's IPv4 address, then `count` ports free on it.
# Dynamo and etcd bind and advertise IP literals only, while a node's NodeAddr is usually a name: the name is resolved
# on the node itself, and an address counts only if it is on one of the node's interfaces (a bind to it succeeds).
# A name that resolves to loopback only there (Debian's `127.0.1.1 <hostname>`) or to nobody's address falls back to
# the node's address on its route to the submitting host (srun's SLURM_LAUNCH_NODE_IPADDR).
PORT_FINDER = """
import ipaddress, os, random, socket, sys
name, count, top = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
skip = {int(p) for p in sys.argv[4].split(",") if p}

def here(ip):
    with socket.socket() as s:
        try:
            s.bind((ip, 0))
        except OSError:
            return False
    return True

def route_to(peer):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((peer, 9))
        except OSError:
            return None
        return s.getsockname()[0]

def ipv4():
    try:
        literal = ipaddress.ip_address(name)
    except ValueError:
        literal = None
    if literal is not None:
        if literal.version == 4 and here(name):
            return name
        sys.exit(f"{name} is not an IPv4 address of this node")
    try:
        found = sorted({a[4][0] for a in socket.getaddrinfo(name, None, socket.AF_INET)})
    except OSError:
        found = []
    wide = [ip for ip in found if not ipaddress.ip_address(ip).is_loopback and here(ip)]
    if wide:
        return wide[0]
    launch = os.environ.get("SLURM_LAUNCH_NODE_IPADDR")
    ip = route_to(launch) if launch else None
    if ip and here(ip):
        return ip
    if not launch and found and here(found[0]):   # loopback only, outside srun: one machine
        return found[0]
    sys.exit(f"no IPv4 address of this node for {name}: it resolves to {', '.join(found) or 'nothing'} here"
             + (f" and no route to the submitting host {launch}" if launch else ""))

ip = ipv4()
tries = random.sample(range(20000, top + 1), k=top - 19999) if top else [0] * 1000
held, found = [], []
for port in tries:
    if len(found) == count:
        break
    s = socket.socket()
    try:
        s.bind((ip, port))
    except OSError:
        s.close()
        continue
    held.append(s)
    if s.getsockname()[1] not in skip:
        found.append(s.getsockname()[1])
else:
    if len(found) < count:
        sys.exit(f"found {len(found)} of {count} free ports on {ip}" + (f" under {top}" if top else ""))
print(" ".join(map(str, [ip, *found])))
"""


def port_finder_argv(settings: SlurmSettings, job_id: str, node: str, host: str, count: int, skip: set[int],
                     step_name: str, max_port: int | None = None) -> list[str]:
    return ["srun", f"--jobid={job_id}", f"--job-name={step_name}", "--nodes=1", f"--nodelist={node}",
            "--ntasks=1", "--overlap", settings.python, "-c", PORT_FINDER, host, str(count), str(max_port or 0),
            ",".join(map(str, sorted(skip)))]


def sampler_argv(settings: SlurmSettings, job_id: str, node: str, gpus: int, step_name: str,
                 platform: Platform = NVIDIA) -> list[str]:
    """The GPU sampler's step on one node (tasks/launchers/gpu_sampler.py), bare as the port finder: `--overlap`
    with the `gpus` the engine's steps hold there, so it sees them (a cgroup hides GPUs a step was not given) without
    taking them from anyone (an overlapping step shares what it holds, see the module's doc); it asks the node's GPUs
    with its `platform`'s tool (nvidia-smi, amd-smi)."""
    return ["srun", f"--jobid={job_id}", f"--job-name={step_name}", "--nodes=1", f"--nodelist={node}",
            "--ntasks=1", "--overlap", *([f"--gpus={gpus}"] if gpus else []),
            f"--immediate={math.ceil(settings.step_timeout_s)}", "--unbuffered",
            *gpu_sampler.argv(settings.python, platform.name)]


def held_gpus(specs: Sequence[ProcessSpec], nodes: Sequence[str]) -> dict[str, int]:
    """The GPUs the specs' steps hold on each node they run on (of the allocation's `nodes`), in node order of first
    use: what each node's GPU sampler step asks for."""
    held: dict[str, int] = {}
    for spec in specs:
        span = nodes[spec.node_index:spec.node_index + spec.nodes]
        for node in span:
            held[node] = held.get(node, 0) + math.ceil(spec.gpus / len(span))
    return held


def review(settings: SlurmSettings, specs: Sequence[ProcessSpec], platform: Platform = NVIDIA) -> dict[str, object]:
    """What a launch would run, for `podium launch --dry-run`: the salloc (unless Podium runs inside a job), each
    process's srun and each engine node's GPU sampler step (its `platform`'s tool), with `$JOB` for the job id and
    `node<i>` for the i-th node of the allocation."""
    nodes = max((s.node_index + s.nodes for s in specs), default=1)
    names = [f"node{i}" for i in range(max(nodes, settings.nodes or 0))]
    steps = {s.name: srun_argv(settings, "$JOB", s, names[s.node_index:s.node_index + s.nodes],
                               f"{settings.job_name}-<launch>-{s.name}") for s in specs}
    samplers = {node: sampler_argv(settings, "$JOB", node, gpus, f"{settings.job_name}-<launch>-gpus-{node}",
                                   platform)
                for node, gpus in held_gpus(specs, names).items()}
    salloc = None if settings.allocation == "inherit" else \
        salloc_argv(settings, settings.nodes or nodes, f"{settings.job_name}-<launch>")
    return {"salloc": salloc, "srun": steps, "samplers": samplers}
