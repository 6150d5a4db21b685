"""docs/quickstart-local.md, every command the page does not mark as not run, in its order, with bash, in a folder
laid out like the repository's root: the smoke assets built by the page's own command, preflight, the dry run,
`podium run`, the check and the package. PLAN is pinned to the smoke plan cut to its Offline scenario with no audits
(a minute, not three); every other command runs as written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tasks.ops.cleanup import end_leftovers
from tests.manual import DOCS, Runner, bare, checkout, runnable, runner_env

pytestmark = pytest.mark.integration
PAGE = DOCS / "quickstart-local.md"


def test_the_local_quickstart(tmp_path: Path, prefect_server: None) -> None:
    root = checkout(tmp_path / "checkout")
    plan = yaml.safe_load((root / "deployments" / "plans" / "smoke.yaml").read_text())
    plan["benchmarks"][0]["scenarios"] = {"Offline": plan["benchmarks"][0]["scenarios"]["Offline"]}
    plan["compliance"] = {"run": "never"}
    cut = root / "smoke-offline.yaml"
    cut.write_text(yaml.safe_dump(plan, sort_keys=False))
    runner = Runner(root, runner_env(PLAN=str(cut)), pinned=frozenset({"PLAN"}))
    commands = runnable(PAGE)
    assert commands[0] == "export PLAN=deployments/plans/smoke.yaml"
    out = {}
    try:
        for command in commands:
            out[bare(command)] = runner.run(command, timeout_s=400).stdout
    finally:
        left = end_leftovers(root / ".podium")
    assert runner.ran == commands
    assert left == [], "the page's commands left processes behind"

    assert (root / ".podium" / "store" / "models" / "tiny-llama" / "model.safetensors").is_file()   # step 2
    assert out['podium preflight "$PLAN"'].rstrip().endswith("preflight: OK")                       # step 3
    assert "transformers" in out['podium launch "$PLAN" --dry-run']                                  # step 4
    ran = out['podium run "$PLAN"']                                                                  # step 5
    assert "smoke: 1/1 runs VALID, 1/1 accuracy PASS, checker 0 errors" in ran, ran[-3000:]
    tree = (root / ".podium" / "runs" / "latest" / "submission").resolve()
    assert (tree / "SMOKE-NOT-A-SUBMISSION.md").is_file()
    checked = out["podium check .podium/runs/latest/submission"]                                     # step 6
    assert "1 scenario folder(s) checked against v6.1: no errors" in checked, checked
    package = tree.parent / "submission.package"                                                      # step 7
    assert sorted(p.name for p in package.iterdir()) == ["submission.manifest.json", "submission.tar.gz",
                                                         "submission.tar.gz.sha256"]
