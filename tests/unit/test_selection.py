"""`podium run --only`: which scenarios a name selects, how each run then uses the cache, and the cache entry a
fresh run drops (its old run folder set aside, never reused)."""

from __future__ import annotations

from pathlib import Path

import pytest

from submission.base.errors import PlanError
from submission.plan import model as plans
from submission.plan import selection

SMOKE = Path(__file__).parents[2] / "deployments" / "plans" / "smoke.yaml"


def test_names_resolve_to_the_plans_scenarios_in_plan_order() -> None:
    plan = plans.load(SMOKE)
    keys = ["cpu-smoke/gpt-oss-120b/Offline", "cpu-smoke/gpt-oss-120b/Server", "cpu-smoke/gpt-oss-120b/Interactive"]
    assert selection.scenario_keys(plan) == keys
    assert selection.resolve(plan, []) == ()
    assert selection.resolve(plan, ["cpu-smoke/gpt-oss-120b/Interactive", "cpu-smoke/gpt-oss-120b/Offline/",
                                    "cpu-smoke/gpt-oss-120b/Interactive"]) == (keys[0], keys[2])
    assert selection.resolve(plan, ["cpu-smoke/gpt-oss-120b"]) == tuple(keys)   # a benchmark: all its scenarios


def test_a_name_the_plan_lacks_is_a_plan_error_listing_its_names() -> None:
    plan = plans.load(SMOKE)
    with pytest.raises(PlanError) as caught:
        selection.resolve(plan, ["cpu-smoke/gpt-oss-120b/Server", "cpu-smoke/gpt-oss-120b/server"], where="p.yaml")
    text = str(caught.value)
    assert caught.value.exit_code == 2 and text.startswith("p.yaml: --only 'cpu-smoke/gpt-oss-120b/server'")
    assert "did you mean 'cpu-smoke/gpt-oss-120b/Server'?" in text
    assert "valid values: cpu-smoke/gpt-oss-120b, cpu-smoke/gpt-oss-120b/Interactive" in text
    with pytest.raises(PlanError, match="no such scenario"):
        selection.resolve(plan, ["gpt-oss-120b/Server"])   # the system is part of the name


def test_each_run_uses_the_cache_as_the_selection_says() -> None:
    only = ("cpu-smoke/gpt-oss-120b/Server",)
    assert selection.reuse((), "cpu-smoke", "gpt-oss-120b", "Server") == "cache"   # a plain run
    assert selection.reuse(only, "cpu-smoke", "gpt-oss-120b", "Server") == "fresh"
    assert selection.reuse(only, "cpu-smoke", "gpt-oss-120b", "Offline") == "cached"


def _step(tmp_path: Path):
    from prefect import task

    from tasks.steps import cached_in

    @task(name="probe", cache_key_fn=lambda _ctx, p: f"probe-{p['x']}", persist_result=True)
    def probe(x: int) -> dict:
        raise AssertionError("a step the cache was asked about must not run")

    return cached_in(probe, tmp_path / "work")


def test_a_run_not_in_the_cache_is_not_run_when_only_the_cache_may_serve_it(tmp_path: Path) -> None:
    from tasks.steps import call_cached

    step = _step(tmp_path)
    assert call_cached(step, tmp_path / "work", {"x": 1}, "cached") is None


def test_a_fresh_run_drops_its_entry_and_sets_the_old_run_folder_aside(tmp_path: Path) -> None:
    from prefect.filesystems import LocalFileSystem
    from prefect.results import ResultStore

    from submission.results.runs import RunRecord
    from tasks.steps import _drop, _entry

    old = tmp_path / "work" / "runs" / "k1"
    old.mkdir(parents=True)
    (old / "mlperf_log_summary.txt").write_text("Result is : VALID\n")
    entry = _entry(_step(tmp_path), tmp_path / "work", {"x": 1})
    assert entry == (tmp_path / "work" / "cache" / "probe-1").resolve()
    rec = RunRecord(key="k1", system="s", benchmark="b", scenario="Server", mode="performance", run_dir=str(old),
                    valid=True, validity="VALID")
    ResultStore(result_storage=LocalFileSystem(basepath=str(entry.parent))).write(rec, key=entry.name)
    assert entry.is_file()
    _drop(entry)
    assert not entry.exists() and not old.exists()
    (aside,) = (tmp_path / "work" / "runs").iterdir()
    assert aside.name.startswith("k1.replaced-") and (aside / "mlperf_log_summary.txt").is_file()


def test_a_part_of_a_scenario_alone_is_refused_with_the_reason_and_the_whole_scenario_as_the_fix() -> None:
    """An endpoints scenario's accuracy is one `--mode both` run with its performance (one client report per scenario
    folder); a loadgen scenario is measured in one sitting. Either way the fix names the scenario."""
    vlm = plans.load(SMOKE.with_name("smoke-vlm.yaml"))
    [scenario, *_] = selection.scenario_keys(vlm)
    with pytest.raises(PlanError) as caught:
        selection.resolve(vlm, [f"{scenario}/accuracy"], where="p.yaml")
    text = str(caught.value)
    assert caught.value.exit_code == 2 and text.startswith(f"p.yaml: --only '{scenario}/accuracy': the endpoints "
                                                           f"client measures {scenario}'s performance and accuracy")
    assert "--mode acc" in text and f"--only {scenario} measures the whole scenario again" in text
    smoke = plans.load(SMOKE)
    with pytest.raises(PlanError, match="--only selects whole scenarios: cpu-smoke/gpt-oss-120b/Server's"):
        selection.resolve(smoke, ["cpu-smoke/gpt-oss-120b/Server/accuracy"])
    with pytest.raises(PlanError, match="no such scenario"):   # a part of a scenario the plan lacks: as any name
        selection.resolve(smoke, ["cpu-smoke/gpt-oss-120b/SingleStream/accuracy"])
    assert selection.part_refusal(smoke, "cpu-smoke/gpt-oss-120b/Server/audit", selection.scenario_keys(smoke)) is None
