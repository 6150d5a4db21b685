"""NVIDIA Dynamo (1.6.1): a frontend, N prefill and M decode workers each at its own TP, and the infrastructure its
discovery needs (engines.md §3): etcd for `discovery: etcd` (Slurm), NATS when a plane uses it, both on
`options.services_node` (node 0 unless the plan says otherwise); none for `file` (one node) or `kubernetes` (the
operator, see tasks/launchers/kubernetes.py).

Workers are `python -m dynamo.vllm` (or `dynamo.mocker`, the simulated engine that runs on a CPU). Each worker gets
its own system port (`DYN_SYSTEM_PORT`, readiness: its /health says `"status":"ready"`; its /metrics is read by each
run's telemetry beside the frontend's) and, for vLLM, its own
NIXL side-channel port and host, unique on its node; the prefill worker's explicit `--kv-transfer-config` is required
by 1.6.1. The frontend comes last: it is ready when a one-token request goes through it. Output token ids stream in
`nvext.completion_token_ids` when a request asks for them in `nvext.extra_fields`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from submission.base.errors import LaunchError
from submission.plan.engine_options import DynamoOptions, OptionsLike
from submission.plan.topology import Slot, place
from tasks.engines import Endpoint, EngineBackend, HttpProbe, Placement, ProcessSpec
from tasks.engines.common import (
    OFFLINE_ENV,
    check_checkpoint,
    engine_version,
    gpu_env,
    ready_probes,
    scratch,
    served_name,
)
from tasks.engines.vllm import kv_transfer_config, mm_limits, nixl_env

DISTS = ("ai-dynamo",)
# A worker's system /health answers 503 "notready" until told which endpoints make it ready; with this it turns
# 200 "ready" once its generate endpoint serves. 1.6.1 logs that the variable "is deprecated and no longer used"
# (runtime config.rs), yet its health still follows it: a 1.6.1 mocker without it stayed 503 "notready" for 60 s with
# "generate":"ready" in the same answer, and was 200 "ready" within 2 s with it. The other switch 1.6.1 reads,
# DYN_HEALTH_CHECK_ENABLED=true, also makes it ready but sends canary requests to idle workers (docs/engines.md).
WORKER_HEALTH = {"DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS": '["generate"]'}
WORKER_READY = '"status":"ready"'
# 1.6.1 parses DYN_SYSTEM_PORT as a signed 16-bit number ("expected i16 for key SYSTEM_PORT"): every port given to a
# Dynamo deployment stays under 32768 (found running the mocker here; the kernel's ephemeral ports start at 32768).
MAX_PORT = 32767


class Ports:
    """Hands out each node's reserved ports in order."""

    def __init__(self, placement: Placement, nodes: int) -> None:
        self.placement = placement
        self.used = [0] * nodes

    def take(self, node: int) -> int:
        ports = self.placement.node(node).ports
        if self.used[node] >= len(ports):
            raise LaunchError(f"the launcher reserved {len(ports)} port(s) on node {node}; the deployment needs more",
                              fix="place it with tasks.launchers.placement_for (it asks for the backend's demand)")
        port = ports[self.used[node]]
        self.used[node] += 1
        return port


class DynamoBackend(EngineBackend):
    name = "dynamo"
    ports_needed = 1
    max_port = MAX_PORT


    def version(self, options: OptionsLike | None = None) -> str:
        o = self.options(options or {})
        return engine_version("Dynamo", o.version, o.python, DISTS,
                              fix="install ai-dynamo for options.python (see docs/engines.md), or pin "
                                  "options.version when it runs in a container")

    def slots(self, o: DynamoOptions) -> list[Slot]:
        return place(o.pools(), o.nodes, o.gpus_per_node, o.workers_per_gpu)

    def services(self, options: OptionsLike) -> dict[str, str]:
        """etcd for `discovery: etcd`, nats-server when a plane is NATS (engines.md §3)."""
        o = self.options(options)
        return {**({"options.etcd": o.etcd} if o.discovery == "etcd" else {}),
                **({"options.nats": o.nats} if "nats" in (o.request_plane, o.event_plane) else {})}

    def _infra_ports(self, o: DynamoOptions) -> int:
        return 2 * len(self.services(o))   # each: a client port and a peer (etcd) or monitoring (NATS) one

    def demand(self, options: OptionsLike) -> tuple[int, int]:
        o = self.options(options)
        per_node = [0] * o.nodes
        per_node[0] = 1                                        # the frontend
        per_node[o.services_node] += self._infra_ports(o)
        for slot in self.slots(o):   # system port; vLLM: NIXL side channel, and the KV-event port when publishing
            per_node[slot.node] += (2 + o.publishes_kv_events) if o.worker == "vllm" else 1
        return o.nodes, max(per_node)

    def build(self, options: OptionsLike, model_dir: Path, out_dir: Path, runner: Any) -> list[str]:
        """Dynamo workers load the checkpoint themselves: check it."""
        return runner.check_checkpoint(model_dir, check_checkpoint(model_dir))

    def _common_env(self, o: DynamoOptions, infra: dict[str, str], kv_dir: Path) -> dict[str, str]:
        env = {**OFFLINE_ENV, **infra}
        if o.discovery == "file":
            env["DYN_FILE_KV"] = str(kv_dir)
        return env

    def _infra(self, o: DynamoOptions, placement: Placement, ports: Ports, work: Path,
               env: dict[str, str]) -> tuple[list[ProcessSpec], dict[str, str]]:
        specs, infra = [], {}
        node = o.services_node
        bind, address = placement.bind_host(node), placement.address(node, "etcd")
        if o.discovery == "etcd":
            client, peer = ports.take(node), ports.take(node)
            argv = (o.etcd, "--name", "podium", "--data-dir", str(work / "etcd"),
                    "--listen-client-urls", f"http://{bind}:{client}",
                    "--advertise-client-urls", f"http://{address}:{client}",
                    "--listen-peer-urls", f"http://{bind}:{peer}",
                    "--initial-advertise-peer-urls", f"http://{address}:{peer}",
                    "--initial-cluster", f"podium=http://{address}:{peer}")
            specs.append(ProcessSpec(role="etcd", name="etcd", argv=argv, env=dict(env), host=address, port=client,
                                     node_index=node, side_ports={"peer": peer},
                                     probes=(HttpProbe("/health", contains='"true"'),), bind=placement.bind))
            infra["ETCD_ENDPOINTS"] = f"http://{address}:{client}"
        if "nats" in (o.request_plane, o.event_plane):
            address = placement.address(node, "nats")
            client, monitor = ports.take(node), ports.take(node)
            argv = (o.nats, "-js", "-a", bind, "-p", str(client), "-m", str(monitor), "-sd", str(work / "nats"))
            specs.append(ProcessSpec(role="nats", name="nats", argv=argv, env=dict(env), host=address, port=monitor,
                                     node_index=node, side_ports={"client": client}, probes=(HttpProbe("/healthz"),),
                                     bind=placement.bind))
            infra["NATS_SERVER"] = f"nats://{address}:{client}"
        return specs, infra

    def _planes(self, o: DynamoOptions) -> list[str]:
        args = ["--discovery-backend", o.discovery]
        if o.request_plane != "tcp":
            args += ["--request-plane", o.request_plane]
        if o.event_plane is not None:
            args += ["--event-plane", o.event_plane]
        return args

    def _worker(self, o: DynamoOptions, slot: Slot, model_dir: Path, model: str, placement: Placement,
                ports: Ports, env: dict[str, str]) -> ProcessSpec:
        pool = o.prefill if slot.role == "prefill" else o.decode
        assert pool is not None
        name, node = f"{slot.role}-{slot.index}", slot.node
        address = placement.address(node, name)
        system_port = ports.take(node)
        mode = ["--disaggregation-mode", slot.role] if o.prefill is not None else []
        if o.worker == "mocker":
            argv = [o.python, "-m", "dynamo.mocker", "--model-path", str(model_dir), "--model-name", model, *mode]
            side: dict[str, int] = {}
            extra_env: dict[str, str] = {}
        else:
            argv = [o.python, "-m", "dynamo.vllm", "--model", str(model_dir), "--served-model-name", model,
                    "--tensor-parallel-size", str(pool.tensor_parallel_size),
                    "--pipeline-parallel-size", str(pool.pipeline_parallel_size), *mode]
            if pool.expert_parallel_size is not None:
                argv.append("--enable-expert-parallel")
            if o.prefill is not None:
                argv += ["--kv-transfer-config", kv_transfer_config(o.kv_transfer)]
            side = {"nixl_side_channel": ports.take(node)}
            if o.publishes_kv_events:
                side["kv_events"] = ports.take(node)
            argv += ["--kv-events-config", kv_events_config(side.get("kv_events"))]
            if o.max_model_len is not None:
                argv += ["--max-model-len", str(o.max_model_len)]
            if o.limit_mm_per_prompt:
                argv += ["--limit-mm-per-prompt", mm_limits(o.limit_mm_per_prompt)]
            if o.enable_multimodal:
                argv.append("--enable-multimodal")
            extra_env = nixl_env(address, side["nixl_side_channel"])
        if o.enable_prefix_caching is not None:   # both dynamo.vllm and dynamo.mocker take the pair
            argv.append("--enable-prefix-caching" if o.enable_prefix_caching else "--no-enable-prefix-caching")
        argv += [*self._planes(o), *o.worker_args, *pool.extra_args, *o.extra_args]
        bind = placement.bind_host(node)
        host_env = {"DYN_SYSTEM_PORT": str(system_port), "DYN_SYSTEM_HOST": bind, "DYN_TCP_RPC_HOST": address,
                    "DYN_TCP_RESPONSE_STREAM_HOST": address, "DYN_EVENT_PLANE_HOST": address, **WORKER_HEALTH}
        return ProcessSpec(role=slot.role, name=name, argv=tuple(argv),
                           env={**env, **host_env, **extra_env, **gpu_env(slot.gpu_ids, placement.platform), **o.env},
                           host=address,
                           port=system_port, gpus=len(slot.gpu_ids), gpu_ids=slot.gpu_ids, node_index=node,
                           side_ports=side, probes=(HttpProbe("/health", contains=WORKER_READY),),
                           bind=placement.bind, metrics="dynamo-worker")

    def processes(self, options: OptionsLike, model_dir: Path, placement: Placement,
                  build_dir: Path | None = None) -> list[ProcessSpec]:
        o = self.options(options)
        model = served_name(o, model_dir)
        ports = Ports(placement, o.nodes)
        front_port = ports.take(0)
        work = scratch(placement.workdir, build_dir, self.name) / f"dynamo-{front_port}"
        infra_specs, infra = self._infra(o, placement, ports, work, OFFLINE_ENV)
        env = self._common_env(o, infra, work / "discovery")
        workers = [self._worker(o, slot, model_dir, model, placement, ports, env) for slot in self.slots(o)]
        address = placement.address(0, "frontend")
        argv = (o.python, "-m", "dynamo.frontend", "--http-host", placement.bind_host(0), "--http-port",
                str(front_port), "--router-mode", o.frontend.router_mode, *router_events(o), *self._planes(o),
                *o.frontend.extra_args)
        probes = ready_probes(model)
        if o.prefill is not None:   # the frontend lists what registered; prefill workers register as `prefill`
            probes = (probes[0], HttpProbe("/health", contains='"component":"prefill"'), *probes[1:])
        frontend = ProcessSpec(role="frontend", name="frontend", argv=argv,
                               env={**env, "DYN_TCP_RPC_HOST": address, "DYN_TCP_RESPONSE_STREAM_HOST": address,
                                    "DYN_EVENT_PLANE_HOST": address, **o.env},
                               host=address, port=front_port, probes=probes, bind=placement.bind)
        return [*infra_specs, *workers, frontend]

    def endpoint(self, options: OptionsLike, model_dir: Path, processes: list[ProcessSpec]) -> Endpoint:
        front = next(p for p in processes if p.role == "frontend")
        tokenizer = model_dir / "tokenizer.json"
        return Endpoint(base_url=f"http://{front.host}:{front.port}", model=served_name(self.options(options),
                                                                                       model_dir),
                        accepts_token_ids=True, returns_token_ids=True,
                        tokenizer=str(tokenizer) if tokenizer.is_file() else None,
                        request_fields={"nvext": {"extra_fields": ["completion_token_ids"]}}, token_ids_in="nvext")


def kv_events_config(port: int | None) -> str:
    """A vLLM worker's `--kv-events-config`: publish KV-cache events on `port` for the KV router, or none.

    vLLM binds its ZMQ publisher only for a wildcard endpoint (`tcp://*:P`; any other address it connects to), and the
    Dynamo worker relays what it reads at 127.0.0.1:P to the frontend over the event plane (dynamo/vllm/main.py):
    the port listens on every interface of its node, so it is reserved like the node's other ports."""
    if port is None:
        return '{"enable_kv_cache_events":false}'
    return json.dumps({"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://*:{port}",
                       "topic": "kv-events"}, separators=(",", ":"))


def router_events(o: DynamoOptions) -> list[str]:
    """The KV router's source of cache state, said explicitly: the workers' events when they publish them, else its
    own predictions (`--no-router-kv-events`), since a router waiting for events nobody sends routes blind.

    With prefix caching off no worker reuses a cached prefix, so there is no overlap to score: `--load-aware` (1.6.1's
    preset, dynamo/common/configuration/groups/kv_router_args.py:99-110) gives overlap no credit, reads no events,
    assumes no KV reuse, and routes on each worker's in-flight prefill tokens and active KV blocks. Predicting cache
    state instead would credit workers with prefixes (the shared system prompt) they never kept."""
    if o.frontend.router_mode != "kv":
        return []
    if o.enable_prefix_caching is False:
        return ["--load-aware"]
    return ["--router-kv-events"] if o.publishes_kv_events or o.worker == "mocker" else ["--no-router-kv-events"]


BACKEND = DynamoBackend()
