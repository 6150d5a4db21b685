"""The checker on trees assembled from real loadgen logs (a fake SUT behind the real loadgen), and on a tree assembled
from endpoints client runs (their report folders written as tests/checker_corpus.py writes an endpoints folder)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from submission.checks.checker import check_tree
from submission.plan import model as plans
from submission.results.runs import RunRecord
from submission.tree.assemble import assemble, plan_file
from submission.tree.paths import Tree
from submission.tree.systems import describe
from tests import checker_corpus as corpus
from tests.loadgen_fake import run_fake

SMOKE = Path(__file__).parents[2] / "deployments" / "plans" / "smoke.yaml"
QWEN_50_50 = SMOKE.with_name("qwen3-vl-dynamo-50-50.yaml")
FAST_SERVER = ["*.Server.target_qps = 2000", "*.Server.min_duration = 100", "*.Server.min_query_count = 480"]


def _conf(model: str, extra: list[str]) -> list[str]:
    return [f"{model}.*.performance_sample_count_override = 16", f"{model}.*.accuracy_sample_count_override = 16",
            "*.Offline.min_duration = 300", "*.Offline.target_qps = 50", *extra]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("runs")
    out = {
        "Offline": run_fake(base / "off", latency_s=0.4, user_conf_lines=_conf("gpt-oss-120b", [])),
        "Server": run_fake(base / "srv", scenario="Server", user_conf_lines=_conf("gpt-oss-120b", FAST_SERVER)),
        "Interactive": run_fake(base / "int", scenario="Server", loadgen_model="gpt-oss-120b-interactive",
                                user_conf_lines=_conf("gpt-oss-120b-interactive", FAST_SERVER)),
        "offline-too-fast": run_fake(base / "fast", user_conf_lines=_conf("gpt-oss-120b", [])),
        "errors": run_fake(base / "err", scenario="Server", n_tokens_override=1,
                           user_conf_lines=_conf("gpt-oss-120b", FAST_SERVER)),
    }
    for scenario in ("Offline", "Server"):
        out[f"acc-{scenario}"] = run_fake(base / f"acc-{scenario}", scenario=scenario, mode="accuracy",
                                          user_conf_lines=_conf("gpt-oss-120b", FAST_SERVER))
    relaxed = [*FAST_SERVER, "gpt-oss-120b-interactive.Server.ttft_latency = 10000",
               "gpt-oss-120b-interactive.Server.tpot_latency = 250"]   # the smoke plan's own bounds
    out["relaxed-Interactive"] = run_fake(base / "relaxed", scenario="Server", loadgen_model="gpt-oss-120b-interactive",
                                          user_conf_lines=_conf("gpt-oss-120b-interactive", relaxed))
    out["acc-Interactive"] = run_fake(base / "acc-int", scenario="Server", mode="accuracy",
                                      loadgen_model="gpt-oss-120b-interactive",
                                      user_conf_lines=_conf("gpt-oss-120b-interactive", FAST_SERVER))
    for name in ("acc-Offline", "acc-Server", "acc-Interactive"):
        (out[name] / "accuracy.txt").write_text("{'exact_match': 100.000, 'num_samples': 16}\n")
    return out


def _record(scenario: str, mode: str, run_dir: Path) -> RunRecord:
    return RunRecord(key="k", system="cpu-smoke", benchmark="gpt-oss-120b", scenario=scenario, mode=mode,
                     run_dir=str(run_dir), valid=True, validity="VALID")


def build(tmp_path: Path, runs: dict[str, Path], *, perf: dict[str, str] | None = None) -> Path:
    """A smoke-plan tree from the given runs (scenario -> name of the run to use as its performance run)."""
    plan = plans.load(SMOKE)
    perf = perf or {s: s for s in ("Offline", "Server", "Interactive")}
    records = [_record(s, "performance", runs[name]) for s, name in perf.items()]
    records += [_record(s, "accuracy", runs[f"acc-{s}"]) for s in perf]
    system = describe(division="open", submitter="Podium", system_name="cpu-smoke", status="available",
                      system_type="datacenter", number_of_nodes=1, framework="test", overrides={})
    root = tmp_path / "tree"
    assemble(plan, records, {"cpu-smoke": system}, root, tmp_path / "backup", commit="test")
    return root


def rules_of(report, severity: str | None = None) -> set[str]:
    return {f.rule for f in report.findings if severity is None or f.severity == severity}


def test_smoke_tree_has_only_named_deviations(tmp_path: Path, runs: dict[str, Path]) -> None:
    root = build(tmp_path, runs)
    report = check_tree(root, "v6.1")
    assert report.profile == "smoke" and report.scenarios_checked == 3
    assert report.ok, [f.line() for f in report.errors]
    assert rules_of(report, "deviation") == {"min-duration", "performance-sample-count", "offline-samples-per-query",
                                             "accuracy-coverage"}
    assert "SMOKE tree: not a valid MLPerf submission" in report.summary()
    mapping = json.loads((root / "open" / "Podium" / "model_mapping.json").read_text())
    assert mapping == {"tiny-llama": "gpt-oss-120b"}


def test_each_benchmark_folder_has_its_code_folder(tmp_path: Path, runs: dict[str, Path]) -> None:
    """src/<benchmark folder>/ beside src/podium/, as submission_structure.md and the samples lay out the code, and
    where preprocess_submission.py copies a result's code from (`<division>/<org>/src/<results folder>`)."""
    root = build(tmp_path, runs)
    src = root / "open" / "Podium" / "src"
    assert sorted(p.name for p in src.iterdir()) == ["podium", "tiny-llama"]   # the results folder's name
    readme = (src / "tiny-llama" / "README.md").read_text()
    assert readme.startswith("# tiny-llama\n") and f"`{plan_file(plans.load(SMOKE))}`: measured by" in readme
    assert "Podium's loadgen SUT" in readme


def test_same_tree_fails_the_submission_profile(tmp_path: Path, runs: dict[str, Path]) -> None:
    report = check_tree(build(tmp_path, runs), "v6.1", profile="submission")
    assert not report.ok and not report.deviations
    assert {"min-duration", "performance-sample-count", "accuracy-coverage"} <= rules_of(report, "error")


def test_a_smoke_plans_own_token_bounds_are_its_named_deviation(tmp_path: Path, runs: dict[str, Path]) -> None:
    """Interactive judged by the smoke plan's TTFT 10 s and TPOT 250 ms (loadgen's ttft_latency/tpot_latency):
    `latency-limit`, a deviation in the smoke profile; in the submission profile a limit other than the round's is
    the error `latency-config`."""
    root = build(tmp_path, runs, perf={"Offline": "Offline", "Interactive": "relaxed-Interactive"})
    smoke = check_tree(root, "v6.1")
    assert smoke.ok, [f.line() for f in smoke.errors]
    judged = [f.message for f in smoke.deviations if f.rule == "latency-limit" and f.message.startswith("loadgen")]
    assert judged == ["loadgen judged TTFT by 10000000000 ns, over the 2000000000 ns Interactive requires (smoke "
                      "profile)", "loadgen judged TPOT by 250000000 ns, over the 15000000 ns Interactive requires "
                      "(smoke profile)"]
    assert "latency-config" in rules_of(check_tree(root, "v6.1", profile="submission"), "error")


def test_interactive_folder_with_server_limits(tmp_path: Path, runs: dict[str, Path]) -> None:
    root = build(tmp_path, runs, perf={"Offline": "Offline", "Interactive": "Server"})
    report = check_tree(root, "v6.1")
    config = [f.message for f in report.errors if f.rule == "latency-config" and "Interactive" in f.path]
    assert config == ["loadgen ran with ttft limit 3000000000 ns, but Interactive requires 2000000000 ns",
                      "loadgen ran with tpot limit 80000000 ns, but Interactive requires 15000000 ns"]


def test_server_target_latency_over_the_checkers_cap(tmp_path: Path, runs: dict[str, Path]) -> None:
    """A user.conf may raise a Server run's target_latency; the official checker rejects an effective target latency
    over its latency-constraint (60 s for gpt-oss-120b), even where the token limits, not the p99, bound the run."""
    def server(name: str, target_ms: int) -> Path:
        extra = [*FAST_SERVER, f"gpt-oss-120b.Server.target_latency = {target_ms}"]
        return run_fake(tmp_path / name, scenario="Server", user_conf_lines=_conf("gpt-oss-120b", extra))

    over = server("srv-70s", 70000)
    runs = {**runs, "Server-70s": over}
    report = check_tree(build(tmp_path, runs, perf={"Offline": "Offline", "Server": "Server-70s"}), "v6.1")
    config = [f for f in report.errors if f.rule == "latency-config"]
    assert [f.message for f in config] == ["loadgen's target latency is 70000000000 ns, over the 60000000000 ns the "
                                           "round allows in Server (the checker's latency-constraint)"]
    assert "Server" in config[0].path and "at most 60000 ms" in config[0].fix
    at_cap = server("srv-60s", 60000)
    report = check_tree(build(tmp_path / "cap", {**runs, "Server-60s": at_cap},
                              perf={"Offline": "Offline", "Server": "Server-60s"}), "v6.1")
    assert "latency-config" not in rules_of(report, "error")


def test_invalid_run_is_an_error(tmp_path: Path, runs: dict[str, Path]) -> None:
    report = check_tree(build(tmp_path, runs, perf={"Offline": "offline-too-fast", "Server": "Server"}), "v6.1")
    invalid = [f for f in report.errors if f.rule == "result-valid"]
    assert invalid and "INVALID" in invalid[0].message and "Offline" in invalid[0].path


def test_loadgen_errors_are_an_error(tmp_path: Path, runs: dict[str, Path]) -> None:
    report = check_tree(build(tmp_path, runs, perf={"Offline": "Offline", "Server": "errors"}), "v6.1")
    errors = [f for f in report.errors if f.rule == "loadgen-errors"]
    assert errors and "Number of tokens need to be greater than 1" in errors[0].message


def test_seeds_of_another_round(tmp_path: Path, runs: dict[str, Path]) -> None:
    root = build(tmp_path, runs)
    report = check_tree(root, "v6.0")
    assert "seeds-round" in rules_of(report, "error")   # the v6.1 seeds, named as such


def test_tampered_accuracy_and_system(tmp_path: Path, runs: dict[str, Path]) -> None:
    root = build(tmp_path, runs)
    org = root / "open" / "Podium"
    acc = org / "results" / "cpu-smoke" / "tiny-llama" / "Offline" / "accuracy"
    (acc / "accuracy.txt").write_text("{'exact_match': 12.000}\n")
    (acc / "mlperf_log_accuracy.json").write_text("[" + ",".join(["{}"] * 6000) + "]")
    (org / "systems" / "cpu-smoke.json").unlink()
    (org / "results" / "cpu-smoke" / "tiny-llama" / "Server" / "README.md").write_text("")
    report = check_tree(root, "v6.1")
    assert {"accuracy-hash", "accuracy-truncated", "system-description", "scenario-files"} <= rules_of(report, "error")
    below = [f for f in report.findings if f.rule == "accuracy-target"]
    assert below and below[0].severity == "warning"   # open division: recorded, not enforced


def test_unknown_benchmark_folder(tmp_path: Path, runs: dict[str, Path]) -> None:
    root = build(tmp_path, runs)
    (root / "open" / "Podium" / "model_mapping.json").unlink()
    assert "unknown-benchmark" in rules_of(check_tree(root, "v6.1"), "error")


def test_empty_tree_does_not_pass(tmp_path: Path) -> None:
    report = check_tree(tmp_path, "v6.1")
    assert not report.ok and rules_of(report) == {"empty-tree"}


def test_closed_tree_needs_compliance_and_calibration(tmp_path: Path, runs: dict[str, Path]) -> None:
    root = build(tmp_path, runs)
    closed = root / "closed" / "Podium"
    shutil.move(root / "open" / "Podium", closed)
    (closed / "results" / "cpu-smoke" / "tiny-llama").rename(closed / "results" / "cpu-smoke" / "gpt-oss-120b")
    report = check_tree(root, "v6.1", profile="submission")
    errors = rules_of(report, "error")
    assert {"compliance-missing", "calibration", "system-description"} <= errors   # system says division "open"


def client_runs(base: Path, system: str) -> list[RunRecord]:
    """One endpoints client run per Qwen3-VL scenario (`--mode both`) and its two rows, performance and accuracy, its
    folder holding the client's `report/` (its files as the corpus writes an endpoints scenario folder)."""
    written = Tree(base / "written", "closed", corpus.ORG)
    records = []
    for sc in ("Offline", "Server", "Interactive"):
        corpus.qwen_scenario(written, sc)
        where = (corpus.SYSTEM, corpus.QWEN, sc)
        files = {"config.yaml": written.endpoints_config(*where),
                 "performance/result_summary.json": written.endpoints_result_summary(*where),
                 "accuracy/accuracy_results.json": written.endpoints_accuracy_results(*where)}
        run_dir = base / "runs" / sc
        for name, src in files.items():
            (run_dir / "report" / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, run_dir / "report" / name)
        for mode in ("performance", "accuracy"):
            records.append(RunRecord(key=sc, system=system, benchmark=corpus.QWEN, scenario=sc,
                                     mode=mode, run_dir=str(run_dir), harness="endpoints",
                                     valid=True if mode == "performance" else None,
                                     validity="VALID" if mode == "performance" else None))
    return records


def test_endpoints_runs_assemble_into_the_endpoints_layout(tmp_path: Path) -> None:
    plan = plans.load(QWEN_50_50)
    system = plan.benchmarks[0].system
    records = client_runs(tmp_path, system)
    root = tmp_path / "tree"
    tree = assemble(plan, records, {system: corpus.system_description()}, root, tmp_path / "backup", commit="t")
    for sc in ("Offline", "Server", "Interactive"):
        folder = tree.scenario(system, corpus.QWEN, sc)
        files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        assert files == ["README.md", "accuracy/accuracy_results.json", "config.yaml", "measurements.json",
                         "performance/result_summary.json"]   # no user.conf, no loadgen logs
        report = tmp_path / "runs" / sc / "report"   # all three files from the scenario's one client report
        for name in ("config.yaml", "performance/result_summary.json", "accuracy/accuracy_results.json"):
            assert (folder / name).read_bytes() == (report / name).read_bytes()
        readme = (folder / "README.md").read_text()
        assert "measured by the MLCommons endpoints client (`inference-endpoint`" in readme
        assert "user.conf" not in readme
    assert "the MLCommons endpoints client" in tree.code(corpus.QWEN).joinpath("README.md").read_text()
    report = check_tree(root, "v6.1")
    assert report.scenarios_checked == 3 and report.ok, [f.line() for f in report.errors]
    found = [f.line() for f in report.findings if f.rule in ("endpoints-files", "unexpected-file")]
    assert found == []
