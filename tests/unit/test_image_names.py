"""Image names as preflight's registry reader takes them apart (tasks/ops/image_checks.py `parse`): Docker's forms,
pyxis' `REGISTRY#IMAGE`, tags and digests, and which registries are spoken to over http."""

from __future__ import annotations

import pytest

from tasks.ops.image_checks import ImageRef, architecture, parse


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
