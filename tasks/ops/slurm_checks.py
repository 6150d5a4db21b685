"""Preflight on the nodes that will run a Slurm engine, before any engine starts (no GPU computes meanwhile):

- **architecture**: on every node of the engine, `uname -m` (the node's machine); the engine's container image
  (`engine.slurm.container_image`) holding a platform for it in its registry (tasks/ops/image_checks.py), before
  any step runs in it; and the engine's interpreter's own `platform.machine()` (in the engine's container when there
  is one), a short step. GB200 nodes are aarch64 (Grace); a venv built on an x86_64 login node fails there with
  "Exec format error", or, under binfmt emulation, runs emulated. Either way the check names the interpreter, the
  node and how to build it (docs/quickstart-slurm.md, step 1);
- **the engine's commands, on the nodes that run them**: every process of the engine as a launch places it (the
  backend's process specs: `trtllm-serve`, `PYTHON -m vllm.entrypoints.openai.api_server`, `PYTHON -m dynamo.vllm`,
  and Dynamo's etcd and nats-server on `options.services_node`), its command found on its node (a path, or a name
  on PATH) and the module a `python -m` runs importable there, in the engine's container (one short step a node, run
  by `engine.slurm.python`): not on the login node that runs the flow. A missing one names the option that names it;
- **system description**: submission/tree/host_facts.py's source run on node 0 of the engine by the nodes' Python
  (`engine.slurm.python`, no Podium needed there), so the description is the engine node's, not the flow host's;
- **time**: inside a job (`allocation: auto|inherit`), the job's time left (`squeue %L`) against what the plan
  needs of it (submission/budget/slurm_time.py); a login-node launch's `time_limit` is checked when the plan loads.

Inside a job the steps run in it; from a login node the checks take the engine's allocation as a launch would, for
the seconds they last, and give it back. Every problem is returned, not raised: one report with the host's and the
clusters' (tasks/ops/prerequisites.py).
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from submission.base.errors import CommandError, LaunchError, PlanError, PodiumError
from submission.budget.slurm_time import job_need, seconds, slurm_time
from submission.plan.model import BenchmarkSpec, Plan
from submission.plan.slurm_options import SlurmSettings
from submission.tree import host_facts
from tasks.engines import ProcessSpec, backend, service_fix
from tasks.engines.replicas import for_engine
from tasks.launchers import slurm_cli as cli
from tasks.ops.image_checks import mismatch, runtime_problems

ARCH = "import platform; print(platform.machine())"
# Prints each [command, module] of its JSON argument not found here: the command not a path or not on PATH, or its
# `python -m` module not importable by it.
FIND = """
import json, shutil, subprocess, sys
for command, module in json.loads(sys.argv[1]):
    found = shutil.which(command) is not None
    if found and module:
        probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)"
        found = subprocess.run([command, "-c", probe, module], capture_output=True).returncode == 0
    if not found:
        print(json.dumps([command, module]))
"""
ENGINE_VENV_FIX = ("build the engine's venv on a node of that architecture from the engines' lock "
                   "(docs/quickstart-slurm.md, step 1) and point engine.options.python at it")


def step_argv(settings: SlurmSettings, job: str, node: str, argv: list[str], name: str,
              container: bool = False) -> list[str]:
    """A short step on one node of the job, sharing its CPUs (--overlap), in the engine's container if asked."""
    return ["srun", f"--jobid={job}", f"--job-name={name}", "--nodes=1", f"--nodelist={node}", "--ntasks=1",
            "--overlap", f"--immediate={int(settings.step_timeout_s)}", *(cli.container_args(settings) if container
                                                                       else []), *argv]


def node_machines(settings: SlurmSettings, env: Mapping[str, str], job: str, nodes: list[str],
                  name: str) -> dict[str, str]:
    """node -> its machine (`uname -m`, a bare step on it)."""
    return {node: cli.run(step_argv(settings, job, node, ["uname", "-m"], name), env).strip() for node in nodes}


def check_architecture(settings: SlurmSettings, env: Mapping[str, str], job: str, machines: Mapping[str, str],
                       python: str, name: str) -> None:
    """The engine's interpreter built for each node's machine (`machines`) and running there; else LaunchError."""
    for node, machine in machines.items():
        try:
            built = cli.run(step_argv(settings, job, node, [python, "-c", ARCH], name, container=True), env).strip()
        except CommandError as e:
            raise LaunchError(f"the engine's interpreter engine.options.python={python} does not run on {node} "
                              f"(uname -m: {machine}): {e.output_tail[-500:]}", fix=ENGINE_VENV_FIX) from None
        if built != machine:
            raise LaunchError(f"the engine's interpreter engine.options.python={python} is built for {built}, but "
                              f"node {node} is {machine}", fix=ENGINE_VENV_FIX)


def commands_by_node(bench: BenchmarkSpec, state_dir: Path) -> dict[int, list[ProcessSpec]]:
    """node index -> the engine's processes that run there (one spanning nodes: on each), as a launch places them."""
    from tasks.serving.launch import model_dir_for, review_placement

    engine = bench.engine
    specs = for_engine(engine).processes(engine.config(), model_dir_for(engine, Path(bench.model.source)),
                                         review_placement(engine, state_dir), state_dir / "build")
    placed: dict[int, list[ProcessSpec]] = {}
    for spec in specs:
        for index in range(spec.node_index, spec.node_index + spec.nodes):
            placed.setdefault(index, []).append(spec)
    return placed


def command_of(spec: ProcessSpec) -> tuple[str, str | None]:
    """(the command a process runs, the module it runs when that is `PYTHON -m MODULE`)."""
    argv = spec.argv
    return argv[0], argv[2] if len(argv) > 2 and argv[1] == "-m" else None


def check_commands(settings: SlurmSettings, env: Mapping[str, str], job: str, node: str, index: int,
                   bench: BenchmarkSpec, specs: list[ProcessSpec], name: str) -> list[PodiumError]:
    """Each command the engine's processes on `node` run (and the module a `python -m` runs) found there, in the
    engine's container, by one step; a problem for each one missing, naming the option that names it, in the order
    the engine starts them (as `_on_nodes` lists those found: never by the paths' spelling)."""
    wanted = list(dict.fromkeys(command_of(s) for s in specs))
    argv = [settings.python, "-c", FIND, json.dumps(wanted)]
    out = cli.run(step_argv(settings, job, node, argv, name, container=True), env)
    missing = {tuple(json.loads(line)) for line in out.splitlines() if line.startswith("[")}
    services = backend(bench.engine.name).services(bench.engine.config())
    place = f"{node}, node {index} of Slurm job {job}"
    problems: list[PodiumError] = []
    for command, module in (c for c in wanted if c in missing):
        users = sorted(s.name for s in specs if command_of(s) == (command, module))
        option = next((o for o, c in services.items() if c == command), None)
        if option:
            problems.append(LaunchError(f"engine.{option}={command}: not found on {place}, where the engine starts "
                                        "it", fix=service_fix(option, command, node)))
            continue
        field = next((f"engine.options.{k}" for k in ("python", "cli")
                      if getattr(bench.engine.config(), k, None) == command), None)
        what = f"{command} -m {module}" if module else command
        problems.append(LaunchError(
            f"{what}{f' ({field})' if field else ''}: not found on {place}, where it runs {', '.join(users)}",
            fix=f"install {bench.engine.name} on every node of the allocation (or in engine.slurm.container_image)"
                + (f" and set {field} to its path there" if field else ", its commands on PATH")))
    return problems


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


def node_checks(plan: Plan, state_dir: Path | None = None, storage: str = "/", log: Callable[[str], object] = print,
                environ: Mapping[str, str] | None = None) -> tuple[dict[str, dict[str, str]], list[PodiumError]]:
    """The checks above for every benchmark whose engine runs under Slurm: (system -> facts of its engine's node 0,
    the first benchmark of a system describing it; every problem found, each naming what to fix)."""
    facts: dict[str, dict[str, str]] = {}
    problems: list[PodiumError] = []
    with tempfile.TemporaryDirectory(prefix="podium-preflight-") as tmp:
        for index, bench in enumerate(plan.benchmarks):
            if bench.engine.launcher != "slurm":
                continue
            try:
                problems += _on_nodes(plan, index, state_dir or Path(tmp), storage, log, facts,
                                      os.environ if environ is None else environ)
            except PodiumError as e:   # no allocation, a step Slurm would not run: the rest of this engine unchecked
                problems.append(e)
    return facts, problems


def _on_nodes(plan: Plan, index: int, state_dir: Path, storage: str, log: Callable[[str], object],
              facts: dict[str, dict[str, str]], environ: Mapping[str, str]) -> list[PodiumError]:
    """`node_checks` of benchmark `index`'s engine on its allocation (taken and given back here when not
    inherited)."""
    from tasks.serving.launch import make_launcher

    bench = plan.benchmarks[index]
    where: Any = make_launcher(bench.engine, state_dir)
    nodes, _ = for_engine(bench.engine).demand(bench.engine.config())
    placed = commands_by_node(bench, state_dir)
    alloc = where.allocate(nodes)
    problems: list[PodiumError] = []
    try:
        name = f"{where.tag}-preflight"
        if where.inherited:
            problems += _job_time(plan, where.settings, nodes, where.env, alloc.job_id)
        machines = node_machines(where.settings, where.env, alloc.job_id, list(alloc.nodes[:nodes]), name)
        image = where.settings.container_image
        if image:   # before any step runs in it
            at = f"benchmarks.{index}.engine.slurm.container_image"
            wrong = mismatch(image, machines, environ, at) + runtime_problems(image, bench.engine.platform(),
                                                                               environ, at)
            problems += wrong
            if wrong:
                return problems
            log(f"{bench.key}: {image} holds a platform for {', '.join(sorted(set(machines.values())))}")
        python = _python(bench)
        if python:
            try:
                check_architecture(where.settings, where.env, alloc.job_id, machines, python, name)
                log(f"{bench.key}: {python} runs natively on "
                    + ", ".join(f"{n} ({m})" for n, m in machines.items()))
            except LaunchError as e:
                problems.append(e)
        for i, specs in sorted(placed.items()):
            node = alloc.nodes[i]
            missing = check_commands(where.settings, where.env, alloc.job_id, node, i, bench, specs, name)
            problems += missing
            if not missing:   # in the engine's start order, as check_commands looks for them
                log(f"{bench.key}: " + ", ".join(dict.fromkeys(" -m ".join(filter(None, command_of(s))) for s in specs))
                    + f" found on {node} (node {i})")
        if bench.system not in facts:
            facts[bench.system] = detect_on_node(where.settings, where.env, alloc.job_id, alloc.nodes[0],
                                                 storage, name)
            log(f"{bench.system}: described from {alloc.nodes[0]}, node 0 of Slurm job {alloc.job_id}")
    finally:
        where.release()
    return problems


def _job_time(plan: Plan, settings: SlurmSettings, nodes: int, env: Mapping[str, str], job: str) -> list[PodiumError]:
    needed = job_need(plan)
    left = job_time_left(env, job)
    if left is None or left >= needed:
        return []
    again = cli.sbatch_argv(settings, settings.nodes or nodes, slurm_time(needed), ["run", "PLAN.yaml"])
    return [PlanError(f"Slurm job {job} has {slurm_time(left)} left, but this plan needs {slurm_time(needed)} of "
                      f"it (`podium launch PLAN --dry-run` shows each benchmark's share)",
                      fix=f"submit it again with --time={slurm_time(needed)} or more: {shlex.join(again)}")]
