"""A plan made of plans (submission/plan/parts.py): the round's fleet stands for its five parts' systems and
benchmarks, each on its pool, every fact read from the part's own file; a part that would change the tree's top, name
a system twice, give a fetch destination two sources or nest another fleet is refused, naming the part and field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from submission.base.errors import PlanError
from submission.plan import model as plans

PLANS = Path(__file__).parents[2] / "deployments" / "plans"
FLEET = PLANS / "round-v6.1-fleet.yaml"
PUBLISHED = {   # the five systems' folders in mlcommons/inference_results_v6.1 closed/Crusoe/results/
    "gb200x4-k8s": ("gpt-oss-120b", "gb200-k8s"), "gb200x4-slurm": ("qwen3-vl-235b-a22b", "gb200-slurm"),
    "gb200x16-slurm": ("qwen3-vl-235b-a22b", "gb200-slurm"), "mi355x-vllm-k8s": ("gpt-oss-120b", "mi355x-k8s"),
    "mi355x-sglang-k8s": ("deepseek-r1", "mi355x-k8s")}


def test_the_round_fleet_is_its_five_plans_each_on_its_pool() -> None:
    fleet = plans.load(FLEET)
    assert {s.name: (s.work_pool) for s in fleet.systems} == {k: pool for k, (_, pool) in PUBLISHED.items()}
    assert {(b.system, b.benchmark) for b in fleet.benchmarks} == {(k, b) for k, (b, _) in PUBLISHED.items()}
    assert fleet.pools() and not fleet.local().benchmarks   # nothing runs in the parent
    for entry in yaml.safe_load(FLEET.read_text())["plans"]:   # each part's facts, unchanged
        part = plans.load(PLANS / entry["file"])
        for system in part.systems:
            assert fleet.systems[[s.name for s in fleet.systems].index(system.name)] == \
                system.model_copy(update={"work_pool": entry["work_pool"]})
        for bench in part.benchmarks:
            assert next(b for b in fleet.benchmarks if b.key == bench.key) == bench
        assert set(part.fetch) <= set(fleet.fetch)


def write(folder: Path, name: str, data: dict) -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(data))
    return path


def fleet_of(tmp_path: Path, **change: object) -> Path:
    """A fleet of the smoke plan and a copy of it under other system names, with `change` made to the copy."""
    smoke = yaml.safe_load((PLANS / "smoke.yaml").read_text())
    write(tmp_path, "a.yaml", smoke)
    other = {**smoke, "systems": [{**s, "name": s["name"] + "-b"} for s in smoke["systems"]],
             "benchmarks": [{**b, "system": b["system"] + "-b"} for b in smoke["benchmarks"]], **change}
    write(tmp_path, "b.yaml", other)
    top = {k: smoke[k] for k in ("round", "division", "profile", "submitter", "storage")}
    return write(tmp_path, "fleet.yaml", {"name": "two", **top, "plans": [{"file": "a.yaml", "work_pool": "pool-a"},
                                                                          {"file": "b.yaml", "work_pool": "pool-b"}]})


def test_a_fleet_of_two_plans_loads_with_both_systems_on_their_pools(tmp_path: Path) -> None:
    fleet = plans.load(fleet_of(tmp_path))
    assert sorted(fleet.pools().values()) == ["pool-a", "pool-b"] and len(fleet.benchmarks) == 2


@pytest.mark.parametrize(("change", "message"), [
    ({"division": "network"}, r"b\.yaml\): division 'network' differs from the fleet's"),
    ({"submitter": "Other"}, r"b\.yaml\): submitter 'Other' differs from the fleet's 'Podium'"),
    ({"systems": None}, r"system .* is in two parts of the fleet"),
    ({"plans": [{"file": "a.yaml"}]}, r"a part of a fleet has plans: of its own"),
    ({"fetch": {"/x": {"github": "mlcommons/inference"}}}, None),
])
def test_a_part_that_does_not_fit_the_fleet_is_refused_naming_it(tmp_path: Path, change: dict,
                                                                 message: str | None) -> None:
    if change.get("systems", 1) is None:   # the copy keeps the first plan's system names
        smoke = yaml.safe_load((PLANS / "smoke.yaml").read_text())
        change = {"systems": smoke["systems"]}
    path = fleet_of(tmp_path, **change)
    if message is None:   # a fetch of its own merges; the same destination from another source is refused
        assert plans.load(path).fetch
        data = yaml.safe_load((tmp_path / "a.yaml").read_text()) | {"fetch": {"/x": {"github": "mlcommons/endpoints"}}}
        write(tmp_path, "a.yaml", data)
        message = r"b\.yaml\): fetch destination /x is given two sources"
    with pytest.raises(PlanError, match=message):
        plans.load(path)


def test_a_missing_part_is_named_with_the_fleets_entry(tmp_path: Path) -> None:
    path = write(tmp_path, "fleet.yaml", {"name": "x", "plans": [{"file": "gone.yaml", "work_pool": "p"}]})
    with pytest.raises(PlanError, match=r"gone\.yaml.*cannot read the plan"):
        plans.load(path)
    write(tmp_path, "fleet.yaml", {"name": "x", "plans": ["gone.yaml"]})
    with pytest.raises(PlanError, match=r"plans\[0\]: 'gone\.yaml' is not \{file, work_pool\}"):
        plans.load(path)


def test_an_error_in_a_part_names_the_parts_file_and_its_own_field(tmp_path: Path) -> None:
    """Merged, the copy's system is the fleet's systems.1; its error names b.yaml and its own systems.0."""
    smoke = yaml.safe_load((PLANS / "smoke.yaml").read_text())
    path = fleet_of(tmp_path, systems=[{**s, "name": s["name"] + "-b", "gpus": 8} for s in smoke["systems"]])
    with pytest.raises(PlanError) as error:
        plans.load(path)
    assert error.value.where == str(tmp_path / "b.yaml"), error.value
    assert "systems.0.gpus: unknown field" in str(error.value) and "systems.1" not in str(error.value)
