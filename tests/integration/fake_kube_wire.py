"""What the fake Kubernetes API server (tests/integration/fake_kube.py) needs to answer kubectl, beside the kubernetes
clients: TLS (kubectl sends a bearer token over TLS only), the protobuf bodies its `kubectl create namespace` and
`kubectl create secret` send (read into the JSON object they stand for), and the OpenAPI v3 documents from which
kubectl learns that the server validates fields itself (each resource's PATCH takes the `fieldValidation` query
parameter), so that `kubectl apply` and `kubectl create -f` need no schema of their own.

The protobuf reading covers the fields those two commands set (wire format: the "k8s\\0" magic, then the
`runtime.Unknown` envelope with the object's bytes, as k8s.io/apimachinery's protobuf serializer writes them).
"""

from __future__ import annotations

import base64
import ssl
import subprocess
from pathlib import Path
from typing import Any

MAGIC = b"k8s\x00"


def tls_context(folder: Path) -> tuple[ssl.SSLContext, Path]:
    """A server context with a certificate for 127.0.0.1 made in `folder`, and the certificate (its own CA)."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   capture_output=True, check=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context, cert


def _fields(data: bytes) -> dict[int, list[Any]]:
    """A protobuf message's fields by number: varints as ints, length-delimited ones as bytes."""
    out: dict[int, list[Any]] = {}
    at = 0

    def varint() -> int:
        nonlocal at
        value = shift = 0
        while True:
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while at < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            value: Any = varint()
        elif wire == 2:
            size = varint()
            value, at = data[at:at + size], at + size
        else:
            raise ValueError(f"protobuf wire type {wire} is not read here")
        out.setdefault(number, []).append(value)
    return out


def _text(fields: dict[int, list[Any]], number: int) -> str | None:
    return fields[number][0].decode() if number in fields else None


def _map(entries: list[bytes]) -> dict[str, bytes]:
    pairs = [_fields(e) for e in entries]
    return {p[1][0].decode(): p.get(2, [b""])[0] for p in pairs}


def _meta(raw: bytes) -> dict[str, Any]:
    """ObjectMeta: name 1, generateName 2, namespace 3, labels 11, annotations 12."""
    f = _fields(raw)
    meta: dict[str, Any] = {k: v for k, v in (("name", _text(f, 1)), ("generateName", _text(f, 2)),
                                              ("namespace", _text(f, 3))) if v}
    for number, name in ((11, "labels"), (12, "annotations")):
        if number in f:
            meta[name] = {k: v.decode() for k, v in _map(f[number]).items()}
    return meta


def from_protobuf(body: bytes) -> dict[str, Any]:
    """The JSON object of a protobuf body kubectl sent: a Namespace or a Secret (ValueError for any other kind)."""
    if not body.startswith(MAGIC):
        raise ValueError("not a Kubernetes protobuf body")
    unknown = _fields(body[len(MAGIC):])
    type_meta = _fields(unknown[1][0])
    api_version, kind = _text(type_meta, 1), _text(type_meta, 2)
    obj = _fields(unknown[2][0])
    out: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": _meta(obj[1][0]) if 1 in obj else {}}
    if kind == "Namespace":
        return out
    if kind == "Secret":   # data 2 (map of bytes), type 3, stringData 4
        out["data"] = {k: base64.b64encode(v).decode() for k, v in _map(obj.get(2, [])).items()}
        out["type"] = _text(obj, 3) or "Opaque"
        if 4 in obj:
            out["stringData"] = {k: v.decode() for k, v in _map(obj[4]).items()}
        return out
    raise ValueError(f"a protobuf {kind} is not read here")


def openapi_v3(resources: list[tuple[str, str, str, str, bool]]) -> dict[str, dict]:
    """The OpenAPI v3 documents by path: `/openapi/v3` (the index) and one per group version, each resource
    (group, version, plural, kind, namespaced) with a PATCH that takes `fieldValidation`, as kubectl looks for it."""
    docs: dict[str, dict] = {}
    for group, version, plural, kind, namespaced in resources:
        prefix = f"apis/{group}/{version}" if group else f"api/{version}"
        doc = docs.setdefault(f"/openapi/v3/{prefix}", {"openapi": "3.0.0", "info": {"title": "Kubernetes",
                                                                                     "version": "v1.33.0"},
                                                         "paths": {}})
        path = f"/{prefix}/" + ("namespaces/{namespace}/" if namespaced else "") + plural + "/{name}"
        doc["paths"][path] = {"patch": {
            "x-kubernetes-action": "patch", "responses": {},
            "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": kind},
            "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}]}}
    docs["/openapi/v3"] = {"paths": {path.removeprefix("/openapi/v3/"): {"serverRelativeURL": path}
                                     for path in docs}}
    return docs
