"""Image names as preflight's registry reader takes them apart (tasks/ops/image_checks.py `parse`): Docker's forms,
pyxis' `REGISTRY#IMAGE`, tags and digests, which registries are spoken to over http, and which token services may
have the registry credentials (the fake registry's tests: tests/integration/test_image_platforms.py)."""

from __future__ import annotations

import pytest

from submission.base.errors import PlanError
from tasks.ops.image_checks import ImageRef, architecture, credentials, parse, realm_problem


@pytest.mark.parametrize(("image", "ref"), [
    ("nvcr.io/nvidia/tensorrt-llm/release:1.2.0", ImageRef("nvcr.io", "nvidia/tensorrt-llm/release", "1.2.0")),
    ("nvcr.io#nvidia/tensorrt-llm/release:1.2.0", ImageRef("nvcr.io", "nvidia/tensorrt-llm/release", "1.2.0")),
    ("me@nvcr.io#nvidia/pytorch", ImageRef("nvcr.io", "nvidia/pytorch", "latest")),
    ("vllm/vllm-openai", ImageRef("registry-1.docker.io", "vllm/vllm-openai", "latest")),
    ("python:3.12-slim", ImageRef("registry-1.docker.io", "library/python", "3.12-slim")),
    ("127.0.0.1:5000/podium/smoke:1", ImageRef("127.0.0.1:5000", "podium/smoke", "1")),
    ("localhost/podium@sha256:" + "a" * 64, ImageRef("localhost", "podium", "sha256:" + "a" * 64)),
    ("ghcr.io/org/img:v1@sha256:" + "b" * 64, ImageRef("ghcr.io", "org/img", "sha256:" + "b" * 64)),
])
def test_image_names(image: str, ref: ImageRef) -> None:
    assert parse(image) == ref


def test_only_a_local_registry_is_spoken_to_over_http() -> None:
    assert parse("127.0.0.1:5000/x:1").base == "http://127.0.0.1:5000"
    assert parse("localhost:5000/x:1").base == "http://localhost:5000"
    assert parse("nvcr.io/nvidia/x:1").base == "https://nvcr.io"
    assert parse("registry.example:5000/x").base == "https://registry.example:5000"


def test_node_machines_are_named_as_platforms_name_them() -> None:
    assert [architecture(m) for m in ("x86_64", "aarch64", "arm64", "amd64", "riscv64")] == \
        ["amd64", "arm64", "arm64", "amd64", "riscv64"]


def test_the_credentials_are_the_named_registrys_alone() -> None:
    env = {"PODIUM_REGISTRY_USER": "$oauthtoken", "PODIUM_REGISTRY_TOKEN": "k", "PODIUM_REGISTRY_HOST": "nvcr.io"}
    assert credentials(env, parse("nvcr.io/nvidia/x:1")) == ("$oauthtoken", "k")
    assert credentials(env, parse("ghcr.io/org/x:1")) == (None, None)
    assert credentials(env, parse("rocm/vllm:latest")) == (None, None)
    hub = {**env, "PODIUM_REGISTRY_HOST": "docker.io"}   # Docker Hub, as an operator calls it
    assert credentials(hub, parse("rocm/vllm:latest")) == credentials(hub, parse("lmsysorg/sglang")) == ("$oauthtoken",
                                                                                                         "k")
    assert credentials({}, parse("nvcr.io/nvidia/x:1")) == (None, None)
    with pytest.raises(PlanError, match="PODIUM_REGISTRY_TOKEN is set but PODIUM_REGISTRY_HOST is not"):
        credentials({"PODIUM_REGISTRY_TOKEN": "k"}, parse("nvcr.io/nvidia/x:1"))


@pytest.mark.parametrize(("image", "realm", "env", "problem"), [
    ("nvcr.io/nvidia/x:1", "https://nvcr.io/proxy_auth", {}, None),            # the registry's own host
    ("rocm/vllm:latest", "https://auth.docker.io/token", {}, None),            # Docker Hub's pairing
    ("nvcr.io/nvidia/x:1", "https://auth.docker.io/token", {}, "not nvcr.io's own"),
    ("nvcr.io/nvidia/x:1", "http://nvcr.io/proxy_auth", {}, "is not https"),   # the token over http: never
    ("nvcr.io/nvidia/x:1", "https://evil.example/token", {}, "export PODIUM_REGISTRY_AUTH_HOST=evil.example"),
    ("reg.example/x:1", "https://auth.example/token", {"PODIUM_REGISTRY_AUTH_HOST": "auth.example"}, None),
    ("reg.example/x:1", "http://auth.example/token", {"PODIUM_REGISTRY_AUTH_HOST": "auth.example"}, "not https"),
    ("127.0.0.1:5000/x:1", "http://127.0.0.1:5001/token", {}, None),          # a registry on this host, over http
    ("reg.example/x:1", "http://127.0.0.1/token", {"PODIUM_REGISTRY_AUTH_HOST": "127.0.0.1"}, "not https"),
])
def test_which_token_services_may_have_the_credentials(image: str, realm: str, env: dict, problem: str | None) -> None:
    found = realm_problem(realm, parse(image), env)
    assert found == problem if problem is None else problem in (found or "")
