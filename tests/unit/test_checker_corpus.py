"""The generated corpus: one complete v6.1 closed tree built from real loadgen runs (tests/checker_corpus.py) that
checks clean, and mutations of it, each of which must give exactly its finding and nothing else.

The loadgen runs take about 30 s (two at a time under a x100 clock; see tests/checker_corpus.py), once per module.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from submission.checks.checker import CheckReport, check_tree
from tests.checker_corpus import GPT, ORG, PERF, QWEN, SYSTEM, assemble_corpus, build_runs

Mutation = Callable[[Path, dict[str, Path], Path], None]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path], Path]:
    base = tmp_path_factory.mktemp("corpus")
    runs = build_runs(base / "runs")
    root = assemble_corpus(runs, base / "tree", base / "backup")
    for name, folder in runs.items():  # the big TEST09 logs live on in the backup; keep one copy only
        if name.startswith("TEST09"):
            (folder / "mlperf_log_accuracy.json").unlink()
    return root, runs, base / "backup"


def org(root: Path) -> Path:
    return root / "closed" / ORG


def gpt(root: Path, scenario: str) -> Path:
    return org(root) / "results" / SYSTEM / GPT / scenario


def qwen(root: Path, scenario: str) -> Path:
    return org(root) / "results" / SYSTEM / QWEN / scenario


def test_corpus_checks_clean(corpus: tuple[Path, dict[str, Path], Path]) -> None:
    root, _, _ = corpus
    report = check_tree(root, "v6.1")
    assert report.profile == "submission" and report.scenarios_checked == 5
    assert report.findings == [], report.text()
    rows = {(r["Model"], r["Scenario"]): r for r in report.csv_rows()}
    assert set(rows) == {(GPT, "Offline"), (GPT, "Server"), (GPT, "Interactive"), (QWEN, "Offline"),
                         (QWEN, "Interactive")}
    assert all(r["errors"] == "0" and r["Division"] == "closed" and r["version"] == "v6.1" for r in rows.values())
    offline = rows[(GPT, "Offline")]
    assert offline["Units"] == "Tokens/s" and float(offline["Result"]) > 0
    assert offline["Accuracy"].startswith("exact_match: 100.000")
    assert rows[(GPT, "Interactive")]["inferred"] == "1" and offline["inferred"] == "0"  # as the checker marks it
    assert rows[(QWEN, "Interactive")]["Accuracy"] == "F1_HIERARCHICAL: 0.7884"
    assert rows[(QWEN, "Offline")]["Units"] == "Samples/s"


def test_corpus_runs_are_real_600_s_runs(corpus: tuple[Path, dict[str, Path], Path]) -> None:
    """The logs say what a closed run must: 600000 ms configured and met, 6396 samples, the v6.1 seeds."""
    from submission.results.logs import load_run
    from submission.rules import load_rules

    root, _, _ = corpus
    for scenario in ("Offline", "Server", "Interactive"):
        run = load_run(gpt(root, scenario) / "performance" / "run_1")
        assert run.valid and run.min_duration_met and run.settings.min_duration_ms == 600000
        assert run.settings.performance_sample_count == 6396 and run.loadgen_version.startswith("6.0.17")
        assert run.seeds == load_rules("v6.1").seeds.model_dump()
    offline = load_run(gpt(root, "Offline") / "performance" / "run_1")
    assert offline.latency_ns["max"] >= 600e9  # the one Offline query really lasted 600 s on loadgen's clock


def _swap_perf(root: Path, scenario: str, run_dir: Path) -> None:
    target = gpt(root, scenario) / "performance" / "run_1"
    for name in PERF:
        shutil.copy2(run_dir / name, target / name)


def _edit_json(path: Path, change: Callable[[dict], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def _edit_yaml(path: Path, change: Callable[[dict], None]) -> None:
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data))


def _rm(relative: str) -> Mutation:
    return lambda root, runs, backup: os.remove(gpt(root, "Offline") / relative)


def _system(change: Callable[[dict], None]) -> Mutation:
    return lambda root, runs, backup: _edit_json(org(root) / "systems" / f"{SYSTEM}.json", change)


def _accuracy_txt(text: str) -> Mutation:
    def mutate(root: Path, runs: dict[str, Path], backup: Path) -> None:
        path = gpt(root, "Offline") / "accuracy" / "accuracy.txt"
        digest = re.search(r"^hash=\w+$", path.read_text(), re.M).group(0)
        path.write_text(f"{text}\n{digest}\n")
    return mutate


def _untruncate(root: Path, runs: dict[str, Path], backup: Path) -> None:
    acc = gpt(root, "Offline") / "accuracy"
    shutil.copy2(backup / acc.relative_to(root) / "mlperf_log_accuracy.json", acc / "mlperf_log_accuracy.json")


def _rename_system(root: Path, runs: dict[str, Path], backup: Path) -> None:
    evil = f"{SYSTEM}..evil"
    (org(root) / "results" / SYSTEM).rename(org(root) / "results" / evil)
    (org(root) / "systems" / f"{SYSTEM}.json").rename(org(root) / "systems" / f"{evil}.json")


def _verify(test: str, name: str, text: str) -> Mutation:
    return lambda root, runs, backup: (gpt(root, "Server") / test / name).write_text(text)


def _qwen_summary(change: Callable[[dict], None], scenario: str = "Interactive") -> Mutation:
    return lambda root, runs, backup: _edit_json(qwen(root, scenario) / "performance" / "result_summary.json",
                                                 change)


def _qwen_config(change: Callable[[dict], None], scenario: str = "Interactive") -> Mutation:
    return lambda root, runs, backup: _edit_yaml(qwen(root, scenario) / "config.yaml", change)


def _set(*path: str, value: object) -> Callable[[dict], None]:
    def change(data: dict) -> None:
        for key in path[:-1]:
            data = data[key]
        data[path[-1]] = value
    return change


OFF = f"closed/{ORG}/results/{SYSTEM}/{GPT}/Offline"
SRV = f"closed/{ORG}/results/{SYSTEM}/{GPT}/Server"
INT = f"closed/{ORG}/results/{SYSTEM}/{GPT}/Interactive"
QINT = f"closed/{ORG}/results/{SYSTEM}/{QWEN}/Interactive"
QOFF = f"closed/{ORG}/results/{SYSTEM}/{QWEN}/Offline"

# id: (mutation, the rule ids it must give (every finding of every severity), the path the findings name)
MUTATIONS: dict[str, tuple[Mutation, set[str], str]] = {
    # each required file missing in turn
    "perf-summary-missing": (_rm("performance/run_1/mlperf_log_summary.txt"), {"performance-files"}, OFF),
    "perf-detail-missing": (_rm("performance/run_1/mlperf_log_detail.txt"), {"performance-files"}, OFF),
    "acc-summary-missing": (_rm("accuracy/mlperf_log_summary.txt"), {"accuracy-files"}, OFF),
    "acc-detail-missing": (_rm("accuracy/mlperf_log_detail.txt"), {"accuracy-files"}, OFF),
    "acc-log-missing": (_rm("accuracy/mlperf_log_accuracy.json"), {"accuracy-files"}, OFF),
    "accuracy-txt-missing": (_rm("accuracy/accuracy.txt"), {"accuracy-files"}, OFF),
    "measurements-missing": (_rm("measurements.json"), {"measurements"}, OFF),
    "user-conf-missing": (_rm("user.conf"), {"scenario-files"}, OFF),
    "readme-missing": (_rm("README.md"), {"scenario-files"}, OFF),
    "readme-empty": (lambda r, _, __: (gpt(r, "Offline") / "README.md").write_text(""), {"scenario-files"}, OFF),
    "system-json-missing": (lambda r, _, __: os.remove(org(r) / "systems" / f"{SYSTEM}.json"),
                            {"system-description"}, f"closed/{ORG}/systems"),
    "src-missing": (lambda r, _, __: shutil.rmtree(org(r) / "src"), {"src-dir"}, f"closed/{ORG}/src"),
    "calibration-missing": (lambda r, _, __: shutil.rmtree(org(r) / "documentation"), {"calibration"},
                            f"closed/{ORG}"),
    "test07-verify-missing": (lambda r, _, __: os.remove(gpt(r, "Server") / "TEST07" / "verify_accuracy.txt"),
                              {"compliance-files"}, f"{SRV}/TEST07"),
    "test09-verify-missing": (lambda r, _, __: os.remove(gpt(r, "Server") / "TEST09" / "verify_output_len.txt"),
                              {"compliance-files"}, f"{SRV}/TEST09"),
    "test09-perf-log-missing": (lambda r, _, __: os.remove(gpt(r, "Offline") / "TEST09" / "performance" / "run_1" /
                                                           "mlperf_log_detail.txt"), {"compliance-files"},
                                f"{OFF}/TEST09"),
    "test07-folder-missing": (lambda r, _, __: shutil.rmtree(gpt(r, "Interactive") / "TEST07"),
                              {"compliance-missing"}, f"{INT}/TEST07"),
    "test07-accuracy-log-missing": (lambda r, _, __: os.remove(gpt(r, "Offline") / "TEST07" / "accuracy" /
                                                               "mlperf_log_accuracy.json"), {"compliance-files"},
                                    f"{OFF}/TEST07"),
    "test09-perf-summary-missing": (lambda r, _, __: os.remove(gpt(r, "Interactive") / "TEST09" / "performance" /
                                                               "run_1" / "mlperf_log_summary.txt"),
                                    {"compliance-files"}, f"{INT}/TEST09"),
    "qwen-measurements-missing": (lambda r, _, __: os.remove(qwen(r, "Offline") / "measurements.json"),
                                  {"measurements"}, QOFF),
    "qwen-readme-missing": (lambda r, _, __: os.remove(qwen(r, "Interactive") / "README.md"), {"scenario-files"},
                            QINT),
    "qwen-config-missing": (lambda r, _, __: os.remove(qwen(r, "Offline") / "config.yaml"), {"endpoints-files"},
                            QOFF),
    "qwen-summary-missing": (lambda r, _, __: os.remove(qwen(r, "Offline") / "performance" / "result_summary.json"),
                             {"endpoints-files"}, QOFF),
    "qwen-accuracy-missing": (lambda r, _, __: os.remove(qwen(r, "Offline") / "accuracy" / "accuracy_results.json"),
                              {"endpoints-files"}, QOFF),
    # runs that break the rules (real loadgen runs)
    "invalid-run": (lambda r, runs, _: _swap_perf(r, "Offline", runs["invalid-Offline"]), {"result-valid"}, OFF),
    "v6.0-log": (lambda r, runs, _: _swap_perf(r, "Offline", runs["v6.0-Offline"]), {"seeds-round"}, OFF),
    "loadgen-errors": (lambda r, runs, _: _swap_perf(r, "Server", runs["errors-Server"]), {"loadgen-errors"}, SRV),
    "interactive-with-server-limits": (lambda r, runs, _: _swap_perf(r, "Interactive", runs["perf-Server"]),
                                       {"latency-config"}, INT),
    "short-min-duration": (lambda r, runs, _: _swap_perf(r, "Offline", runs["short-Offline"]), {"min-duration"},
                           OFF),
    "audit-run-as-main-run": (lambda r, runs, _: _swap_perf(r, "Offline", runs["TEST09-Offline"]),
                              {"audit-in-run", "min-duration"}, OFF),
    "main-run-as-audit-run": (lambda r, runs, _: [shutil.copy2(runs["perf-Offline"] / n, gpt(r, "Offline") / "TEST09" /
                                                               "performance" / "run_1" / n) for n in PERF],
                              {"compliance-audit"}, f"{OFF}/TEST09"),
    "perf-logs-in-accuracy": (lambda r, runs, _: [shutil.copy2(runs["perf-Offline"] / n, gpt(r, "Offline") /
                                                               "accuracy" / n) for n in PERF], {"test-mode"}, OFF),
    # accuracy
    "untruncated-accuracy-log": (_untruncate, {"accuracy-truncated"}, OFF),
    "hash-line-missing": (lambda r, _, __: (gpt(r, "Offline") / "accuracy" / "accuracy.txt").write_text(
        "{'exact_match': 100.000, 'tokens_per_sample': 16.0}\n"), {"accuracy-hash"}, OFF),
    "accuracy-under-target": (_accuracy_txt("{'exact_match': 80.125, 'tokens_per_sample': 16.0}"),
                              {"accuracy-target"}, OFF),
    "accuracy-over-upper-limit": (_accuracy_txt("{'exact_match': 100.000, 'tokens_per_sample': 12000.0}"),
                                  {"accuracy-upper-limit"}, OFF),
    "accuracy-metric-missing": (_accuracy_txt("{'rouge1': 40.0}"), {"accuracy-metric"}, OFF),
    # system description
    "empty-system-field": (_system(_set("host_processor_model_name", value="")), {"system-description"},
                           f"closed/{ORG}/systems"),
    "bad-status": (_system(_set("status", value="released")), {"system-description"}, f"closed/{ORG}/systems"),
    "closed-system-says-network": (_system(_set("is_network", value="true")), {"system-description"},
                                   f"closed/{ORG}/systems"),
    "measurements-key-empty": (lambda r, _, __: _edit_json(gpt(r, "Server") / "measurements.json",
                                                           _set("weight_data_types", value="")), {"measurements"}, SRV),
    # structure
    "unknown-scenario-folder": (lambda r, _, __: shutil.copytree(gpt(r, "Offline"), gpt(r, "SingleStream")),
                                {"unknown-scenario"}, f"{GPT}/SingleStream"),
    "required-scenario-missing": (lambda r, _, __: shutil.rmtree(gpt(r, "Offline")), {"required-scenarios"},
                                  f"{SYSTEM}/{GPT}"),
    "no-server-nor-interactive": (lambda r, _, __: [shutil.rmtree(gpt(r, s)) for s in ("Server", "Interactive")],
                                  {"required-scenarios"}, f"{SYSTEM}/{GPT}"),
    "dotdot-in-system-name": (_rename_system, {"unsafe-name"}, f"{SYSTEM}..evil"),
    "extra-file": (lambda r, _, __: (gpt(r, "Offline") / "accuracy" / "notes.txt").write_text("x"),
                   {"unexpected-file"}, f"{OFF}/accuracy/notes.txt"),
    "extra-file-in-test-folder": (lambda r, _, __: (gpt(r, "Server") / "TEST07" / "audit.config").write_text("x"),
                                  {"unexpected-file"}, f"{SRV}/TEST07/audit.config"),
    "symlink": (lambda r, _, __: (org(r) / "documentation" / "link.md").symlink_to(
        org(r) / "documentation" / "calibration.md"), {"symlink"}, "documentation/link.md"),
    "model-mapping-in-closed": (lambda r, _, __: (org(r) / "model_mapping.json").write_text('{"x": "gpt-oss-120b"}'),
                                {"model-mapping"}, f"closed/{ORG}/model_mapping.json"),
    "empty-tree": (lambda r, _, __: shutil.rmtree(r / "closed"), {"empty-tree"}, "."),
    # compliance pass lines
    "test09-fail": (_verify("TEST09", "verify_output_len.txt", "Mean output tokens: 900.00\nTEST FAIL\n"),
                    {"compliance-pass"}, f"{SRV}/TEST09"),
    "test07-pass-line-missing": (_verify("TEST07", "verify_accuracy.txt", "exact_match: 55.000\n"),
                                 {"compliance-pass"}, f"{SRV}/TEST07"),
    # endpoints (qwen3-vl)
    "qwen-wrong-seeds": (_qwen_config(lambda c: c["settings"]["runtime"].update(
        scheduler_random_seed=42, dataloader_random_seed=42)), {"seeds"}, QINT),
    "qwen-e2e-latency-over-limit": (_qwen_summary(_set("latency", "early_stopping_percentiles", "99.0",
                                                       value=1_600_000_000)), {"latency-limit"}, QINT),
    "qwen-short-min-duration": (_qwen_config(_set("settings", "runtime", "min_duration_ms", value="60s")),
                                {"min-duration"}, QINT),
    "qwen-offline-run-in-interactive": (_qwen_config(_set("type", value="offline")), {"scenario-mismatch"}, QINT),
    "qwen-failed-samples": (_qwen_summary(_set("n_samples_failed", value=3)), {"endpoints-errors"}, QINT),
    "qwen-under-target": (lambda r, _, __: _edit_json(qwen(r, "Offline") / "accuracy" / "accuracy_results.json",
                                                      lambda d: d["accuracy_scores"][0].update(score={"f1": 0.75})),
                          {"accuracy-target"}, QOFF),
    "qwen-partial-coverage": (lambda r, _, __: _edit_json(
        qwen(r, "Interactive") / "accuracy" / "accuracy_results.json",
        lambda d: d["accuracy_scores"][0].update(total_samples=7999)), {"accuracy-coverage"}, QINT),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_mutation_gives_exactly_its_finding(name: str, corpus: tuple[Path, dict[str, Path], Path],
                                            tmp_path: Path) -> None:
    root, runs, backup = corpus
    mutate, expected, where = MUTATIONS[name]
    tree = tmp_path / "tree"
    shutil.copytree(root, tree, symlinks=True)
    mutate(tree, runs, backup)
    report: CheckReport = check_tree(tree, "v6.1")
    assert report.rules() == expected, report.text()
    assert not report.ok and all(f.severity == "error" for f in report.findings), report.text()
    assert all(where in f.path or where == "." for f in report.findings), report.text()
    assert all(f.fix for f in report.findings if f.rule != "system-description"), report.text()


def test_an_invalid_test07_run_is_only_a_warning(corpus: tuple[Path, dict[str, Path], Path],
                                                   tmp_path: Path) -> None:
    """A Server TEST07 audit whose 990 queries leave TPOT early stopping short (a full-size rehearsal's, as loadgen
    wrote it: "Would need to run at least 11 more queries"): the official checker judges only TEST01/TEST04's
    performance runs and says "submission looks OK", so Podium warns; a rehearsal's marker passes with a warning."""
    from submission.tree.rehearsal_marker import mark

    root, _, _ = corpus
    tree = tmp_path / "tree"
    shutil.copytree(root, tree)
    run = gpt(tree, "Server") / "TEST07" / "performance" / "run_1"
    detail = (run / "mlperf_log_detail.txt").read_text()
    for key in ("result_validity", "early_stopping_met"):
        line = next(x for x in detail.splitlines() if f'"key": "{key}"' in x)
        detail = detail.replace(line, line.replace('"value": "VALID"', '"value": "INVALID"')
                                .replace('"value": true', '"value": false'))
    (run / "mlperf_log_detail.txt").write_text(detail)
    summary = (run / "mlperf_log_summary.txt").read_text()
    summary = re.sub(r"Result is : VALID", "Result is : INVALID", summary)
    (run / "mlperf_log_summary.txt").write_text(re.sub(r"Early stopping satisfied: Yes", "Early stopping satisfied: NO",
                                                       summary))
    mark(tree)
    report = check_tree(tree, "v6.1")
    assert report.ok, report.text()
    assert {(f.rule, f.severity) for f in report.findings} == {("result-valid", "warning"), ("rehearsal", "warning")}
    invalid = next(f for f in report.findings if f.rule == "result-valid")
    assert invalid.path.startswith(f"{SRV}/TEST07") and "TEST07" in invalid.message


def test_enough_mutations() -> None:
    assert len(MUTATIONS) >= 30


def test_cli_exit_codes_json_and_csv(corpus: tuple[Path, dict[str, Path], Path], tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from flows.cli import app
    from submission.checks.summary import COLUMNS

    root, runs, backup = corpus
    clean = CliRunner().invoke(app, ["check", str(root), "--csv", str(tmp_path / "summary.csv")])
    assert clean.exit_code == 0, clean.output
    assert "5 scenario folder(s) checked against v6.1: no errors" in clean.output
    lines = (tmp_path / "summary.csv").read_text().splitlines()
    assert lines[0] == ",".join(COLUMNS) and len(lines) == 6 and all(line.startswith('"Podium"') for line in lines[1:])
    tree = tmp_path / "tree"
    shutil.copytree(root, tree)
    MUTATIONS["invalid-run"][0](tree, runs, backup)
    bad = CliRunner().invoke(app, ["check", str(tree), "--json"])
    assert bad.exit_code == 1
    data = json.loads(bad.output)
    assert data["ok"] is False and data["counts"] == {"error": 1, "warning": 0, "deviation": 0}
    assert data["findings"][0]["rule"] == "result-valid" and data["findings"][0]["fix"]
    assert CliRunner().invoke(app, ["check", str(tmp_path / "nowhere")]).exit_code == 2
    assert CliRunner().invoke(app, ["check", str(root), "--round", "v9.9"]).exit_code == 2


def test_the_round_tools_on_the_corpus(corpus: tuple[Path, dict[str, Path], Path], tmp_path: Path,
                                      inference_src: Path) -> None:
    """`podium submit`'s official steps, run for real from the round's pinned sources: the checker passes the corpus
    (src/<benchmark>/ included) and ends with its counts. preprocess_submission.py, at the pin: on the closed tree it
    stops with the TypeError of submission_checker_old.py line 3669 (TEST07), named as the known defect; without
    gpt-oss-120b it runs through (the src/<benchmark>/ it copies a moved result's code from is there) but drops both
    qwen3-vl results, whose endpoints layout it reads with loadgen readers; in the open division it keeps gpt-oss-120b
    and drops qwen3-vl again. Both drops are refused, naming the folders."""
    from submission.checks import official
    from submission.checks.preprocess import PreprocessDroppedResults, PreprocessFailed, run_preprocess
    from submission.tree.changes import compare

    root, _, _ = corpus
    theirs = official.run_official(root, inference_src, "v6.1", tmp_path / "official.csv")
    assert theirs.ok and theirs.summary[-1] == "SUMMARY: submission looks OK", theirs.output_tail
    assert theirs.summary[:2] == ["Results=5, NoResults=0, Power Results=0", "Closed Results=5, Closed Power Results=0"]
    with pytest.raises(PreprocessFailed, match=r"exited with code 1: TypeError: 'NotImplementedType' object is not "
                                               r"callable; a known defect at mlcommons/inference b66003e1") as failed:
        run_preprocess(root, inference_src, "v6.1", tmp_path / "closed")
    assert "line 3669, in check_compliance_acc_dir" in failed.value.log and "FileNotFoundError" not in failed.value.log
    results = f"{ORG}/results/{SYSTEM}/{QWEN}"
    no_gpt = tmp_path / "no-gpt"
    shutil.copytree(root, no_gpt)
    shutil.rmtree(no_gpt / "closed" / ORG / "results" / SYSTEM / GPT)
    with pytest.raises(PreprocessDroppedResults) as dropped:
        run_preprocess(no_gpt, inference_src, "v6.1", tmp_path / "closed-qwen")
    assert dropped.value.folders == [f"closed/{results}/{sc}" for sc in ("Interactive", "Offline")]
    assert (tmp_path / "closed-qwen" / "open" / ORG / "src" / QWEN / "README.md").is_file()   # copied to open
    opened = tmp_path / "open-tree"
    shutil.copytree(org(root), opened / "open" / ORG)
    _edit_json(opened / "open" / ORG / "systems" / f"{SYSTEM}.json", lambda d: d.update(division="open"))
    with pytest.raises(PreprocessDroppedResults) as dropped:
        run_preprocess(opened, inference_src, "v6.1", tmp_path / "preprocessed")
    assert dropped.value.folders == [f"open/{results}/{sc}" for sc in ("Interactive", "Offline")]
    kept = compare(opened, tmp_path / "preprocessed")
    assert not (kept.added or kept.changed) and {Path(p).parts[4] for p in kept.removed} == {QWEN}
    assert (tmp_path / "preprocessed" / "open" / ORG / "results" / SYSTEM / GPT).is_dir()
