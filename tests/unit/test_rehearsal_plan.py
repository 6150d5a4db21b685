"""The dress rehearsal's plan rewrite of both shipped closed plans: engine, data, rates, names, description and
storage replaced; everything else as written; the result a valid submission-profile plan."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from submission.base.errors import PlanError
from submission.plan import model as plans
from submission.tree.package import package
from submission.tree.rehearsal_marker import MARKER, mark
from tasks import clock
from tasks.rehearsal import data
from tasks.rehearsal.plan import LABEL, rehearsal_plan

PLANS = {"gpt-oss-120b": "deployments/plans/gpt-oss-120b-trtllm-k8s.yaml",
         "qwen3-vl-235b-a22b": "deployments/plans/qwen3-vl-dynamo-75-25.yaml"}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, data.Built]:
    root = tmp_path_factory.mktemp("rehearsal-data")
    return {b: data.build(b, root / b, scale=0.02) for b in PLANS}


@pytest.mark.parametrize("benchmark", PLANS)
def test_rewrite_keeps_the_plan_but_engine_data_rates_and_names(benchmark: str,
                                                                built: dict[str, data.Built]) -> None:
    original = yaml.safe_load(Path(PLANS[benchmark]).read_text())
    out = rehearsal_plan(original, built)
    loaded = plans.parse(out)   # valid as a closed submission-profile plan
    assert (loaded.division, loaded.profile) == (original["division"], original["profile"]) == ("closed", "submission")
    assert loaded.name == "rehearsal-" + original["name"]
    assert all(s.name.startswith("rehearsal-") for s in loaded.systems)
    assert loaded.storage.embedded and loaded.storage.prefix.startswith("rehearsal")
    bench, before = loaded.benchmarks[0], original["benchmarks"][0]
    assert bench.engine.name == "simulated" and bench.engine.launcher == "local"
    options = bench.engine.config()
    assert options.answers == built[benchmark].answers and options.chunk_tokens >= 1024
    assert bench.dataset.performance == built[benchmark].plan["dataset.performance"]
    assert Path(bench.model.source).is_relative_to(built[benchmark].root)
    assert bench.generation.model_dump(exclude_defaults=True) == before["generation"]
    assert bench.model.name == before["model"]["name"]
    assert set(bench.scenarios) == set(before["scenarios"])
    offline = bench.scenarios["Offline"].target_qps   # the performance set once over 660 s
    assert offline * 660 <= len(pq.read_table(bench.dataset.performance)) < (offline + 0.01) * 660
    for name, sc in bench.scenarios.items():   # under the plan's targets; Server/Interactive at half the Offline rate
        assert sc.target_qps < before["scenarios"][name]["target_qps"]
        if name != "Offline":
            assert sc.target_qps * 600 >= 662 and sc.target_qps >= offline / 2 - 0.01
        assert sc.max_concurrency == before["scenarios"][name]["max_concurrency"]
    assert loaded.gates.server_offline_min_ratio is None and loaded.gates.published_min_fraction is None
    system = loaded.systems[0].description
    assert all(system[k] == v for k, v in original["systems"][0]["description"].items())
    assert LABEL in system.values()   # the fields the plan leaves empty are labelled
    if benchmark == "gpt-oss-120b":
        assert bench.dataset.lcb_tests == built[benchmark].extra["lcb_tests"]
        assert ("dataset.lcb_tests", "tests", bench.dataset.lcb_tests) in bench.sources()


def test_the_clock_seam(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(clock.ENV, raising=False)
    assert clock.wrap(["a"]) == ["a"] and clock.speed() is None
    monkeypatch.setenv(clock.ENV, "x10")
    assert clock.speed() == 10 and clock.wrap(["a"])[-3:] == ["-f", "+0 x10", "a"]
    monkeypatch.setenv(clock.ENV, "fast")
    with pytest.raises(PlanError):
        clock.speed()


def test_package_refuses_a_rehearsal_tree(tmp_path: Path) -> None:
    tree = tmp_path / "submission"
    (tree / "closed").mkdir(parents=True)
    mark(tree)
    with pytest.raises(PlanError, match=MARKER):
        package(tree)


def test_timeouts_in_real_seconds_on_an_accelerated_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A harness child under `faketime -f "+0 x50"` (FAKETIME in its environment) gives its connect timeout 50 x
    the seconds on its own clock, so 10 real seconds: with 10 s of its clock (0.2 real seconds) a full-size x50
    rehearsal lost 924 accuracy requests to TimeoutError while the engine accepted 1024 connections at once."""
    from tasks.harness.wire import CONNECT_TIMEOUT_S, HttpPool

    monkeypatch.delenv("FAKETIME", raising=False)
    assert clock.own_speed() == 1 and HttpPool("http://127.0.0.1:1", max_connections=1).connect_timeout == 10
    monkeypatch.setenv("FAKETIME", "+0 x50")
    assert clock.own_speed() == 50 and clock.real(2) == 100
    assert HttpPool("http://127.0.0.1:1", max_connections=1).connect_timeout == 50 * CONNECT_TIMEOUT_S


def test_a_deepseek_r1_plan_is_served_from_its_answers_file_and_keeps_the_real_grader(tmp_path: Path) -> None:
    """deepseek-r1's data set is a pickle: its rows and answer lengths come from the answers parquet beside it, and the
    MATH-500 grader given (the fetched one) replaces the plan's folder; the rest as for the other plans."""
    from tests.deepseek_r1_plan import plan

    small = data.build("deepseek-r1", tmp_path / "deepseek-r1", scale=0.02)
    out = rehearsal_plan(plan(), {"deepseek-r1": small}, math_grader=str(tmp_path / "prm800k"))
    bench = plans.parse(out).benchmarks[0]
    assert bench.dataset.accuracy.endswith(".pkl") and bench.dataset.math_grader == str(tmp_path / "prm800k")
    assert bench.dataset.lcb_tests == small.extra["lcb_tests"] and bench.engine.name == "simulated"
    answers = data.answers_file(bench.dataset.accuracy)
    assert bench.engine.options["answers"] == [answers]
    served = pq.read_table(answers).column("rehearsal_output_tokens").to_numpy()
    assert bench.engine.options["output_tokens"] == round(served.mean())   # ~3886, the checker's reference
    # a scaled set is still issued 4388 times (mlperf.conf's deepseek-r1.Offline.min_query_count) over 1.1 x 600 s
    assert len(served) < 4388 and bench.scenarios["Offline"].target_qps == pytest.approx(4388 / 660, abs=0.01)


def test_the_round_fleet_rehearses_as_one_plan_of_its_five_systems_at_their_first_step(tmp_path: Path) -> None:
    """`podium rehearse deployments/plans/round-v6.1-fleet.yaml --nodes 1` (its plan, as `prepare` writes it): the
    five systems in one flow and one tree, the MI355X ones at their 1-node step, none on a work pool."""
    from flows.rehearsal_cli import prepare

    fleet = Path(__file__).parents[2] / "deployments" / "plans" / "round-v6.1-fleet.yaml"
    rehearsal = plans.load(prepare(fleet, tmp_path, nodes=1, scale=0.002))
    assert [s.name for s in rehearsal.systems] == [
        "rehearsal-gb200x4-k8s", "rehearsal-gb200x4-slurm", "rehearsal-gb200x16-slurm", "rehearsal-mi355x-vllm-k8s-n1",
        "rehearsal-mi355x-sglang-k8s-n1"]
    assert not rehearsal.pools() and {b.engine.name for b in rehearsal.benchmarks} == {"simulated"}
    nodes = {s.name: s.nodes for s in rehearsal.systems}
    assert nodes["rehearsal-gb200x16-slurm"] == 4 and nodes["rehearsal-mi355x-vllm-k8s-n1"] == 1
    assert sorted(p.name for p in (tmp_path / "rehearsal-data").iterdir()) == [
        "deepseek-r1", "gpt-oss-120b", "qwen3-vl-235b-a22b"]
