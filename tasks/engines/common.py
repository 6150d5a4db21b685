"""What the GPU backends share: engine versions read from package metadata (never by importing the engine), the
readiness probes, the served model name, the GPU environment of the placement's platform, and the checkpoint check of
the build step.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from submission.base.errors import LaunchError
from submission.plan.platforms import Platform
from tasks.engines import HttpProbe

OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
VERSION_TIMEOUT_S = 60
# Asks an interpreter for the version of the first installed distribution named on the command line.
_VERSION_SCRIPT = ("import importlib.metadata as m, sys\n"
                   "for d in sys.argv[1:]:\n"
                   "    try:\n        print(d, m.version(d)); break\n"
                   "    except m.PackageNotFoundError:\n        pass\n")


@functools.lru_cache(maxsize=32)
def installed_version(python: str, dists: tuple[str, ...]) -> str | None:
    """`'<dist> <version>'` of the first of `dists` installed for interpreter `python`; None when none is."""
    try:
        out = subprocess.run([python, "-c", _VERSION_SCRIPT, *dists], capture_output=True, text=True,  # noqa: S603
                             timeout=VERSION_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def interpreter_of(cli: str) -> str | None:
    """The Python interpreter a console script runs with (its shebang), or None when the command is not found."""
    path = shutil.which(cli)
    if path is None:
        return None
    try:
        first = Path(path).read_bytes()[:512].split(b"\n", 1)[0].decode(errors="replace")
    except OSError:
        return None
    return first[2:].strip().split()[0] if first.startswith("#!") and "python" in first else None


def engine_version(name: str, pinned: str | None, python: str | None, dists: tuple[str, ...], fix: str) -> str:
    """The engine version for the records and the build key: detected from `python`'s packages, checked against
    the plan's pin; only the pin when the engine is not installed here (it runs in a container)."""
    found = installed_version(python, dists) if python else None
    if pinned is not None:
        if found is not None and found.split()[-1] != pinned:
            raise LaunchError(f"the plan pins {name} {pinned} but {found} is installed for {python}",
                              fix="install the pinned version or change options.version")
        return f"{dists[0]} {pinned}"
    if found is None:
        raise LaunchError(f"{name} is not installed{f' for {python}' if python else ''}", fix=fix)
    return found


def served_name(options: Any, model_dir: Path) -> str:
    return options.served_model_name or model_dir.name


def ready_probes(model: str, health: str = "/health", listed: bool = True) -> tuple[HttpProbe, ...]:
    """Ready means: the health route answers, the model is listed (when `listed`), and a one-token request
    succeeds."""
    models = (HttpProbe("/v1/models", contains=json.dumps(model)),) if listed else ()
    return (HttpProbe(health), *models,
            HttpProbe("/v1/completions", {"model": model, "prompt": "hello", "max_tokens": 1}))


def scratch(placement_workdir: str | None, build_dir: Path | None, engine: str) -> Path:
    """Where launch-time files go: the placement's private folder, else the build folder."""
    if placement_workdir:
        return Path(placement_workdir)
    if build_dir is not None:
        return build_dir / "launch"
    return Path(tempfile.gettempdir()) / f"podium-{engine}"


def gpu_env(gpu_ids: tuple[int, ...], platform: Platform) -> dict[str, str]:
    """The environment that gives a process `gpu_ids` of its node on `platform` (the placement's): CUDA's
    CUDA_VISIBLE_DEVICES, or ROCm's ROCR_VISIBLE_DEVICES with the variables read after it numbered from 0
    (`Platform.pin`); none without GPUs."""
    return platform.pin(gpu_ids)


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def check_checkpoint(model_dir: Path) -> list[str]:
    """Problems with a Hugging Face checkpoint folder: config, weights (all shards of an index), tokenizer."""
    if not model_dir.is_dir():
        return [f"{model_dir} is not a folder"]
    problems = []
    if not (model_dir / "config.json").is_file():
        problems.append("config.json is missing")
    for index in sorted(model_dir.glob("*.index.json")):
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError) as e:
            problems.append(f"{index.name} is unreadable: {e}")
            continue
        problems += [f"{s} (named in {index.name}) is missing" for s in sorted(shards)
                     if not (model_dir / s).is_file()]
    if not any(model_dir.glob("*.safetensors")) and not any(model_dir.glob("*.bin")):
        problems.append("no weights (*.safetensors or *.bin)")
    if not any((model_dir / f).is_file() for f in ("tokenizer.json", "tokenizer.model", "tiktoken.model")):
        problems.append("no tokenizer (tokenizer.json, tokenizer.model or tiktoken.model)")
    return problems
