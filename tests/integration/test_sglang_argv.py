"""The SGLang argv of every shipped plan, read by SGLang's own parser at the version the plan pins (`make
venv-sglang`: the reference's 0.5.4 installed, the AMD plan's 0.5.15.post1 beside it): each engine launch a plan makes
(one per variant of its options: Offline and Server without speculative decoding, Interactive with it) parses, and
SGLang itself resolves the Interactive launch's speculative flags to the round's appendix (EAGLE, 3 steps, top-k 1, 4
draft tokens, the checkpoint's own MTP head). Nothing is launched."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from submission.plan import model as plans
from submission.plan.parts import FIELD
from tasks.engines import backend
from tasks.serving import launch
from tests.integration.engines_support import engine_python

pytestmark = [pytest.mark.integration, pytest.mark.engines]
REPO = Path(__file__).parents[2]
PLANS = sorted(p for p in (REPO / "deployments" / "plans").glob("*.yaml")   # a fleet's launches are its parts'
               if FIELD not in plans.read_yaml(p) and any(b.engine.name == "sglang" for b in plans.load(p).benchmarks))


def launches(path: Path) -> dict[str, list[str]]:
    """`<plan>/<benchmark>/<scenarios>` -> the server argv of each engine launch the plan makes."""
    plan, out = plans.load(path), {}
    for bench in (b for b in plan.benchmarks if b.engine.name == "sglang"):
        placement = launch.review_placement(bench.engine, Path("/nonexistent"))
        for scenarios, options in bench.engine_variants():
            spec, = backend("sglang").processes(options, Path(bench.model.source), placement, Path("/b"))
            out[f"{path.stem}/{bench.key}/{'+'.join(scenarios)}"] = list(spec.argv)
    return out


def test_the_shipped_plans_run_sglang() -> None:
    assert [p.name for p in PLANS] == ["deepseek-r1-sglang-512.yaml", "deepseek-r1-sglang.yaml"]


def overlays(python: Path) -> dict[str, Path]:
    """The SGLang versions `make venv-sglang` holds beside the installed one: version -> the folder put first on the
    venv's path for it."""
    return {p.name.removeprefix("overlay-"): p for p in python.parent.parent.glob("overlay-*")
            if (p / ".installed").is_file()}


def parse(python: Path, argv: dict[str, list[str]], config_dir: Path, tmp: Path, path: Path | None = None) -> dict:
    """SGLang's parser on each argv (tests/integration/sglang_argv.py), with `path` first on the venv's path."""
    (tmp / "in.json").write_text(json.dumps({"argv": argv, "config_dir": str(config_dir)}))
    env = {**os.environ, "PYTHONPATH": str(path)} if path else None
    done = subprocess.run([str(python), str(REPO / "tests/integration/sglang_argv.py"), str(tmp / "in.json"),
                           str(tmp / "out.json")], capture_output=True, text=True, timeout=300, check=False, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((tmp / "out.json").read_text())


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Every launch of the shipped plans, each by the parser of the SGLang its plan pins, a misspelt flag and a NEXTN
    launch with 7 draft tokens, as SGLang's parser (and, with speculative flags, its speculative step) made them;
    `config_dir`: the model folder it read."""
    python = engine_python(".venv-sglang", "venv-sglang")
    installed = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('sglang'))"],
                               capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    held = {installed: None, **overlays(python)}
    tmp = tmp_path_factory.mktemp("sglang")
    (tmp / "ds").mkdir()   # what SGLang reads of the model: its architecture, to pick the MTP head
    (tmp / "ds" / "config.json").write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"],
                                                        "model_type": "deepseek_v3"}))
    by_version: dict[str, dict[str, list[str]]] = {}
    for path in PLANS:
        [version] = {b.engine.config().version for b in plans.load(path).benchmarks}
        assert version in held, f"{path.name} pins sglang {version}; make venv-sglang holds {sorted(held)}"
        by_version.setdefault(version, {}).update(launches(path))
    assert set(by_version) == {"0.5.4", "0.5.15.post1"}   # the reference's pin, and the AMD plan's image's
    argv = by_version[installed]
    good = argv["deepseek-r1-sglang/b200x8-slurm/deepseek-r1/Offline+Server"]
    argv["misspelt"] = [*good, "--cuda-graph-max-batch", "8"]
    argv["nextn"] = ["python3", "-m", "sglang.launch_server", "--model-path", "/m", "--tp-size", "8",
                     "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk",
                     "1", "--speculative-num-draft-tokens", "7"]
    out = {}
    for version, launched in by_version.items():
        (tmp / version).mkdir()
        found = parse(python, launched, tmp / "ds", tmp / version, held[version])
        out |= {name: {**args, "sglang": version} for name, args in found.items()}
    return {**out, "config_dir": str(tmp / "ds")}


def test_every_sglang_launch_parses_under_the_pinned_sglang(parsed: dict) -> None:
    launched = {k: v for k, v in parsed.items() if k.startswith("deepseek-r1-sglang/")}
    assert [k.rsplit("/", 1)[1] for k in launched] == ["Offline+Server", "Interactive"]
    for name, args in launched.items():
        assert "error" not in args, (name, args)
        assert (args["tp_size"], args["ep_size"], args["dp_size"], args["enable_dp_attention"]) == (8, 8, 8, True)
        assert args["enable_metrics"] is True and args["trust_remote_code"] is True
        assert (args["mem_fraction_static"], args["context_length"], args["attention_backend"]) == \
            (0.85, 23145, "flashinfer")
        assert (args["host"], args["port"], args["served_model_name"]) == ("NODE0_IPV4", 8000, "DeepSeek-R1")
    offline, interactive = launched.values()
    assert offline["speculative_algorithm"] is None and "resolved" not in offline
    # SGLang's own resolution: EAGLE with 4 draft tokens at top-k 1, drafted by the served checkpoint's MTP layer
    assert interactive["resolved"] == {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
                                       "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4,
                                       "speculative_draft_model_path": parsed["config_dir"],
                                       "model_path": parsed["config_dir"]}


def test_the_512_replica_plans_launch_parses_under_its_own_sglang(parsed: dict) -> None:
    """The AMD plan's one launch (a replica: TP8, EP8, DP8 with DP attention, AITER attention, FP8 KV cache) parses
    under the parser of the SGLang its image holds, 0.5.15.post1."""
    [(name, args)] = [(k, v) for k, v in parsed.items() if k.startswith("deepseek-r1-sglang-512/")]
    assert name.endswith("/Offline+Server") and "error" not in args, (name, args)
    assert args["sglang"] == "0.5.15.post1"
    assert (args["tp_size"], args["ep_size"], args["dp_size"], args["enable_dp_attention"]) == (8, 8, 8, True)
    assert (args["attention_backend"], args["kv_cache_dtype"], args["context_length"]) == ("aiter", "fp8_e4m3", 23145)
    assert args["speculative_algorithm"] is None and args["enable_metrics"] is True


def test_sglang_refuses_a_misspelt_flag(parsed: dict) -> None:
    assert "unrecognized arguments: --cuda-graph-max-batch 8" in parsed["misspelt"]["error"]


def test_sglang_resolves_nextn_and_the_draft_count_as_the_rules_data_says(parsed: dict) -> None:
    """The rules data's NEXTN alias and draft-token count (submission/rules/v6.1.yaml) are SGLang's own: NEXTN
    becomes EAGLE, and at top-k 1 any other draft count is overridden to num_steps + 1."""
    from submission.rules import load_rules

    rule = load_rules("v6.1").benchmark("deepseek-r1").serving.speculative_decoding
    resolved = parsed["nextn"]["resolved"]
    assert resolved["speculative_algorithm"] == rule.algorithms[0] and "NEXTN" in rule.algorithms
    assert resolved["speculative_num_draft_tokens"] == rule.num_draft_tokens == rule.num_steps + 1


def test_telemetry_reads_metric_names_the_pinned_sglang_defines() -> None:
    """Each SGLang series telemetry reads (tasks/serving/metrics.py SOURCES) is one the pinned SGLang registers."""
    from tasks.serving.metrics import SOURCES

    python = engine_python(".venv-sglang", "venv-sglang")
    site = next((python.parent.parent / "lib").glob("python3*/site-packages"))
    source = (site / "sglang" / "srt" / "metrics" / "collector.py").read_text()
    read = SOURCES["sglang"]
    names = [n for kind in (read.series, read.rates) for names in kind.values() for n in names]
    assert len(names) == 4
    for name in names:
        assert f'name="{name}"' in source, name
