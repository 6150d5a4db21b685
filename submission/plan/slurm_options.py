"""The Slurm launcher's settings: the plan's `engine.slurm` section, validated when the plan loads.

Podium takes one allocation per deployment (`salloc --no-shell`), or uses the one it runs in (`allocation:
inherit`, when `podium` itself runs inside `sbatch`), and starts each process as an `srun` job step on its node.
The `container_*` fields are pyxis options that every step gets (`--container-image` and friends); the image must
hold the engine, its Python and the model path (or mount it).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from submission.base.errors import did_you_mean
from submission.base.schema import Input, reason
from submission.plan.limits import Nodes

MEMORY = r"^\d+[KMGT]?$"   # the sizes --mem and --mem-per-gpu accept: a number, in megabytes unless K, M, G or T
TIME = re.compile(r"^(\d+-)?\d+(:\d{2}){0,2}$|^UNLIMITED$|^INFINITE$")   # the forms `--time` accepts


class SlurmSettings(Input):
    allocation: Literal["auto", "new", "inherit"] = Field(
        "auto", description="new: salloc one for the deployment and scancel it at the end; inherit: use the job "
                            "Podium runs in ($SLURM_JOB_ID, never cancelled); auto: inherit inside a job, else new")
    slurm_conf: str | None = Field(None, description="slurm.conf for the client commands (SLURM_CONF); "
                                                     "None: the cluster's default")
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    constraint: str | None = None
    nodelist: tuple[str, ...] = Field((), description="exactly these nodes (salloc --nodelist), one node or one "
                                                      "range (gpu[01-04]) per item")
    nodes: Nodes | None = Field(None, description="nodes to allocate; None: as many as the engine's topology")
    gpus_per_node: int = Field(0, ge=0, description="GPUs to allocate per node (salloc --gpus-per-node)")
    cpus_per_gpu: int | None = Field(None, ge=1, description="CPUs of a GPU step per GPU (srun --cpus-per-gpu)")
    mem: str | None = Field(None, pattern=MEMORY, description="memory per node of the allocation (salloc --mem); "
                                                             "\"0\": all of each node's memory")
    mem_per_gpu: str | None = Field(None, pattern=MEMORY, description="host memory of a GPU step per GPU "
                                                                     "(srun --mem-per-gpu), e.g. 200G")
    exclusive: bool = Field(True, description="whole nodes (salloc --exclusive): no other job shares them")
    time_limit: str = Field("04:00:00", description="the allocation's time limit (salloc --time); must cover what "
                                                    "the benchmark runs (submission/budget/slurm_time.py)")
    job_name: str = Field("podium", pattern=r"^[A-Za-z0-9._-]+$")
    allocation_timeout_s: int = Field(600, ge=1, description="give up when the allocation is not granted in time "
                                                             "(salloc --immediate)")
    step_timeout_s: float = Field(120, gt=0, description="how long a step may take to be created")
    grace_s: float = Field(10, ge=0, description="after SIGTERM, how long steps get before SIGKILL")
    python: str = Field("python3", description="a Python on the nodes, for the step that finds free ports there")
    mpi: str = Field("pmix", description="srun --mpi for processes with several MPI ranks (TensorRT-LLM)")
    container_image: str | None = Field(None, description="pyxis: the image every step runs in, e.g. "
                                                          "nvcr.io#nvidia/tensorrt-llm/release:1.2.0")
    container_mounts: tuple[str, ...] = Field((), description="pyxis: SRC:DST[:FLAGS] mounts, e.g. "
                                                             "/lustre/models:/models:ro")
    container_workdir: str | None = None
    container_name: str | None = Field(None, description="pyxis: a named container, reused by later steps")
    container_writable: bool = False
    container_mount_home: bool = False
    srun_args: tuple[str, ...] = Field((), description="more srun options for every step, e.g. --network=...")
    salloc_args: tuple[str, ...] = Field((), description="more salloc options, e.g. --switches=1")
    local_stage: str | None = Field(
        None, description="a folder on each engine node's local disk, e.g. /local/nvme/podium: before the engine "
                          "starts, one short step per node copies the staged model there from the shared copy, "
                          "verified against its manifest (size and sha256 of every file; a complete copy is kept), "
                          "and the engine reads it there. `{node}` stands for the node's name (nodes that share one "
                          "filesystem, as a test cluster's, each get their own folder); with container_image, mount "
                          "it at the same path (container_mounts). None: the engine reads the shared copy")

    @field_validator("local_stage")
    @classmethod
    def _local_stage(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not v.startswith("/"):
            raise ValueError(f"{v!r} is not an absolute path; give the folder on each node's local disk, e.g. "
                             "/local/nvme/podium")
        if any(c in v.replace("{node}", "") for c in "{}"):
            raise ValueError(f"{v!r}: the only placeholder is {{node}} (the node's name), e.g. /local/nvme/{{node}}")
        return v.rstrip("/") or "/"

    @model_validator(mode="after")
    def _local_stage_in_container(self) -> SlurmSettings:
        """The copy runs on the node itself, the engine in its container: the container must see the folder where
        the node has it."""
        if self.local_stage and self.container_image:
            root = self.local_stage.split("{node}")[0]
            same = [src for src, dst, *_ in (m.split(":") for m in self.container_mounts)
                    if src == dst and (root.rstrip("/") + "/").startswith(src.rstrip("/") + "/")]
            if not same:
                raise ValueError(f"local_stage: {self.local_stage} is not mounted in the engine's container at the "
                                 f"same path; add it to container_mounts, e.g. {root.rstrip('/')}:{root.rstrip('/')}")
        return self

    @field_validator("time_limit")
    @classmethod
    def _time(cls, v: str) -> str:
        if not TIME.match(v):
            raise ValueError(f"{v!r} is not a Slurm time; use minutes, HH:MM:SS or D-HH:MM:SS, e.g. 04:00:00")
        return v

    @field_validator("srun_args", "salloc_args")
    @classmethod
    def _options_only(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [a for a in v if not a.startswith("--") or any(c.isspace() for c in a)]
        if bad:
            raise ValueError(f"{bad[0]!r}: give long options, each with its value after '=', e.g. --network=sn_all")
        return v

    @field_validator("nodelist")
    @classmethod
    def _one_node_each(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [n for n in v if not n or "," in n or any(c.isspace() for c in n)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not one node or one range; give one per list item, without commas or "
                             "spaces, e.g. nodelist: [gpu01, gpu02] or [gpu[01-04]]")
        return v

    @field_validator("container_mounts")
    @classmethod
    def _mounts(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [m for m in v if ":" not in m or "," in m]
        if bad:
            raise ValueError(f"{bad[0]!r}: a mount is SRC:DST[:FLAGS], one per list item")
        return v


def settings_problems(settings: dict[str, Any], launcher: str) -> list[str]:
    """Everything wrong with an `engine.slurm` section, each naming its field (relative to `engine`)."""
    if not settings:
        return []
    if launcher != "slurm":
        return ["slurm: only the slurm launcher reads it; set launcher: slurm or remove it"]
    try:
        SlurmSettings.model_validate(settings)
    except ValidationError as e:
        return [_line(err) for err in e.errors()]
    return []


def _line(err: Any) -> str:
    field = ".".join(str(p) for p in err["loc"])
    if not field:   # a check across fields: its message names them
        return f"slurm.{reason(err)}"
    if err["type"] == "extra_forbidden":
        return f"slurm.{field}: unknown setting; {did_you_mean(field, SlurmSettings.model_fields)}"
    return f"slurm.{field}: {reason(err)}"
