"""The kubernetes launcher: the deployment's objects (tasks/launchers/kubernetes_manifests.py) applied with the
kubernetes client; readiness through each Service, by the API server's service proxy, so Podium needs no route into
the cluster to know the engine generates; stopped by deleting exactly the objects it created.

Each pod has its own address, so every process binds 0.0.0.0 on fixed ports and is reached at its Service's name.
A pod whose container crashes or cannot pull its image fails the launch at once with the tail of its log. The
objects a launch created are recorded under the state folder, so a later launch removes what a killed run left.
A flow pod's state folder may die with it, so before creating anything a launch also lists the deployment's objects
by their labels (`labels(prefix)`): those an earlier flow of the same plan, system and benchmark left (the owner
labels, `owner_labels`) are deleted and waited for until gone, so the new ones never meet a 409 Conflict; those
another benchmark made under the same prefix are left alone, and the launch says whose they are.
`watched` names the nodes the engine's pods run on, for telemetry: Podium's own pods by its labels, a Dynamo graph's
by the labels the operator puts on them (`GRAPH_NAME_LABEL`, `GRAPH_SERVICE_LABEL`).
`run_pod` runs one short-lived pod to its end and returns its node and log (preflight's description of the engine's
node, tasks/ops/kube_checks.py); it deletes the pod however it ends.
`ACCESS` (and `GRAPH_ACCESS` for a Dynamo graph) is every Kubernetes API call the launcher and preflight make, as
RBAC names it: deployments/kubernetes/rbac.yaml's Role grants exactly these (tests/integration/test_kubernetes.py),
and preflight asks the API server whether the plan's account may make each (tasks/ops/kube_checks.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from submission.base.errors import LaunchError
from submission.plan.engine_options import KubernetesSettings
from submission.plan.platforms import NVIDIA, Platform
from submission.plan.replicas import Layout
from tasks.engines import Endpoint, HttpProbe, Placement, ProcessSpec, Watched, watched
from tasks.launchers import Launcher
from tasks.launchers import replicas as replica_wait
from tasks.launchers.kubernetes_manifests import (
    COMPONENTS,
    DGD,
    GRAPH_NAME_LABEL,
    GRAPH_SERVICE_LABEL,
    LABEL,
    OWNER,
    dns_name,
    labels,
    manifests,
    owner_labels,
    selector,
    shown,
    validate,
)
from tasks.launchers.replicas import Readiness

BAD_WAITING = {"CrashLoopBackOff", "ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError",
               "CreateContainerError", "InvalidImageName", "RunContainerError"}
TAIL_LINES = 30
POLL_S = 2.0
# (verb, API group, resource[/subresource]) in the engine's namespace
ACCESS = tuple((verb, group, resource) for group, resources, verbs in (
    # the engine's objects (its environment's values in a Secret), preflight's pod
    ("", ("configmaps", "secrets", "services", "pods"), ("list", "create", "delete")),
    ("apps", ("deployments",), ("list", "create", "delete")),
    ("", ("services/proxy",), ("get", "create")),            # readiness probes through the API server's proxy
    ("", ("pods/log",), ("get",)),                            # a failing pod's log; preflight's pod's output
    ("", ("persistentvolumeclaims",), ("get",)),              # preflight: the model's claim exists
) for resource in resources for verb in verbs)
GRAPH_ACCESS = tuple((verb, DGD[0], DGD[2]) for verb in ("list", "create", "delete"))   # a DynamoGraphDeployment
GONE_TIMEOUT_S = 300.0   # a replaced Deployment is deleted in the foreground: gone once its pods have terminated


@dataclass
class KubernetesDeployment:
    processes: list[ProcessSpec]
    prefix: str
    objects: list[dict]
    graph: bool
    created: list[tuple[str, str]] = field(default_factory=list)   # (kind, name) in creation order


def api_error(e: Exception, what: str) -> LaunchError:
    status, reason, body = getattr(e, "status", "?"), getattr(e, "reason", ""), getattr(e, "body", "") or ""
    try:
        message = json.loads(body).get("message", body)
    except (ValueError, AttributeError):
        message = body
    fix = {401: "check the kubeconfig credentials", 403: "grant the service account rights in the namespace",
           404: "check the namespace (and that the Dynamo operator's CRDs are installed for a graph)"}
    return LaunchError(f"kubernetes API: {what} failed: {status} {reason}: {str(message)[:300]}",
                       fix=fix.get(status, "read the API server's message above"))


class KubernetesLauncher(Launcher):
    name = "kubernetes"

    def __init__(self, state_dir: Path, settings: KubernetesSettings | dict[str, Any], engine: str = "",
                 api_client: Any = None, owner: dict[str, str] | None = None, replicas: Layout | None = None,
                 platform: Platform = NVIDIA) -> None:
        self.state_dir = state_dir
        self.replicas = replicas   # with head: own-node, replica pods keep off the flow pod's node
        self.platform = platform   # the GPUs' resource (amd.com/gpu on AMD's) and the variables a pod drops
        self.owner = dict(owner or {})   # plan, system, benchmark: labels on every object (owner_labels)
        self.settings = settings if isinstance(settings, KubernetesSettings) else \
            KubernetesSettings.model_validate(settings)
        self.prefix = self.settings.name or dns_name("podium", engine or "engine")
        self.graph = self.settings.dynamo_graph if self.settings.dynamo_graph is not None else engine == "dynamo"
        self._api = api_client

    # --- what the backends see ------------------------------------------------------------------------------
    def service_name(self, process: str) -> str:
        return dns_name(self.prefix, process)

    def placement(self, ports_needed: int, nodes: int = 1, max_port: int | None = None) -> Placement:
        ports = tuple(self.settings.port + i for i in range(ports_needed))
        if max_port is not None and ports and ports[-1] > max_port:
            raise LaunchError(f"this engine takes ports up to {max_port}; kubernetes.port {self.settings.port} "
                              f"gives up to {ports[-1]}", fix=f"set engine.kubernetes.port under {max_port}")
        template = f"{self.prefix}-{{name}}.{self.settings.namespace}.svc.cluster.local"
        return Placement("0.0.0.0", ports, nodes=tuple(_node(ports) for _ in range(nodes)) if nodes > 1 else (),
                         bind="0.0.0.0", service_address=template, workdir="/tmp/podium", platform=self.platform)

    def model_path(self, staged: Path) -> Path:
        return Path(self.settings.model_path) if self.settings.model_path else staged

    def objects(self, specs: list[ProcessSpec]) -> list[dict]:
        apart = self.replicas is not None and self.replicas.head == "own-node"
        objects = manifests(self.prefix, specs, self.settings, self.graph, self.owner, head_apart=apart,
                            platform=self.platform)
        validate(objects)
        return objects

    # --- the API ------------------------------------------------------------------------------------------------
    @property
    def api(self) -> Any:
        if self._api is None:
            from kubernetes import config

            try:
                if self.settings.kubeconfig is None and self.settings.context is None and \
                        os.environ.get("KUBERNETES_SERVICE_HOST"):
                    config.load_incluster_config()
                    from kubernetes.client import ApiClient

                    self._api = ApiClient()
                else:
                    self._api = config.new_client_from_config(config_file=self.settings.kubeconfig,
                                                              context=self.settings.context)
            except (config.ConfigException, OSError) as e:
                raise LaunchError(f"no Kubernetes credentials: {e}",
                                  fix="set engine.kubernetes.kubeconfig/context, or run Podium inside the cluster") \
                    from None
        return self._api

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return fn(*args, **kwargs)
        except ApiException as e:
            raise api_error(e, what) from None

    def _create(self, obj: dict) -> None:
        from kubernetes import client

        ns, kind, name = self.settings.namespace, obj["kind"], obj["metadata"]["name"]
        core, apps, custom = client.CoreV1Api(self.api), client.AppsV1Api(self.api), client.CustomObjectsApi(self.api)
        create = {"ConfigMap": lambda: core.create_namespaced_config_map(ns, client.V1ConfigMap.from_dict(obj)),
                  "Secret": lambda: core.create_namespaced_secret(ns, client.V1Secret.from_dict(obj)),
                  "Pod": lambda: core.create_namespaced_pod(ns, client.V1Pod.from_dict(obj)),
                  "Service": lambda: core.create_namespaced_service(ns, client.V1Service.from_dict(obj)),
                  "Deployment": lambda: apps.create_namespaced_deployment(ns, client.V1Deployment.from_dict(obj)),
                  DGD[3]: lambda: custom.create_namespaced_custom_object(DGD[0], DGD[1], ns, DGD[2], obj)}
        from kubernetes.client.exceptions import ApiException

        try:
            create[kind]()
        except ApiException as e:
            if e.status == 409:
                raise LaunchError(f"{kind} {name} already exists in namespace {ns} and this workspace did not "
                                  f"create it", fix="delete it, or set engine.kubernetes.name to another prefix") \
                    from None
            raise api_error(e, f"creating {kind} {name}") from None

    def _delete(self, kind: str, name: str) -> None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        ns = self.settings.namespace
        core, apps, custom = client.CoreV1Api(self.api), client.AppsV1Api(self.api), client.CustomObjectsApi(self.api)
        raw = {"_preload_content": False}   # the answer (the object, or a Status) is not needed
        delete = {"ConfigMap": lambda: core.delete_namespaced_config_map(name, ns, **raw),
                  "Secret": lambda: core.delete_namespaced_secret(name, ns, **raw),
                  "Pod": lambda: core.delete_namespaced_pod(name, ns, grace_period_seconds=0, **raw),
                  "Service": lambda: core.delete_namespaced_service(name, ns, **raw),
                  "Deployment": lambda: apps.delete_namespaced_deployment(name, ns, propagation_policy="Foreground",
                                                                          **raw),
                  DGD[3]: lambda: custom.delete_namespaced_custom_object(DGD[0], DGD[1], ns, DGD[2], name, **raw)}
        try:
            delete[kind]()
        except ApiException as e:
            if e.status != 404:
                raise api_error(e, f"deleting {kind} {name}") from None

    @property
    def _record(self) -> Path:
        return self.state_dir / f"k8s-{self.settings.namespace}-{self.prefix}.json"

    def _save(self, deployment: KubernetesDeployment) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._record.write_text(json.dumps(deployment.created))

    def reap(self, logger: logging.Logger | logging.LoggerAdapter) -> int:
        """Delete the objects an earlier launch recorded and never deleted (it was killed). Returns how many."""
        if not self._record.is_file():
            return 0
        left = [tuple(x) for x in json.loads(self._record.read_text())]
        for kind, name in reversed(left):
            logger.warning("deleting %s %s left behind by an earlier run", kind, name)
            self._delete(kind, name)
        self._record.unlink()
        return len(left)

    def _listed(self, kinds: list[str]) -> list[tuple[str, str, dict[str, str]]]:
        """(kind, name, labels) of every object of these kinds that carries this deployment's labels."""
        from kubernetes import client

        ns, sel = self.settings.namespace, selector(labels(self.prefix))
        core, apps, custom = client.CoreV1Api(self.api), client.AppsV1Api(self.api), client.CustomObjectsApi(self.api)
        raw = {"label_selector": sel, "_preload_content": False}   # plain JSON: every kind read alike
        lists = {"ConfigMap": lambda: core.list_namespaced_config_map(ns, **raw),
                 "Secret": lambda: core.list_namespaced_secret(ns, **raw),
                 "Service": lambda: core.list_namespaced_service(ns, **raw),
                 "Deployment": lambda: apps.list_namespaced_deployment(ns, **raw),
                 DGD[3]: lambda: custom.list_namespaced_custom_object(DGD[0], DGD[1], ns, DGD[2], **raw)}
        out = []
        for kind in kinds:
            answer = self._call(f"listing {kind}s labelled {sel}", lists[kind])
            out += [(kind, o["metadata"]["name"], o["metadata"].get("labels") or {})
                    for o in json.loads(answer.data).get("items") or []]
        return out

    def replace_leftovers(self, objects: list[dict], logger: logging.Logger | logging.LoggerAdapter) -> int:
        """Delete the objects of this deployment that an earlier flow of the same plan, system and benchmark left
        (found by label: its record may have died with its pod) and wait until they are gone. Returns how many."""
        kinds = list(dict.fromkeys(o["kind"] for o in objects))
        ours = owner_labels(self.owner)
        left = self._listed(kinds)
        for kind, name, have in left:
            theirs = {k: v for k, v in have.items() if k.removeprefix(f"{LABEL}/") in OWNER}
            if theirs != ours:
                raise LaunchError(f"{kind} {name} in namespace {self.settings.namespace} serves {_whose(theirs)}, "
                                  f"not {_whose(ours)}; the same engine.kubernetes.name ({self.prefix}) names both",
                                  fix="give this benchmark's engine.kubernetes.name a prefix of its own, or delete it "
                                      f"(kubectl delete {kind.lower()} {name} -n {self.settings.namespace})")
        for kind, name, _ in reversed(left):
            logger.warning("replacing %s %s, left by an earlier flow of %s", kind, name, _whose(ours))
            self._delete(kind, name)
        deadline = time.monotonic() + GONE_TIMEOUT_S
        while left and (still := self._listed(kinds)):
            if time.monotonic() > deadline:
                names = ", ".join(f"{k} {n}" for k, n, _ in still)
                held = f"kubectl get pods -n {self.settings.namespace} -l {selector(labels(self.prefix))}"
                raise LaunchError(f"{names} still terminating {GONE_TIMEOUT_S:.0f} s after being deleted",
                                  fix=f"{held} shows what holds them; delete them, then launch again")
            time.sleep(POLL_S)
        return len(left)

    # --- the launcher ------------------------------------------------------------------------------------------
    def start(self, specs: list[ProcessSpec], log_dir: Path, logger: logging.Logger | logging.LoggerAdapter
              ) -> KubernetesDeployment:
        objects = self.objects(specs)
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / "manifests.json").write_text(json.dumps(shown(objects), indent=2))
        self.reap(logger)
        self.replace_leftovers(objects, logger)
        deployment = KubernetesDeployment(processes=specs, prefix=self.prefix, objects=shown(objects),
                                          graph=self.graph)
        try:
            for obj in objects:
                logger.info("creating %s %s in %s", obj["kind"], obj["metadata"]["name"], self.settings.namespace)
                self._create(obj)
                deployment.created.append((obj["kind"], obj["metadata"]["name"]))
                self._save(deployment)
        except BaseException:
            self.stop(deployment)
            raise
        return deployment

    def _fail_fast(self, deployment: KubernetesDeployment, spec: ProcessSpec) -> None:
        """A pod of this process that cannot run fails the launch now, with its log."""
        from kubernetes import client

        core = client.CoreV1Api(self.api)
        pods = self._call("listing pods", core.list_namespaced_pod, self.settings.namespace,
                          label_selector=selector(labels(self.prefix, spec.name)))
        for pod in pods.items or []:
            why = _crashed(pod)
            if why:
                tail = ""
                with contextlib.suppress(Exception):
                    tail = core.read_namespaced_pod_log(pod.metadata.name, self.settings.namespace,
                                                        tail_lines=TAIL_LINES)
                raise LaunchError(f"{spec.name} (pod {pod.metadata.name}) {why} while starting; last lines of "
                                  f"its log:\n{tail}", fix="read the pod's events: kubectl describe pod "
                                                           f"{pod.metadata.name} -n {self.settings.namespace}")

    def run_pod(self, obj: dict, timeout_s: float) -> tuple[str, str]:
        """Create the pod `obj` (restartPolicy Never), wait until it has ended, and return (its node, its log);
        the pod is deleted however this ends (one a killed run left under the same name first). A pod that failed,
        cannot pull its image, or is not running after `timeout_s` (unschedulable: no node has its GPUs free) is a
        LaunchError naming why."""
        from kubernetes import client

        core, ns, name = client.CoreV1Api(self.api), self.settings.namespace, obj["metadata"]["name"]
        by_label = selector(obj["metadata"]["labels"])
        container = obj["spec"]["containers"][0]["name"]
        self._delete("Pod", name)
        self._create(obj)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                pods = self._call("listing pods", core.list_namespaced_pod, ns, label_selector=by_label)
                pod = next((p for p in pods.items or [] if p.metadata.name == name), None)
                phase = pod.status.phase if pod and pod.status else None
                if phase in ("Succeeded", "Failed"):
                    break
                why = _pod_trouble(pod)
                if why and why.split(":")[0] in BAD_WAITING:
                    raise LaunchError(f"pod {name} cannot run: {why}", fix=f"kubectl describe pod {name} -n {ns}")
                if time.monotonic() > deadline:
                    raise LaunchError(f"pod {name} had not run after {timeout_s:.0f} s ({phase or 'not listed'}"
                                      f"{': ' + why if why else ''})",
                                      fix="free the GPUs it asks for on a node of engine.kubernetes.node_selector "
                                          "(an engine a killed run left?), or raise engine.ready_timeout_s")
                time.sleep(POLL_S)
            log = self._call(f"reading the log of pod {name}", core.read_namespaced_pod_log, name, ns,
                             container=container)
            if phase == "Failed":
                raise LaunchError(f"pod {name} failed ({_pod_trouble(pod) or 'no reason given'}); its log:\n"
                                  f"{log[-2000:]}", fix=f"kubectl describe pod {name} -n {ns}")
            return pod.spec.node_name or "", log
        finally:
            self._delete("Pod", name)

    def _probe(self, service: str, port: int, probe: HttpProbe) -> bool:
        """One probe through the API server's service proxy."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        api = self.api
        params = api.param_serialize(   # the probe's path goes in as is: a path parameter would escape its '/'
            method="GET" if probe.body is None else "POST",
            resource_path="/api/v1/namespaces/{namespace}/services/{name}/proxy" + probe.path,
            path_params={"namespace": self.settings.namespace, "name": f"{service}:{port}"},
            header_params={"Accept": "*/*", **({"Content-Type": "application/json"} if probe.body else {})},
            body=probe.body, auth_settings=["BearerToken"])
        try:
            response = api.call_api(*params, _request_timeout=30)
            response.read()
        except (ApiException, HTTPError, OSError):
            return False   # the API server or the Service is not answering yet
        return probe.accepts(response.status, (response.data or b"").decode(errors="replace"))

    def _targets(self, deployment: KubernetesDeployment) -> list[tuple[ProcessSpec, str]]:
        if deployment.graph:   # the operator's Service for the Frontend carries the end-to-end probes
            front = next(s for s in deployment.processes if s.role == "frontend")
            return [(front, self.settings.frontend_service or f"{self.prefix}-frontend")]
        return [(s, self.service_name(s.name)) for s in deployment.processes if s.port]

    def wait_ready(self, deployment: KubernetesDeployment, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for spec, service in self._targets(deployment):
            for probe in spec.probes:
                while not self._probe(service, spec.port or 0, probe):
                    if not deployment.graph:
                        self._fail_fast(deployment, spec)
                    if time.monotonic() > deadline:
                        raise LaunchError(f"{spec.name} was not ready after {timeout_s:.0f} s (Service {service}, "
                                          f"{probe.path})", fix="raise engine.ready_timeout_s or read the pod logs")
                    time.sleep(POLL_S)

    def endpoint(self, endpoint: Endpoint, deployment: KubernetesDeployment) -> Endpoint:
        """How Podium reaches the endpoint: the plan's endpoint_url, else the Service's cluster DNS name."""
        if self.settings.endpoint_url:
            return replace(endpoint, base_url=self.settings.endpoint_url.rstrip("/"))
        if deployment.graph:
            front = next(s for s in deployment.processes if s.role == "frontend")
            service = self.settings.frontend_service or f"{self.prefix}-frontend"
            return replace(endpoint, base_url=f"http://{service}.{self.settings.namespace}.svc.cluster.local:"
                                              f"{front.port}")
        return endpoint

    def review(self, specs: list[ProcessSpec], endpoint: Endpoint) -> tuple[dict[str, Any], Endpoint]:
        unstarted = KubernetesDeployment(processes=specs, prefix=self.prefix, objects=[], graph=self.graph)
        return {"kubernetes": shown(self.objects(specs))}, self.endpoint(endpoint, unstarted)

    def _pods_on_nodes(self, labelled: dict[str, str]) -> list[Any]:
        """The pods carrying these labels that a node runs (spec.nodeName set), as the client's models; none when the
        API does not answer: what telemetry reads costs the node names, never the launch."""
        from kubernetes import client

        with contextlib.suppress(Exception):
            pods = self._call("listing pods", client.CoreV1Api(self.api).list_namespaced_pod, self.settings.namespace,
                              label_selector=selector(labelled))
            return [p for p in pods.items or [] if p.spec is not None and p.spec.node_name]
        return []

    def watched(self, deployment: KubernetesDeployment) -> Watched:
        """The deployment by the nodes its pods run on (each pod's spec.nodeName), node 0 first: what a DCGM URL
        template is filled with. A graph's pods are the operator's: found by the graph's name label and told apart by
        their service label (`graph_nodes`); its workers are reached through the operator, so no page of theirs is
        read, and the device plugin, not Podium, picks which GPUs of its node a pod holds, so no GPU is given a role.
        Nodes the API does not name (yet) are left out."""
        if deployment.graph:
            pods = [((p.metadata.labels or {}).get(GRAPH_SERVICE_LABEL, ""), p.metadata.name, p.spec.node_name)
                    for p in self._pods_on_nodes({GRAPH_NAME_LABEL: deployment.prefix})
                    if p.metadata.deletion_timestamp is None]
            return Watched(nodes=graph_nodes(deployment.processes, pods))
        by_process: dict[str, str] = {}
        for pod in self._pods_on_nodes(labels(self.prefix)):
            by_process.setdefault((pod.metadata.labels or {}).get(f"{LABEL}/process", ""), pod.spec.node_name)
        nodes: dict[int, str] = {}
        for spec in deployment.processes:
            if dns_name(spec.name) in by_process:
                nodes.setdefault(spec.node_index, by_process[dns_name(spec.name)])
        return watched(deployment.processes, tuple(nodes.get(i, "") for i in range(max(nodes, default=-1) + 1)))

    def alive(self, deployment: KubernetesDeployment) -> bool:
        """False once a pod of the deployment crashed or cannot run (the session then relaunches)."""
        if not deployment.created:
            return False
        if deployment.graph:
            return True   # the operator restarts a graph's pods itself
        try:
            for spec in deployment.processes:
                self._fail_fast(deployment, spec)
        except LaunchError:
            return False
        return True

    # --- replicas: one pod each (tasks/launchers/replicas.py) --------------------------------------------------
    def wait_replicas(self, deployment: KubernetesDeployment, timeout_s: float) -> Readiness:
        return replica_wait.wait(self, deployment, timeout_s, POLL_S)   # each round: a pod list and a proxy call each

    def probe(self, deployment: KubernetesDeployment, spec: ProcessSpec, probe: HttpProbe, client: Any) -> bool:
        return self._probe(self.service_name(spec.name), spec.port or 0, probe)

    def _pods_by_process(self) -> dict[str, list[Any]]:
        """The deployment's pods by their process label (one list call)."""
        from kubernetes import client

        pods = self._call("listing pods", client.CoreV1Api(self.api).list_namespaced_pod, self.settings.namespace,
                          label_selector=selector(labels(self.prefix)))
        out: dict[str, list[Any]] = {}
        for pod in pods.items or []:
            out.setdefault((pod.metadata.labels or {}).get(f"{LABEL}/process", ""), []).append(pod)
        return out

    def down(self, deployment: KubernetesDeployment) -> dict[str, str]:
        """Replicas whose pod crashed or cannot run (CrashLoopBackOff, an image it cannot pull, ended)."""
        pods, out = self._pods_by_process(), {}
        for spec in (s for s in deployment.processes if s.replica is not None):
            for pod in pods.get(dns_name(spec.name), []):
                if why := _crashed(pod):
                    out[spec.name] = why
        return out

    def replica_nodes(self, deployment: KubernetesDeployment) -> dict[str, str]:
        pods = self._pods_by_process()
        return {s.name: next((p.spec.node_name for p in pods.get(dns_name(s.name), []) if p.spec and
                              p.spec.node_name), "") for s in deployment.processes}

    def replica_log(self, deployment: KubernetesDeployment, name: str, lines: int) -> tuple[str, str]:
        from kubernetes import client

        pods = self._pods_by_process().get(dns_name(name), [])
        if not pods:
            return f"no pod of Deployment {self.service_name(name)}", ""
        pod, text = pods[0], ""
        with contextlib.suppress(Exception):   # a pod not yet scheduled has no log
            text = client.CoreV1Api(self.api).read_namespaced_pod_log(pod.metadata.name, self.settings.namespace,
                                                                      tail_lines=lines)
        trouble = _pod_trouble(pod) if _crashed(pod) is None else ""   # a crash is `down`'s to say
        return f"pod {pod.metadata.name}" + (f", {trouble}" if trouble else ""), text

    def stop(self, deployment: KubernetesDeployment) -> None:
        """Delete what this launch created, newest first; the record goes when all are gone."""
        for kind, name in reversed(deployment.created):
            self._delete(kind, name)
        deployment.created.clear()
        self._record.unlink(missing_ok=True)


def graph_nodes(specs: list[ProcessSpec], pods: list[tuple[str, str, str]]) -> tuple[str, ...]:
    """The nodes a graph's pods run on, each pod given as (its service label, its name, its node), in the order of
    Podium's processes (node 0 first, then the processes' own order): a service's pods, by name, stand for the
    processes of its role in turn (the operator places replicas, not Podium's processes); a pod more than its
    service's processes (a replica being replaced) comes last; a pod of a service Podium did not write is left out."""
    roles = {name: role for role, (name, _, _) in COMPONENTS.items()}
    by_role: dict[str, list[str]] = {}
    for service, _, node in sorted(pods):
        if service in roles:
            by_role.setdefault(roles[service], []).append(node)
    placed = []
    for position, spec in enumerate(specs):
        if by_role.get(spec.role):
            placed.append((spec.node_index, position, by_role[spec.role].pop(0)))
    rest = [node for nodes in by_role.values() for node in nodes]
    return tuple(dict.fromkeys([node for _, _, node in sorted(placed)] + rest))


def _whose(owner: dict[str, str]) -> str:
    """`plan smoke, system cpu, benchmark gpt-oss-120b` from owner labels; "no named benchmark" without them."""
    named = [f"{k} {owner[f'{LABEL}/{k}']}" for k in OWNER if f"{LABEL}/{k}" in owner]
    return ", ".join(named) or "no named benchmark"


def _pod_trouble(pod: Any) -> str:
    """Why a pod is not running, as `Reason: message`: a container waiting or ended badly, else an unmet condition
    (`Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.`); "" when nothing is said."""
    status = pod.status if pod is not None else None
    for c in (status.container_statuses or []) if status else []:
        state = c.state
        bad = (state.waiting if state and state.waiting and state.waiting.reason in BAD_WAITING else None) or \
            (state.terminated if state and state.terminated and state.terminated.exit_code else None)
        if bad:
            return f"{bad.reason}: {bad.message or ''}".rstrip(": ")
    for cond in (status.conditions or []) if status else []:
        if cond.status == "False" and cond.reason:
            return f"{cond.reason}: {cond.message or ''}".rstrip(": ")
    return ""


def _crashed(pod: Any) -> str | None:
    """Why a pod's container cannot run (its waiting reason, e.g. CrashLoopBackOff) or has ended (`exited with code
    N`); None while it may run."""
    for status in (pod.status.container_statuses or []) if pod.status else []:
        waiting = status.state.waiting if status.state else None
        done = status.state.terminated if status.state else None
        if waiting and waiting.reason in BAD_WAITING:
            return waiting.reason
        if done:
            return f"exited with code {done.exit_code}"
    return None


def _node(ports: tuple[int, ...]) -> Any:
    from tasks.engines import Node

    return Node("0.0.0.0", ports)


def make(state_dir: Path, settings: KubernetesSettings | dict[str, Any] | None = None, engine: str = "",
         **kwargs: Any) -> KubernetesLauncher:
    if settings is None:
        raise LaunchError("the kubernetes launcher needs settings", fix="add engine.kubernetes to the plan")
    return KubernetesLauncher(state_dir, settings, engine=engine, **kwargs)
