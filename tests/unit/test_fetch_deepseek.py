"""DeepSeek-R1's inputs through `podium fetch`: the plan's entries (tests/deepseek_r1_plan.py, named as a DeepSeek-R1
plan names them) resolve to the round's pins (the checkpoint at the README's revision, LiveCodeBench release_v1's
test.jsonl, openai/prm800k at the reference's submodule commit), other commits are refused; the data set and the
calibration set land from a local stand-in of MLCommons' storage (tests/fake_r2.py), each MD5 checked and its sha256
recorded, and the fetched pickle is read by the deepseek-r1 reader; the grader lands from a stand-in of GitHub's
archive of the commit and grades."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import yaml

from submission.base.errors import PlanError
from submission.plan import model as plans
from submission.rules import load_rules
from tasks.accuracy.math_grader import grade
from tasks.datasets.prompts import read_deepseek
from tasks.ops import grader_source
from tasks.rehearsal.data import build
from tasks.staging.fetch import FETCHED, fetch_all
from tasks.staging.fetch_r2 import access_from
from tasks.staging.sources import MANIFEST
from tests import deepseek_r1_plan
from tests.fake_r2 import FakeR2
from tests.local_http import LocalServer

TOKEN = "cf-token-deepseek-planted"


def _load(tmp_path: Path, data: dict) -> plans.Plan:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data))
    return plans.load(path)


def test_the_plans_entries_take_the_rounds_pins(tmp_path: Path) -> None:
    found = {item.source.kind: item for item in _load(tmp_path, deepseek_r1_plan.plan()).fetches()}
    assert (found["repo"].repo, found["repo"].revision) == ("deepseek-ai/DeepSeek-R1",
                                                           "56d4cbbb4d29f4355bab4b9a39ccb717a14ad5ad")
    assert found["livecodebench"].files == ("test.jsonl",)
    assert found["livecodebench"].source.livecodebench == "release_v1"
    assert (found["github"].repo, found["github"].revision) == ("openai/prm800k",
                                                               "7ecc794703b2877f63226f2477a49b34f9b25163")
    assert found["mlcommons_uri"].source.mlcommons_uri == deepseek_r1_plan.URI


@pytest.mark.parametrize(("dest", "source", "said"), [
    ("/mnt/mlperf/tools/prm800k", {"github": "openai/prm800k", "revision": "1" * 40},
     "the round pins openai/prm800k at 7ecc794703b2877f63226f2477a49b34f9b25163"),
    ("/mnt/mlperf/data/deepseek-r1/livecodebench_tests.jsonl", {"livecodebench": "release_v9"},
     "names no LiveCodeBench release 'release_v9' \\(it names: release_v6, release_v1\\)"),
])
def test_another_commit_or_release_is_refused(tmp_path: Path, dest: str, source: dict, said: str) -> None:
    data = deepseek_r1_plan.plan()
    data["benchmarks"][0]["fetch"][dest] = source
    with pytest.raises(PlanError, match=said):
        _load(tmp_path, data)


@pytest.fixture()
def r2() -> Iterator[FakeR2]:
    fake = FakeR2(token=TOKEN).start()
    yield fake
    fake.stop()


def test_the_data_and_calibration_sets_land_from_mlcommons_storage(r2: FakeR2, tmp_path: Path) -> None:
    small = build("deepseek-r1", tmp_path / "synthetic", scale=0.01)
    pickle = Path(small.plan["dataset.accuracy"]).read_bytes()
    files = {deepseek_r1_plan.FILES[0]: pickle, deepseek_r1_plan.FILES[1]: pickle[:2000]}
    uri = r2.publish("deepseek-r1-datasets-fp8-eval", files)
    data = deepseek_r1_plan.plan()
    fetch = data["benchmarks"][0]["fetch"]
    fetch[deepseek_r1_plan.DATA] = {"mlcommons_uri": uri}
    plan = _load(tmp_path, data)
    [item] = [i for i in plan.fetches() if i.source.kind == "mlcommons_uri"]
    root = tmp_path / "root"
    access = access_from({"CF_ACCESS_TOKEN": TOKEN}, [item], lambda: False)
    [done] = fetch_all([item], root=root, access=access, say=lambda _: None)
    folder = root / deepseek_r1_plan.DATA.lstrip("/")
    assert {name: (folder / name).read_bytes() for name in files} == files
    manifest = json.loads((folder / MANIFEST).read_text())
    assert {name: manifest[name]["sha256"] for name in files} == {
        name: hashlib.sha256(body).hexdigest() for name, body in files.items()}
    assert json.loads((folder / FETCHED).read_text())["mlcommons_uri"] == uri and done.fetched == 3   # + the listing
    dataset = root / plan.benchmarks[0].dataset.accuracy.lstrip("/")
    assert len(read_deepseek(dataset, accuracy=True)) == small.rows[deepseek_r1_plan.FILES[0]]
    [again] = fetch_all([item], root=root, access=access, say=lambda _: None)
    assert again.fetched == 0   # verified, nothing asked of the network


class _Archive(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = self.server.fake.files.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *_args: object) -> None:
        pass


def test_the_grader_lands_from_githubs_archive_and_grades(prm800k_src: Path, tmp_path: Path) -> None:
    kept = Path(str(prm800k_src) + ".tar.gz")   # the archive `podium fetch-grader` keeps beside the folder
    if not kept.is_file():
        pytest.skip(f"{prm800k_src} was not unpacked from an archive by `podium fetch-grader --archive`")
    [item] = [i for i in _load(tmp_path, deepseek_r1_plan.plan()).fetches() if i.source.kind == "github"]
    server = LocalServer(_Archive)
    server.files = {f"/openai/prm800k/archive/{item.revision}.tar.gz": kept.read_bytes()}
    with server:
        fetch_all([item], root=tmp_path / "root", github=server.url, say=lambda _: None)
    folder = tmp_path / "root" / item.dest.lstrip("/")
    grader_source.check(folder, load_rules("v6.1"))
    assert grade(folder, [("0.375", "\\frac{3}{8}"), ("6/16", "\\frac{3}{8}")]).verdicts == (True, False)


def test_preflight_refuses_a_missing_or_foreign_grader_and_takes_the_fetched_one(prm800k_src: Path,
                                                                                 tmp_path: Path) -> None:
    from tasks.ops.prerequisites import math_grader_problems

    data = deepseek_r1_plan.plan()
    [missing] = math_grader_problems(_load(tmp_path, data))
    assert missing.where == "benchmarks.0.dataset.math_grader" and "podium fetch-grader" in missing.fix
    foreign = tmp_path / "prm800k"
    (foreign / "prm800k" / "grading").mkdir(parents=True)
    (foreign / "prm800k" / "grading" / "grader.py").write_text("def grade_answer(**_): return True\n")
    data["benchmarks"][0]["dataset"]["math_grader"] = str(foreign)   # a copy, not the fetched commit
    data["benchmarks"][0]["fetch"].pop("/mnt/mlperf/tools/prm800k")
    [unverified] = math_grader_problems(_load(tmp_path, data))
    assert ".podium-manifest.json is missing" in unverified.message
    data["benchmarks"][0]["dataset"]["math_grader"] = str(prm800k_src)
    assert math_grader_problems(_load(tmp_path, data)) == []
    del data["benchmarks"][0]["dataset"]["math_grader"]
    [none] = math_grader_problems(_load(tmp_path, data))
    assert "names none" in none.message
