"""The engine build step as a Prefect task over tasks/serving/build.py. Its cache is the content-addressed build
folder itself (model manifest + engine options + engine version -> `<root>/<engine>-<key>/build.json`), not a
Prefect result: a folder that is gone is rebuilt, never reported from a stale record."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from tasks.engines import backend
from tasks.serving.build import build


def _logger() -> logging.Logger | logging.LoggerAdapter:
    try:
        return get_run_logger()
    except Exception:  # outside a Prefect run (plain function use)
        return logging.getLogger("podium.build")


@task(name="build", task_run_name="build[{engine}]", cache_policy=NO_CACHE)
def build_engine(engine: str, options: dict[str, Any], model_dir: str, model_sha256: str, root: str) -> dict:
    """Build (or reuse) the engine folder; returns its path, key, version, whether it was reused, files and commands."""
    version = backend(engine).version(options)
    return dataclasses.asdict(build(engine, options, Path(model_dir), model_sha256, version, Path(root), _logger()))
