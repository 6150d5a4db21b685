"""Preflight on the nodes that will run a Slurm engine, before any engine starts (no GPU computes meanwhile):

- **architecture**: on every node of the engine, `uname -m` (the node's machine) and the engine's interpreter's own
  `platform.machine()` (in the engine's container when there is one), each a short step. GB200 nodes are aarch64
  (Grace); a venv built on an x86_64 login node fails there with "Exec format error", or, under binfmt emulation,
  runs emulated. Either way the check names the interpreter, the node and how to build it (docs/quickstart-slurm.md,
  step 1);
- **the commands the engine starts beside itself** (Dynamo's etcd and nats-server, `EngineBackend.services`): found
  on node 0, where the engine starts them, by the engine's interpreter in the engine's container (a short step);
- **system description**: submission/tree/host_facts.py's source run on node 0 of the engine by the nodes' Python
  (`engine.slurm.python`, no Podium needed there), so the description is the engine node's, not the flow host's;
- **time**: inside a job (`allocation: auto|inherit`), the job's time left (`squeue %L`) against what the plan
  needs of it (submission/budget/slurm_time.py); a login-node launch's `time_limit` is checked when the plan loads.

Inside a job the steps run in it; from a login node the checks take the engine's allocation as a launch would, for
the seconds they last, and give it back.
"""

from __future__ import annotations

import shlex
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from submission.base.errors import CommandError, LaunchError, PlanError
from submission.budget.slurm_time import job_need, seconds, slurm_time
from submission.plan.model import BenchmarkSpec, Plan
from submission.plan.slurm_options import SlurmSettings
from submission.tree import host_facts
from tasks.engines import backend, service_fix
from tasks.launchers import slurm_cli as cli

ARCH = "import platform; print(platform.machine())"
MISSING = "import shutil, sys; print(' '.join(c for c in sys.argv[1:] if shutil.which(c) is None))"
ENGINE_VENV_FIX = ("build the engine's venv on a node of that architecture from the engines' lock "
                   "(docs/quickstart-slurm.md, step 1) and point engine.options.python at it")


def step_argv(settings: SlurmSettings, job: str, node: str, argv: list[str], name: str,
              container: bool = False) -> list[str]:
    """A short step on one node of the job, sharing its CPUs (--overlap), in the engine's container if asked."""
    return ["srun", f"--jobid={job}", f"--job-name={name}", "--nodes=1", f"--nodelist={node}", "--ntasks=1",
            "--overlap", f"--immediate={int(settings.step_timeout_s)}", *(cli.container_args(settings) if container
                                                                       else []), *argv]


def check_architecture(settings: SlurmSettings, env: Mapping[str, str], job: str, nodes: list[str], python: str,
                       name: str) -> dict[str, str]:
    """node -> its machine, once the engine's interpreter is known to be built for it there; else LaunchError."""
    machines = {}
    for node in nodes:
        machine = cli.run(step_argv(settings, job, node, ["uname", "-m"], name), env).strip()
        try:
            built = cli.run(step_argv(settings, job, node, [python, "-c", ARCH], name, container=True), env).strip()
        except CommandError as e:
            raise LaunchError(f"the engine's interpreter engine.options.python={python} does not run on {node} "
                              f"(uname -m: {machine}): {e.output_tail[-500:]}", fix=ENGINE_VENV_FIX) from None
        if built != machine:
            raise LaunchError(f"the engine's interpreter engine.options.python={python} is built for {built}, but "
                              f"node {node} is {machine}", fix=ENGINE_VENV_FIX)
        machines[node] = machine
    return machines


def check_services(settings: SlurmSettings, env: Mapping[str, str], job: str, node: str, python: str,
                   services: Mapping[str, str], name: str) -> None:
    """Each command of `services` (option -> command) found on `node` where the engine's steps run; else
    LaunchError naming every missing one and its option."""
    argv = [python, "-c", MISSING, *services.values()]
    missing = set(cli.run(step_argv(settings, job, node, argv, name, container=True), env).split())
    lost = [f"engine.{option}={command}" for option, command in services.items() if command in missing]
    if lost:
        raise LaunchError(f"{', '.join(lost)}: not found on {node}, node 0 of Slurm job {job}, where the engine starts "
                          f"{'them' if len(lost) > 1 else 'it'}",
                          fix="; ".join(service_fix(o, services[o], node) for o in services
                                        if services[o] in missing))


def detect_on_node(settings: SlurmSettings, env: Mapping[str, str], job: str, node: str, storage: str,
                   name: str) -> dict[str, str]:
    """The node's facts by description field (submission/tree/host_facts.py run there by `engine.slurm.python`)."""
    out = cli.run(step_argv(settings, job, node, [settings.python, "-c", host_facts.script(), storage], name), env)
    try:
        return host_facts.parse_facts(out)
    except ValueError as e:
        raise LaunchError(f"describing {node}: {e}", fix="run the step by hand to see why: srun --nodes=1 "
                                                         f"--nodelist={node} {settings.python} -c '...'") from None


def job_time_left(env: Mapping[str, str], job: str) -> int | None:
    """Seconds the job has left (`squeue %L`); None when unlimited."""
    left = cli.run(["squeue", "--noheader", f"--jobs={job}", "--format=%L"], env).strip()
    return None if left in ("UNLIMITED", "NOT_SET", "INVALID") else seconds(left)


def _python(bench: BenchmarkSpec) -> str | None:
    return getattr(bench.engine.config(), "python", None)


def node_checks(plan: Plan, state_dir: Path | None = None, storage: str = "/",
                log: Callable[[str], object] = print) -> dict[str, dict[str, str]]:
    """The checks above for every benchmark whose engine runs under Slurm; returns system -> facts of its engine's
    node 0 (the first benchmark of a system describes it). Raises PlanError or LaunchError naming what to fix."""
    from tasks.serving.launch import make_launcher

    facts: dict[str, dict[str, str]] = {}
    benches = [b for b in plan.benchmarks if b.engine.launcher == "slurm"]
    with tempfile.TemporaryDirectory(prefix="podium-preflight-") as tmp:
        for bench in benches:
            where: Any = make_launcher(bench.engine, state_dir or Path(tmp))
            nodes, _ = backend(bench.engine.name).demand(bench.engine.config())
            alloc = where.allocate(nodes)
            try:
                name = f"{where.tag}-preflight"
                if where.inherited:
                    _check_job_time(plan, where.settings, nodes, where.env, alloc.job_id)
                python = _python(bench)
                if python:
                    machines = check_architecture(where.settings, where.env, alloc.job_id,
                                                  list(alloc.nodes[:nodes]), python, name)
                    where_ = ", ".join(f"{n} ({m})" for n, m in machines.items())
                    log(f"{bench.key}: {python} runs natively on {where_}")
                services = backend(bench.engine.name).services(bench.engine.config())
                if services:
                    check_services(where.settings, where.env, alloc.job_id, alloc.nodes[0],
                                   python or where.settings.python, services, name)
                    log(f"{bench.key}: {', '.join(services.values())} found on {alloc.nodes[0]} (node 0)")
                if bench.system not in facts:
                    facts[bench.system] = detect_on_node(where.settings, where.env, alloc.job_id, alloc.nodes[0],
                                                         storage, name)
                    log(f"{bench.system}: described from {alloc.nodes[0]}, node 0 of Slurm job {alloc.job_id}")
            finally:
                where.release()
    return facts


def _check_job_time(plan: Plan, settings: SlurmSettings, nodes: int, env: Mapping[str, str], job: str) -> None:
    needed = job_need(plan)
    left = job_time_left(env, job)
    if left is not None and left < needed:
        again = cli.sbatch_argv(settings, settings.nodes or nodes, slurm_time(needed), ["run", "PLAN.yaml"])
        raise PlanError(f"Slurm job {job} has {slurm_time(left)} left, but this plan needs {slurm_time(needed)} of "
                        f"it (`podium launch PLAN --dry-run` shows each benchmark's share)",
                        fix=f"submit it again with --time={slurm_time(needed)} or more: {shlex.join(again)}")
