"""A fake container registry for preflight's image checks: the parts of the OCI distribution API (the Docker Registry
HTTP API v2) that reading an image's platforms uses, on 127.0.0.1 only.

- `GET /v2/` and every `/v2/...` answer 401 with a `Bearer realm=".../token",service="fake-registry"` challenge
  (`realm`, when set, names another token service instead) unless the request carries a token the token service
  issued;
- `GET /token?service=...&scope=repository:NAME:pull` issues one: to anyone, or only with the basic credentials of
  `users` when that is set (401 otherwise);
- `GET /v2/NAME/manifests/REF` answers an image index (OCI; its platforms, plus an attestation entry as buildx
  pushes one) or a single-platform image manifest, with its media type, 404 for an image it does not hold;
- `GET /v2/NAME/blobs/DIGEST` answers an image's config (`os`, `architecture`, and the environment it sets,
  `config.Env`); an index's per-platform manifests are served by their digests.

Every request is recorded (method, path, query, Authorization header)."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.local_http import LocalServer

INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"


def _digest(data: Any) -> str:
    return "sha256:" + hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


@dataclass
class Registry:
    manifests: dict[tuple[str, str], dict] = field(default_factory=dict)   # (name, reference) -> manifest
    blobs: dict[str, dict] = field(default_factory=dict)                   # digest -> config
    users: dict[str, str] = field(default_factory=dict)    # user -> password the token service takes; {}: anyone
    tokens: set[str] = field(default_factory=set)
    realm: str | None = None    # the token service the challenge names; None: this server's /token
    requests: list[dict[str, Any]] = field(default_factory=list)

    def push_index(self, name: str, tag: str, platforms: list[str], env: list[str] | None = None) -> None:
        """A multi-platform image: an index naming one manifest per `os/arch[/variant]` (each with a config setting
        `env`), and an attestation."""
        entries = []
        for platform in platforms:
            os_, arch, *variant = platform.split("/")
            plat = {"os": os_, "architecture": arch, **({"variant": variant[0]} if variant else {})}
            one = self._manifest(plat, env)
            digest = _digest(one)
            self.manifests[(name, digest)] = one
            entries.append({"mediaType": MANIFEST, "digest": digest, "size": 1, "platform": plat})
        entries.append({"mediaType": MANIFEST, "digest": _digest(name), "size": 1,
                        "platform": {"os": "unknown", "architecture": "unknown"},
                        "annotations": {"vnd.docker.reference.type": "attestation-manifest"}})
        self.manifests[(name, tag)] = {"schemaVersion": 2, "mediaType": INDEX, "manifests": entries}

    def push_single(self, name: str, tag: str, platform: str, env: list[str] | None = None) -> None:
        """A single-platform image: a manifest whose config blob names its os and architecture (and sets `env`)."""
        os_, arch = platform.split("/")[:2]
        self.manifests[(name, tag)] = self._manifest({"os": os_, "architecture": arch}, env)

    def _manifest(self, platform: dict[str, str], env: list[str] | None) -> dict:
        config = {**platform, "config": {"Env": list(env)} if env else {}, "rootfs": {"type": "layers", "diff_ids": []}}
        digest = _digest(config)
        self.blobs[digest] = config
        return {"schemaVersion": 2, "mediaType": MANIFEST, "layers": [],
                "config": {"mediaType": CONFIG, "digest": digest, "size": 1}}


class Handler(BaseHTTPRequestHandler):
    registry: Registry
    base: str

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, code: int, body: Any, content_type: str = "application/json",
              headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        r = self.registry
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        auth = self.headers.get("Authorization") or ""
        r.requests.append({"method": "GET", "path": url.path, "query": query, "auth": auth})
        if url.path == "/token":
            return self._token(auth)
        if not url.path.startswith("/v2/"):
            return self._send(404, {"errors": [{"code": "NOT_FOUND"}]})
        if auth.removeprefix("Bearer ") not in r.tokens:
            challenge = f'Bearer realm="{r.realm or self.base + "/token"}",service="fake-registry"'
            name = url.path.removeprefix("/v2/").rsplit("/", 2)[0]
            if name:
                challenge += f',scope="repository:{name}:pull"'
            return self._send(401, {"errors": [{"code": "UNAUTHORIZED"}]}, headers={"WWW-Authenticate": challenge})
        if url.path == "/v2/":
            return self._send(200, {})
        name, kind, ref = url.path.removeprefix("/v2/").rsplit("/", 2)
        if kind == "manifests" and (name, ref) in r.manifests:
            manifest = r.manifests[(name, ref)]
            return self._send(200, manifest, manifest["mediaType"])
        if kind == "blobs" and ref in r.blobs:
            return self._send(200, r.blobs[ref], CONFIG)
        return self._send(404, {"errors": [{"code": "MANIFEST_UNKNOWN" if kind == "manifests" else "BLOB_UNKNOWN"}]})

    def _token(self, auth: str) -> None:
        r = self.registry
        if r.users:
            user, _, password = base64.b64decode(auth.removeprefix("Basic ") or "Og==").decode().partition(":")
            if not auth.startswith("Basic ") or r.users.get(user) != password:
                return self._send(401, {"errors": [{"code": "UNAUTHORIZED"}]})
        token = secrets.token_hex(8)
        r.tokens.add(token)
        self._send(200, {"token": token})


class FakeRegistry(LocalServer):
    def __init__(self) -> None:
        self.registry = Registry()
        handler = type("BoundHandler", (Handler,), {"registry": self.registry})
        super().__init__(handler)
        handler.base = self.url
