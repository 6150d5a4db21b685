"""The Slurm launcher: one allocation, one `srun` job step per process on its node, readiness by HTTP probes against
each node's address, and `scancel` of the steps, then of the allocation, by the ids it recorded.

The allocation is taken with `salloc --no-shell` when the first placement is asked for: salloc returns as soon as
Slurm grants it (or fails at once with the controller's reason), holds no process on any node, and names the job;
an sbatch'd holder job would need a placeholder script on the first node and polling until it runs. When Podium
itself runs inside a job (`sbatch deployments/slurm/podium.sbatch`), the launcher uses that job instead and never
cancels it (`allocation: auto|inherit`).

Beside the engine, one GPU sampler step per node (tasks/launchers/gpu_sampler.py) prints that node's GPU figures,
which srun brings to `<log_dir>/gpus-<node>.jsonl` on this host for each run's telemetry; it stops with the engine.

With `engine.slurm.local_stage`, one short step per node that reads the model first copies the staged model onto
the node's local disk, verified, and the engine reads it there (tasks/launchers/slurm_stage.py).

An engine's replicas (`replicas`) run as one step per node, a supervisor that starts the node's replicas
(tasks/launchers/slurm_replicas.py), each judged ready on its own. With `head: own-node`, the node Podium itself runs
on, when it is one of the allocation's (Podium inside the job), serves no replica: it is left out of the nodes.

A short step on each node finds its IPv4 address (its NodeAddr resolved there: Dynamo and etcd bind and advertise IP
literals only) and ports free on it; ports differ across the deployment (nodes of a test cluster share one
address). Each step's output goes to `<log_dir>/<name>.log` through srun, forwarded line by line to the run logger.
A step's environment is named on srun's command line (`--export=ALL,NAME,...`) and its values set in srun's own
environment, so that none shows in `ps`, the launch log or the dry run.
The allocation and the step ids are recorded under the state folder, so a later launch cancels what a killed run
left behind (after checking that the job still carries the recorded name).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from submission.base.errors import CommandError, LaunchError, PlanError, PodiumError
from submission.base.files import tail
from submission.plan.platforms import NVIDIA, Platform
from submission.plan.replicas import Layout
from submission.plan.secret_env import shown_env
from submission.plan.slurm_options import SlurmSettings, settings_problems
from tasks.engines import Node, Placement, ProcessSpec, Watched, watched, write_files
from tasks.launchers import Launcher, slurm_replicas, slurm_stage
from tasks.launchers import slurm_cli as cli
from tasks.launchers.processes import TAIL_LINES, forward_log, wait_for_probes

Logger = logging.Logger | logging.LoggerAdapter
POLL_S = 0.5


@dataclass
class Allocation:
    job_id: str
    nodes: tuple[str, ...]       # node names, in Slurm's order: node_index i of a spec is nodes[i]
    hosts: tuple[str, ...]       # each one's NodeAddr (often a name; placement resolves it on the node)
    owned: bool                  # taken by this launcher, so cancelled by it
    tag: str                     # the name of the launch: the job's (when owned), prefix of its steps' names
    state_dir: Path
    head: str | None = None      # the node kept for the head (engine.replicas.head own-node): not among `nodes`

    @property
    def record(self) -> Path:
        return self.state_dir / f"slurm-{self.tag}.json"

    @property
    def workdir(self) -> Path:
        """The deployment's private folder for config files; on a real cluster the workspace must be on a shared
        filesystem, since the processes read these files on their nodes."""
        return self.state_dir / "slurm-work" / f"{self.job_id}-{self.tag}"


@dataclass
class Step:
    spec: ProcessSpec
    srun: subprocess.Popen
    log: Path
    name: str                    # the step's job name, unique to this launch
    nodes: tuple[str, ...]
    step_id: str | None = None   # "<job>.<step>" once Slurm lists it
    srun_job: str = ""           # the job it is a step of

    @property
    def label(self) -> str:
        return f"{self.spec.name} (step {self.step_id or '?'} on {','.join(self.nodes)})"


@dataclass
class SlurmDeployment:
    processes: list[ProcessSpec]
    allocation: Allocation
    steps: list[Step] = field(default_factory=list)
    samplers: list[Step] = field(default_factory=list)   # the GPU samplers, one per node: never judged alive or ready
    stop_forwarding: threading.Event = field(default_factory=threading.Event)
    ready: threading.Event = field(default_factory=threading.Event)   # set when every probe passed
    logger: Logger = field(default_factory=lambda: logging.getLogger("podium.slurm"))   # the launch's: what stop did
    exits: slurm_replicas.Exits = field(default_factory=slurm_replicas.Exits)   # replicas the supervisors saw end


def _fix(text: str, default: str) -> str:
    known = cli.explain(text)
    return f"{known[0]}: {known[1]}" if known else default


def _failure(step: Step, code: int, when: str) -> LaunchError:
    text = tail(step.log, TAIL_LINES)
    if step.step_id is None:   # it ended before squeue listed it; srun's own lines name it
        found = re.findall(rf"StepId=({step.srun_job}\.\d+)", text)
        step.step_id = found[-1] if found else None
    return LaunchError(f"{step.label} exited with code {code} {when}; last lines of {step.log}:\n{text}",
                       fix=_fix(text, f"read {step.log}"))


class SlurmLauncher(Launcher):
    name = "slurm"

    def __init__(self, state_dir: Path, settings: SlurmSettings | Mapping[str, Any] | None = None,
                 environ: Mapping[str, str] | None = None, replicas: Layout | None = None,
                 platform: Platform = NVIDIA) -> None:
        try:
            self.settings = settings if isinstance(settings, SlurmSettings) else \
                SlurmSettings.model_validate(dict(settings or {}))
        except ValidationError:
            lines = settings_problems(dict(settings or {}), "slurm")
            raise PlanError("invalid Slurm settings:\n  " + "\n  ".join(lines), where="engine",
                            fix="see docs/slurm.md for every engine.slurm field") from None
        environ = os.environ if environ is None else environ
        self.state_dir = state_dir
        self.replicas = replicas
        self.platform = platform   # how each node's supervisor pins its replicas, and what samples its GPUs
        self.here = environ.get("SLURMD_NODENAME")   # the node Podium runs on, inside a job
        self.env = cli.client_env(self.settings, environ)
        mode = self.settings.allocation
        self.inherited = environ.get("SLURM_JOB_ID") if mode in ("auto", "inherit") else None
        if mode == "inherit" and not self.inherited:
            raise PlanError("engine.slurm.allocation is inherit but Podium does not run inside a Slurm job "
                            "(no SLURM_JOB_ID)", fix="run podium inside sbatch/salloc, or set allocation: new")
        self.tag = f"{self.settings.job_name}-{uuid.uuid4().hex[:8]}"
        self.allocation: Allocation | None = None
        self.steps: list[Step] = []   # live steps of every deployment started here: what the record lists

    # --- the allocation -----------------------------------------------------------------------------------------
    def _write_record(self) -> None:
        alloc = self.allocation
        if alloc is None:
            return
        self.state_dir.mkdir(parents=True, exist_ok=True)
        data = {"job_id": alloc.job_id, "job_name": alloc.tag, "owned": alloc.owned,
                "slurm_conf": self.env.get("SLURM_CONF"),
                "steps": [[s.step_id, s.name] for s in self.steps if s.step_id]}
        tmp = alloc.record.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(alloc.record)

    def allocate(self, nodes: int, logger: Logger | None = None) -> Allocation:
        """The allocation of this launcher: taken now (salloc) unless it exists or Podium runs inside one."""
        log = logger or logging.getLogger("podium.slurm")
        if self.allocation is not None:
            if nodes > len(self.allocation.nodes):
                raise LaunchError(f"the topology needs {nodes} nodes but allocation {self.allocation.job_id} has "
                                  f"{len(self.allocation.nodes)}", fix="raise engine.slurm.nodes")
            return self.allocation
        reap_stale(self.state_dir, self.env, log, keep=self.tag)
        if self.inherited:
            job, owned = self.inherited, False
        else:
            want = self.settings.nodes or nodes
            if want < nodes:
                raise LaunchError(f"the topology needs {nodes} nodes but engine.slurm.nodes is {want}",
                                  fix=f"set engine.slurm.nodes to {nodes} or more, or remove it")
            argv = cli.salloc_argv(self.settings, want, self.tag)
            log.info("allocating %d node(s): %s", want, json.dumps(argv))
            try:
                done = subprocess.run(argv, env=self.env, capture_output=True, text=True, check=False,  # noqa: S603
                                      timeout=self.settings.allocation_timeout_s + 60)
            except FileNotFoundError:
                raise LaunchError("salloc is not installed here", fix="run Podium on a Slurm login or batch node "
                                  "(slurm-client), or use another launcher") from None
            except subprocess.TimeoutExpired as e:   # salloc was killed: withdraw the job it may have queued
                err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr or ""
                for pending in re.findall(r"job allocation (\d+)", err):
                    with contextlib.suppress(PodiumError):
                        cli.run(["scancel", pending], self.env)
                raise LaunchError(f"salloc did not return in {self.settings.allocation_timeout_s + 60} s",
                                  fix="check the controller (`scontrol ping`) and `squeue --me`") from None
            granted = re.search(r"Granted job allocation (\d+)", done.stderr)
            if done.returncode != 0 or not granted:
                known = cli.explain(done.stderr)
                raise LaunchError(
                    f"Slurm refused the allocation of {want} node(s)"
                    + (f": {known[0]}" if known else "") + f"\n{done.stderr.strip()[-1500:]}",
                    fix=known[1] if known else "read salloc's message above")
            job, owned = granted.group(1), True
        self.allocation = Allocation(job, (), (), owned, self.tag, self.state_dir)
        self._write_record()
        try:
            self.allocation = self._head_apart(self._describe(job, owned))
        except BaseException:
            self.release()
            raise
        log.info("allocation %s: %s", job, ", ".join(f"{n} ({h})" for n, h in zip(self.allocation.nodes,
                                                                                  self.allocation.hosts, strict=True))
                 + (f"; {self.allocation.head} kept for the head" if self.allocation.head else ""))
        if nodes > len(self.allocation.nodes):
            have, head = len(self.allocation.nodes), self.allocation.head
            self.release()
            besides = f" besides {head}, where Podium runs (engine.replicas.head: own-node)" if head else ""
            raise LaunchError(f"the topology needs {nodes} nodes but job {job} has {have}{besides}",
                              fix="raise engine.slurm.nodes, or sbatch Podium with more nodes"
                                  + (" (one more for the head), or set engine.replicas.head: beside" if head else ""))
        return self.allocation

    def _head_apart(self, alloc: Allocation) -> Allocation:
        """The allocation without the node Podium runs on, when its replicas' head has a node of its own."""
        if self.replicas is None or self.replicas.head != "own-node" or self.here not in alloc.nodes:
            return alloc
        keep = [i for i, n in enumerate(alloc.nodes) if n != self.here]
        return dataclasses.replace(alloc, nodes=tuple(alloc.nodes[i] for i in keep),
                                   hosts=tuple(alloc.hosts[i] for i in keep), head=self.here)

    def _describe(self, job: str, owned: bool) -> Allocation:
        state = cli.run(["squeue", "--noheader", f"--jobs={job}", "--format=%T|%N"], self.env).strip()
        status, _, nodelist = state.partition("|")
        if status != "RUNNING" or not nodelist:
            raise LaunchError(f"Slurm job {job} is {status or 'gone'}, not running",
                              fix="run Podium inside a running job, or set engine.slurm.allocation: new")
        names = cli.hostnames(nodelist, self.env)
        out = cli.run(["sinfo", "--noheader", "--Node", f"--nodes={nodelist}", "--format=%N|%o"], self.env)
        addr = dict(line.split("|", 1) for line in out.split())
        return Allocation(job, tuple(names), tuple(addr.get(n, n) for n in names), owned, self.tag, self.state_dir)

    def release(self) -> None:
        """Cancel the allocation if this launcher took it, and wait until Slurm has ended it."""
        alloc, self.allocation = self.allocation, None
        if alloc is not None:
            self._end(alloc)

    def _end(self, alloc: Allocation) -> None:
        if alloc.owned:
            with contextlib.suppress(CommandError):
                cli.run(["scancel", alloc.job_id], self.env)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and _job_exists(alloc.job_id, self.env):
                time.sleep(POLL_S)
        alloc.record.unlink(missing_ok=True)

    # --- what the backends see ----------------------------------------------------------------------------------
    def placement(self, ports_needed: int, nodes: int = 1, max_port: int | None = None) -> Placement:
        """Each node as its IPv4 address (resolved on the node: Dynamo and etcd take IP literals only) with its free
        ports."""
        alloc = self.allocate(nodes)
        taken: set[int] = set()
        per_node = []
        try:
            for i in range(nodes):
                ip, ports = self._probe_node(alloc, i, ports_needed, taken, max_port)
                taken.update(ports)
                per_node.append(Node(ip, ports))
        except BaseException:
            self.release()
            raise
        workdir = alloc.workdir
        workdir.mkdir(parents=True, exist_ok=True)
        return Placement(per_node[0].host, per_node[0].ports, nodes=tuple(per_node) if nodes > 1 else (),
                         workdir=str(workdir), platform=self.platform)

    def model_on_nodes(self, specs: list[ProcessSpec], model_dir: Path, logger: Logger) -> list[ProcessSpec]:
        """With `local_stage`: the model copied onto each node that reads it (tasks/launchers/slurm_stage.py), and
        the specs reading it there."""
        if not self.settings.local_stage or not slurm_stage.readers(specs, model_dir):
            return specs
        alloc = self.allocate(max(s.node_index + s.nodes for s in specs), logger)
        local = slurm_stage.localised(self.settings, specs, model_dir, alloc.nodes)
        nodes = [alloc.nodes[i] for i in slurm_stage.reader_nodes(specs, model_dir)]
        slurm_stage.copy_to_nodes(self.settings, self.env, alloc.job_id, nodes, model_dir, f"{self.tag}-local-stage",
                                  logger)
        return local

    def _probe_node(self, alloc: Allocation, index: int, count: int, skip: set[int],
                    max_port: int | None) -> tuple[str, tuple[int, ...]]:
        """(the node's IPv4 address, `count` ports free there), found by a short step on the node."""
        node = alloc.nodes[index]
        argv = cli.port_finder_argv(self.settings, alloc.job_id, node, alloc.hosts[index], count,
                                    skip, f"{self.tag}-ports", max_port)
        try:
            out = cli.run(argv, self.env).split()
        except CommandError as e:
            raise LaunchError(f"cannot find the address and free ports of {node} (NodeAddr {alloc.hosts[index]}): "
                              f"{e.message}", fix=f"{e.fix}; engine.slurm.python must be a Python on the nodes, and "
                              "the node's NodeAddr must resolve there to one of its IPv4 addresses") from None
        return out[0], tuple(int(p) for p in out[1:])

    # --- start, probe, stop -------------------------------------------------------------------------------------
    def start(self, specs: list[ProcessSpec], log_dir: Path, logger: Logger) -> SlurmDeployment:
        needed = max((s.node_index + s.nodes for s in specs), default=1)
        alloc = self.allocate(needed, logger)
        log_dir.mkdir(parents=True, exist_ok=True)
        deployment = SlurmDeployment(processes=specs, allocation=alloc, logger=logger)
        try:
            for spec in slurm_replicas.node_steps(specs, self.settings.python, self.platform):   # a step per node
                nodes = alloc.nodes[spec.node_index:spec.node_index + spec.nodes]
                write_files(spec)
                step_name = f"{self.tag}-{spec.name}"
                argv = cli.srun_argv(self.settings, alloc.job_id, spec, nodes, step_name)
                log = log_dir / f"{spec.name}.log"
                logger.info("starting %s on %s: %s; env %s", spec.name, ",".join(nodes), json.dumps(argv),
                            json.dumps(shown_env(spec.env)))
                with log.open("ab") as out:
                    srun = subprocess.Popen(  # noqa: S603 - argv list from a typed spec, no shell
                        argv, env={**self.env, **spec.env}, stdout=out, stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL, process_group=0)
                deployment.steps.append(Step(spec, srun, log, step_name, nodes, srun_job=alloc.job_id))
                self.steps.append(deployment.steps[-1])
                threading.Thread(target=forward_log, args=(log, spec.name, logger, deployment.stop_forwarding,
                                                                 deployment.ready),
                                 daemon=True).start()
                if spec.gpus:   # one GPU step at a time: Slurm hands out the lowest free GPUs, in the specs' order
                    self._find_steps(deployment)
            self._find_steps(deployment)
            self._start_samplers(deployment, log_dir)
        except BaseException:
            self.stop(deployment)
            raise
        return deployment

    def _start_samplers(self, deployment: SlurmDeployment, log_dir: Path) -> None:
        """One GPU sampler step per node of the deployment, with the GPUs the engine's steps hold there; what it
        prints goes to `<log_dir>/gpus-<node>.jsonl`. A sampler that does not start is a warning: telemetry never
        fails a launch."""
        alloc = deployment.allocation
        for node, gpus in cli.held_gpus(deployment.processes, alloc.nodes).items():
            name, log = f"{self.tag}-gpus-{node}", log_dir / f"gpus-{node}.jsonl"
            argv = cli.sampler_argv(self.settings, alloc.job_id, node, gpus, name, self.platform)
            deployment.logger.info("starting the GPU sampler of %s: %s", node, json.dumps(argv))
            with log.open("ab") as out:
                srun = subprocess.Popen(argv, env=self.env, stdout=out, stderr=subprocess.STDOUT,  # noqa: S603
                                        stdin=subprocess.DEVNULL, process_group=0)
            step = Step(ProcessSpec(role="telemetry", name=f"gpus-{node}", argv=tuple(argv)), srun, log, name, (node,),
                        srun_job=alloc.job_id)
            deployment.samplers.append(step)
            self.steps.append(step)
        try:
            self._find_steps(deployment, deployment.samplers)
        except LaunchError as e:
            deployment.logger.warning("a GPU sampler did not start, so runs lack that node's GPUs: %s", e.message)

    def watched(self, deployment: SlurmDeployment) -> Watched:
        """The deployment by the allocation's node names, with what its GPU samplers write."""
        return watched(deployment.processes, deployment.allocation.nodes,
                       gpu_logs=tuple((s.nodes[0], str(s.log)) for s in deployment.samplers))

    def _find_steps(self, deployment: SlurmDeployment, steps: list[Step] | None = None) -> None:
        """Wait until Slurm lists every step (its id is what stop cancels); a step that exits first fails. `steps`:
        those of the deployment's to wait for (default: its processes')."""
        steps = deployment.steps if steps is None else steps
        deadline = time.monotonic() + self.settings.step_timeout_s + 30   # srun gives up first (--immediate)
        job, tries = deployment.allocation.job_id, 0
        while True:
            listed = cli.run(["squeue", "--noheader", "--steps", f"--jobs={job}", "--format=%i|%j"], self.env)
            by_name = {name: sid for sid, _, name in (line.partition("|") for line in listed.split())}
            for step in steps:
                if step.step_id is None and step.name in by_name:
                    step.step_id = by_name[step.name]
                    deployment.logger.info("Slurm step %s of %s on %s", step.step_id, step.spec.name,
                                           ",".join(step.nodes))
            self._write_record()
            for step in steps:
                code = step.srun.poll()
                if code is not None and step.spec.role != slurm_replicas.ROLE:   # a node of replicas: `down` says
                    raise _failure(step, code, "while starting")
            missing = [s for s in steps if s.step_id is None and s.srun.poll() is None]
            if not missing:
                return
            if time.monotonic() > deadline:
                s = missing[0]
                raise LaunchError(f"Slurm did not create the step of {s.label} in {self.settings.step_timeout_s:.0f} "
                                  f"s; last lines of {s.log}:\n{tail(s.log, TAIL_LINES)}",
                                  fix=_fix(tail(s.log, TAIL_LINES), f"read {s.log}"))
            time.sleep(min(POLL_S, 0.05 * 2 ** tries))
            tries += 1

    def alive(self, deployment: SlurmDeployment) -> bool:
        return all(s.srun.poll() is None for s in deployment.steps) and not self.down(deployment)

    def down(self, deployment: SlurmDeployment) -> dict[str, str]:
        """Replicas their supervisor saw end, and every replica of a node whose step has ended."""
        steps = [s for s in deployment.steps if s.spec.role == slurm_replicas.ROLE]
        ended = deployment.exits.scan([s.log for s in steps])
        for step in steps:
            if (code := step.srun.poll()) is not None:
                for spec in deployment.processes:
                    if spec.replica is not None and spec.node_index == step.spec.node_index:
                        ended.setdefault(spec.name, f"its node's step {step.step_id or '?'} ended with code {code}")
        return ended

    def replica_nodes(self, deployment: SlurmDeployment) -> dict[str, str]:
        return {s.name: deployment.allocation.nodes[s.node_index] for s in deployment.processes}

    def replica_log(self, deployment: SlurmDeployment, name: str, lines: int) -> tuple[str, str]:
        spec = next(s for s in deployment.processes if s.name == name)
        step = next(s for s in deployment.steps if s.spec.node_index == spec.node_index
                    and s.spec.role == slurm_replicas.ROLE)
        own = slurm_replicas.replica_tail(step.log, name, lines)
        return f"step {step.step_id or '?'} on {step.nodes[0]}, log {step.log}", own or tail(step.log, lines)

    def wait_ready(self, deployment: SlurmDeployment, timeout_s: float) -> None:
        """Ready means every probe of every process answers on its node; a step that exits fails at once."""

        def exited() -> None:
            for step in deployment.steps:
                code = step.srun.poll()
                if code is not None:
                    raise _failure(step, code, "while starting")

        wait_for_probes([(s.label, s.spec, s.log) for s in deployment.steps], timeout_s, exited, POLL_S)
        exited()   # a process without probes is ready while it runs
        deployment.ready.set()

    def stop(self, deployment: SlurmDeployment) -> None:
        """SIGTERM the steps (scancel --signal), SIGKILL them after the grace period (scancel), then cancel the
        allocation this launcher took. Everything by the ids recorded at start."""
        try:
            self._cancel_steps(deployment)
        finally:
            deployment.stop_forwarding.set()
            with contextlib.suppress(OSError):   # kept when a backend wrote files there (they help debugging)
                deployment.allocation.workdir.rmdir()
            # Any launcher object may stop a deployment (a flow keeps the one its launch task returned): what to
            # end is read from the deployment, not from this object.
            alloc = deployment.allocation
            self.steps = [s for s in self.steps if s not in deployment.steps + deployment.samplers]
            if self.allocation is not None and self.allocation.job_id == alloc.job_id and alloc.owned:
                self.allocation = None
            if alloc.owned:   # one deployment per allocation taken: it ends with it
                self._end(alloc)
            elif self.steps and self.allocation is not None:
                self._write_record()
            else:
                alloc.record.unlink(missing_ok=True)

    def _listed(self, job: str, ids: list[str]) -> list[str]:
        """Those of the step ids `ids` (of `job`) that Slurm still lists."""
        try:
            listed = cli.run(["squeue", "--noheader", "--steps", f"--jobs={job}", "--format=%i"], self.env).split()
        except CommandError:   # "Invalid job id specified": the job, and so its steps, are gone
            return []
        return [i for i in ids if i in listed]

    def _cancel_steps(self, deployment: SlurmDeployment) -> None:
        """Cancel every recorded step Slurm still lists, whether or not its srun still runs (srun may be gone while
        the step lives on): SIGTERM and SIGCONT (a stopped process acts on SIGTERM only once continued), then
        Slurm's own kill after `grace_s`. A step not yet created is withdrawn by ending its srun."""
        log, steps = deployment.logger, deployment.steps + deployment.samplers
        for s in steps:
            if s.step_id is None and s.srun.poll() is None:   # still asking Slurm for its step
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(s.srun.pid, signal.SIGTERM)
        recorded = [s.step_id for s in steps if s.step_id]
        ids = self._listed(deployment.allocation.job_id, recorded)
        if gone := [i for i in recorded if i not in ids]:
            log.info("Slurm step(s) %s already ended", ", ".join(gone))
        if ids:
            log.info("cancelling Slurm step(s) %s by their recorded ids: SIGTERM and SIGCONT, SIGKILL after %g s",
                     ", ".join(ids), self.settings.grace_s)
            for sig in ("TERM", "CONT"):
                with contextlib.suppress(CommandError):   # a step that ended meanwhile
                    cli.run(["scancel", f"--signal={sig}", *ids], self.env)
        deadline = time.monotonic() + self.settings.grace_s
        while ids and time.monotonic() < deadline and (ids := self._listed(deployment.allocation.job_id, ids)):
            time.sleep(POLL_S)
        if ids:
            log.warning("Slurm step(s) %s still running after %g s: cancelling them (SIGKILL)", ", ".join(ids),
                        self.settings.grace_s)
            with contextlib.suppress(CommandError):
                cli.run(["scancel", *ids], self.env)
        for step in steps:
            try:
                step.srun.wait(timeout=30)
            except subprocess.TimeoutExpired:   # srun itself stuck (or its step never created): end our srun
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(step.srun.pid, signal.SIGKILL)
                step.srun.wait()


def _job_exists(job: str, env: Mapping[str, str]) -> bool:
    try:
        return bool(cli.run(["squeue", "--noheader", f"--jobs={job}", "--format=%i"], env).strip())
    except CommandError:   # "Invalid job id specified": gone
        return False


def reap_stale(state_dir: Path, env: Mapping[str, str], logger: Logger, keep: str = "") -> int:
    """Cancel the allocations and steps recorded by launches that died without stopping them: only a job (or step)
    that still carries the recorded name. Returns how many were cancelled."""
    ended = 0
    for record in sorted(state_dir.glob("slurm-*.json")):
        data = json.loads(record.read_text())
        if data["job_name"] == keep:
            continue
        job, cenv = data["job_id"], {**env, **({"SLURM_CONF": data["slurm_conf"]} if data.get("slurm_conf") else {})}
        try:
            if data["owned"]:
                name = cli.run(["squeue", "--noheader", f"--jobs={job}", "--format=%j"], cenv).strip()
                if name == data["job_name"]:
                    logger.warning("cancelling Slurm job %s left behind by an earlier run", job)
                    cli.run(["scancel", job], cenv)
                    ended += 1
            else:
                listed = cli.run(["squeue", "--noheader", "--steps", f"--jobs={job}", "--format=%i|%j"], cenv)
                alive = {tuple(line.split("|", 1)) for line in listed.split()}
                stale = [sid for sid, name in data["steps"] if (sid, name) in alive]
                if stale:
                    logger.warning("cancelling Slurm steps %s left behind by an earlier run", ", ".join(stale))
                    cli.run(["scancel", *stale], cenv)
                    ended += len(stale)
        except PodiumError:   # the job is gone (or its cluster is): nothing to cancel
            pass
        record.unlink(missing_ok=True)
    return ended


def make(state_dir: Path, settings: SlurmSettings | Mapping[str, Any] | None = None, **kwargs: Any) -> SlurmLauncher:
    return SlurmLauncher(state_dir, settings, **kwargs)
