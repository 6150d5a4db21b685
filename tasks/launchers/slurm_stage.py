"""The staged model copied onto each engine node's local disk (`engine.slurm.local_stage`), so the engine reads it
there instead of from the shared filesystem.

After the shared copy is staged (tasks/staging/stage.py: a folder holding `.podium-manifest.json`, the size and
sha256 of every file) and before the engine's steps start, one short step per node that runs the engine's model
readers copies the folder into `<local_stage>/<folder name>` there, by the nodes' Python (`engine.slurm.python`,
bare like the port finder): each file through a `.part` file, hashed on the way and checked against the manifest,
then renamed into place. Beside the copy it writes the manifest and a record of the manifest's digest with each file's
size and mtime; a later launch keeps every file whose record still matches (a file rewritten since has another
mtime) and copies the rest, so a complete copy costs a `stat` per file. Each node reports the bytes it copied and
kept. The engine's argv then names the local folder wherever it named the shared one.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from submission.base.errors import LaunchError
from submission.plan.slurm_options import SlurmSettings
from tasks.engines import ProcessSpec
from tasks.launchers import slurm_cli as cli

Logger = logging.Logger | logging.LoggerAdapter
FIELD = "engine.slurm.local_stage"

# Runs on a node: copy SRC (a staged folder) to DEST, verified against SRC's manifest; keep the files DEST's record
# vouches for (the record names the manifest by the sha256 of its bytes). Prints one JSON line: what it copied and
# kept, or the error (its kind and message); exit 3 on error.
NODE_COPY = r"""
import concurrent.futures, errno, hashlib, json, os, shutil, socket, sys
src, dest = sys.argv[1], sys.argv[2]
# the manifest a staged folder carries (tasks.staging.sources.MANIFEST); the record beside the local copy
MANIFEST, RECORD, CHUNK = ".podium-manifest.json", ".podium-local.json", 16 << 20
node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()

def fail(kind, message):
    print(json.dumps({"node": node, "error": kind, "message": message}), flush=True)
    sys.exit(3)

def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def write(path, data):
    with open(path + ".tmp", "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)

try:
    with open(os.path.join(src, MANIFEST), "rb") as f:
        text = f.read()
    files = json.loads(text)
except (OSError, ValueError):
    files = None
if not isinstance(files, dict):
    fail("manifest", f"{src} has no readable {MANIFEST}")
digest = hashlib.sha256(text).hexdigest()
try:
    os.makedirs(dest, exist_ok=True)
    probe = os.path.join(dest, f".podium-write-{os.getpid()}")
    open(probe, "w").close()
    os.unlink(probe)
except OSError as e:
    fail("not_writable", f"cannot write in {dest}: {e.strerror}")
old = load(os.path.join(dest, RECORD)) or {}
seen = old.get("files", {}) if old.get("manifest_sha256") == digest else {}

def stamp(rel):
    try:
        st = os.stat(os.path.join(dest, rel))
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]

kept = {rel: seen[rel] for rel, meta in files.items()
        if rel in seen and stamp(rel) == seen[rel] and seen[rel][0] == int(meta["size"])}
todo = sorted((rel for rel in files if rel not in kept), key=lambda r: -int(files[r]["size"]))
for rel in todo:
    if os.path.isabs(rel) or ".." in rel.split("/"):
        fail("manifest", f"manifest entry {rel!r} would escape {dest}")
    for stale in (rel, rel + ".part"):   # an outdated copy, or what a copy that failed or was killed left
        try:
            os.unlink(os.path.join(dest, stale))
        except FileNotFoundError:
            pass
need = sum(int(files[rel]["size"]) for rel in todo)
free = shutil.disk_usage(dest).free
if free < need:
    fail("disk_full", f"{dest} has {free} bytes free, the copy needs {need} more")

def copy(rel):
    out = os.path.join(dest, rel)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    h = hashlib.sha256()
    try:
        with open(os.path.join(src, rel), "rb") as fin, open(out + ".part", "wb") as fout:
            while block := fin.read(CHUNK):
                h.update(block)
                fout.write(block)
            fout.flush()
            os.fsync(fout.fileno())
    except OSError:
        if os.path.exists(out + ".part"):   # a full disk keeps no partial file
            os.unlink(out + ".part")
        raise
    if h.hexdigest() != files[rel]["sha256"]:
        os.unlink(out + ".part")
        raise ValueError(f"{rel}: sha256 {h.hexdigest()} after the copy, the manifest says {files[rel]['sha256']}")
    os.replace(out + ".part", out)
    return rel, stamp(rel)

try:
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        copied = dict(pool.map(copy, todo))
except ValueError as e:
    fail("mismatch", str(e))
except OSError as e:
    fail("disk_full" if e.errno in (errno.ENOSPC, errno.EDQUOT) else "not_writable", f"copying into {dest}: {e}")
write(os.path.join(dest, MANIFEST), text)
write(os.path.join(dest, RECORD), json.dumps({"manifest_sha256": digest, "files": {**kept, **copied}}).encode())
print(json.dumps({"node": node, "path": dest, "copied": need, "copied_files": len(todo),
                  "kept": sum(v[0] for v in kept.values()), "kept_files": len(kept)}), flush=True)
"""

FIXES = {
    "manifest": "stage the model again (the shared copy must be a folder Podium staged, with its manifest)",
    "not_writable": f"point {FIELD} at a folder the job may write on every node (or create it there)",
    "disk_full": f"free space on the node's local disk or point {FIELD} at a larger one",
    "mismatch": "the shared copy no longer matches its manifest: stage the model again (a fresh staging verifies "
                "every byte)",
}


def local_dir(settings: SlurmSettings, node: str, model_dir: Path) -> str:
    """Where node `node` holds its copy of the staged folder `model_dir`."""
    assert settings.local_stage
    return str(PurePosixPath(settings.local_stage.replace("{node}", node)) / model_dir.name)


def readers(specs: Sequence[ProcessSpec], model_dir: Path) -> list[ProcessSpec]:
    """The processes whose argv names the model folder."""
    return [s for s in specs if any(_under(a, model_dir) for a in s.argv)]


def reader_nodes(specs: Sequence[ProcessSpec], model_dir: Path) -> list[int]:
    """The node indexes where a process reads the model."""
    return sorted({i for s in readers(specs, model_dir) for i in range(s.node_index, s.node_index + s.nodes)})


def localised(settings: SlurmSettings, specs: Sequence[ProcessSpec], model_dir: Path,
              nodes: Sequence[str]) -> list[ProcessSpec]:
    """The specs with the model folder replaced by its copy on each process's node (`nodes`: node names by index)."""
    out = []
    for spec in specs:
        span = nodes[spec.node_index:spec.node_index + spec.nodes]
        paths = {local_dir(settings, n, model_dir) for n in span}
        if any(_under(a, model_dir) for a in spec.argv) and len(paths) > 1:
            raise LaunchError(f"{spec.name} spans nodes {', '.join(span)}, and {FIELD}={settings.local_stage} names "
                              "another folder on each, but one argv names one model folder",
                              fix=f"give {FIELD} a path that is the same on every node (without {{node}})")
        local = paths.pop()
        argv = tuple(local + a[len(str(model_dir)):] if _under(a, model_dir) else a for a in spec.argv)
        out.append(dataclasses.replace(spec, argv=argv))
    return out


def step_argv(settings: SlurmSettings, job: str, node: str, model_dir: Path, name: str) -> list[str]:
    """The copy's step on one node: bare (the node's own disk), sharing the node (--overlap)."""
    return ["srun", f"--jobid={job}", f"--job-name={name}", "--nodes=1", f"--nodelist={node}", "--ntasks=1",
            "--overlap", f"--immediate={int(settings.step_timeout_s)}", settings.python, "-c", NODE_COPY,
            str(model_dir), local_dir(settings, node, model_dir)]


def copy_to_nodes(settings: SlurmSettings, env: Mapping[str, str], job: str, nodes: Sequence[str], model_dir: Path,
                  name: str, logger: Logger) -> dict[str, dict]:
    """Copy the staged folder onto each of `nodes` (steps side by side), verified; node -> what it copied and kept.
    The first node that fails raises LaunchError naming it, the field and the fix."""
    running = {}
    for node in nodes:
        argv = step_argv(settings, job, node, model_dir, name)
        shown = [*argv[:argv.index("-c") + 1], "<NODE_COPY>", *argv[argv.index("-c") + 2:]]
        logger.info("copying %s onto %s: %s", model_dir.name, node, json.dumps(shown))
        running[node] = subprocess.Popen(argv, env=dict(env), stdout=subprocess.PIPE,  # noqa: S603 - argv list
                                         stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    reports, failed = {}, []
    for node, proc in running.items():
        out, err = proc.communicate()
        last = next((json.loads(line) for line in reversed(out.splitlines()) if line.startswith("{")), {})
        if proc.returncode == 0 and "copied" in last:
            reports[node] = last
            logger.info("local copy on %s: %s: %d bytes copied (%d files), %d bytes kept (%d files)", node,
                        last["path"], last["copied"], last["copied_files"], last["kept"], last["kept_files"])
            continue
        if "error" in last:
            failed.append(LaunchError(f"{FIELD}: the model's copy on {node} failed: {last['message']}",
                                      fix=FIXES[last["error"]]))
        else:
            known = cli.explain(err)
            failed.append(LaunchError(f"{FIELD}: the copy step on {node} exited with code {proc.returncode}: "
                                      f"{err.strip()[-1000:]}", fix=f"{known[0]}: {known[1]}" if known else
                                      "engine.slurm.python must be a Python on the nodes"))
    if failed:
        raise failed[0]
    return reports


def review(settings: SlurmSettings, specs: Sequence[ProcessSpec], model_dir: Path,
           nodes: Sequence[str]) -> dict[str, list[str]]:
    """The copy step a launch runs on each node that reads the model (`nodes`: names by index), for the dry run."""
    return {nodes[i]: step_argv(settings, "$JOB", nodes[i], model_dir, f"{settings.job_name}-<launch>-local-stage")
            for i in reader_nodes(specs, model_dir)}


def _under(arg: str, model_dir: Path) -> bool:
    return arg == str(model_dir) or arg.startswith(f"{model_dir}/")

