"""A fake Kubernetes API server for the kubernetes launcher's tests: it records every request, keeps the objects it
was given, reports a pod per Deployment in the state the test chooses, and forwards the service proxy
(`/api/v1/namespaces/NS/services/NAME:PORT/proxy/PATH`) to a real local server the test names for that Service.
It authorises as the API server's RBAC does, in part: the admin token may do anything; a ServiceAccount's token
(`sa_token`) may do what the Roles bound to that account grant in the request's namespace, and the ClusterRoles bound
to it anywhere (nodes, cluster-scoped), else 403. Nodes (`nodes`, each a Node object with its labels and
`status.nodeInfo.architecture`) are listed by label selector. Each request's
attributes (verb, API group, resource, namespace) are worked out as the API server's RequestInfo does. A
SelfSubjectAccessReview (which every authenticated account may make) answers allowed as that authorisation would,
less the (verb, resource) pairs in `denied`. An object is read by name (404 when absent).
It is no cluster: nothing schedules or pulls, and the only thing it runs is a bare Pod's command (not a Deployment's),
on this host as a node without a container would, once, when the pod is created: the pod then reports node
`fake-node-0`, phase Succeeded or Failed by the exit code, and the output as its log (`schedulable=False`: it stays
Pending, Unschedulable, as on a cluster with no GPU free). Collections are listed by label selector; a deleted object
stays listed, and its name taken, for the next `linger_lists` lists of its kind (`linger_lists=0`: gone at once), as
a Deployment deleted in the foreground stays until its pods have ended. A label selector may name a key alone (the
label present). Every change (an object created, deleted, or changed by `finish_job`) gets the next resourceVersion
and is streamed to a watch (`?watch=true`) of its kind and namespace that matches it, from the resourceVersion the
watch gives; a watch stays open `watch_s` (or its timeoutSeconds) and then ends, as the API server's do. An object
created with `generateName` is named from it. Discovery (`/api`, `/apis`, their group versions) is answered to every
authenticated account, as the API server's system:discovery role does. Jobs (batch/v1) are kept like the other
objects; nothing runs them: `finish_job` does what the Job controller and the kubelet would for a Job whose one pod
ran to an exit code. Listens on 127.0.0.1 only.
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import re
import secrets
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from tests.integration.fake_kube_wire import from_protobuf, openapi_v3, tls_context
from tests.local_http import LocalServer

TOKEN = "podium-test-token"
OBJECT = re.compile(r"^/(?:api/v1|apis/apps/v1|apis/batch/v1|apis/nvidia\.com/v1alpha1"
                    r"|apis/rbac\.authorization\.k8s\.io/v1)/namespaces/([^/]+)/([a-z]+)(?:/([^/]+))?$")
NAMESPACES = re.compile(r"^/api/v1/namespaces$")
CLUSTER_RBAC = re.compile(r"^/apis/rbac\.authorization\.k8s\.io/v1/(clusterroles|clusterrolebindings)$")
RESOURCE = re.compile(r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)(?:/namespaces/(?P<ns>[^/]+))?/(?P<resource>[a-z]+)"
                      r"(?:/(?P<name>[^/]+)(?:/(?P<sub>[a-z]+))?)?(?:/.*)?$")
VERBS = {("GET", True): "get", ("GET", False): "list", ("POST", True): "create", ("POST", False): "create",
         ("PUT", True): "update", ("PATCH", True): "patch", ("DELETE", True): "delete",
         ("DELETE", False): "deletecollection"}


@dataclass(frozen=True)
class Attributes:
    """What RBAC judges a request by."""

    verb: str
    group: str
    resource: str      # with its subresource: "pods/log", "services/proxy"
    namespace: str


def attributes(method: str, path: str, query: dict[str, list[str]] | None = None) -> Attributes:
    """A request's RBAC attributes, as the API server's RequestInfo resolver works them out."""
    m = RESOURCE.match(path)
    if m is None:
        raise ValueError(f"not a resource path: {path}")
    if m["ns"] is None and m["resource"] == "namespaces" and m["name"]:   # /api/v1/namespaces/NS (the object)
        return Attributes(VERBS[(method, True)], "", "namespaces", m["name"])
    verb = VERBS[(method, bool(m["name"]))]
    if verb == "list" and (query or {}).get("watch", ["false"])[0] in ("true", "1"):
        verb = "watch"
    resource = m["resource"] + (f"/{m['sub']}" if m["sub"] else "")
    return Attributes(verb, m["group"] or "", resource, m["ns"] or "")


def allowed(rules: list[dict], what: Attributes) -> bool:
    """Whether any rule of a Role grants `what` (wildcards as RBAC reads them)."""
    return any((what.group in r.get("apiGroups", []) or "*" in r.get("apiGroups", []))
               and (what.resource in r.get("resources", []) or "*" in r.get("resources", []))
               and (what.verb in r.get("verbs", []) or "*" in r.get("verbs", [])) for r in rules)


def matches(labels: dict[str, str], selector: str) -> bool:
    """Whether labels match a label selector of `key=value` and `key` (present) terms, comma-separated."""
    terms = [t for t in selector.split(",") if t]
    return all(labels.get(k) == v if eq else t in labels for t in terms for k, eq, v in [t.partition("=")])


# The resources the fake serves, as discovery and the OpenAPI documents name them: (group, version, plural, kind,
# namespaced); a subresource's verbs are `get` alone
RESOURCES = [("", "v1", plural, kind, namespaced) for plural, kind, namespaced in (
    ("namespaces", "Namespace", False), ("nodes", "Node", False), ("pods", "Pod", True), ("pods/log", "Pod", True),
    ("events", "Event", True), ("serviceaccounts", "ServiceAccount", True), ("secrets", "Secret", True),
    ("configmaps", "ConfigMap", True), ("services", "Service", True),
    ("persistentvolumeclaims", "PersistentVolumeClaim", True))] + [
    ("apps", "v1", "deployments", "Deployment", True), ("batch", "v1", "jobs", "Job", True),
    *(("rbac.authorization.k8s.io", "v1", plural, kind, namespaced) for plural, kind, namespaced in (
        ("roles", "Role", True), ("rolebindings", "RoleBinding", True), ("clusterroles", "ClusterRole", False),
        ("clusterrolebindings", "ClusterRoleBinding", False)))]
VERBS_OF = ["create", "delete", "get", "list", "patch", "watch"]


def _discovery() -> dict[str, dict]:
    """What discovery answers: /api, /apis and each group version's resources (kopf in the Prefect worker's observer
    and kubectl read them before anything else)."""
    docs: dict[str, dict] = {"/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
                             "/version": {"major": "1", "minor": "33", "gitVersion": "v1.33.0"}}
    groups: dict[str, dict] = {}
    for group, version, plural, kind, namespaced in RESOURCES:
        gv = f"{group}/{version}" if group else version
        doc = docs.setdefault(f"/apis/{gv}" if group else f"/api/{gv}",
                              {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": []})
        doc["resources"].append({"name": plural, "singularName": "", "kind": kind, "namespaced": namespaced,
                                 "verbs": ["get"] if "/" in plural else VERBS_OF})
        if group:
            groups[group] = {"name": group, "versions": [{"groupVersion": gv, "version": version}],
                             "preferredVersion": {"groupVersion": gv, "version": version}}
    docs["/apis"] = {"kind": "APIGroupList", "apiVersion": "v1", "groups": list(groups.values())}
    return docs


DISCOVERY = _discovery() | openapi_v3([r for r in RESOURCES if "/" not in r[2]])
SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
PROXY = re.compile(r"^/api/v1/namespaces/([^/]+)/services/([^/:]+):(\d+)/proxy(/.*)$")
PODS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods$")
NODES = "/api/v1/nodes"
LOG = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/log$")


@dataclass
class FakeCluster:
    services: dict[str, tuple[str, int]] = field(default_factory=dict)   # Service name -> a real local server
    objects: dict[tuple[str, str], dict] = field(default_factory=dict)   # (plural, name) -> object
    requests: list[dict[str, Any]] = field(default_factory=list)
    pod_waiting: str | None = None        # e.g. "CrashLoopBackOff": every pod reports it
    pod_log: str = ""
    unready_proxy_calls: int = 0          # the first N proxy calls answer 503, as before a pod is ready
    schedulable: bool = True              # False: bare pods stay Pending (no node has what they ask)
    pod_logs: dict[str, str] = field(default_factory=dict)   # a bare pod's output, by name
    tokens: dict[str, tuple[str, str]] = field(default_factory=dict)   # token -> ServiceAccount (namespace, name)
    rbac: dict[tuple[str, str, str], dict] = field(default_factory=dict)   # (kind, namespace, name) -> Role/Binding
    denied: set[tuple[str, str]] = field(default_factory=set)   # (verb, resource): SelfSubjectAccessReview refuses
    nodes: list[dict] = field(default_factory=list)   # the cluster's Node objects, listed by label selector
    linger_lists: int = 0                 # a deleted object is still listed (terminating) this many more times
    terminating: dict[tuple[str, str], list] = field(default_factory=dict)   # (plural, name) -> [object, lists left]
    version: int = 0                      # the resourceVersion of the last change
    changes: list[tuple[int, str, str, dict]] = field(default_factory=list)   # (version, event type, plural, object)
    watch_s: float = 2.0                  # how long a watch stays open, at most
    lock: threading.Lock = field(default_factory=threading.Lock)

    def changed(self, kind: str, plural: str, obj: dict) -> None:
        """An object ADDED, MODIFIED or DELETED (the lock held): its resourceVersion the next one, and the change
        kept for the watches of its kind."""
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.changes.append((self.version, kind, plural, copy.deepcopy(obj)))

    def finish_job(self, name: str, exit_code: int, log: str = "") -> dict:
        """What the Job controller and the kubelet do for Job `name` whose one pod ran to `exit_code`: the pod, with
        the Job's pod labels and `job-name`, created and ended (its output `log`), and the Job's status counting it.
        Returns the pod."""
        with self.lock:
            job = self.objects[("jobs", name)]
            template = job["spec"]["template"]
            pod_name = f"{name}-{secrets.token_hex(3)[:5]}"
            [container] = template["spec"]["containers"]
            ended = "Succeeded" if exit_code == 0 else "Failed"
            reason = "Completed" if exit_code == 0 else "Error"
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": pod_name, "namespace": job["metadata"]["namespace"], "uid": str(uuid.uuid4()),
                "labels": {**template["metadata"].get("labels", {}), "job-name": name,
                           "controller-uid": job["metadata"]["uid"]},
                "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {**template["spec"], "nodeName": "fake-node-0"},
                "status": {"phase": ended, "containerStatuses": [
                    {"name": container["name"], "image": container["image"], "imageID": "", "ready": False,
                     "restartCount": 0, "state": {"terminated": {"exitCode": exit_code, "reason": reason}}}]}}
            self.objects[("pods", pod_name)] = pod
            self.pod_logs[pod_name] = log
            self.changed("ADDED", "pods", pod)
            job["status"] = {"succeeded" if exit_code == 0 else "failed": 1, "conditions": [
                {"type": "Complete" if exit_code == 0 else "Failed", "status": "True"}]}
            self.changed("MODIFIED", "jobs", job)
            return pod

    def watched(self, plural: str, namespace: str, since: int, labels: str, fields: str) -> list[tuple[int, dict]]:
        """The changes after `since` a watch of `plural` in `namespace` with these selectors sees, as watch events."""
        name = fields.removeprefix("metadata.name=") if fields else None
        return [(version, {"type": kind, "object": obj}) for version, kind, p, obj in self.changes
                if version > since and p == plural and obj["metadata"].get("namespace") == namespace
                and matches(obj["metadata"].get("labels") or {}, labels) and name in (None, obj["metadata"]["name"])]

    def sa_token(self, namespace: str, name: str) -> str:
        token = f"sa-{namespace}-{name}"
        self.tokens[token] = (namespace, name)
        return token

    def authorize(self, token: str | None, what: Attributes) -> bool:
        if token == TOKEN or what.resource == "selfsubjectaccessreviews":   # system:basic-user's, for everyone
            return True
        account = self.tokens.get(token or "")
        if account is None:
            return False
        for (kind, ns, _), binding in self.rbac.items():   # a ClusterRoleBinding grants in every namespace
            if kind not in ("RoleBinding", "ClusterRoleBinding") or (kind == "RoleBinding" and ns != what.namespace):
                continue
            if not any(s.get("kind") == "ServiceAccount" and (s.get("namespace"), s.get("name")) == account
                       for s in binding.get("subjects", [])):
                continue
            ref = binding["roleRef"]
            role = self.rbac.get(("ClusterRole", "", ref["name"]) if ref["kind"] == "ClusterRole"
                                 else ("Role", ns, ref["name"]))
            if role and allowed(role.get("rules", []), what):
                return True
        return False

    def review(self, token: str, body: dict) -> dict:
        """A SelfSubjectAccessReview answered: allowed as `authorize` would, unless (verb, resource) is `denied`."""
        asked = body["spec"]["resourceAttributes"]
        resource = asked["resource"] + (f"/{asked['subresource']}" if asked.get("subresource") else "")
        may = self.authorize(token, Attributes(asked["verb"], asked.get("group") or "", resource,
                                               asked.get("namespace") or "")) \
            and (asked["verb"], resource) not in self.denied
        return {**body, "status": {"allowed": may}}

    def run(self, pod: dict) -> None:
        """A bare pod, created: its command run here once (or left Pending when nothing is schedulable)."""
        name = pod["metadata"]["name"]
        if not self.schedulable:
            pod["status"] = {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]}
            return
        [container] = pod["spec"]["containers"]
        done = subprocess.run(container["command"], capture_output=True, text=True, timeout=60, check=False)
        self.pod_logs[name] = done.stderr + done.stdout
        pod["spec"]["nodeName"] = "fake-node-0"
        pod["status"] = {"phase": "Succeeded" if done.returncode == 0 else "Failed", "containerStatuses": [
            {"name": container["name"], "image": container["image"], "imageID": "", "ready": False, "restartCount": 0,
             "state": {"terminated": {"exitCode": done.returncode, "reason": "Completed" if done.returncode == 0
                                      else "Error"}}}]}

    def listed(self, plural: str, selector: str) -> list[dict]:
        """The objects of a kind whose labels match `k=v,...`, terminating ones included (each such list counts)."""
        found = [o for (p, _), o in self.objects.items() if p == plural]
        for key, entry in list(self.terminating.items()):
            if key[0] == plural:
                found.append(entry[0])
                entry[1] -= 1
                if entry[1] <= 0:
                    del self.terminating[key]
        return [o for o in found if matches(o["metadata"].get("labels", {}), selector)]

    def container_env(self, deployment: str) -> dict[str, str]:
        """The environment the engine container of Deployment `deployment` starts with, as the kubelet builds it: each
        `value`, and each `secretKeyRef` read from the Secret it names (its stringData, or its base64 data, as the API
        server keeps it); a reference to a Secret or key that is not there fails, as the pod would
        (CreateContainerConfigError)."""
        [container] = self.objects[("deployments", deployment)]["spec"]["template"]["spec"]["containers"]
        env = {}
        for var in container.get("env") or []:
            ref = (var.get("valueFrom") or {}).get("secretKeyRef")
            if ref is None:
                env[var["name"]] = var.get("value", "")
                continue
            secret = self.objects[("secrets", ref["name"])]
            data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
            env[var["name"]] = (data | (secret.get("stringData") or {}))[ref["key"]]
        return env

    def pods(self, selector: str) -> list[dict]:
        out = []
        for (plural, name), obj in self.objects.items():
            if plural == "pods" and matches(obj["metadata"].get("labels", {}), selector):
                out.append({k: obj[k] for k in ("metadata", "spec", "status") if k in obj})
                continue
            labels = obj["spec"]["template"]["metadata"]["labels"] if plural == "deployments" else {}
            if plural != "deployments" or not matches(labels, selector):
                continue
            state = {"waiting": {"reason": self.pod_waiting}} if self.pod_waiting else {"running": {}}
            out.append({"metadata": {"name": f"{name}-7d9f8-abcde", "labels": labels},
                        "spec": {"nodeName": "fake-node-0",
                                 "containers": obj["spec"]["template"]["spec"]["containers"]},
                        "status": {"phase": "Running", "containerStatuses": [
                            {"name": "engine", "image": "x", "imageID": "", "ready": not self.pod_waiting,
                             "restartCount": 3 if self.pod_waiting else 0, "state": state}]}})
        return out


class Handler(BaseHTTPRequestHandler):
    cluster: FakeCluster

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, code: int, body: Any, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int, reason: str, message: str) -> None:
        self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                          "message": message, "code": code})

    def _read(self) -> tuple[bytes, Any]:
        """The request's body, raw and as JSON (None when it is none; a protobuf body read into its JSON object)."""
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if "protobuf" in (self.headers.get("Content-Type") or ""):
            return raw, from_protobuf(raw)
        try:   # the client sends JSON bodies without a Content-Type
            return raw, json.loads(raw) if raw else None
        except ValueError:
            return raw, None

    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        raw, body = self._read()
        c = self.cluster
        with c.lock:
            c.requests.append({"method": method, "path": path, "query": parse_qs(url.query), "body": body,
                               "auth": self.headers.get("Authorization")})
        token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        if token != TOKEN and token not in c.tokens:
            return self._status(401, "Unauthorized", "no valid bearer token")
        if path in DISCOVERY and method == "GET":   # system:discovery's, for every authenticated account
            return self._send(200, DISCOVERY[path])
        try:
            what = attributes(method, path, parse_qs(url.query))
        except ValueError:   # not a resource (/version, discovery): the admin's only, in this fake
            what = Attributes(method.lower(), "", path, "")
        if not c.authorize(token, what):
            return self._status(403, "Forbidden", f"{what.verb} {what.resource} (group {what.group!r}) in namespace "
                                                  f"{what.namespace!r} is not granted to {c.tokens[token]}")
        if self._cluster_scoped(method, path, url.query, body):   # namespaces, ClusterRoles and bindings, nodes
            return None
        if path == SSAR and method == "POST":
            return self._send(201, c.review(token, body))
        if method == "GET" and what.verb == "watch":
            return self._watch(what, parse_qs(url.query))
        if m := PROXY.match(path):
            return self._proxy(method, m.group(2), m.group(4), raw)
        if (m := PODS.match(path)) and method == "GET":
            selector = parse_qs(url.query).get("labelSelector", [""])[0]
            return self._send(200, {"kind": "PodList", "apiVersion": "v1",
                                    "metadata": {"resourceVersion": str(c.version)}, "items": c.pods(selector)})
        if (m := LOG.match(path)) and method == "GET":
            return self._send(200, c.pod_logs.get(m.group(2), c.pod_log).encode(), "text/plain")
        if m := OBJECT.match(path):
            return self._object(method, m, parse_qs(url.query), body)
        return self._status(404, "NotFound", f"no route for {method} {path}")

    def _object(self, method: str, m: re.Match, query: dict[str, list[str]], body: Any) -> None:
        """One namespaced object's route: get, list, create or delete."""
        plural, name = m.group(2), m.group(3)
        c = self.cluster
        with c.lock:
            if name is not None and (plural, name) not in c.objects:
                return self._status(404, "NotFound", f"{plural} \"{name}\" not found")
            if method == "GET" and name is not None:
                return self._send(200, c.objects[(plural, name)])
            if method == "GET" and name is None:
                fields = query.get("fieldSelector", [""])[0].removeprefix("metadata.name=")
                return self._send(200, {"kind": "List", "apiVersion": "v1",
                                        "metadata": {"resourceVersion": str(c.version)},
                                        "items": [o for o in c.listed(plural, query.get("labelSelector", [""])[0])
                                                  if fields in ("", o["metadata"]["name"])]})
            if method == "POST" and name is None:
                meta = body["metadata"]
                meta.setdefault("name", meta.get("generateName", "") + secrets.token_hex(3)[:5])
                key = (plural, meta["name"])
                if key in c.objects or key in c.terminating:
                    return self._status(409, "AlreadyExists", f"{plural} \"{key[1]}\" already exists")
                meta |= {"namespace": m.group(1), "uid": str(uuid.uuid4()),
                         "creationTimestamp": "2026-01-01T00:00:00Z"}
                c.objects[key] = body
                if plural == "pods":
                    c.run(body)
                c.changed("ADDED", plural, body)
                if body.get("kind") in ("Role", "RoleBinding"):
                    c.rbac[(body["kind"], m.group(1), key[1])] = body
                return self._send(201, body)
            if method == "DELETE" and name is not None:
                gone = c.objects.pop((plural, name))
                c.changed("DELETED", plural, gone)
                if c.linger_lists:
                    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                    c.terminating[(plural, name)] = [gone, c.linger_lists]
                return self._send(200, gone)   # the API server answers with the deleted object
        return self._status(404, "NotFound", f"no route for {method} {m.string}")

    def _cluster_scoped(self, method: str, path: str, query: str, body: Any) -> bool:
        """A namespace, ClusterRole or ClusterRoleBinding created, or the nodes listed: answered here (True)."""
        c = self.cluster
        if NAMESPACES.match(path) and method == "POST":
            with c.lock:
                c.objects[("namespaces", body["metadata"]["name"])] = body
            self._send(201, body)
            return True
        if (m := CLUSTER_RBAC.match(path)) and method == "POST":
            with c.lock:
                c.objects[(m.group(1), body["metadata"]["name"])] = body
                c.rbac[(body["kind"], "", body["metadata"]["name"])] = body
            self._send(201, body)
            return True
        if path == NODES and method == "GET":
            selector = parse_qs(query).get("labelSelector", [""])[0]
            items = [n for n in c.nodes if matches(n["metadata"].get("labels", {}), selector)]
            self._send(200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": items})
            return True
        return False

    def _watch(self, what: Attributes, query: dict[str, list[str]]) -> None:
        """A watch: each change it matches after its resourceVersion, one JSON line each, as they happen, until
        `watch_s` (or its timeoutSeconds) has passed; then the stream ends (the connection closes)."""
        c = self.cluster
        since = int(query.get("resourceVersion", ["0"])[0] or 0)
        labels, fields = query.get("labelSelector", [""])[0], query.get("fieldSelector", [""])[0]
        until = time.monotonic() + min(c.watch_s, float(query.get("timeoutSeconds", [c.watch_s])[0]))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        try:
            while time.monotonic() < until:
                with c.lock:
                    found = c.watched(what.resource, what.namespace, since, labels, fields)
                for version, event in found:
                    self.wfile.write(json.dumps(event).encode() + b"\n")
                    since = version
                self.wfile.flush()
                time.sleep(0.05)
        except (BrokenPipeError, ConnectionResetError):   # the client stopped watching
            pass
        self.close_connection = True

    def _proxy(self, method: str, service: str, path: str, raw: bytes) -> None:
        c = self.cluster
        with c.lock:
            if c.unready_proxy_calls > 0 or service not in c.services:
                c.unready_proxy_calls -= 1
                return self._status(503, "ServiceUnavailable", f"no endpoints available for service \"{service}\"")
        host, port = c.services[service]
        conn = http.client.HTTPConnection(host, port, timeout=60)
        try:
            conn.request(method, path, body=raw or None, headers={"Content-Type": "application/json"} if raw else {})
            response = conn.getresponse()
            self._send(response.status, response.read(), response.getheader("Content-Type") or "text/plain")
        finally:
            conn.close()

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")


class FakeApiServer(LocalServer):
    """`tls_dir`: HTTPS, with a certificate made there for 127.0.0.1 (kubectl sends a bearer token over TLS only);
    the kubeconfig names it as the CA, and `ca_file` is it, for a client configured by hand."""

    def __init__(self, tls_dir: Path | None = None) -> None:
        self.cluster = FakeCluster()
        handler = type("BoundHandler", (Handler,), {"cluster": self.cluster})
        super().__init__(handler)
        self.ca_file: Path | None = None
        if tls_dir is not None:
            context, self.ca_file = tls_context(tls_dir)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)

    @property
    def url(self) -> str:
        return f"{'https' if self.ca_file else 'http'}://{self.host}"

    def kubeconfig(self, path: Path, token: str = TOKEN) -> Path:
        ca = {"certificate-authority-data": base64.b64encode(self.ca_file.read_bytes()).decode()} \
            if self.ca_file else {}
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url, **ca}}],
            "users": [{"name": "podium", "user": {"token": token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "podium"}}]}))
        return path



def node(name: str, architecture: str, labels: dict[str, str] | None = None,
         allocatable: dict[str, str] | None = None) -> dict:
    """A Node object as the API server reports one (its nodeInfo complete: the client requires every field), with
    the resources it offers pods (`allocatable`, e.g. {"amd.com/gpu": "8"}: what a device plugin advertises)."""
    info = dict.fromkeys(("bootID", "containerRuntimeVersion", "kernelVersion", "kubeProxyVersion", "kubeletVersion",
                          "machineID", "osImage", "systemUUID"), "fake")
    return {"metadata": {"name": name, "labels": {"kubernetes.io/arch": architecture, **(labels or {})}},
            "status": {"nodeInfo": {**info, "architecture": architecture, "operatingSystem": "linux"},
                       **({"allocatable": allocatable} if allocatable else {})}}


def grant(cluster: FakeCluster, rbac: list[dict], namespace: str | None = None, account_name: str = "podium") -> str:
    """Apply the ServiceAccounts, Roles, RoleBindings, ClusterRoles and ClusterRoleBindings of `rbac` (the documents
    of a YAML file), the Roles and RoleBindings moved to `namespace` when given; returns the token of the
    ServiceAccount `account_name`."""
    [account] = [d for d in rbac if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == account_name]
    for doc in rbac:
        if doc["kind"] in ("Role", "RoleBinding"):
            ns = namespace or doc["metadata"]["namespace"]
            cluster.rbac[(doc["kind"], ns, doc["metadata"]["name"])] = doc
        elif doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            cluster.rbac[(doc["kind"], "", doc["metadata"]["name"])] = doc
    return cluster.sa_token(account["metadata"]["namespace"], account["metadata"]["name"])
