"""The engine build step: a content-addressed folder per (model manifest, engine options, engine version).

For the TensorRT path of trtllm it runs convert_checkpoint.py and trtllm-build; for every other engine it checks
the checkpoint and writes the engine's config files (the LLM-API YAMLs of trtllm). The folder is built under a
temporary name and renamed into place with `build.json` (the record) written last, so a folder that exists is a
finished build: an unchanged plan reuses it, a changed flag gets a new key and builds again.

`build_engine` is the step as a Prefect task. Its cache is the build folder itself, not a Prefect result: a folder
that is gone is rebuilt, never reported from a stale record.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from submission.base.errors import CommandError, LaunchError, PlanError
from submission.base.files import tail
from submission.plan.engine_options import OptionsLike
from submission.plan.secret_env import shown_options
from tasks.engines import backend
from tasks.steps import run_logger

RECORD = "build.json"
TAIL_LINES = 30


def build_key(engine: str, options: OptionsLike, model_sha256: str, version: str) -> str:
    plan_options = backend(engine).options(options).as_plan()
    blob = json.dumps({"engine": engine, "options": plan_options, "model": model_sha256, "version": version},
                      sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


def build_dir(root: Path, engine: str, key: str) -> Path:
    return root / f"{engine}-{key[:16]}"


@dataclass
class Runner:
    """What a backend's build may do: check the checkpoint, write files, run commands. Everything is logged."""

    out_dir: Path                  # the temporary folder being built
    final: Path                    # the name it gets when done (paths in argv and files use it)
    log: Path
    logger: logging.Logger | logging.LoggerAdapter
    commands: list[list[str]] = field(default_factory=list)

    def check_checkpoint(self, model_dir: Path, problems: list[str]) -> list[str]:
        if problems:
            raise PlanError(f"the checkpoint in {model_dir} is not usable: {'; '.join(problems)}",
                            fix="stage a complete Hugging Face checkpoint (config.json, weights, tokenizer)")
        return []

    def write(self, path: Path, text: str) -> str:
        """Write a file of the build (its final path is inside the build folder); returns its relative name."""
        relative = path.relative_to(self.final)
        target = self.out_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        return str(relative)

    def run(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        """Run one build command with its output appended to the build log; a non-zero exit raises CommandError.
        Paths in argv name the final folder; the command runs while it still has its temporary name, so they are
        mapped."""
        mapped = [a.replace(str(self.final), str(self.out_dir)) for a in argv]
        self.commands.append(list(argv))
        self.logger.info("build: %s", json.dumps(list(argv)))
        with self.log.open("ab") as out:
            try:
                code = subprocess.run(mapped, stdout=out, stderr=subprocess.STDOUT, check=False,  # noqa: S603
                                      env={**os.environ, **(env or {})}, cwd=self.out_dir).returncode
            except OSError as e:
                raise LaunchError(f"cannot run {argv[0]}: {e.strerror}",
                                  fix="build on a host (or in the image) that has the engine's tools") from None
        if code != 0:
            raise CommandError(argv, code, tail(self.log, TAIL_LINES),
                               fix=f"read {self.final.parent / (self.final.name + '.failed.log')}")

    def expect(self, folder: Path, names: list[str]) -> list[str]:
        """The files a command must have produced (under the final folder's name)."""
        here = self.out_dir / folder.relative_to(self.final)
        missing = [n for n in names if not (here / n).exists()]
        if missing:
            raise LaunchError(f"the build finished but {folder} lacks {', '.join(missing)}",
                              fix=f"read {self.log}")
        return [str((folder / n).relative_to(self.final)) for n in names]


@dataclass(frozen=True)
class Built:
    path: str
    key: str
    version: str
    reused: bool
    files: tuple[str, ...]
    commands: tuple[tuple[str, ...], ...]


def build(engine: str, options: OptionsLike, model_dir: Path, model_sha256: str, version: str, root: Path,
          logger: logging.Logger | logging.LoggerAdapter) -> Built:
    """Build (or reuse) the engine folder for these inputs."""
    key = build_key(engine, options, model_sha256, version)
    final = build_dir(root, engine, key)
    record = final / RECORD
    if record.is_file():
        done = json.loads(record.read_text())
        if done.get("key") == key:
            logger.info("build: reusing %s", final)
            return Built(str(final), key, version, True, tuple(done["files"]),
                         tuple(tuple(c) for c in done["commands"]))
    backend_ = backend(engine)
    tmp = root / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    runner = Runner(out_dir=tmp, final=final, log=tmp / "build.log", logger=logger)
    started = time.time()
    try:
        files = backend_.build(options, model_dir, final, runner)
        (tmp / RECORD).write_text(json.dumps({
            "key": key, "engine": engine, "version": version,
            "options": shown_options(backend_.options(options).as_plan()),
            "model_sha256": model_sha256,
            "model_dir": str(model_dir), "files": files, "commands": runner.commands,
            "seconds": round(time.time() - started, 3)}, indent=2, sort_keys=True))
        if final.exists():   # a stale folder without a record: an interrupted rename; replace it
            shutil.rmtree(final)
        tmp.rename(final)
    except BaseException:
        if runner.log.is_file():   # keep what the failed commands said, beside the builds
            shutil.copyfile(runner.log, root / f"{final.name}.failed.log")
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    logger.info("build: %s built in %.1f s", final, time.time() - started)
    return Built(str(final), key, version, False, tuple(files), tuple(tuple(c) for c in runner.commands))


@task(name="build", task_run_name="build[{engine}]", cache_policy=NO_CACHE)
def build_engine(engine: str, options: OptionsLike, model_dir: str, model_sha256: str, root: str) -> dict:
    """Build (or reuse) the engine folder; returns its path, key, version, whether it was reused, files and commands."""
    version = backend(engine).version(options)
    built = build(engine, options, Path(model_dir), model_sha256, version, Path(root), run_logger("build"))
    return dataclasses.asdict(built)
