"""Every engine env value is a secret (submission/plan/secret_env.py): the dry run of a Slurm and a Kubernetes plan
names the variable with `<set>` and holds no value, the tree (the plan it keeps, each scenario's README, a curated
tree's curation.json) holds none, and the plan's fingerprint is the same with and without it. The launchers' own
share: tests/unit/test_slurm_launcher.py, tests/unit/test_kubernetes_manifests.py, tests/integration/test_slurm.py,
tests/integration/test_kubernetes.py; a whole run: tests/faults/test_secrets.py."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from flows.cli import app
from submission.plan import model as plans
from submission.plan.secret_env import SHOWN, env_values, shown_options, shown_plan, with_env, with_values
from submission.tree.assemble import plan_file
from submission.tree.curated import write
from submission.tree.curation import curate, load_source
from tests.secret_search import files_under, leaks
from tests.unit.test_curation import SMOKE, make_run

PLANS = Path(__file__).parents[2] / "deployments" / "plans"
PLANTED = "hf_plantedDryRun0123456789"


def _with_token(plan: Path, out: Path) -> Path:
    data = yaml.safe_load(plan.read_text())
    engine = data["benchmarks"][0]["engine"]
    engine["options"] = {**(engine.get("options") or {}), "env": {"HF_TOKEN": PLANTED, "UCX_TLS": "rc,cuda_copy"}}
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def _dry_run(plan: Path, tmp_path: Path, *flags: str) -> str:
    result = CliRunner().invoke(app, ["launch", str(plan), "--dry-run", *flags, "--workspace", str(tmp_path / "ws")])
    assert result.exit_code == 0, result.output
    return result.output


def test_the_dry_run_of_a_slurm_plan_names_the_variables_and_holds_no_value(tmp_path: Path) -> None:
    plan = _with_token(PLANS / "qwen3-vl-dynamo-75-25.yaml", tmp_path / "plan.yaml")
    text, data = _dry_run(plan, tmp_path), _dry_run(plan, tmp_path, "--json")
    assert PLANTED not in text and PLANTED not in data
    [review] = json.loads(data)
    assert review["options"]["env"] == {"HF_TOKEN": SHOWN, "UCX_TLS": SHOWN}
    workers = [p for p in review["processes"] if p["role"] in ("prefill", "decode")]
    assert workers and all(p["env"]["HF_TOKEN"] == SHOWN for p in workers)
    # what the backend derives (a node's address) is shown as it is: the review stays a review
    assert all(p["env"]["VLLM_NIXL_SIDE_CHANNEL_HOST"] == f"NODE{p['node']}_IPV4" for p in workers)
    sruns = review["slurm"]["srun"]
    assert all(next(a for a in argv if a.startswith("--export=")).split(",")[1:] == sorted(
        next(p for p in review["processes"] if p["name"] == name)["env"]) for name, argv in sruns.items())
    assert "HF_TOKEN=<set>" in text and "UCX_TLS=<set>" in text


def test_the_dry_run_of_a_kubernetes_plan_shows_the_secret_without_its_values(tmp_path: Path) -> None:
    plan = _with_token(PLANS / "gpt-oss-120b-trtllm-k8s.yaml", tmp_path / "plan.yaml")
    text, data = _dry_run(plan, tmp_path), _dry_run(plan, tmp_path, "--json")
    assert PLANTED not in text and PLANTED not in data
    [review] = json.loads(data)
    secret = next(o for o in review["kubernetes"] if o["kind"] == "Secret")
    assert secret["stringData"]["trtllm-server.HF_TOKEN"] == SHOWN
    assert set(secret["stringData"].values()) == {SHOWN}
    deployment = next(o for o in review["kubernetes"] if o["kind"] == "Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": secret["metadata"]["name"],
                                                               "key": "trtllm-server.HF_TOKEN"}}} in container["env"]


def test_the_tree_keeps_the_plan_without_its_env_values(tmp_path: Path) -> None:
    plan = plans.load(_with_token(SMOKE, tmp_path / "smoke.yaml"))
    assert plan.benchmarks[0].engine.config().env["HF_TOKEN"] == PLANTED   # the plan as written: the engine's
    run = make_run(tmp_path, "r1", plan, {"Offline": 1.0})
    write(curate([load_source(run)], "best"), tmp_path / "out")
    outputs = files_under(run, tmp_path / "out")
    assert len(outputs) > 10 and leaks(outputs, PLANTED) == []
    kept = run / "submission" / "open" / "Podium" / plan_file(plan)
    assert yaml.safe_load(kept.read_text())["benchmarks"][0]["engine"]["options"]["env"]["HF_TOKEN"] == SHOWN
    assert plans.load(kept).fingerprint() == plan.fingerprint()   # the same plan, by the name the tree gives it
    readmes = list((run / "submission").rglob("results/*/*/Offline/README.md"))
    assert readmes and '"HF_TOKEN": "<set>"' in readmes[0].read_text()
    assert (tmp_path / "out" / "submission" / "open" / "Podium" / plan_file(plan)).is_file()


def test_shown_forms_and_the_values_put_back() -> None:
    data = yaml.safe_load(SMOKE.read_text())
    data["benchmarks"][0]["engine"]["options"] = {"env": {"HF_TOKEN": PLANTED}, "device": "cpu"}
    plan = plans.parse(data).model_dump(mode="json")
    shown = shown_plan(plan)
    assert shown["benchmarks"][0]["engine"]["options"] == {"env": {"HF_TOKEN": SHOWN}, "device": "cpu"}
    assert plan["benchmarks"][0]["engine"]["options"]["env"]["HF_TOKEN"] == PLANTED   # a copy: unchanged
    assert env_values(plan) == {"0": {"HF_TOKEN": PLANTED}} and env_values(shown_plan(yaml.safe_load(
        SMOKE.read_text()))) == {}
    assert with_env(shown, env_values(plan)) == plan
    assert shown_options({"tensor_parallel_size": 4}) == {"tensor_parallel_size": 4}
    options = {"tensor_parallel_size": 4, "env": {"HF_TOKEN": PLANTED}}   # a sweep's split, as its subflow gets it
    assert with_values(shown_options(options), {"HF_TOKEN": PLANTED, "OTHER": "x"}) == options
    assert with_values({"tensor_parallel_size": 4}, {}) == {"tensor_parallel_size": 4}


def test_the_engine_identity_names_the_variables_and_tells_values_apart_by_digest() -> None:
    """A run's engine identity (part of its cache key and record) holds no value, yet another value makes it another
    identity, so a run measured with other settings is not taken for this one; without env it is as it always was."""
    from tasks.engines import engine_identity

    one = engine_identity("smoke", {"env": {"HF_TOKEN": PLANTED}})
    assert PLANTED not in one and '"env": {"HF_TOKEN": "<set>"}' in one and " env-sha256:" in one
    assert engine_identity("smoke", {"env": {"HF_TOKEN": PLANTED + "x"}}) != one
    assert engine_identity("smoke", {"env": {"HF_TOKEN": PLANTED}}) == one
    assert engine_identity("smoke", {"device": "cpu"}).endswith(' {"device": "cpu"}')
