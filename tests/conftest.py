"""Fixtures shared by the integration and fault suites: one Prefect test server for the whole session, the smoke
assets, a smoke engine started once, the local Slurm cluster. Session-scoped, so a full run starts each once."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def _one_parse_at_a_time() -> None:
    """Python 3.11's AST constructor (before 3.11.8) keeps its recursion depth per interpreter, not per call, and a
    garbage collection inside it can run finalizers: a second parse that starts there, in another thread (pytest
    formatting a failure's traceback while a Prefect or server thread formats a logged one) or in the same one (a
    finalizer whose error pytest formats), raises `SystemError: AST constructor recursion depth mismatch` in the
    first, which takes a pytest-xdist worker, and the whole session, down. So one parse at a time, with the collector
    paused while it runs. 3.12 collects only between bytecodes (tests/unit/test_conftest_guards.py forces both)."""
    import ast
    import gc
    import sys
    import threading

    if sys.version_info >= (3, 12) or getattr(ast.parse, "one_at_a_time", False):
        return
    parse, lock = ast.parse, threading.RLock()

    def locked_parse(*args, **kwargs):
        with lock:
            collecting = gc.isenabled()
            gc.disable()
            try:
                return parse(*args, **kwargs)
            finally:
                if collecting:
                    gc.enable()

    locked_parse.one_at_a_time = True
    ast.parse = locked_parse


_one_parse_at_a_time()
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
DURATIONS = Path(__file__).with_name("durations.json")   # seconds per test file, measured (tests/durations.py)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest test files first, each file's tests in their order: with workers that take a whole file at a time
    (`make test`: `--dist loadfile --no-loadscope-reorder`), the last file to start is a short one."""
    seconds = json.loads(DURATIONS.read_text())
    root = Path(str(config.rootpath))
    first = {}
    for i, item in enumerate(items):
        first.setdefault(item.path, i)
    items.sort(key=lambda item: (-seconds.get(item.path.relative_to(root).as_posix(), 0.0), first[item.path]))


@pytest.fixture(scope="session")
def prefect_server() -> Iterator[None]:
    """One Prefect test server for the session (its own temporary database). Its URL is in the environment too, so
    every `podium` command a test starts talks to it instead of starting a temporary server of its own (tests that
    need that strip PREFECT_* from the command's environment)."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        before = os.environ.get("PREFECT_API_URL")
        os.environ["PREFECT_API_URL"] = str(PREFECT_API_URL.value())
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("PREFECT_API_URL", None)
            else:
                os.environ["PREFECT_API_URL"] = before


@pytest.fixture(scope="session")
def smoke_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model and the smoke data set, built the way `podium dev smoke-assets` builds them."""
    from tasks.engines.smoke import data as smoke_data
    from tasks.engines.smoke import model as smoke_model

    store = tmp_path_factory.mktemp("store")
    smoke_model.build(store / "models" / "tiny-llama")
    smoke_data.build(store / "models" / "tiny-llama", store / "datasets" / "smoke")
    return store


@pytest.fixture(scope="session")
def smoke_server(smoke_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One real smoke engine on 127.0.0.1 for the session, for tests that need a server someone else started (the
    external engine; the pod behind a fake Kubernetes Service). Yields its Endpoint."""
    import logging

    from tasks.engines import backend
    from tasks.launchers import launched, launcher

    base = tmp_path_factory.mktemp("smoke-server")
    with launched(backend("smoke"), {}, smoke_store / "models" / "tiny-llama", launcher("local", state_dir=base / "p"),
                  base / "logs", logging.getLogger("test.smoke-server"), timeout_s=240) as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def inference_src() -> Path:
    """mlcommons/inference at the round's pin, as the official checks run it: the folder PODIUM_INFERENCE_SRC names
    (`make test` sets it to the folder `make inference-src` prints: INFERENCE_ARCHIVE unpacked by `podium
    fetch-inference --archive`, CI's way, or the commit fetched with git). A test that runs the official tools takes
    this fixture; without the sources it fails under PODIUM_REQUIRE_OFFICIAL=1 (`make test` sets it) and skips
    otherwise, naming the fix. tests/unit/test_inference_sources.py checks that the folder is the round's pin."""
    folder = Path(os.environ.get("PODIUM_INFERENCE_SRC", "/nonexistent")).expanduser()
    if (folder / "tools" / "submission" / "submission_checker" / "main.py").is_file():
        return folder
    why = (f"PODIUM_INFERENCE_SRC ({folder}) names no mlcommons/inference sources with the submission checker: "
           "`make inference-src INFERENCE_ARCHIVE=<a git archive of the round's pin>` (or without it, to fetch the "
           "pin with git) prints the folder to set it to")
    if os.environ.get("PODIUM_REQUIRE_OFFICIAL") == "1":
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="session")
def prm800k_src() -> Path:
    """openai/prm800k at the round's pin, deepseek-r1's MATH-500 grader: the folder PODIUM_PRM800K_SRC names (`make
    test` sets it to the folder `make prm800k-src` prints: PRM800K_ARCHIVE unpacked by `podium fetch-grader
    --archive`, CI's way, or GitHub's archive of the commit). Without it, a failure under PODIUM_REQUIRE_OFFICIAL=1 and
    a skip otherwise, as `inference_src`."""
    from tasks.accuracy.math_grader import GRADER

    folder = Path(os.environ.get("PODIUM_PRM800K_SRC", "/nonexistent")).expanduser()
    if (folder / GRADER).is_file():
        return folder
    why = (f"PODIUM_PRM800K_SRC ({folder}) names no openai/prm800k with {GRADER}: `make prm800k-src "
           "PRM800K_ARCHIVE=<a git archive of the round's pin>` (or without it, to fetch GitHub's archive) prints the "
           "folder to set it to")
    if os.environ.get("PODIUM_REQUIRE_OFFICIAL") == "1":
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="session")
def slurm_conf(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The local 4-node Slurm cluster (deployments/slurm/local-cluster.sh), started for this session (seconds) and
    stopped at its end; yields its slurm.conf."""
    script = Path(__file__).parents[1] / "deployments" / "slurm" / "local-cluster.sh"
    folder = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "PODIUM_SLURM_DIR": str(folder)}
    up = subprocess.run([str(script), "up"], env=env, capture_output=True, text=True, timeout=600, check=False)
    try:
        assert up.returncode == 0, f"local-cluster.sh up failed:\n{up.stdout}\n{up.stderr}"
        yield folder / "slurm.conf"
    finally:
        down = subprocess.run([str(script), "down"], env=env, capture_output=True, text=True, timeout=120,
                              check=False)
        assert down.returncode == 0, down.stderr
