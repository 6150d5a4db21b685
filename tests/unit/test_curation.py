"""`podium assemble`: choosing per (system, benchmark, scenario) from synthetic run folders, the refusals, the tree
and curation.json. Each run folder is made by the real `assemble` from stub loadgen files that name their run, so a
test can tell which run every file of the curated tree came from."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from submission.base.errors import CurationError, PlanError
from submission.plan import model as plans
from submission.results.runs import AuditCheck, AuditRecord, RunRecord
from submission.tree import rehearsal_marker, source
from submission.tree.assemble import assemble, plan_file
from submission.tree.curated import write
from submission.tree.curation import curate, load_source

SMOKE = Path(__file__).parents[2] / "deployments" / "plans" / "smoke.yaml"
OPEN = ("open", "Podium")
BOTH_AUDITS = {"TEST07": True, "TEST09": True}


def make_plan(name: str = "smoke", system: str = "cpu-smoke", scenarios: tuple[str, ...] = ("Offline",),
              **top: object) -> plans.Plan:
    """The smoke plan, renamed, on `system`, with `scenarios`; top-level keys replaced by `top`."""
    data = yaml.safe_load(SMOKE.read_text())
    data["systems"][0]["name"] = data["benchmarks"][0]["system"] = system
    bench = data["benchmarks"][0]
    bench["scenarios"] = {s: bench["scenarios"].get(s, {"target_qps": 5}) for s in scenarios}
    if "benchmark" in top:   # another benchmark, closed, without audits
        bench |= {"benchmark": top.pop("benchmark"), "evaluator": None}
        data["compliance"] = {"run": "never"}
    if top.get("division") == "closed":
        bench["model"]["name"] = bench["benchmark"]
    if top.get("profile") == "submission":   # without the smoke-only values
        data.pop("compliance")
        bench["loadgen"] = {}
        for sc in bench["scenarios"].values():
            sc.pop("ttft_ms", None), sc.pop("tpot_ms", None)
    data.update(name=name, **top)
    return plans.parse(data)


def _stub(run_dir: Path, text: str) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in ("mlperf_log_summary.txt", "mlperf_log_detail.txt", "user.conf", "accuracy.txt"):
        (run_dir / name).write_text(f"{text}\n")
    (run_dir / "mlperf_log_accuracy.json").write_text("[]\n")


def _records(folder: Path, run_id: str, plan: plans.Plan, scenario: str, metric: float, *, valid: bool,
             accuracy: bool, ended: str | None) -> list[RunRecord]:
    bench = plan.benchmarks[0]
    out = []
    for mode in ("performance", "accuracy"):
        run_dir = folder / "work" / f"{scenario}-{mode}"
        _stub(run_dir, f"run {run_id} {scenario} {mode}")
        perf = mode == "performance"
        out.append(RunRecord(
            key=f"{run_id}-{scenario}-{mode}", system=bench.system, benchmark=bench.benchmark, scenario=scenario,
            mode=mode, run_dir=str(run_dir), valid=valid if perf else None,
            validity=("VALID" if valid else "INVALID") if perf else None,
            invalid_reasons=() if valid or not perf else ("min duration not met",),
            metric=metric if perf else None, unit="Tokens/s" if perf else None,
            accuracy_metric=None if perf else "exact_match", accuracy=None if perf else (100.0 if accuracy else 40.0),
            accuracy_pass=None if perf else accuracy, ended_at=ended, flow_run_id=run_id))
    return out


def _audits(folder: Path, run_id: str, plan: plans.Plan, scenario: str, tests: dict[str, bool]) -> list[AuditRecord]:
    bench = plan.benchmarks[0]
    out = []
    for test, passed in tests.items():
        audit_dir = folder / "work" / f"{scenario}-{test}"
        audit_dir.mkdir(parents=True)
        (audit_dir / "verify_accuracy.txt").write_text(f"run {run_id} {scenario} {test}\n")
        out.append(AuditRecord(key=f"{run_id}-{scenario}-{test}", system=bench.system, benchmark=bench.benchmark,
                               scenario=scenario, test=test, run_dir=str(audit_dir), folder=str(audit_dir),
                               passed=passed, checks=(AuditCheck(name="mean output tokens", passed=passed),)))
    return out


def make_run(base: Path, run_id: str, plan: plans.Plan, metrics: dict[str, float], *, invalid: tuple[str, ...] = (),
             accuracy: bool = True, audits: dict[str, bool] | None = None, ended: str | None = None,
             description: dict[str, str] | None = None, code: source.Code | None = None) -> Path:
    """A run folder as `podium run` leaves it: results.json, compliance.json and the tree `assemble` writes."""
    folder = base / run_id
    records, audit_records = [], []
    for scenario, metric in metrics.items():
        records += _records(folder, run_id, plan, scenario, metric, valid=scenario not in invalid, accuracy=accuracy,
                            ended=ended)
        audit_records += _audits(folder, run_id, plan, scenario, BOTH_AUDITS if audits is None else audits)
    system = plan.benchmarks[0].system
    desc = {"division": plan.division, "submitter": plan.submitter, "system_name": system, "hw_notes": "CPU only",
            **(description or {})}
    assemble(plan, records, {system: desc}, folder / "submission", folder / "logs" / "accuracy-full",
             commit="test", audits=audit_records, code=code)
    (folder / "results.json").write_text(json.dumps([r.model_dump(mode="json") for r in records]))
    (folder / "compliance.json").write_text(json.dumps([a.model_dump(mode="json") for a in audit_records]))
    return folder


def _scenario(out: Path, scenario: str, system: str = "cpu-smoke", folder: str = "tiny-llama",
              division: tuple[str, str] = OPEN) -> Path:
    return out / "submission" / division[0] / division[1] / "results" / system / folder / scenario


def _from(scenario_dir: Path) -> set[str]:
    """Which run each file of a curated scenario folder came from (the stubs name their run)."""
    files = [scenario_dir / "performance" / "run_1" / "mlperf_log_summary.txt",
             scenario_dir / "accuracy" / "mlperf_log_summary.txt", scenario_dir / "user.conf",
             *sorted(scenario_dir.glob("TEST*/verify_*.txt"))]
    return {f.read_text().split()[1] for f in files}


def test_best_takes_the_highest_complete_run_whole(tmp_path: Path) -> None:
    plan = make_plan()
    runs = [make_run(tmp_path, "run-a", plan, {"Offline": 100.0}),
            make_run(tmp_path, "run-b", plan, {"Offline": 200.0}),
            make_run(tmp_path, "run-c", plan, {"Offline": 300.0}, invalid=("Offline",))]
    result = curate([load_source(r) for r in runs], "best")
    write(result, tmp_path / "out")
    assert _from(_scenario(tmp_path / "out", "Offline")) == {"run-b"}
    record = json.loads((tmp_path / "out" / "curation.json").read_text())
    [chosen] = record["chosen"]
    assert chosen["why"].startswith("best VALID: 200.0 Tokens/s of 2 candidate(s)")
    assert chosen["why"].endswith("(SMOKE run: not a valid MLPerf result)")
    assert (chosen["source"], chosen["run_id"]) == (str(runs[1]), "run-b")
    assert (chosen["performance"], chosen["accuracy"]) == ("run-b-Offline-performance", "run-b-Offline-accuracy")
    assert chosen["audits"] == {"TEST07": "PASS", "TEST09": "PASS"}
    assert chosen["engine"] == {"name": "smoke", "options": {}} and chosen["model"]["name"] == "tiny-llama"
    assert chosen["plan"] == {"name": "smoke", "fingerprint": plan.fingerprint(), "file": plan_file(plan)}
    left = {entry["run_id"]: entry["why"] for entry in record["left_out"]}
    assert left["run-c"] == "performance INVALID (min duration not met)"
    assert left["run-a"].startswith("not picked:") and "run-b" in left["run-a"]


def test_performance_accuracy_and_audits_never_mixed(tmp_path: Path) -> None:
    """The fastest run failed accuracy: its performance does not go out with another run's accuracy run; the
    slower complete run goes out whole, and so does each scenario, each from the run that was best for it."""
    plan = make_plan(scenarios=("Offline", "Server"))
    fast = make_run(tmp_path, "fast", plan, {"Offline": 900.0, "Server": 10.0}, accuracy=False)
    slow = make_run(tmp_path, "slow", plan, {"Offline": 100.0, "Server": 5.0})
    audit_failed = make_run(tmp_path, "audit", plan, {"Server": 50.0}, audits={"TEST07": True, "TEST09": False})
    mixed = make_run(tmp_path, "mixed", plan, {"Server": 8.0})
    result = curate([load_source(f) for f in (fast, slow, audit_failed, mixed)], "best")
    write(result, tmp_path / "out")
    assert _from(_scenario(tmp_path / "out", "Offline")) == {"slow"}
    assert _from(_scenario(tmp_path / "out", "Server")) == {"mixed"}
    left = {(e["scenario"], e["run_id"]): e["why"] for e in json.loads(
        (tmp_path / "out" / "curation.json").read_text())["left_out"]}
    assert left[("Offline", "fast")] == "accuracy failed (exact_match 40.0)"
    assert left[("Server", "audit")].startswith("audit TEST09 failed (FAIL: mean output tokens: FAIL)")


def test_latest_takes_the_run_that_ended_last(tmp_path: Path) -> None:
    plan = make_plan()
    old = make_run(tmp_path, "old", plan, {"Offline": 500.0}, ended="2025-11-01T10:00:00+00:00")
    new = make_run(tmp_path, "new", plan, {"Offline": 100.0}, ended="2025-11-02T10:00:00+00:00")
    newest_broken = make_run(tmp_path, "broken", plan, {"Offline": 50.0}, invalid=("Offline",),
                             ended="2025-11-03T10:00:00+00:00")
    result = curate([load_source(f) for f in (old, new, newest_broken)], "latest")
    [choice] = result.chosen
    assert choice.candidate.source.run_id == "new"
    assert choice.why.startswith("latest complete: ended 2025-11-02T10:00:00+00:00, of 2 candidate(s)")
    assert curate([load_source(f) for f in (old, new)], "best").chosen[0].candidate.source.run_id == "old"


def test_latest_falls_back_to_the_run_folders_time(tmp_path: Path) -> None:
    plan = make_plan()
    first = make_run(tmp_path, "first", plan, {"Offline": 500.0})
    second = make_run(tmp_path, "second", plan, {"Offline": 100.0})
    os.utime(first / "results.json", (2_000_000_000, 2_000_000_000))   # written after `second`
    os.utime(second / "results.json", (1_900_000_000, 1_900_000_000))
    assert curate([load_source(second), load_source(first)], "latest").chosen[0].candidate.source.run_id == "first"
    os.utime(second / "results.json", (2_100_000_000, 2_100_000_000))
    assert curate([load_source(second), load_source(first)], "latest").chosen[0].candidate.source.run_id == "second"


def test_a_named_run_gives_what_it_has_and_best_the_rest(tmp_path: Path) -> None:
    plan = make_plan(scenarios=("Offline", "Server"))
    named = make_run(tmp_path, "3f2a9c-named", plan, {"Offline": 100.0})
    other = make_run(tmp_path, "77b1-other", plan, {"Offline": 400.0, "Server": 20.0})
    weaker = make_run(tmp_path, "77c0-weaker", plan, {"Server": 10.0})
    result = curate([load_source(f) for f in (named, other, weaker)], "3f2a")   # a unique prefix
    picks = {c.candidate.scenario: (c.candidate.source.run_id, c.why) for c in result.chosen}
    assert picks["Offline"] == ("3f2a9c-named", "named run 3f2a9c-named (SMOKE run: not a valid MLPerf result)")
    assert picks["Server"][0] == "77b1-other"
    assert picks["Server"][1].startswith("best VALID: 20.0 Tokens/s of 2 candidate(s) (run 3f2a9c-named does not")
    with pytest.raises(CurationError, match="'77' matches 2 runs"):
        curate([load_source(f) for f in (named, other, weaker)], "77")
    with pytest.raises(CurationError, match="'zz' matches no run"):
        curate([load_source(f) for f in (named, other)], "zz")


def test_a_named_runs_incomplete_scenario_is_left_out_not_replaced(tmp_path: Path) -> None:
    plan = make_plan(scenarios=("Offline", "Server"))
    named = make_run(tmp_path, "named", plan, {"Offline": 100.0, "Server": 5.0}, invalid=("Server",))
    other = make_run(tmp_path, "other", plan, {"Offline": 400.0, "Server": 20.0})
    result = curate([load_source(named), load_source(other)], "named")
    assert [(c.candidate.scenario, c.candidate.source.run_id) for c in result.chosen] == [("Offline", "named")]
    assert result.warnings == ["cpu-smoke/gpt-oss-120b/Server left out: run named (named by --pick) has it "
                               "incomplete: performance INVALID (min duration not met); no other run stands in"]
    left = {(lo.candidate.scenario, lo.candidate.source.run_id): lo.reason for lo in result.left_out}
    assert left[("Server", "other")] == "run named was named by --pick"


def test_nothing_complete_leaves_the_scenario_out_with_the_reasons(tmp_path: Path) -> None:
    plan = make_plan(scenarios=("Offline", "Server"))
    invalid = make_run(tmp_path, "invalid", plan, {"Offline": 100.0, "Server": 5.0}, invalid=("Server",))
    wrong = make_run(tmp_path, "wrong", plan, {"Server": 9.0}, accuracy=False)
    unaudited = make_run(tmp_path, "unaudited", plan, {"Server": 7.0}, audits={"TEST07": True})
    result = curate([load_source(f) for f in (invalid, wrong, unaudited)], "best")
    assert [c.candidate.scenario for c in result.chosen] == ["Offline"]
    [warning] = result.warnings
    assert warning.startswith("cpu-smoke/gpt-oss-120b/Server left out: nothing complete to pick: ")
    for reason in (f"{invalid} (run invalid): performance INVALID (min duration not met)",
                   f"{wrong} (run wrong): accuracy failed (exact_match 40.0)",
                   f"{unaudited} (run unaudited): audit TEST09 missing (the plan ran audits)"):
        assert reason in warning
    with pytest.raises(CurationError, match="nothing complete to pick from the sources") as error:
        curate([load_source(wrong)], "best")
    assert "accuracy failed" in str(error.value) and error.value.fix


def _refused(sources: list[Path], *phrases: str) -> CurationError:
    with pytest.raises(CurationError) as error:
        curate([load_source(s) for s in sources], "best")
    text = str(error.value)
    for phrase in (*phrases, *map(str, sources)):   # the message names both sources
        assert phrase in text, text
    assert error.value.fix and error.value.exit_code == 2
    return error.value


def test_refuses_two_rounds_submitters_and_profiles(tmp_path: Path) -> None:
    base = make_run(tmp_path, "base", make_plan(), {"Offline": 1.0})
    _refused([base, make_run(tmp_path, "r60", make_plan(round="v6.0"), {"Offline": 1.0})],
             "two rounds", "'v6.1'", "'v6.0'")
    _refused([base, make_run(tmp_path, "acme", make_plan(submitter="Acme"), {"Offline": 1.0})],
             "two submitters", "'Podium'", "'Acme'")
    real = make_run(tmp_path, "real", make_plan("real", "sut-b", ("Offline", "Server"), profile="submission"),
                    {"Offline": 1.0}, audits={})
    _refused([base, real], "two profiles", "'smoke'", "'submission'")


def test_dress_rehearsals_curate_into_a_rehearsal_tree_and_never_beside_a_real_run(tmp_path: Path) -> None:
    """Curating rehearsal trees keeps REHEARSAL.txt at the top, so `podium package` refuses the curated tree as it
    refuses each rehearsal's own; a rehearsal is never curated with a real run."""
    rehearsals = []
    for name, system in (("rehearsal-a", "rehearsal-sys-a"), ("rehearsal-b", "rehearsal-sys-b")):
        plan = make_plan(name, system, ("Offline", "Server"), profile="submission")
        folder = make_run(tmp_path, name, plan, {"Offline": 1.0, "Server": 1.0}, audits={})
        rehearsal_marker.mark(folder / "submission")   # as `podium rehearse` leaves its tree
        rehearsals.append(folder)
    result = curate([load_source(r) for r in rehearsals], "best")
    root = write(result, tmp_path / "out")
    assert (root / rehearsal_marker.MARKER).read_text().startswith("DRESS REHEARSAL, NOT A SUBMISSION")
    with pytest.raises(PlanError, match="dress rehearsal's tree"):
        rehearsal_marker.refuse(root)
    record = json.loads((tmp_path / "out" / "curation.json").read_text())
    assert record["profile"] == "rehearsal" and len(record["chosen"]) == 4
    assert all(c["why"].endswith("(DRESS REHEARSAL: a simulated engine on synthetic data, not a measurement)")
               for c in record["chosen"])
    real = make_run(tmp_path, "real", make_plan("real", "sut-b", ("Offline", "Server"), profile="submission"),
                    {"Offline": 1.0}, audits={})
    _refused([rehearsals[0], real], "two profiles", "'rehearsal'", "'submission'")


def test_refuses_two_descriptions_of_one_system(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", make_plan("one"), {"Offline": 1.0})
    b = make_run(tmp_path, "b", make_plan("two", scenarios=("Server",)), {"Server": 1.0},
                 description={"hw_notes": "8x accelerator"})
    _refused([a, b], "system 'cpu-smoke' is described differently", "hw_notes 'CPU only' vs '8x accelerator'")


def test_one_division_per_system_and_benchmark(tmp_path: Path) -> None:
    """The same system in open and closed: its descriptions may differ in `division` only; one benchmark's
    scenarios picked in both divisions are refused."""
    open_run = make_run(tmp_path, "open", make_plan("o"), {"Offline": 1.0})
    closed_run = make_run(tmp_path, "closed", make_plan("c", scenarios=("Server",), division="closed"),
                          {"Server": 1.0})
    _refused([open_run, closed_run], "cpu-smoke/gpt-oss-120b would be submitted in two divisions", "open from",
             "closed from")
    llama = make_run(tmp_path, "llama", make_plan("l", benchmark="llama3.1-8b", division="closed"), {"Offline": 1.0},
                     audits={})
    write(curate([load_source(open_run), load_source(llama)], "best"), tmp_path / "out")   # two benchmarks: fine
    assert _from(_scenario(tmp_path / "out", "Offline")) == {"open"}
    assert _from(_scenario(tmp_path / "out", "Offline", folder="llama3.1-8b", division=("closed", "Podium"))) == {
        "llama"}
    closed_org = tmp_path / "out" / "submission" / "closed" / "Podium"
    assert json.loads((closed_org / "systems" / "cpu-smoke.json").read_text())["division"] == "closed"
    assert (closed_org / "documentation" / "calibration.md").read_text().startswith("# Calibration\n\n- llama3.1-8b")
    other = make_run(tmp_path, "other", make_plan("c", scenarios=("Server",), division="closed"), {"Server": 1.0},
                     description={"hw_notes": "else"})
    _refused([open_run, other], "described differently", "hw_notes")   # `division` aside, they must agree


def test_the_curated_tree(tmp_path: Path) -> None:
    """Systems, merged model mapping, each plan under its own name (the READMEs name it), the smoke marker."""
    one, two = make_plan("alpha", "sys-a"), make_plan("beta", "sys-b")
    a = make_run(tmp_path, "run-a", one, {"Offline": 1.0})
    b = make_run(tmp_path, "run-b", two, {"Offline": 2.0})
    (b / "submission" / "open" / "Podium" / "model_mapping.json").write_text('{"tiny-llama": "gpt-oss-120b"}')
    write(curate([load_source(a), load_source(b)], "best"), tmp_path / "out")
    org = tmp_path / "out" / "submission" / "open" / "Podium"
    assert sorted(p.name for p in (org / "systems").iterdir()) == ["sys-a.json", "sys-b.json"]
    assert json.loads((org / "model_mapping.json").read_text()) == {"tiny-llama": "gpt-oss-120b"}
    assert sorted(p.name for p in (org / "src" / "podium" / "plans").iterdir()) == sorted(
        Path(plan_file(p)).name for p in (one, two))
    for plan, system in ((one, "sys-a"), (two, "sys-b")):
        assert plans.load(org / plan_file(plan)).fingerprint() == plan.fingerprint()
        readme = (_scenario(tmp_path / "out", "Offline", system) / "README.md").read_text()
        assert f"the plan is in {plan_file(plan)}" in readme
    assert "run-a" in (org / "src" / "podium" / "README.md").read_text()
    code = (org / "src" / "tiny-llama" / "README.md").read_text()   # one code folder, naming both plans
    assert all(f"`{plan_file(plan)}`" in code for plan in (one, two))
    assert (tmp_path / "out" / "submission" / "SMOKE-NOT-A-SUBMISSION.md").is_file()
    assert not (tmp_path / "out" / "submission" / "closed").exists()


def test_the_curated_tree_carries_the_podium_source_of_each_run(tmp_path: Path) -> None:
    """Runs of two commits and a third run of the first: each archive once in src/podium/, listed in source.json and
    the README with its sha256, byte for byte the run trees' own."""
    from tests.unit.test_source import checkout, git

    repo = tmp_path / "repo"
    first = checkout(repo)
    one = source.snapshot(tmp_path / "code-1", first, root=repo)
    (repo / "tasks" / "steps.py").write_text("STEP = 6\n")
    git(repo, "commit", "-qam", "two")
    two = source.snapshot(tmp_path / "code-2", git(repo, "rev-parse", "HEAD").decode().strip(), root=repo)
    runs = [make_run(tmp_path, f"run-{i}", make_plan(f"p{i}", f"sys-{i}"), {"Offline": 1.0}, code=code)
            for i, code in enumerate((one, two, one))]
    assert source.read(runs[0] / "submission" / "open" / "Podium" / "src" / "podium") == [one.model_copy(
        update={"folder": runs[0] / "submission" / "open" / "Podium" / "src" / "podium"})]
    write(curate([load_source(run) for run in runs], "best"), tmp_path / "out")
    podium = tmp_path / "out" / "submission" / "open" / "Podium" / "src" / "podium"
    assert [c.archive for c in source.read(podium)] == [one.archive, two.archive]
    for code in (one, two):
        assert (podium / code.archive.name).read_bytes() == (code.folder / code.archive.name).read_bytes()
        assert f"`{code.archive.name}` ({code.archive.size:,} bytes, sha256 `{code.archive.sha256}`)" in (
            podium / "README.md").read_text()


def test_an_older_tree_with_src_podium_plan_yaml(tmp_path: Path) -> None:
    plan = make_plan()
    run = make_run(tmp_path, "old", plan, {"Offline": 1.0})
    org = run / "submission" / "open" / "Podium"
    (org / plan_file(plan)).rename(org / "src" / "podium" / "plan.yaml")
    readme = _scenario(run.parent / "old", "Offline").parent.parent.parent.parent / "results" / "cpu-smoke"
    readme = readme / "tiny-llama" / "Offline" / "README.md"
    readme.write_text(readme.read_text().replace(plan_file(plan), "src/podium/plan.yaml"))
    write(curate([load_source(run)], "best"), tmp_path / "out")
    curated = _scenario(tmp_path / "out", "Offline") / "README.md"
    assert f"the plan is in {plan_file(plan)}" in curated.read_text()
    assert (tmp_path / "out" / "submission" / "open" / "Podium" / plan_file(plan)).is_file()


def test_the_same_run_twice_counts_once(tmp_path: Path) -> None:
    run = make_run(tmp_path, "r1", make_plan(), {"Offline": 1.0})
    copy = tmp_path / "elsewhere"
    copy.mkdir()
    os.symlink(run, copy / "r1")
    result = curate([load_source(run), load_source(copy / "r1")], "best")
    assert len(result.sources) == 1 and "is run r1 again" in result.warnings[0]


def test_cli_refusal_exits_2_naming_both_sources(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", make_plan(), {"Offline": 1.0})
    b = make_run(tmp_path, "b", make_plan(round="v6.0"), {"Offline": 1.0})
    result = CliRunner().invoke(app, ["assemble", "--from", str(a), "--from", str(b), "--out", str(tmp_path / "o"),
                                      "--workspace", str(tmp_path / "ws")])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: two rounds") and str(a) in result.output and str(b) in result.output
    assert "fix:" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "o").exists()
    missing = CliRunner().invoke(app, ["assemble", "--from", str(tmp_path / "nope" / "x"), "--out", str(tmp_path)])
    assert missing.exit_code == 2 and "is not a run folder" in missing.output


def test_assemble_keeps_the_plan_under_its_name_and_fingerprint(tmp_path: Path) -> None:
    plan = make_plan("my-plan")
    run = make_run(tmp_path, "r", plan, {"Offline": 1.0})
    org = run / "submission" / "open" / "Podium"
    assert plan_file(plan) == f"src/podium/plans/my-plan-{plan.fingerprint()[:8]}.yaml"
    assert (org / plan_file(plan)).is_file() and not (org / "src" / "podium" / "plan.yaml").exists()
    readme = (org / "results" / "cpu-smoke" / "tiny-llama" / "Offline" / "README.md").read_text()
    assert f"podium run my-plan-{plan.fingerprint()[:8]}.yaml   # the plan is in {plan_file(plan)}" in readme
