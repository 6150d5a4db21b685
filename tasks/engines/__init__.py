"""What runs: an engine backend turns engine options and a model folder into process specs and an endpoint.

Where it runs is the launchers' business (`tasks.launchers`). Backends never import their engine; they build argv
for its CLI. Look one up with `backend(name)`.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from submission.base.errors import LaunchError, PlanError, did_you_mean
from submission.base.files import write_atomic
from submission.plan.engine_options import OptionsLike, parse_options
from submission.plan.platforms import NVIDIA, Platform
from submission.plan.secret_env import shown_options, values_digest


@dataclass(frozen=True)
class HttpProbe:
    """Ready when `POST path` with `body` (or `GET path` when body is None) answers 200 (and, when `contains` is
    set, the answer holds that text: e.g. a Dynamo worker's `"generate":"ready"`)."""

    path: str
    body: dict[str, Any] | None = None
    contains: str | None = None

    def accepts(self, status: int, text: str) -> bool:
        """Whether an answer passes this probe; every launcher judges answers with this."""
        return status == 200 and (self.contains is None or self.contains in text)


@dataclass(frozen=True)
class ProcessSpec:
    """One OS process, Slurm job step or pod."""

    role: str                      # server | frontend | prefill | decode | router | etcd | nats
    name: str                      # unique within a deployment; names the log file
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    host: str = "127.0.0.1"
    port: int | None = None
    gpus: int = 0
    node_index: int = 0
    probes: tuple[HttpProbe, ...] = ()
    gpu_ids: tuple[int, ...] = ()  # which GPUs of its node (also in env: its platform's pin); () = any `gpus`
    side_ports: dict[str, int] = field(default_factory=dict)   # other ports it listens on, e.g. nixl side channel
    mpi_ranks: int = 1             # >1: one MPI rank per GPU across `nodes` (trtllm under srun --mpi=pmix)
    nodes: int = 1                 # nodes one process spans (with mpi_ranks)
    files: dict[str, str] = field(default_factory=dict)   # path -> text of the config files it reads; the launcher
    #                                writes them before it starts the process (a pod gets them from a ConfigMap)
    bind: str | None = None        # the address it binds when that differs from `host` (0.0.0.0 in a pod)
    metrics: str | None = None     # how its own metrics page on host:port is read beside the endpoint's, by each
    #                                run's telemetry: a key of tasks/serving/metrics.py SOURCES (a Dynamo worker's
    #                                system port: "dynamo-worker"); None: it has none worth reading
    replica: int | None = None     # its index among the engine's replicas (tasks/engines/replicas.py); None: not one


@dataclass(frozen=True)
class MetricsPage:
    """A process's own metrics page, read beside the endpoint's: which process, its role, the node it runs on (by
    name) and the base URL of its page; `source` says how it is read (tasks/serving/metrics.py SOURCES)."""

    name: str
    role: str
    base_url: str
    source: str
    node: str = ""


@dataclass(frozen=True)
class Watched:
    """What each run's telemetry reads beside the endpoint's own metrics, tagged by node: the deployment's nodes by
    name (node 0 first), its processes' own metrics pages, which role holds which GPU of which node, the files the
    per-node GPU samplers write (the Slurm launcher's), and the DCGM exporters (the plan's, node templates filled in
    by the engine session). Every launcher fills it from its deployment (`Launcher.watched`)."""

    nodes: tuple[str, ...] = ()
    pages: tuple[MetricsPage, ...] = ()
    gpu_roles: tuple[tuple[str, int, str], ...] = ()   # (node, GPU index, role)
    gpu_logs: tuple[tuple[str, str], ...] = ()         # (node, file)
    dcgm: tuple[tuple[str, str], ...] = ()             # (node, URL); node "": the exporter's own Hostname label


def watched(specs: list[ProcessSpec], nodes: tuple[str, ...], **more: Any) -> Watched:
    """What telemetry reads of a deployment whose node `i` is named `nodes[i]`: each process's metrics page and the
    GPUs its role holds (`gpu_ids`, else the first `gpus` of each node it spans, split evenly); `more`: the
    launcher's own fields (gpu_logs)."""
    def name(index: int) -> str:
        return nodes[index] if index < len(nodes) else str(index)

    pages = tuple(MetricsPage(s.name, s.role, f"http://{s.host}:{s.port}", s.metrics, name(s.node_index))
                  for s in specs if s.metrics and s.port)
    roles: list[tuple[str, int, str]] = []
    for s in specs:
        if s.gpu_ids:
            roles += [(name(s.node_index), i, s.role) for i in s.gpu_ids]
        elif s.gpus:
            per_node = -(-s.gpus // max(1, s.nodes))
            roles += [(name(s.node_index + n), i, s.role) for n in range(max(1, s.nodes)) for i in range(per_node)]
    return Watched(nodes=tuple(nodes), pages=pages, gpu_roles=tuple(dict.fromkeys(roles)), **more)


@dataclass(frozen=True)
class Replica:
    """One of an engine's independent serving replicas (`engine.replicas` in the plan): its name (`replica-<i>`), the
    base URL the head reaches it at, the node it runs on (by name) and the GPU ids it holds there."""

    name: str
    base_url: str
    node: str = ""
    gpu_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Endpoint:
    """What the load generator talks to. With `replicas`, the system is those independent replicas and the head's
    dispatch (tasks/harness) spreads the samples over them; `base_url` is then the first replica's."""

    base_url: str
    model: str                     # the `model` field of every request
    accepts_token_ids: bool        # prompt may be a list of token ids
    returns_token_ids: bool        # the response carries output token ids
    tokenizer: str | None = None   # local tokenizer.json, for engines that take and return text only
    drop_fields: frozenset[str] = frozenset()   # request fields the engine rejects
    request_fields: dict[str, Any] = field(default_factory=dict)   # added to every request, e.g. what makes the
    #                                engine return token ids: vLLM {"return_token_ids": true}, TRT-LLM {"detokenize":
    #                                false}, Dynamo {"nvext": {"extra_fields": ["completion_token_ids"]}}
    token_ids_in: str = "choice"   # where a streamed chunk carries them: choices[].token_ids ("choice") or
    #                                nvext.completion_token_ids ("nvext", Dynamo)
    watched: Watched = Watched()   # what each run's telemetry reads besides `base_url`'s metrics (the launcher's)
    replicas: tuple[Replica, ...] = ()   # () : one serving instance at `base_url`

    def for_client(self) -> dict[str, Any]:
        """What a measuring client is given, as JSON (`watched` is telemetry's, not the client's)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "watched"}
        replicas = [dataclasses.asdict(r) for r in self.replicas]
        return data | {"drop_fields": sorted(self.drop_fields), "replicas": replicas}

    @classmethod
    def from_client(cls, data: dict[str, Any]) -> Endpoint:
        """The endpoint `for_client` gave, read back (in a measuring client's process)."""
        replicas = tuple(Replica(**{**r, "gpu_ids": tuple(r.get("gpu_ids", ()))}) for r in data.get("replicas", ()))
        return cls(**{**data, "drop_fields": frozenset(data["drop_fields"]), "replicas": replicas})


@dataclass(frozen=True)
class Node:
    """One node of a placement: the address processes there are reached at, and the ports reserved there."""

    host: str
    ports: tuple[int, ...]


@dataclass(frozen=True)
class Placement:
    """Where the launcher puts a deployment: the bind host and the ports it reserved.

    One node is `host` + `ports`; a multi-node placement lists `nodes` (node 0 first). `bind` is the address servers
    bind when it differs from the one they are reached at (0.0.0.0 in a pod); `service_address` is a template
    (`{name}` = process name) when every process has its own address (a Kubernetes Service per process).
    `workdir` is a directory private to this deployment that every node sees (None: the backend makes one).
    `platform` is the nodes' GPU platform (submission/plan/platforms.py): how a process is pinned to its GPUs.
    """

    host: str
    ports: tuple[int, ...]
    nodes: tuple[Node, ...] = ()
    bind: str | None = None
    service_address: str | None = None
    workdir: str | None = None
    platform: Platform = NVIDIA

    def node(self, index: int) -> Node:
        if not self.nodes:
            if index != 0:
                raise LaunchError(f"the launcher placed one node; node {index} does not exist",
                                  fix="give the launcher as many nodes as the topology's `nodes`")
            return Node(self.host, self.ports)
        if index >= len(self.nodes):
            raise LaunchError(f"the launcher placed {len(self.nodes)} node(s); node {index} does not exist",
                              fix="give the launcher as many nodes as the topology's `nodes`")
        return self.nodes[index]

    def bind_host(self, index: int) -> str:
        return self.bind or self.node(index).host

    def address(self, index: int, name: str) -> str:
        """Where other processes reach process `name` on node `index`."""
        return self.service_address.format(name=name) if self.service_address else self.node(index).host


class EngineBackend(Protocol):
    """What every backend has; every backend subclasses this Protocol, so the members with a body are defaults that
    a backend overrides where it differs. Each method takes the engine's typed options
    (submission.plan.engine_options, as
    `EngineSpec.config()` parsed them when the plan loaded) or a plan's mapping of them, which `options` parses."""

    name: str
    ports_needed: int
    max_port: int | None = None   # the highest port its processes can take (Dynamo: a signed 16-bit number)
    external: bool = False        # it runs elsewhere: launchers start nothing, `attach` waits until it answers

    def options(self, options: OptionsLike) -> Any:
        """The typed options (given back as they are when they already are)."""
        return parse_options(self.name, options)

    def version(self, options: OptionsLike = None) -> str: ...

    def demand(self, options: OptionsLike) -> tuple[int, int]:
        """(nodes, ports per node) that these options need."""
        return 1, self.ports_needed

    def services(self, options: OptionsLike) -> dict[str, str]:
        """The commands it starts on node 0 besides the engine itself, by the option that names each (preflight
        looks for them where they run). Default: none."""
        return {}

    def build(self, options: OptionsLike, model_dir: Path, out_dir: Path, runner: Any) -> list[str]:
        """Build what the engine serves from into `out_dir` (tasks/serving/build.py's Runner does the work); returns
        the files written. Default: nothing to build."""
        return []

    def processes(self, options: OptionsLike, model_dir: Path, placement: Placement,
                  build_dir: Path | None = None) -> list[ProcessSpec]: ...

    def endpoint(self, options: OptionsLike, model_dir: Path, processes: list[ProcessSpec]) -> Endpoint: ...

    def attach(self, options: OptionsLike, timeout_s: float) -> None:
        """An external engine: wait until it answers. Others are started by a launcher, never attached to."""
        raise LaunchError(f"the {self.name} engine is started by a launcher, not attached to",
                          fix="use engine.name external for an endpoint Podium does not start")


BACKENDS = {
    "smoke": "tasks.engines.smoke.llm",
    "smoke-vlm": "tasks.engines.smoke.vlm",
    "vllm": "tasks.engines.vllm",
    "trtllm": "tasks.engines.trtllm",
    "sglang": "tasks.engines.sglang",
    "dynamo": "tasks.engines.dynamo",
    "external": "tasks.engines.external",
    "simulated": "tasks.engines.simulated",   # a queueing-model server of known capacity (search tests, benchmark)
}


def write_files(spec: ProcessSpec) -> None:
    """Write a process's config files where its argv expects them (each atomically; the same text is a no-op)."""
    for name, text in spec.files.items():
        path = Path(name)
        if not (path.is_file() and path.read_text() == text):
            write_atomic(path, text)


def backend(name: str) -> EngineBackend:
    """The backend registered under `name`."""
    if name not in BACKENDS:
        raise PlanError(f"unknown engine {name!r}", fix=did_you_mean(name, BACKENDS))
    return importlib.import_module(BACKENDS[name]).BACKEND


def service_fix(option: str, command: str, place: str) -> str:
    """How to fix a command of `EngineBackend.services` missing on `place`."""
    return (f"install {Path(command).name} on {place} (etcd: Debian's etcd-server package or an etcd-io/etcd release; "
            f"nats-server: a nats-io/nats-server release), or set engine.{option} to its path")


def engine_identity(name: str, options: OptionsLike, replicas: Any = None) -> str:
    """What identifies a deployment's behaviour: the engine, its version and its options, each env value as `<set>`
    and a digest of the values after them (submission/plan/secret_env.py), and for an engine of replicas (`replicas`:
    its submission.plan.replicas.Layout) how many on how many nodes, so a run of 8 replicas is never one of 64's."""
    be = backend(name)
    given = be.options(options).as_plan()
    env = f" env-sha256:{values_digest(given['env'])}" if given.get("env") else ""
    copies = f" replicas {replicas.per_node}x{replicas.nodes}" if replicas is not None else ""
    return f"{name} {be.version(options)} {json.dumps(shown_options(given), sort_keys=True)}{env}{copies}"
