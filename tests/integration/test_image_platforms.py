"""Preflight's reading of an image's platforms from its registry (tasks/ops/image_checks.py) against the fake registry
of fake_registry.py: an index and a single-platform image, anonymous pulls and pulls with credentials from the
environment, a refused token and an image the registry lacks; and the mismatch against the nodes' machines (`uname
-m`, as the Slurm node checks read them), named with the nodes, the missing platform and the `docker buildx` fix."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from submission.base.errors import PlanError
from tasks.ops.image_checks import mismatch, platforms
from tests.integration.fake_registry import FakeRegistry

pytestmark = pytest.mark.integration


@pytest.fixture
def registry() -> Iterator[FakeRegistry]:
    with FakeRegistry() as server:
        server.registry.push_index("nvidia/tensorrt-llm/release", "1.2.0", ["linux/amd64", "linux/arm64/v8"])
        server.registry.push_single("podium/flow", "1", "linux/amd64")
        yield server


def test_an_index_and_a_single_platform_image_read_anonymously(registry: FakeRegistry) -> None:
    assert platforms(f"{registry.host}/nvidia/tensorrt-llm/release:1.2.0", {}) == {"linux/amd64",
                                                                                   "linux/arm64/v8"}
    assert platforms(f"{registry.host}#podium/flow:1", {}) == {"linux/amd64"}   # pyxis' form; its config blob
    tokens = [r for r in registry.registry.requests if r["path"] == "/token"]
    assert tokens and all(r["auth"] == "" for r in tokens)                      # anonymous
    assert tokens[0]["query"]["scope"] == ["repository:nvidia/tensorrt-llm/release:pull"]


def test_credentials_from_the_environment_and_a_refused_pull(registry: FakeRegistry) -> None:
    registry.registry.users = {"$oauthtoken": "nvapi-key"}
    image = f"{registry.host}/nvidia/tensorrt-llm/release:1.2.0"
    with pytest.raises(PlanError) as refused:
        platforms(image, {})
    assert "refused an anonymous pull of nvidia/tensorrt-llm/release (HTTP 401)" in refused.value.message
    assert refused.value.fix and "PODIUM_REGISTRY_USER and PODIUM_REGISTRY_TOKEN" in refused.value.fix
    env = {"PODIUM_REGISTRY_USER": "$oauthtoken", "PODIUM_REGISTRY_TOKEN": "nvapi-key",
           "PODIUM_REGISTRY_HOST": registry.host}
    assert platforms(image, env) == {"linux/amd64", "linux/arm64/v8"}
    with pytest.raises(PlanError, match="refused the credentials of PODIUM_REGISTRY_USER"):
        platforms(image, {**env, "PODIUM_REGISTRY_TOKEN": "wrong"})


def _basic_sent(requests: list[dict]) -> list[str]:
    return [r["auth"] for r in requests if r["auth"].startswith("Basic ")]


def test_credentials_go_only_to_the_registry_they_are_for(registry: FakeRegistry) -> None:
    """PODIUM_REGISTRY_HOST names the registry; an image of another registry is read anonymously, and credentials
    without a named registry are refused before anything is sent."""
    image = f"{registry.host}/nvidia/tensorrt-llm/release:1.2.0"
    env = {"PODIUM_REGISTRY_USER": "$oauthtoken", "PODIUM_REGISTRY_TOKEN": "nvapi-planted-key"}
    with pytest.raises(PlanError, match="PODIUM_REGISTRY_USER is set but PODIUM_REGISTRY_HOST is not") as unnamed:
        platforms(image, env)
    assert unnamed.value.fix == ("export PODIUM_REGISTRY_HOST=<the registry they are for, e.g. nvcr.io, or docker.io "
                                 "for Docker Hub>")
    assert registry.registry.requests == []
    assert platforms(image, {**env, "PODIUM_REGISTRY_HOST": "nvcr.io"}) == {"linux/amd64", "linux/arm64/v8"}
    assert registry.registry.requests and _basic_sent(registry.registry.requests) == []   # anonymous
    bearer = {"PODIUM_REGISTRY_TOKEN": "nvapi-planted-key", "PODIUM_REGISTRY_HOST": "nvcr.io"}   # the token alone
    assert platforms(image, bearer) == {"linux/amd64", "linux/arm64/v8"}
    assert not [r for r in registry.registry.requests if "nvapi-planted-key" in r["auth"]]
    registry.registry.users = {"$oauthtoken": "nvapi-planted-key"}
    with pytest.raises(PlanError) as refused:
        platforms(image, {**env, "PODIUM_REGISTRY_HOST": "nvcr.io"})
    assert refused.value.message.endswith(f"the credentials were not sent: PODIUM_REGISTRY_HOST names nvcr.io, not "
                                          f"{registry.host}")
    assert refused.value.fix.endswith(f"PODIUM_REGISTRY_HOST={registry.host}")
    assert _basic_sent(registry.registry.requests) == []


def test_a_token_service_on_another_host_gets_no_credentials(registry: FakeRegistry) -> None:
    """A registry whose challenge names a token service elsewhere (here `localhost`, not the registry's 127.0.0.1)
    is asked anonymously there; PODIUM_REGISTRY_AUTH_HOST names a host the operator trusts with them."""
    with FakeRegistry() as elsewhere:
        elsewhere.registry.tokens = registry.registry.tokens   # its tokens open the registry
        registry.registry.realm = f"http://localhost:{elsewhere.port}/token"
        image = f"{registry.host}/podium/flow:1"
        env = {"PODIUM_REGISTRY_USER": "$oauthtoken", "PODIUM_REGISTRY_TOKEN": "nvapi-planted-key",
               "PODIUM_REGISTRY_HOST": registry.host}
        assert platforms(image, env) == {"linux/amd64"}
        asked = [r for r in elsewhere.registry.requests if r["path"] == "/token"]
        assert asked and [r["auth"] for r in asked] == [""] * len(asked)   # anonymously
        elsewhere.registry.users = {"$oauthtoken": "nvapi-planted-key"}
        with pytest.raises(PlanError) as refused:
            platforms(image, env)
        assert refused.value.message.endswith(
            "the credentials were not sent: its token service localhost is not "
            f"{registry.host}'s own (if it is, name it: export PODIUM_REGISTRY_AUTH_HOST=localhost)")
        assert _basic_sent(elsewhere.registry.requests) == []
        assert platforms(image, {**env, "PODIUM_REGISTRY_AUTH_HOST": "auth.example, localhost"}) == {"linux/amd64"}
        assert len(_basic_sent(elsewhere.registry.requests)) == 1   # named by the operator: trusted
    assert _basic_sent(registry.registry.requests) == []


def test_an_image_the_registry_lacks_and_a_registry_that_does_not_answer(registry: FakeRegistry) -> None:
    with pytest.raises(PlanError, match=rf"image {registry.host}/podium/flow:2 is not in its registry"):
        platforms(f"{registry.host}/podium/flow:2", {})
    [problem] = mismatch("127.0.0.1:9/podium/flow:1", {"node1": "aarch64"}, {}, "benchmarks.0.engine.slurm")
    assert "does not answer at http://127.0.0.1:9" in problem.message and problem.where == "benchmarks.0.engine.slurm"


def test_nodes_whose_architecture_the_image_lacks_are_named_with_the_buildx_fix(registry: FakeRegistry) -> None:
    image = f"{registry.host}/podium/flow:1"
    assert mismatch(image, {"node1": "x86_64", "node2": "x86_64"}, {}, "w") == []
    [problem] = mismatch(image, {"node1": "aarch64", "node2": "aarch64", "node3": "x86_64"}, {}, "w")
    assert problem.message == (f"image {image} has no linux/arm64 platform (it has linux/amd64), but node1, node2 "
                               "are arm64")
    assert problem.fix == (f"use a tag of the image published for linux/arm64, or build and push one for both: docker "
                           f"buildx build --platform linux/arm64,linux/amd64 -t {image} --push . "
                           "(docs/quickstart-kubernetes.md, step 5)")
    index = f"{registry.host}/nvidia/tensorrt-llm/release:1.2.0"
    assert mismatch(index, {"gb200-1": "arm64", "node3": "x86_64"}, {}, "w") == []   # arm64/v8 is arm64
