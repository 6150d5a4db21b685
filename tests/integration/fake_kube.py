"""A fake Kubernetes API server for the kubernetes launcher's tests: it records every request, keeps the objects it
was given, reports a pod per Deployment in the state the test chooses, and forwards the service proxy
(`/api/v1/namespaces/NS/services/NAME:PORT/proxy/PATH`) to a real local server the test names for that Service.
It is no cluster: nothing schedules, pulls or runs a container. Listens on 127.0.0.1 only.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

TOKEN = "podium-test-token"
OBJECT = re.compile(r"^/(?:api/v1|apis/apps/v1|apis/nvidia\.com/v1alpha1)/namespaces/([^/]+)/([a-z]+)(?:/([^/]+))?$")
PROXY = re.compile(r"^/api/v1/namespaces/([^/]+)/services/([^/:]+):(\d+)/proxy(/.*)$")
PODS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods$")
LOG = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/log$")


@dataclass
class FakeCluster:
    services: dict[str, tuple[str, int]] = field(default_factory=dict)   # Service name -> a real local server
    objects: dict[tuple[str, str], dict] = field(default_factory=dict)   # (plural, name) -> object
    requests: list[dict[str, Any]] = field(default_factory=list)
    pod_waiting: str | None = None        # e.g. "CrashLoopBackOff": every pod reports it
    pod_log: str = ""
    unready_proxy_calls: int = 0          # the first N proxy calls answer 503, as before a pod is ready
    lock: threading.Lock = field(default_factory=threading.Lock)

    def pods(self, selector: str) -> list[dict]:
        wanted = dict(kv.split("=", 1) for kv in selector.split(",") if kv)
        out = []
        for (plural, name), obj in self.objects.items():
            labels = obj["spec"]["template"]["metadata"]["labels"] if plural == "deployments" else {}
            if plural != "deployments" or any(labels.get(k) != v for k, v in wanted.items()):
                continue
            state = {"waiting": {"reason": self.pod_waiting}} if self.pod_waiting else {"running": {}}
            out.append({"metadata": {"name": f"{name}-7d9f8-abcde", "labels": labels},
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

    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:   # the client sends JSON bodies without a Content-Type
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        c = self.cluster
        with c.lock:
            c.requests.append({"method": method, "path": path, "query": parse_qs(url.query), "body": body,
                               "auth": self.headers.get("Authorization")})
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._status(401, "Unauthorized", "no valid bearer token")
        if m := PROXY.match(path):
            return self._proxy(method, m.group(2), m.group(4), raw)
        if (m := PODS.match(path)) and method == "GET":
            selector = parse_qs(url.query).get("labelSelector", [""])[0]
            return self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": c.pods(selector)})
        if (m := LOG.match(path)) and method == "GET":
            return self._send(200, c.pod_log.encode(), "text/plain")
        if m := OBJECT.match(path):
            plural, name = m.group(2), m.group(3)
            with c.lock:
                if method == "POST" and name is None:
                    key = (plural, body["metadata"]["name"])
                    if key in c.objects:
                        return self._status(409, "AlreadyExists", f"{plural} \"{key[1]}\" already exists")
                    c.objects[key] = body
                    return self._send(201, body)
                if method == "DELETE" and name is not None:
                    gone = c.objects.pop((plural, name), None)
                    if gone is None:
                        return self._status(404, "NotFound", f"{plural} \"{name}\" not found")
                    return self._send(200, gone)   # the API server answers with the deleted object
        return self._status(404, "NotFound", f"no route for {method} {path}")

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


class FakeApiServer:
    def __init__(self) -> None:
        self.cluster = FakeCluster()
        handler = type("BoundHandler", (Handler,), {"cluster": self.cluster})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "podium", "user": {"token": TOKEN}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "podium"}}]}))
        return path

    def __enter__(self) -> FakeApiServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
