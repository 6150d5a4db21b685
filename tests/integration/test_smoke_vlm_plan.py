"""`podium run deployments/plans/smoke-vlm.yaml` end to end on the CPU: the tiny LLaVA served by `transformers
serve`, Offline, Server and Interactive with their accuracy results measured by the real MLCommons endpoints client
(`.venv-endpoints`) in one client run per scenario (`--mode both`), the tree in the endpoints layout. Podium's results
rows are the client's own numbers, and Podium's checker finds nothing but the smoke profile's named deviations (the
official v6.1 checker, run locally with `--inference-src`, agreed on the same tree: docs/benchmarks.md). About 3
minutes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from submission.checks.checker import check_tree
from tests.integration.conftest import REPO

pytestmark = pytest.mark.integration
PLAN = REPO / "deployments" / "plans" / "smoke-vlm.yaml"
SCENARIO_FILES = {"README.md", "config.yaml", "measurements.json", "performance/result_summary.json",
                  "accuracy/accuracy_results.json"}


@pytest.fixture(scope="module")
def smoke_vlm_run(tmp_path_factory: pytest.TempPathFactory, client: Path) -> dict:
    from tasks.engines.smoke import build_vlm_assets

    base = tmp_path_factory.mktemp("smoke-vlm")
    store = base / "store"
    build_vlm_assets(store)
    data = yaml.safe_load(PLAN.read_text())
    bench = data["benchmarks"][0]
    bench["model"]["source"] = str(store / "models" / "tiny-llava")
    parquet = str(store / "datasets" / "smoke-vlm" / "shopify_smoke.parquet")
    bench["dataset"] = {"performance": parquet, "accuracy": parquet}
    plan = base / "smoke-vlm.yaml"
    plan.write_text(yaml.safe_dump(data, sort_keys=False))
    done = subprocess.run([str(Path(sys.executable).parent / "podium"), "run", str(plan), "--workspace",
                           str(base / "ws")], capture_output=True, text=True, timeout=900, check=False)
    folder = re.findall(r"^run folder: (\S+)$", done.stdout + done.stderr, re.MULTILINE)
    return {"done": done, "folder": Path(folder[-1]) if folder else None}


def test_the_run_measures_every_scenario_through_the_client(smoke_vlm_run: dict) -> None:
    done = smoke_vlm_run["done"]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "3/3 runs VALID, 3 accuracy score(s) reported, not judged (smoke stand-in model)" in done.stdout
    records = json.loads((smoke_vlm_run["folder"] / "results.json").read_text())
    assert sorted((r["scenario"], r["mode"]) for r in records) == sorted(
        (s, m) for s in ("Offline", "Server", "Interactive") for m in ("performance", "accuracy"))
    # one client run (`--mode both`) per scenario: its performance and accuracy rows come from the one report
    assert {r["scenario"]: r["run_dir"] for r in records if r["mode"] == "accuracy"} == \
        {r["scenario"]: r["run_dir"] for r in records if r["mode"] == "performance"}
    report_md = (smoke_vlm_run["folder"] / "report.md").read_text()
    assert "(not judged)" in report_md   # as the summary line says
    # GPU time: one row per client run (not per results row), the CPU engine holding no GPU, and the total
    gpu = report_md.split("## GPU time", 1)[1].split("\n## ", 1)[0]
    assert sum(f"/{s}/performance |" in gpu for s in ("Offline", "Server", "Interactive")) == 3, gpu
    assert "/accuracy |" not in gpu and "| total |" in gpu and "No run held a GPU (a CPU engine)" in gpu, gpu
    for r in records:   # every row is the client's own numbers, read from its report
        assert r["harness"] == "endpoints", r
        report = Path(r["run_dir"]) / "report"
        summary = json.loads((report / "performance" / "result_summary.json").read_text())
        assert summary["n_samples_failed"] == 0 and summary["complete"] is True
        config = yaml.safe_load((report / "config.yaml").read_text())
        assert config["type"] == ("offline" if r["scenario"] == "Offline" else "online")
        if r["mode"] == "performance":
            assert r["validity"] == "VALID" and r["metric"] == summary["qps"]
            p99 = summary["latency"]["early_stopping_percentiles"]["99.0"]   # None: too few samples (Offline: no limit)
            assert r["latency_p99_ms"] == (None if p99 is None else p99 / 1e6)
            assert p99 is not None or r["scenario"] == "Offline"
        else:
            scores = json.loads((report / "accuracy" / "accuracy_results.json").read_text())["accuracy_scores"]
            [client_score] = [s["score"] for s in scores if s["dataset_type"] == "accuracy"]
            assert r["accuracy"] == client_score and r["accuracy_pass"] is None
            assert "F1" in (Path(r["run_dir"]) / "accuracy.txt").read_text()   # Podium scored the same answers


def test_the_tree_is_in_the_endpoints_layout_and_only_deviates_by_name(smoke_vlm_run: dict) -> None:
    tree = smoke_vlm_run["folder"] / "submission"
    results = tree / "open" / "Podium" / "results" / "cpu-smoke" / "tiny-llava"
    for scenario in ("Offline", "Server", "Interactive"):
        folder = results / scenario
        assert {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()} == SCENARIO_FILES
        assert "inference-endpoint" in (folder / "README.md").read_text()
    report = check_tree(tree, "v6.1", profile="smoke")
    assert report.errors == [], [f.line() for f in report.errors]
    # latency-limit: Interactive judged by the plan's latency_ms where a busy machine put it over the round's 1.5 s
    assert {"min-duration", "accuracy-coverage"} <= {f.rule for f in report.deviations} <= {
        "min-duration", "accuracy-coverage", "latency-limit"}
    assert {f.rule for f in report.warnings} == {"accuracy-target"}   # the tiny model's F1 0, open division



def test_the_official_checker_refuses_the_endpoints_smoke_tree_as_podium_names_it(smoke_vlm_run: dict,
                                                                                   inference_src: Path) -> None:
    """The round's checker (mlcommons/inference at the v6.1 pin) on the endpoints smoke tree, as `podium check
    --inference-src` runs it: it refuses each scenario for the smoke plan's minimum durations and the 16 samples of
    its accuracy runs, and an online scenario for its p99 wherever the client measured it over the round's limit (a
    busy machine), in its own words and for nothing else; Podium finds no error, names each of those as one of the
    smoke profile's deviations (latency-limit exactly where the official checker says the latency is not met) and
    calls every difference EXPECTED."""
    from submission.checks.official import check_all
    from submission.rules import load_rules
    from tasks.engines.smoke import VLM_ROWS

    tree = (smoke_vlm_run["folder"] / "submission").resolve()
    checked = check_all(tree, "v6.1", inference_src=inference_src)
    theirs, ours = checked.official, checked.report
    rules = load_rules("v6.1").benchmark("qwen3-vl-235b-a22b")
    planned = yaml.safe_load(PLAN.read_text())["benchmarks"][0]["scenarios"]
    results = tree / "open" / "Podium" / "results" / "cpu-smoke" / "tiny-llava"
    words, over = [], set()
    for sc in ("Interactive", "Offline", "Server"):
        perf, acc = results / sc / "performance" / "run_1" / "mlperf_log_detail.txt", results / sc / "accuracy"
        summary = json.loads((results / sc / "performance" / "result_summary.json").read_text())
        p99, limit = summary["latency"]["early_stopping_percentiles"]["99.0"], rules.scenario(sc).latency_ns
        if limit is not None and p99 > limit:
            over.add(sc)
            words.append(f"{perf} Latency constraint not met, expected={limit}, found={p99}")
        words += [f"{perf} Test duration less than 600s in user config. expected=600000, "
                  f"found={planned[sc]['min_duration_ms']}",
                  f"Some performance checks Checks failed for: {perf}",
                  f"{acc}/mlperf_log_detail.txt accurcy run does not cover all dataset, accuracy samples: {VLM_ROWS}, "
                  f"dataset size: {rules.scenario(sc).accuracy_sample_count}",
                  f"Some accuracy checks Checks failed for: {acc}/mlperf_log_detail.txt"]
    words += [f"NoResults {results / sc / 'performance' / 'run_1' / 'mlperf_log_detail.txt'}"
              for sc in ("Interactive", "Offline", "Server")]
    assert theirs.errors == [*words, "SUMMARY: submission has errors"], theirs.output_tail
    assert theirs.summary[0] == "Results=0, NoResults=3, Power Results=0" and theirs.rows == [] and not theirs.crashed
    assert ours.errors == [] and {f.path.split("/")[5] for f in ours.deviations if f.rule == "latency-limit"} == over
    assert [(d.kind, d.path) for d in checked.differences] == [("verdict", "."), *(
        ("rejected-by-official", f"open/Podium/results/cpu-smoke/tiny-llava/{sc}")
        for sc in ("Interactive", "Offline", "Server"))]
    assert all(d.expected for d in checked.differences), [d.line() for d in checked.differences]
