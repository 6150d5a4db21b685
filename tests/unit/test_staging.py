"""Staging from a local (shared) filesystem: verified copy, skip, resume after an interruption, refusal by name."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from submission.base.errors import PlanError, StorageError
from tasks.staging import transfer
from tasks.staging.stage import MANIFEST, stage
from tasks.staging.transfer import ChecksumMismatch

MIB = 1 << 20


class Interrupted(Exception):
    """Stands in for a kill: raised from the progress callback in the middle of a copy."""


def make_model(root: Path, big_mib: int = 10) -> Path:
    model = root / "tiny-model"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"layers": 2}))
    (model / "sub" / "tokenizer.json").write_text("{}")
    (model / "weights.bin").write_bytes(os.urandom(big_mib * MIB))
    return model


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_manifest(model: Path) -> None:
    """The source's own manifest of `make_model`'s three files, as they are now."""
    listed = {rel: {"size": p.stat().st_size, "sha256": sha(p)} for rel, p in
              (("config.json", model / "config.json"), ("sub/tokenizer.json", model / "sub" / "tokenizer.json"),
               ("weights.bin", model / "weights.bin"))}
    (model / MANIFEST).write_text(json.dumps(listed))


def stage_interrupted(model: Path, to: Path, at_mib: int) -> None:
    """Stage `model` into `to` and kill the copy (Interrupted) once `at_mib` MiB have been copied."""
    def cut(done: int, _total: int) -> None:
        if done >= at_mib * MIB:
            raise Interrupted

    with pytest.raises(Interrupted):
        stage(model, to, progress=cut)


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """1 MiB reads, journal every 2 MiB: an interruption leaves a resumable journal in a 10 MiB file."""
    monkeypatch.setattr(transfer, "CHUNK", MIB)
    monkeypatch.setattr(transfer, "JOURNAL_EVERY", 2 * MIB)


def test_stage_verifies_places_and_reuses(tmp_path: Path) -> None:
    model = make_model(tmp_path / "nfs")
    seen: list[tuple[int, int]] = []
    first = stage(model, tmp_path / "stage", progress=lambda done, total: seen.append((done, total)))
    staged = Path(first.path)
    assert staged.parent == tmp_path / "stage" and staged.name == f"tiny-model-{first.sha256[:12]}"
    assert not first.reused and first.files == 3 and first.fetched == first.bytes and first.resumed == 0
    for rel in ("config.json", "sub/tokenizer.json", "weights.bin"):
        assert sha(staged / rel) == sha(model / rel)
    recorded = json.loads((staged / MANIFEST).read_text())
    assert recorded["weights.bin"] == {"size": 10 * MIB, "sha256": sha(model / "weights.bin")}
    assert seen[-1] == (first.bytes, first.bytes) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert not list((tmp_path / "stage").glob(".*.partial"))
    again = stage(model, tmp_path / "stage")
    assert again.reused and again.path == first.path and again.fetched == 0


def test_a_single_file_source(tmp_path: Path) -> None:
    data = tmp_path / "nfs" / "perf_eval_ref.parquet"
    data.parent.mkdir()
    data.write_bytes(b"PAR1" + os.urandom(1000))
    out = stage(data, tmp_path / "stage")
    assert Path(out.path).name == "perf_eval_ref.parquet" and Path(out.path).parent.name.startswith("perf_eval_ref-")
    assert sha(Path(out.path)) == sha(data)


def test_resume_after_an_interruption(tmp_path: Path, small_chunks: None) -> None:
    model = make_model(tmp_path / "nfs")
    total = sum(p.stat().st_size for p in model.rglob("*") if p.is_file())
    stage_interrupted(model, tmp_path / "stage", at_mib=7)
    partial = next((tmp_path / "stage").glob(".tiny-model-*.partial"))
    journal = json.loads((partial / "weights.bin.part.json").read_text())
    assert journal["done"] == 6 * MIB   # journaled every 2 MiB: 6 of the 7 copied MiB are known good
    assert not list((tmp_path / "stage").glob("tiny-model-*"))   # nothing in place before it all verified
    done = set(json.loads((partial / ".podium-done.json").read_text()))   # small files copied beside the weights
    assert done <= {"config.json", "sub/tokenizer.json"} and all((partial / rel).is_file() for rel in done)
    resumed = stage(model, tmp_path / "stage")
    assert not partial.exists()
    assert resumed.resumed >= 6 * MIB and resumed.fetched + resumed.resumed == total
    assert sha(Path(resumed.path) / "weights.bin") == sha(model / "weights.bin")


def test_a_changed_source_restarts_the_file(tmp_path: Path, small_chunks: None) -> None:
    model = make_model(tmp_path / "nfs")
    stage_interrupted(model, tmp_path / "stage", at_mib=5)
    (model / "weights.bin").write_bytes(os.urandom(10 * MIB))   # same size, new bytes, new mtime
    out = stage(model, tmp_path / "stage")
    assert out.resumed < MIB   # only the small files that had finished; the weights came again
    assert sha(Path(out.path) / "weights.bin") == sha(model / "weights.bin")


def test_a_corrupt_file_is_refused_by_name(tmp_path: Path) -> None:
    model = make_model(tmp_path / "nfs", big_mib=2)
    write_manifest(model)   # the source's own manifest, then a bit flips
    data = bytearray((model / "weights.bin").read_bytes())
    data[12345] ^= 0xFF
    (model / "weights.bin").write_bytes(bytes(data))
    with pytest.raises(ChecksumMismatch) as caught:
        stage(model, tmp_path / "stage")
    assert "tiny-model/weights.bin" in str(caught.value) and "does not match" in str(caught.value)
    assert not list((tmp_path / "stage").glob("tiny-model-*"))
    assert not list((tmp_path / "stage").rglob("weights.bin.part"))   # the bad copy is gone


def test_a_damaged_staged_copy_is_replaced(tmp_path: Path) -> None:
    model = make_model(tmp_path / "nfs", big_mib=1)
    first = stage(model, tmp_path / "stage")
    (Path(first.path) / "weights.bin").write_bytes(b"short")
    again = stage(model, tmp_path / "stage")
    assert not again.reused and sha(Path(again.path) / "weights.bin") == sha(model / "weights.bin")


def test_missing_source_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(PlanError) as caught:
        stage(tmp_path / "nope", tmp_path / "stage")
    assert str(tmp_path / "nope") in str(caught.value)


def test_cli_stage_shows_progress_and_result(tmp_path: Path) -> None:
    from flows.cli import app

    model = make_model(tmp_path / "nfs", big_mib=1)
    result = CliRunner().invoke(app, ["stage", str(model), "--to", str(tmp_path / "stage"),
                                      "--workspace", str(tmp_path / "ws")])
    assert result.exit_code == 0, result.output
    assert "staging" in result.output and "3 file(s)" in result.output and "fetched" in result.output
    again = CliRunner().invoke(app, ["stage", str(model), "--to", str(tmp_path / "stage"),
                                     "--workspace", str(tmp_path / "ws")])
    assert again.exit_code == 0 and "reused" in again.output


def test_an_unchanged_folder_is_not_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder without its own manifest is hashed while it is copied (one pass); later stagings trust its
    remembered manifest while every file keeps its size, mtime and inode, and read nothing."""
    from tasks.staging import sources

    model = make_model(tmp_path / "nfs", big_mib=1)
    first = stage(model, tmp_path / "stage")
    assert not first.reused and list((tmp_path / "stage" / ".sources").glob("tiny-model-*.json"))

    def no_reads(*args: object, **kwargs: object) -> None:
        raise AssertionError("the source was read")

    with monkeypatch.context() as patched:
        patched.setattr(sources, "copy_file", no_reads)
        assert stage(model, tmp_path / "stage").reused
    os.utime(model / "weights.bin", ns=(1, 1))     # touched: copied and hashed again, same bytes, same place
    again = stage(model, tmp_path / "stage")
    assert again.reused and again.fetched == again.bytes and again.path == first.path


def test_a_resumed_copy_that_fails_its_checksum_starts_over(tmp_path: Path, small_chunks: None) -> None:
    """Journaled bytes are not fsynced: after a machine crash they may be garbage. The final checksum catches that,
    and the copy is redone once from nothing rather than calling the source corrupt."""
    model = make_model(tmp_path / "nfs")
    write_manifest(model)
    stage_interrupted(model, tmp_path / "stage", at_mib=7)
    part = next((tmp_path / "stage").rglob("weights.bin.part"))
    with part.open("r+b") as f:   # what a crash can leave: journaled bytes that never reached the disk
        f.seek(MIB)
        f.write(b"\0" * 4096)
    out = stage(model, tmp_path / "stage")
    assert sha(Path(out.path) / "weights.bin") == sha(model / "weights.bin")
    assert out.resumed < MIB   # the small files only: the weights came again from the start


def test_a_model_the_engine_reads_from_its_volume_is_verified_in_place_not_copied(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped Kubernetes plan's engine mounts the model's claim: the flow uses the folder where it is. With the
    manifest `podium fetch` writes, nothing is read or copied; a file of another size is refused by name. Without
    one, the folder is hashed once in place (same key as a copy's) and the next call reads nothing."""
    from submission.plan import model as plans
    from tasks.serving.launch import read_in_place
    from tasks.staging import stage as staging
    from tasks.staging.stage import verify_in_place

    k8s = plans.load(Path(__file__).parents[2] / "deployments" / "plans" / "gpt-oss-120b-trtllm-k8s.yaml")
    slurm = plans.load(Path(__file__).parents[2] / "deployments" / "plans" / "qwen3-vl-dynamo-50-50.yaml")
    [gpt], [vlm] = k8s.benchmarks, slurm.benchmarks
    assert read_in_place(gpt.engine, gpt.model.source) and not read_in_place(vlm.engine, vlm.model.source)
    assert not read_in_place(gpt.engine, "s3://models/gpt-oss-120b")   # fetched from S3: staged as before

    model = make_model(tmp_path / "pvc", big_mib=1)
    write_manifest(model)
    with monkeypatch.context() as patched:
        patched.setattr(staging, "sha256_file", lambda path: pytest.fail(f"{path} was read"))
        found = verify_in_place(model, tmp_path / "stage")
    assert Path(found.path) == model and found.reused and found.files == 3
    assert found.sha256 == stage(model, tmp_path / "copy").sha256   # the same model key a copy would have
    assert not [p for p in (tmp_path / "stage").rglob("*") if p.is_file()]   # nothing copied, nothing written
    (model / "weights.bin").write_bytes(b"truncated")
    with pytest.raises(StorageError, match=r"tiny-model: 1 file\(s\) missing or not the size its manifest records: "
                                           r"weights.bin") as e:
        verify_in_place(model, tmp_path / "stage")
    assert e.value.fix is not None and "podium fetch PLAN" in e.value.fix

    (model / MANIFEST).unlink()                           # a folder Podium did not fetch: hashed once, in place
    first = verify_in_place(model, tmp_path / "stage")
    assert first.path == str(model) and list((tmp_path / "stage" / ".sources").glob("tiny-model-*.json"))
    assert not list((tmp_path / "stage").glob("tiny-model-*"))
    assert verify_in_place(model, tmp_path / "stage").sha256 == first.sha256
