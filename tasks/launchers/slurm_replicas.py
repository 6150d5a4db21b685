"""An engine's replicas under Slurm: one job step per node, in which a small supervisor starts the node's K replicas.

`node_steps(specs, python, platform)` turns the replicas' process specs into one step spec per node: `python -c
SUPERVISOR CHILDREN GPUS`, holding the GPUs of all its replicas (`--exact --gpus=K x g`), its environment the values
every replica there shares (passed by name, as any step's: the plan's `options.env` among them), CHILDREN a JSON list
of each replica's name, argv, working folder, the variables whose values differ between them (Podium's own: ports),
the positions of its GPUs among the step's and its pin (`Platform.pin` of those positions), GPUS the variable Slurm
sets to the step's GPUs and the one the pin names them in, by the node's platform (submission/plan/platforms.py:
CUDA_VISIBLE_DEVICES on NVIDIA's; ROCR_VISIBLE_DEVICES on AMD's, beside HIP_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES and
GPU_DEVICE_ORDINAL numbered from 0). On the node the supervisor reads the GPUs Slurm gave the step, starts each
replica with its pin, its block of them in the pin's variable, each in a session of its own, prefixes every line
a replica writes with `[replica-<i>] `, and prints `podium-supervisor: replica-<i> exited with code N` when one ends;
it keeps the others running, sends SIGTERM and SIGCONT to every replica when the step is signalled, and ends when the
last replica has. `Exits` reads those lines from the steps' logs as they grow, `replica_tail` one replica's lines.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from submission.plan.platforms import Platform
from tasks.engines import ProcessSpec

MARK = "podium-supervisor:"
ROLE = "replicas"

# Runs on the node, inside the engine's container when the plan names one: `python -c SUPERVISOR CHILDREN GPUS`.
SUPERVISOR = r"""
import json, os, signal, subprocess, sys, threading
MARK = "podium-supervisor:"
children, gpu = json.loads(sys.argv[1]), json.loads(sys.argv[2])
visible = [d for d in os.environ.get(gpu["visible"], "").split(",") if d]
lock, procs, threads, stopping = threading.Lock(), {}, [], []

def say(line):
    with lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

def follow(name, proc):
    for raw in proc.stdout:
        say(f"[{name}] " + raw.decode(errors="replace").rstrip("\r\n"))
    say(f"{MARK} {name} exited with code {proc.wait()}")

def stop(signum, frame):
    stopping.append(signum)
    for proc in list(procs.values()):
        for sig in (signal.SIGTERM, signal.SIGCONT):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass

signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
failed = 0
for child in children:
    name, env = child["name"], dict(os.environ, **child["env"])
    if stopping:
        break
    if child["gpus"]:
        if max(child["gpus"]) >= len(visible):
            say(f"{MARK} {name} could not start: it needs GPU positions {child['gpus']} of the step's "
                f"{len(visible)} ({','.join(visible) or 'none'})")
            failed += 1
            continue
        env.update(child["pin"])   # its positions among the step's GPUs become the GPUs Slurm gave the step
        env[gpu["pin"]] = ",".join(visible[i] for i in child["gpus"])
    try:
        procs[name] = subprocess.Popen(child["argv"], env=env, cwd=child["cwd"], stdin=subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as e:
        say(f"{MARK} {name} could not start: {e}")
        failed += 1
        continue
    say(f"{MARK} {name} started, pid {procs[name].pid}, GPUs {env.get(gpu['pin'], 'none')}")
    threads.append(threading.Thread(target=follow, args=(name, procs[name])))
    threads[-1].start()
if stopping:   # a signal that came while a replica was starting reaches it too
    stop(None, None)
for thread in threads:
    thread.join()
sys.exit(1 if failed or any(p.returncode for p in procs.values()) else 0)
"""
EXIT = re.compile(rf"^{MARK} (\S+) (exited with code (-?\d+)|could not start: .*)$")


def step_name(node: int) -> str:
    return f"{ROLE}-node{node}"


def node_steps(specs: list[ProcessSpec], python: str, platform: Platform) -> list[ProcessSpec]:
    """One supervisor step spec per node for the replicas among `specs` (the others as they are), each replica pinned
    to its GPUs on `platform` (the nodes')."""
    by_node: dict[int, list[ProcessSpec]] = {}
    for spec in (s for s in specs if s.replica is not None):
        by_node.setdefault(spec.node_index, []).append(spec)
    steps = [s for s in specs if s.replica is None]
    numbering = platform.visibility_env()   # set per replica by the supervisor, never shared or passed
    gpus = json.dumps({"visible": platform.slurm_env, "pin": platform.pin_env}, separators=(",", ":"))
    for node, members in sorted(by_node.items()):
        shared = {k: v for k, v in members[0].env.items()
                  if k not in numbering and all(m.env.get(k) == v for m in members)}
        held = sorted({g for m in members for g in m.gpu_ids})
        children = [{"name": m.name, "argv": list(m.argv), "cwd": m.cwd,
                     "env": {k: v for k, v in m.env.items() if k not in numbering and k not in shared},
                     "gpus": (positions := [held.index(g) for g in m.gpu_ids]), "pin": platform.pin(positions)}
                    for m in members]
        cwd = {m.cwd for m in members}
        steps.append(ProcessSpec(role=ROLE, name=step_name(node), node_index=node, gpus=sum(m.gpus for m in members),
                                 argv=(python, "-c", SUPERVISOR, json.dumps(children, separators=(",", ":")), gpus),
                                 env=shared, cwd=cwd.pop() if len(cwd) == 1 else None,
                                 files={p: t for m in members for p, t in m.files.items()}))
    return steps


def why(line: str) -> tuple[str, str] | None:
    """(replica, why it ended) from a supervisor's line, or None."""
    found = EXIT.match(line.rstrip("\n"))
    if found is None:
        return None
    code = found.group(3)
    if code is not None and int(code) < 0:
        return found.group(1), f"killed by signal {-int(code)}"
    return found.group(1), found.group(2)


@dataclass
class Exits:
    """What the supervisors said of their replicas' ends, read from the step logs as they grow."""

    ended: dict[str, str] = field(default_factory=dict)
    offsets: dict[Path, int] = field(default_factory=dict)

    def scan(self, logs: list[Path]) -> dict[str, str]:
        for log in logs:
            if not log.is_file():
                continue
            with log.open("rb") as f:
                f.seek(self.offsets.get(log, 0))
                text = f.read()
            whole = text[:text.rfind(b"\n") + 1]   # a line still being written is read next time
            self.offsets[log] = self.offsets.get(log, 0) + len(whole)
            for line in whole.decode(errors="replace").splitlines():
                if found := why(line):
                    self.ended[found[0]] = found[1]
        return dict(self.ended)


def replica_tail(log: Path, name: str, lines: int) -> str:
    """The last `lines` lines replica `name` wrote to its node's step log, and what the supervisor said of it."""
    if not log.is_file():
        return ""
    own = [line for line in log.read_text(errors="replace").splitlines()
           if line.startswith(f"[{name}] ") or line.startswith(f"{MARK} {name} ")]
    return "\n".join(own[-lines:])
