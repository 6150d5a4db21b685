"""The engine build step: keyed by model manifest + engine options + engine version; an unchanged plan reuses the
build, a changed flag rebuilds. The TensorRT path's commands run for real against stand-ins for
convert_checkpoint.py and trtllm-build (TensorRT-LLM cannot be installed here) that record their argv."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import pytest
import yaml

from submission.base.errors import CommandError, PlanError
from tasks.engines import backend
from tasks.serving.build import RECORD, build, build_key

LOG = logging.getLogger("test.build")

CONVERT = """import json, pathlib, sys
args = sys.argv[1:]
out = pathlib.Path(args[args.index("--output_dir") + 1]); out.mkdir(parents=True)
(out / "config.json").write_text("{}"); (out / "rank0.safetensors").write_text("w")
with open(sys.argv[0] + ".calls", "a") as f: f.write(json.dumps(sys.argv[1:]) + "\\n")
"""
TRTLLM_BUILD = f"""#!{sys.executable}
import json, pathlib, sys
args = sys.argv[1:]
with open(sys.argv[0] + ".calls", "a") as f: f.write(json.dumps(args) + "\\n")
if "--fail" in args:
    print("[TRT] [E] out of memory while building rank0"); sys.exit(3)
assert (pathlib.Path(args[args.index("--checkpoint_dir") + 1]) / "config.json").is_file()
out = pathlib.Path(args[args.index("--output_dir") + 1]); out.mkdir(parents=True)
(out / "config.json").write_text("{{}}"); (out / "rank0.engine").write_bytes(b"engine")
"""


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    model = tmp_path / "models" / "tiny"
    model.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json"):
        (model / name).write_text("{}")
    (model / "model.safetensors").write_bytes(b"\0")
    return model


@pytest.fixture
def tools(tmp_path: Path) -> dict[str, Path]:
    convert = tmp_path / "tools" / "convert_checkpoint.py"
    convert.parent.mkdir()
    convert.write_text(CONVERT)
    trt = tmp_path / "tools" / "trtllm-build"
    trt.write_text(TRTLLM_BUILD)
    trt.chmod(0o755)
    return {"convert": convert, "build": trt}


def _tensorrt(tools: dict[str, Path], *extra: str) -> dict:
    return {"backend": "tensorrt", "gpus_per_node": 1, "max_batch_size": 8, "build_cli": str(tools["build"]),
            "build": {"convert_script": str(tools["convert"]), "python": sys.executable, "build_args": list(extra)}}


def test_the_key_covers_model_options_and_version() -> None:
    base = build_key("vllm", {"max_model_len": 2048}, "sha-a", "vllm 0.31.0")
    assert base == build_key("vllm", {"max_model_len": 2048}, "sha-a", "vllm 0.31.0")
    assert len({base, build_key("vllm", {"max_model_len": 4096}, "sha-a", "vllm 0.31.0"),
                build_key("vllm", {"max_model_len": 2048}, "sha-b", "vllm 0.31.0"),
                build_key("vllm", {"max_model_len": 2048}, "sha-a", "vllm 0.32.0")}) == 4


def test_tensorrt_path_runs_convert_then_trtllm_build_once(tmp_path: Path, checkpoint: Path,
                                                           tools: dict[str, Path]) -> None:
    options = _tensorrt(tools)
    first = build("trtllm", options, checkpoint, "sha-a", "tensorrt-llm 1.2.0", tmp_path / "builds", LOG)
    out = Path(first.path)
    assert not first.reused and (out / "engine" / "rank0.engine").read_bytes() == b"engine"
    assert [list(c) for c in first.commands] == backend("trtllm").build_commands(options, checkpoint, out)
    # the commands ran in the folder's temporary name, the record names the final one
    [call] = [json.loads(c) for c in (tools["build"].parent / "trtllm-build.calls").read_text().splitlines()]
    temporary = str(tmp_path / "builds" / f".{out.name}.tmp-{os.getpid()}")
    assert [a.replace(temporary, str(out)) for a in call] == list(first.commands[1][1:])
    record = json.loads((out / RECORD).read_text())
    assert record["key"] == first.key and record["files"] == ["engine/config.json", "engine/rank0.engine"]
    again = build("trtllm", options, checkpoint, "sha-a", "tensorrt-llm 1.2.0", tmp_path / "builds", LOG)
    assert again.reused and again.path == first.path
    assert len((tools["build"].parent / "trtllm-build.calls").read_text().splitlines()) == 1   # nothing re-ran


def test_a_changed_flag_rebuilds(tmp_path: Path, checkpoint: Path, tools: dict[str, Path]) -> None:
    options = _tensorrt(tools)
    first = build("trtllm", options, checkpoint, "sha-a", "1.2.0", tmp_path / "builds", LOG)
    changed = {**options, "max_batch_size": 16}
    second = build("trtllm", changed, checkpoint, "sha-a", "1.2.0", tmp_path / "builds", LOG)
    assert not second.reused and second.path != first.path
    calls = [json.loads(c) for c in (tools["build"].parent / "trtllm-build.calls").read_text().splitlines()]
    assert [c[c.index("--max_batch_size") + 1] for c in calls] == ["8", "16"]


def test_a_failing_build_leaves_no_build_and_keeps_its_log(tmp_path: Path, checkpoint: Path,
                                                           tools: dict[str, Path]) -> None:
    with pytest.raises(CommandError) as e:
        build("trtllm", _tensorrt(tools, "--fail"), checkpoint, "sha-a", "1.2.0", tmp_path / "builds", LOG)
    assert e.value.returncode == 3 and "out of memory while building rank0" in str(e.value)
    builds = tmp_path / "builds"
    assert [p.name for p in builds.iterdir() if not p.name.endswith(".failed.log")] == []
    [log] = builds.glob("*.failed.log")
    assert "out of memory" in log.read_text() and str(log) in str(e.value)


def test_pytorch_backend_checks_the_checkpoint_and_writes_the_yaml(tmp_path: Path, checkpoint: Path) -> None:
    options = {"gpus_per_node": 4, "tensor_parallel_size": 4, "llm_api_options": {"enable_attention_dp": True}}
    built = build("trtllm", options, checkpoint, "sha-a", "1.2.0", tmp_path / "builds", LOG)
    assert built.files == ("llm_api_options.yaml",) and built.commands == ()
    assert yaml.safe_load((Path(built.path) / "llm_api_options.yaml").read_text()) == {
        "enable_attention_dp": True, "enable_iter_perf_stats": True}   # the latter for telemetry, unless the plan
    specs = backend("trtllm").processes(options, checkpoint, _one(), Path(built.path))   # says otherwise:
    assert specs[0].files == {str(Path(built.path) / "llm_api_options.yaml"):
                              "enable_attention_dp: true\nenable_iter_perf_stats: true\n"}
    off = {**options, "llm_api_options": {"enable_iter_perf_stats": False}}
    assert backend("trtllm").config_files(off, tmp_path) == {str(tmp_path / "llm_api_options.yaml"):
                                                             "enable_iter_perf_stats: false\n"}


def test_an_incomplete_checkpoint_is_named(tmp_path: Path, checkpoint: Path) -> None:
    (checkpoint / "tokenizer.json").unlink()
    (checkpoint / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": "model-00001-of-00002.safetensors"}}))
    with pytest.raises(PlanError, match=r"model-00001-of-00002.safetensors \(named in model.safetensors.index.json\) "
                                        r"is missing; no tokenizer"):
        build("vllm", {}, checkpoint, "sha-a", "vllm 0.31.0", tmp_path / "builds", LOG)
    assert not list((tmp_path / "builds").iterdir())


def _one() -> object:
    from tasks.engines import Placement

    return Placement("127.0.0.1", (9000,))
