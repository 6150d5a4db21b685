"""`podium fetch`: repositories from a local stand-in for the Hugging Face Hub (tests/fake_hub.py, through the real
huggingface_hub), plain URLs and LiveCodeBench releases converted for the evaluator, verified; a second call fetches
nothing, a corrupt file is fetched again, an interrupted fetch keeps what it verified, and every bad input is one
clear error naming the item and the fix. Archives: test_fetch_archives.py."""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from submission.base.errors import PlanError, StorageError
from submission.plan.fetch import FetchItem, FetchSource, resolve
from submission.rules import load_rules
from tasks.accuracy.livecodebench import read_problems
from tasks.staging.fetch import FETCHED, Hub, Progress, fetch_all
from tasks.staging.sources import MANIFEST, LocalSource
from tasks.staging.transfer import ChecksumMismatch
from tests.fake_hub import FakeHub, commit_archive
from tests.fake_r2 import md5_listing
from tests.lcb_release import CALL, LATER, STDIN, release

PLANS = Path(__file__).parents[2] / "deployments" / "plans"
COMMIT = "c0ffee" + "0" * 34
MODEL = {"config.json": b'{"model_type": "tiny"}', "model-00001-of-00002.safetensors": b"w" * 5000,
         "model-00002-of-00002.safetensors": b"v" * 3000, "tokenizer/tokenizer.json": b'{"vocab": {}}'}
DATASET = {"README.md": b"# tiny catalogue\n", "data/train-00000-of-00001.parquet": b"P" * 4000,
           "data/test-00000-of-00001.parquet": b"Q" * 1000}
GPT_OSS_DATA = {"perf/perf_eval_ref.parquet": b"perf", "acc/acc_eval_inputs.parquet": b"acc"}


@pytest.fixture()
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    fake = FakeHub()
    fake.add("tiny/model", COMMIT, MODEL)
    fake.add("tiny/catalogue", COMMIT, DATASET, repo_type="dataset")
    fake.start()
    yield fake
    fake.stop()


def _repo(tmp: Path, repo: str = "tiny/model", kind: str = "model", revision: str = COMMIT) -> FetchItem:
    return FetchItem(f"benchmarks.0.fetch.{tmp / repo}", str(tmp / repo),
                     FetchSource(repo=repo, repo_type=kind, revision=revision), revision)


def _url(tmp: Path, hub: FakeHub, name: str, sha256: str) -> FetchItem:
    return FetchItem(f"benchmarks.0.fetch.{tmp / name}", str(tmp / name),
                     FetchSource(url=f"{hub.url}/files/{name}", sha256=sha256), None)


def _fetch(items: list[FetchItem], hub: FakeHub, **kw: object) -> list:
    lines: list[str] = []
    return fetch_all(items, hub=Hub(endpoint=hub.url, **kw), say=lines.append)


def test_a_model_and_a_dataset_repository_are_fetched_verified_and_a_second_call_fetches_nothing(
        hub: FakeHub, tmp_path: Path) -> None:
    model, dataset = _repo(tmp_path), _repo(tmp_path, "tiny/catalogue", "dataset")
    first = _fetch([model, dataset], hub)
    assert [(f.files, f.fetched, f.kept) for f in first] == [(4, 4, 0), (3, 3, 0)]
    for item, files in ((model, MODEL), (dataset, DATASET)):
        dest = Path(item.dest)
        assert {rel: (dest / rel).read_bytes() for rel in files} == files
        manifest = json.loads((dest / MANIFEST).read_text())
        assert manifest == {rel: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                            for rel, data in files.items()}
        assert LocalSource(dest).manifest() == manifest   # staging reads it: no byte hashed twice
        record = json.loads((dest / FETCHED).read_text())
        assert (record["repo"], record["repo_type"], record["revision"]) == (item.source.repo, item.source.repo_type,
                                                                             COMMIT)
    assert set(hub.downloads.values()) == {1} and len(hub.downloads) == 7

    second = _fetch([model, dataset], hub)
    assert [(f.fetched, f.kept) for f in second] == [(0, 4), (0, 3)]
    assert sum(hub.downloads.values()) == 7


def test_a_corrupt_or_deleted_file_is_fetched_again_and_only_it(hub: FakeHub, tmp_path: Path) -> None:
    item = _repo(tmp_path)
    _fetch([item], hub)
    dest = Path(item.dest)
    shard = dest / "model-00001-of-00002.safetensors"
    shard.write_bytes(b"x" + shard.read_bytes()[1:])   # same size, one byte changed
    (dest / "config.json").unlink()
    [again] = _fetch([item], hub)
    assert (again.fetched, again.kept) == (2, 2)
    assert shard.read_bytes() == MODEL["model-00001-of-00002.safetensors"]
    assert hub.downloads["tiny/model/model-00001-of-00002.safetensors"] == 2
    assert hub.downloads["tiny/model/model-00002-of-00002.safetensors"] == 1


def test_an_interrupted_fetch_keeps_every_verified_file(hub: FakeHub, tmp_path: Path) -> None:
    item = _repo(tmp_path)
    seen: list[str] = []

    def killed_at_the_third_file(line: str) -> None:
        seen.append(line)
        if "file 3 of 4" in line:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fetch_all([item], hub=Hub(endpoint=hub.url), say=killed_at_the_third_file)
    assert not (Path(item.dest) / MANIFEST).exists()
    [resumed] = _fetch([item], hub)
    assert (resumed.fetched, resumed.kept) == (2, 2)
    assert set(hub.downloads.values()) == {1}   # the two files fetched before the kill were not fetched again


def test_a_wrong_revision_names_the_item_and_the_fix(hub: FakeHub, tmp_path: Path) -> None:
    item = _repo(tmp_path, revision="1" * 40)
    with pytest.raises(PlanError) as e:
        _fetch([item], hub)
    message = str(e.value)
    assert item.field in message and "has no revision 1111111111" in message and "full commit" in message


def test_a_refused_token_names_hf_token_and_keeps_what_is_there(hub: FakeHub, tmp_path: Path) -> None:
    done = _repo(tmp_path, "tiny/catalogue", "dataset")
    _fetch([done], hub)
    hub.token = "hf_right"
    item = _repo(tmp_path)
    for token, said in ((None, "HF_TOKEN is not set"), ("hf_wrong", "the token in HF_TOKEN was refused")):
        with pytest.raises(PlanError) as e:
            _fetch([done, item], hub, token=token)
        assert item.field in str(e.value) and said in str(e.value) and "export HF_TOKEN=" in str(e.value)
    assert _fetch([done], hub)[0].kept == 3   # a complete fetch is verified on disk, the hub not asked
    assert _fetch([item], hub, token="hf_right")[0].fetched == 4


def test_an_unreachable_hub_names_the_item_and_a_complete_fetch_still_verifies(hub: FakeHub, tmp_path: Path) -> None:
    item = _repo(tmp_path)
    _fetch([item], hub)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"   # nothing listens there once the socket closes
    offline = Hub(endpoint=closed)
    assert fetch_all([item], hub=offline, say=lambda line: None)[0].kept == 4
    (Path(item.dest) / "config.json").unlink()
    with pytest.raises(StorageError) as e:
        fetch_all([item], hub=offline, say=lambda line: None)
    assert item.field in str(e.value) and f"cannot reach the hub at {closed}" in str(e.value)
    assert "run podium fetch again" in str(e.value)
    assert (Path(item.dest) / "model-00001-of-00002.safetensors").is_file()   # nothing verified was deleted


def test_bytes_that_differ_from_the_hubs_checksum_are_refused_and_deleted(hub: FakeHub, tmp_path: Path) -> None:
    hub.corrupt.add("tiny/model/model-00002-of-00002.safetensors")
    item = _repo(tmp_path)
    with pytest.raises(ChecksumMismatch) as e:
        _fetch([item], hub)
    assert "model-00002-of-00002.safetensors" in str(e.value) and item.field in str(e.value)
    assert not (Path(item.dest) / "model-00002-of-00002.safetensors").exists()


def test_a_url_is_verified_by_its_sha256_and_resumed_with_a_range(hub: FakeHub, tmp_path: Path) -> None:
    data = bytes(range(256)) * 40
    hub.files["perf_eval_ref.parquet"] = data
    sha = hashlib.sha256(data).hexdigest()
    wrong = _url(tmp_path, hub, "perf_eval_ref.parquet", "0" * 64)
    with pytest.raises(ChecksumMismatch) as e:
        _fetch([wrong], hub)
    assert wrong.field in str(e.value) and sha in str(e.value) and "the plan says 0000" in str(e.value)
    assert not Path(wrong.dest).exists() and not list(tmp_path.glob("*.part"))

    item = _url(tmp_path, hub, "perf_eval_ref.parquet", sha)
    (tmp_path / "perf_eval_ref.parquet.part").write_bytes(data[:3000])   # what a killed download left
    hub.sent.clear()
    [got] = _fetch([item], hub)
    assert Path(item.dest).read_bytes() == data and got.fetched == 1
    # one GET that asked for the rest, and the hub sent only the rest: the 3000 bytes kept are not fetched again
    assert hub.sent == [("perf_eval_ref.parquet", "bytes=3000-", len(data) - 3000)]
    record = json.loads((tmp_path / f"perf_eval_ref.parquet{FETCHED}").read_text())
    assert record == {"url": item.source.url, "sha256": sha, "size": len(data)}
    before = sum(hub.downloads.values())
    assert _fetch([item], hub)[0].fetched == 0 and sum(hub.downloads.values()) == before


@pytest.mark.parametrize("name", ["gpt-oss-120b-trtllm-k8s.yaml", "qwen3-vl-dynamo-50-50.yaml"])
def test_podium_fetch_of_a_shipped_plan_fetches_its_pins_then_nothing(
        hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    rules = load_rules("v6.1")
    pins = rules.hub_pins()
    hub.add("openai/gpt-oss-120b", pins["openai/gpt-oss-120b"], MODEL)
    for repo in ("Shopify/product-catalogue", "nvidia/Shopify-product-catalogue-8k"):
        hub.add(repo, pins[repo], DATASET, repo_type="dataset")
    lcb = rules.livecodebench["release_v6"]
    hub.add(lcb.repo, lcb.revision, release([STDIN], [CALL], [LATER], [], [], []), repo_type="dataset")
    for repo, commit in rules.source_pins().items():
        hub.github(repo, commit, commit_archive(commit, {"README.md": repo.encode()}, top=repo.split("/")[1]))
    mirror = f"{hub.url}/files/mlcommons"   # MLCommons' storage: the gpt-oss data sets' .uri, .md5 and files
    hub.files |= {"mlcommons/metadata/gpt-oss-data.uri": f"{mirror}/gpt-oss-data\n".encode(),
                  "mlcommons/metadata/gpt-oss-data.md5": md5_listing(GPT_OSS_DATA).encode(),
                  **{f"mlcommons/gpt-oss-data/{path}": data for path, data in GPT_OSS_DATA.items()}}
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("PODIUM_GITHUB_URL", hub.github_url)
    monkeypatch.setenv("PODIUM_MLCOMMONS_STORAGE_URL", mirror)
    runner = CliRunner()
    first = runner.invoke(app, ["fetch", str(PLANS / name), "--dest", str(tmp_path)])
    assert first.exit_code == 0, first.output
    fetched = [line for line in first.stdout.splitlines() if " fetched, " in line]
    assert fetched and all(" 0 verified in place" in line for line in fetched)
    if name.startswith("gpt-oss"):
        assert (tmp_path / "mnt/mlperf/models/gpt-oss-120b/config.json").read_bytes() == MODEL["config.json"]
        assert set(read_problems(tmp_path / "mnt/mlperf/data/gpt-oss-120b/acc/livecodebench_tests.jsonl")) == {
            STDIN["question_id"], CALL["question_id"], LATER["question_id"]}
        assert (tmp_path / "mnt/mlperf/src/inference/README.md").read_bytes() == b"mlcommons/inference"
        assert (tmp_path / "mnt/mlperf/data/gpt-oss-120b/perf/perf_eval_ref.parquet").read_bytes() == b"perf"
    else:
        assert (tmp_path / "lustre/mlperf/data/qwen3-vl/shopify_product_catalogue_8k/data/"
                           "train-00000-of-00001.parquet").is_file()
        assert (tmp_path / "lustre/mlperf/src/endpoints.tar.gz").is_file()
        assert "make venv-endpoints ENDPOINTS_SRC=" in first.stderr
    count = sum(hub.downloads.values())
    second = runner.invoke(app, ["fetch", str(PLANS / name), "--dest", str(tmp_path)])
    assert second.exit_code == 0, second.output
    assert len(second.stdout.splitlines()) == len(fetched)
    assert all(" 0 fetched, " in line for line in second.stdout.splitlines())
    assert sum(hub.downloads.values()) == count


def test_podium_fetch_of_a_plan_that_names_nothing_says_how_to_name_it() -> None:
    result = CliRunner().invoke(app, ["fetch", str(PLANS / "smoke.yaml")])
    assert result.exit_code == 2 and "names nothing to fetch" in result.output and "fetch:" in result.output


def test_a_livecodebench_release_is_fetched_converted_once_and_verified_after(hub: FakeHub, tmp_path: Path) -> None:
    rules = load_rules("v6.1")
    pin = rules.livecodebench["release_v6"]
    files = release([STDIN, CALL], [LATER], *([{**LATER, "question_id": f"abc40{i}_a"}] for i in range(4)))
    hub.add(pin.repo, pin.revision, {**files, "README.md": b"# LiveCodeBench\n"}, repo_type="dataset")
    dest = tmp_path / "acc" / "livecodebench_tests.jsonl"
    item = resolve(f"benchmarks.0.fetch.{dest}", str(dest), FetchSource(livecodebench="release_v6"), rules)
    shares: list[tuple[int, int]] = []
    converting: list[tuple[int, int]] = []
    progress = Progress(bytes=lambda label, d, t: converting.append((d, t)) if label.startswith("converting") else None,
                        share=lambda d, t: shares.append((d, t)))
    [first] = fetch_all([item], hub=Hub(endpoint=hub.url), say=lambda line: None, progress=progress)
    assert (first.files, first.fetched, first.kept) == (7, 7, 0)
    assert set(hub.downloads) == {f"{pin.repo}/{name}" for name in files}   # the release's files, nothing else
    problems = read_problems(dest)
    assert set(problems) >= {"abc301_a", "3000", "abc399_b", "abc403_a"} and problems["3000"].func_name == "twice"
    record = json.loads(dest.with_name(dest.name + FETCHED).read_text())
    assert (record["sha256"], record["size"]) == (hashlib.sha256(dest.read_bytes()).hexdigest(), dest.stat().st_size)
    assert (record["livecodebench"], record["revision"], record["problems"]) == ("release_v6", pin.revision, 7)
    assert shares[-1] == (1000, 1000) and converting[-1][0] == converting[-1][1] == sum(map(len, files.values()))

    lines: list[str] = []
    [again] = fetch_all([item], hub=Hub(endpoint=hub.url), say=lines.append)
    assert (again.fetched, again.kept) == (0, 7) and sum(hub.downloads.values()) == 6
    assert any("nothing to convert" in line for line in lines)
    converted = dest.read_bytes()
    dest.write_text("changed\n")
    [third] = fetch_all([item], hub=Hub(endpoint=hub.url), say=lines.append)
    assert (third.fetched, third.kept) == (1, 6) and dest.read_bytes() == converted   # converted again, not fetched
    assert sum(hub.downloads.values()) == 6


def test_the_token_is_never_shown_and_a_refusal_names_where_it_came_from(hub: FakeHub, tmp_path: Path) -> None:
    hub.token = "hf_right"
    secret = Hub(endpoint=hub.url, token="hf_wrong", token_from="the Prefect Secret block hf-token")
    assert "hf_wrong" not in repr(secret)
    with pytest.raises(PlanError) as e:
        fetch_all([_repo(tmp_path)], hub=secret, say=lambda line: None)
    assert "the token in the Prefect Secret block hf-token was refused" in str(e.value)
    assert "hf_wrong" not in str(e.value)
