"""The engine image's platforms against the nodes' architecture, before a node pulls it: GB200 nodes are aarch64
(Grace), and an image built for amd64 only fails there with "exec format error" (or "no match for platform in
manifest") after the allocation is taken. And its GPU runtime against the system's GPU platform
(submission/plan/platforms.py): a CUDA image on AMD GPUs (or a ROCm image on NVIDIA's) starts, then finds no GPU.
An image's runtime is read from the environment its config sets (`RUNTIME_ENV`); an image that names neither, or
both, is not judged.

The image's platforms are read from its registry with the OCI distribution API (the Docker Registry HTTP API v2):
`GET /v2/<name>/manifests/<reference>` accepting an image index (OCI) or manifest list (Docker), whose entries name
each platform; a single-platform manifest's platform is its config blob's `os`/`architecture`. A registry that
answers 401 with a `Bearer` challenge gets a token from the challenge's realm (its token service). A registry on
localhost or 127.0.0.0/8 is spoken to over http, as Docker does; every other over https.

Credentials: PODIUM_REGISTRY_USER and PODIUM_REGISTRY_TOKEN are the basic credentials of the token service (for
nvcr.io: `$oauthtoken` and an NGC API key); PODIUM_REGISTRY_TOKEN alone is sent to the registry as the bearer token
itself. They belong to the one registry PODIUM_REGISTRY_HOST names (`nvcr.io`; `docker.io` for Docker Hub) and go
nowhere else: an image of another registry is read anonymously, and they reach a token service only when its realm
is https (http only for a registry on this host, itself spoken to over http) and on the registry's own host, a host
paired with it (`TOKEN_HOSTS`: Docker Hub's tokens come from auth.docker.io), or a host PODIUM_REGISTRY_AUTH_HOST
names (comma-separated). Any other realm is asked anonymously. Credentials set without PODIUM_REGISTRY_HOST are
refused: Podium cannot tell where they may go.

Image names as Docker reads them (`nvcr.io/nvidia/tensorrt-llm/release:1.2.0`; `vllm/vllm-openai` is Docker Hub's,
tag `latest`) and as pyxis does (`nvcr.io#nvidia/tensorrt-llm/release:1.2.0`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from submission.base.errors import PlanError, PodiumError
from submission.base.hosts import loopback
from submission.plan.platforms import PLATFORMS, Platform

TIMEOUT_S = 30
INDEXES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
MANIFESTS = ("application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json")
# `uname -m` and Kubernetes' node architecture (Go's GOARCH) -> the OCI platform's architecture
ARCHITECTURES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64le",
                 "s390x": "s390x"}
DOCKER_HUB = "registry-1.docker.io"
ALIASES = {"docker.io": DOCKER_HUB, "index.docker.io": DOCKER_HUB}   # what PODIUM_REGISTRY_HOST may call a registry
# Token services on a host of their own that are a registry's: Docker Hub's images (registry-1.docker.io, where the
# ROCm and SGLang images live) get their tokens from auth.docker.io (its Bearer challenge's realm).
TOKEN_HOSTS = {DOCKER_HUB: ("auth.docker.io",)}
USER, TOKEN, HOST, AUTH_HOST = ("PODIUM_REGISTRY_USER", "PODIUM_REGISTRY_TOKEN", "PODIUM_REGISTRY_HOST",
                                "PODIUM_REGISTRY_AUTH_HOST")
# What an image's environment (its config's `Env`) says of the GPU runtime it is built for, by platform: NVIDIA's CUDA
# base images set CUDA_VERSION and NVIDIA_REQUIRE_CUDA (gitlab.com/nvidia/container-images/cuda, dist/*/base/
# Dockerfile), which the CUDA images of vLLM, TensorRT-LLM and SGLang are built on; ROCm's set ROCM_PATH (vLLM's
# docker/Dockerfile.rocm_base `ENV ROCM_PATH=/opt/rocm`, the base of vllm/vllm-openai-rocm).
RUNTIME_ENV = {"nvidia": ("CUDA_VERSION", "NVIDIA_REQUIRE_CUDA"), "amd": ("ROCM_PATH",)}
READ_ARCH = "amd64"   # the platform of an index whose environment is read (its first one without it)


@dataclass(frozen=True)
class ImageRef:
    registry: str     # host[:port]
    repository: str   # e.g. nvidia/tensorrt-llm/release
    reference: str    # a tag or a digest

    @property
    def host(self) -> str:
        """The registry's host name or address, without its port."""
        return urlsplit(f"//{self.registry}").hostname or self.registry

    @property
    def local(self) -> bool:
        return loopback(self.host)

    @property
    def base(self) -> str:
        return f"{'http' if self.local else 'https'}://{self.registry}"


def parse(image: str) -> ImageRef:
    """An image name (Docker's form, or pyxis' `REGISTRY#IMAGE`) as registry, repository and tag or digest."""
    if "#" in image:
        registry, rest = image.split("#", 1)
        registry = registry.rsplit("@", 1)[-1]   # pyxis' USER@REGISTRY
    else:
        first, _, after = image.partition("/")
        local = "." in first or ":" in first or first == "localhost"
        registry, rest = (first, after) if after and local else ("docker.io", image)
    rest, at, digest = rest.partition("@")
    name, colon, tag = rest.rpartition(":") if ":" in rest.rsplit("/", 1)[-1] else (rest, "", "")
    if registry == "docker.io":
        registry = DOCKER_HUB
        name = name if "/" in name else f"library/{name}"
    return ImageRef(registry, name, digest if at else (tag if colon else "latest"))


def registry_name(text: str) -> str:
    """A registry as PODIUM_REGISTRY_HOST names it (`nvcr.io`, `docker.io`, `host:5000`), as `parse` names it."""
    name = text.strip().lower().removeprefix("https://").removeprefix("http://").rstrip("/")
    return ALIASES.get(name, name)


def credentials(environ: Mapping[str, str], ref: ImageRef) -> tuple[str | None, str | None]:
    """(user, token) for `ref`'s registry: PODIUM_REGISTRY_USER and PODIUM_REGISTRY_TOKEN where PODIUM_REGISTRY_HOST
    names that registry, else none (an anonymous pull). Raises PlanError for credentials without a registry."""
    user, token = environ.get(USER) or None, environ.get(TOKEN) or None
    if not (user or token):
        return None, None
    if not (environ.get(HOST) or "").strip():
        raise PlanError(f"{USER if user else TOKEN} is set but {HOST} is not, so Podium cannot tell which registry "
                        "the credentials belong to (it sends them to no other)",
                        fix=f"export {HOST}=<the registry they are for, e.g. nvcr.io, or docker.io for Docker Hub>")
    return (user, token) if registry_name(environ[HOST]) == ref.registry.lower() else (None, None)


def realm_problem(realm: str, ref: ImageRef, environ: Mapping[str, str]) -> str | None:
    """Why the token service at `realm` may not have `ref`'s registry credentials; None when it may: https (http only
    for a registry on this host) on the registry's own host, a host TOKEN_HOSTS pairs with it, or one of
    PODIUM_REGISTRY_AUTH_HOST's."""
    url = urlsplit(realm)
    host = (url.hostname or "").lower()
    named = {h.strip().lower() for h in (environ.get(AUTH_HOST) or "").split(",") if h.strip()}
    if host not in {ref.host.lower(), *TOKEN_HOSTS.get(ref.registry, ()), *named}:
        return (f"its token service {host or realm} is not {ref.registry}'s own (if it is, name it: export "
                f"{AUTH_HOST}={host})")
    if url.scheme != "https" and not (url.scheme == "http" and ref.local and loopback(host)):
        return f"its token service {realm} is not https"
    return None


def _challenge(header: str) -> dict[str, str]:
    """The parameters of a `Bearer realm="...",service="...",scope="..."` challenge (none: not Bearer)."""
    if not header.lower().startswith("bearer "):
        return {}
    return dict(re.findall(r'(\w+)="([^"]*)"', header))


def _token(client: httpx.Client, challenge: dict[str, str], ref: ImageRef, user: str | None,
           token: str | None, withheld: str | None = None) -> str:
    """A bearer token from the challenge's realm, asked with the basic credentials `user`/`token` (anonymously
    without `user`); `withheld`: why the credentials were not sent, for the error."""
    params = {k: v for k, v in (("service", challenge.get("service")),
                                ("scope", challenge.get("scope") or f"repository:{ref.repository}:pull")) if v}
    answer = client.get(challenge["realm"], params=params, auth=(user, token or "") if user else None)
    if answer.status_code != 200:
        raise PlanError(f"the registry's token service {challenge['realm']} refused "
                        + (f"the credentials of {USER}" if user else "an anonymous pull")
                        + f" of {ref.repository} (HTTP {answer.status_code})"
                        + (f"; the credentials were not sent: {withheld}" if withheld else ""),
                        fix=f"export {USER} and {TOKEN} with the registry's pull credentials (nvcr.io: $oauthtoken "
                            f"and an NGC API key), and {HOST}={ref.registry}")
    data = answer.json()
    return str(data.get("token") or data.get("access_token"))


def platforms(image: str, environ: Mapping[str, str]) -> set[str]:
    """The platforms (`os/architecture[/variant]`) the registry holds `image` for. Raises PlanError naming the image
    and what to do when it cannot tell."""
    return _asked(image, environ, _read)


def image_env(image: str, environ: Mapping[str, str]) -> list[str]:
    """The environment (`NAME=value` entries) `image`'s config sets, of its linux/amd64 image where it is an index
    (else its first). PlanError as `platforms`."""
    return _asked(image, environ, _read_env)


def _asked(image: str, environ: Mapping[str, str], read: Any) -> Any:
    """`read(client, answer, ref, image, headers)` of the registry's answer for `image`'s manifest, asked with
    the credentials that may go there (a Bearer token from its token service when it challenges)."""
    ref = parse(image)
    user, token = credentials(environ, ref)
    withheld = None if user or token or not (environ.get(USER) or environ.get(TOKEN)) else \
        f"{HOST} names {environ[HOST]}, not {ref.registry}"
    url = f"{ref.base}/v2/{ref.repository}/manifests/{ref.reference}"
    headers = {"Accept": ", ".join(INDEXES + MANIFESTS)}
    if token and not user:
        headers["Authorization"] = f"Bearer {token}"
    try:
        with httpx.Client(timeout=TIMEOUT_S, follow_redirects=True) as client:   # a redirect elsewhere drops auth
            answer = client.get(url, headers=headers)
            if answer.status_code == 401 and (challenge := _challenge(answer.headers.get("WWW-Authenticate", ""))):
                if user and (why := realm_problem(challenge.get("realm", ""), ref, environ)):
                    user, withheld = None, why   # asked anonymously
                headers["Authorization"] = f"Bearer {_token(client, challenge, ref, user, token, withheld)}"
                answer = client.get(url, headers=headers)
            found = read(client, answer, ref, image, headers)
    except httpx.HTTPError as e:
        raise PlanError(f"the registry of image {image} does not answer at {ref.base} ({type(e).__name__}: {e})",
                        fix="check the image name and that this host reaches its registry") from None
    except (ValueError, KeyError) as e:   # not the distribution API's JSON
        raise PlanError(f"{ref.base} answers for image {image} with something that is not an image manifest ({e})",
                        fix="check the image's registry name") from None
    return found


def _answered(answer: httpx.Response, ref: ImageRef, image: str) -> dict[str, Any]:
    """A manifest answer's JSON, or the PlanError its status means."""
    if answer.status_code == 404:
        raise PlanError(f"image {image} is not in its registry ({ref.registry} has no {ref.repository}:"
                        f"{ref.reference})", fix="check the image's name and tag")
    if answer.status_code in (401, 403):
        raise PlanError(f"the registry refuses to show image {image} (HTTP {answer.status_code})",
                        fix=f"export {USER} and {TOKEN} with pull credentials for {ref.registry}, and "
                            f"{HOST}={ref.registry}")
    if answer.status_code != 200:
        raise PlanError(f"the registry answers HTTP {answer.status_code} for image {image}",
                        fix="check the image's name and the registry")
    data: dict[str, Any] = answer.json()
    return data


def _is_index(data: dict[str, Any], answer: httpx.Response) -> bool:
    kind = data.get("mediaType") or answer.headers.get("Content-Type", "").split(";")[0]
    return kind in INDEXES or "manifests" in data


def _read(client: httpx.Client, answer: httpx.Response, ref: ImageRef, image: str,
          headers: dict[str, str]) -> set[str]:
    data = _answered(answer, ref, image)
    if _is_index(data, answer):
        return {"/".join(filter(None, (p.get("os"), p.get("architecture"), p.get("variant"))))
                for m in data.get("manifests", []) if (p := m.get("platform"))
                and p.get("architecture") not in (None, "unknown")}   # attestations are "unknown/unknown"
    conf = _config(client, data, ref, image, headers)
    return {"/".join(filter(None, (conf.get("os"), conf.get("architecture"), conf.get("variant"))))}


def _config(client: httpx.Client, manifest: dict[str, Any], ref: ImageRef, image: str,
            headers: dict[str, str]) -> dict[str, Any]:
    """The config blob a single-platform manifest names."""
    config = client.get(f"{ref.base}/v2/{ref.repository}/blobs/{manifest['config']['digest']}", headers=headers)
    if config.status_code != 200:
        raise PlanError(f"the registry answers HTTP {config.status_code} for the config of image {image}",
                        fix="check the image's name and the registry")
    found: dict[str, Any] = config.json()
    return found


def _read_env(client: httpx.Client, answer: httpx.Response, ref: ImageRef, image: str,
              headers: dict[str, str]) -> list[str]:
    data = _answered(answer, ref, image)
    if _is_index(data, answer):
        entries = [m for m in data.get("manifests", []) if (m.get("platform") or {}).get("architecture")
                   not in (None, "unknown")]
        entry = next((m for m in entries if m["platform"]["architecture"] == READ_ARCH),
                     entries[0] if entries else None)
        if entry is None:
            return []
        one = client.get(f"{ref.base}/v2/{ref.repository}/manifests/{entry['digest']}", headers=headers)
        data = _answered(one, ref, image)
    return list((_config(client, data, ref, image, headers).get("config") or {}).get("Env") or [])


def runtime(env: list[str]) -> Platform | None:
    """The GPU platform an image's environment says it is built for (`RUNTIME_ENV`); None when it names neither, or
    both."""
    names = {entry.split("=", 1)[0] for entry in env}
    found = [PLATFORMS[p] for p, marks in RUNTIME_ENV.items() if names & set(marks)]
    return found[0] if len(found) == 1 else None


def runtime_problems(image: str, platform: Platform, environ: Mapping[str, str], where: str) -> list[PodiumError]:
    """`image` built for another GPU platform than `platform` (the system's), named with what its environment sets
    and the fix; none when its registry cannot tell (`mismatch` says why) or its environment names no runtime."""
    try:
        env = image_env(image, environ)
    except PlanError:
        return []
    built = runtime(env)
    if built is None or built is platform:
        return []
    marks = sorted({e.split("=", 1)[0] for e in env} & set(RUNTIME_ENV[built.name]))
    return [PlanError(f"image {image} is built for {built.vendor}'s {built.runtime} (its environment sets "
                      f"{', '.join(marks)}), but the system's GPUs are {platform.vendor}'s ({platform.runtime})",
                      fix=f"use the engine's {platform.runtime} image (docs/amd.md names the vLLM and SGLang ones), "
                          "or correct the system's accelerator_model_name", where=where)]


def architecture(machine: str) -> str:
    """A node's architecture as an OCI platform names it (`uname -m`'s aarch64 is arm64)."""
    return ARCHITECTURES.get(machine, machine)


def mismatch(image: str, nodes: Mapping[str, str], environ: Mapping[str, str], where: str) -> list[PodiumError]:
    """Each architecture of `nodes` (node -> `uname -m` or its Kubernetes architecture) that `image` has no
    platform for, named with the nodes, the missing platform and how to build it; or why the registry could not
    tell."""
    try:
        held = platforms(image, environ)
    except PlanError as e:
        return [PlanError(e.message, fix=e.fix, where=where)]
    archs = {p.split("/")[1] for p in held if "/" in p}
    wanted: dict[str, list[str]] = {}
    for node, machine in sorted(nodes.items()):
        wanted.setdefault(architecture(machine), []).append(node)
    return [PlanError(f"image {image} has no linux/{arch} platform (it has {', '.join(sorted(held)) or 'none'}), "
                      f"but {', '.join(named)} {'is' if len(named) == 1 else 'are'} {arch}",
                      fix=f"use a tag of the image published for linux/{arch}, or build and push one for both: "
                          f"docker buildx build --platform linux/{arch},{','.join(sorted(held))} -t {image} "
                          "--push . (docs/quickstart-kubernetes.md, step 5)", where=where)
            for arch, named in wanted.items() if arch not in archs]
