"""The tests' stand-in servers share one way to serve: a ThreadingHTTPServer on 127.0.0.1 and a free port, answering
from a daemon thread, started and stopped by the test (`with` or `start()`/`stop()`). The fakes built on it: the
Hugging Face Hub (tests/fake_hub.py), the MLCommons submission server (tests/fake_submission_server.py), an OCI
registry and the Kubernetes API (tests/integration/fake_registry.py, fake_kube.py), and the tests' small stand-in
engines, metrics pages and webhook. A handler reaches its fake as `self.server.fake`."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class LocalServer:
    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.fake = self   # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def start(self) -> Self:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
