"""`podium fetch` of a data set on MLCommons' storage (`mlcommons_uri`, tasks/staging/fetch_r2.py) from a local
stand-in that demands Cloudflare Access credentials (tests/fake_r2.py): every file of the .md5 listing fetched, each
MD5 checked and its sha256 recorded, a second call asking nothing of the network; both credential forms, from the
environment, sent to the .uri's and the base URL's hosts only and never printed or recorded; an MD5 mismatch refused
with the file named and nothing placed; listed paths that could leave the folder refused before anything is fetched;
a `podium fetch` killed mid-file resumed with a Range request. The shipped gpt-oss plan names its source."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from submission.base.errors import PlanError, StorageError
from submission.plan import model as plans
from submission.plan.fetch import FetchItem, FetchSource
from tasks.staging.fetch import FETCHED, fetch_all
from tasks.staging.fetch_r2 import ANONYMOUS, Access, access_from, parse_listing, parse_uri
from tasks.staging.sources import MANIFEST, manifest_digest
from tasks.staging.transfer import ChecksumMismatch
from tests.fake_r2 import FakeR2, md5_listing

PLANS = Path(__file__).parents[2] / "deployments" / "plans"
GPT_OSS_URI = "https://inference.mlcommons-storage.org/metadata/gpt-oss-data.uri"
TOKEN = "cf-token-c0ffee-planted"
CLIENT = ("0123abcd.access", "cf-secret-planted-5ca1ab1e")
FILES = {"perf/perf_eval_ref.parquet": random.Random(1).randbytes(5000),
         "acc/acc_eval_inputs.parquet": random.Random(2).randbytes(3000),
         "acc/acc_eval_compliance_gpqa.parquet": b"gpqa" * 100}
BIG = 3 << 20   # over fetch_http's 1 MiB block: a killed download leaves a whole block in its .part


@pytest.fixture()
def r2() -> Iterator[FakeR2]:
    fake = FakeR2(token=TOKEN, client=CLIENT).start()
    yield fake
    fake.release.set()
    fake.stop()


def _item(dest: Path, uri: str) -> FetchItem:
    return FetchItem(f"benchmarks.0.fetch.{dest}", str(dest), FetchSource(mlcommons_uri=uri), None)


def _token() -> Access:
    return access_from({"CF_ACCESS_TOKEN": TOKEN}, [_item(Path("x"), GPT_OSS_URI)], lambda: False)


def _fetch(item: FetchItem, access: Access) -> tuple[object, list[str]]:
    lines: list[str] = []
    [done] = fetch_all([item], access=access, say=lines.append)
    return done, lines


def test_every_listed_file_is_fetched_md5_checked_its_sha256_recorded_and_a_second_call_asks_nothing(
        r2: FakeR2, tmp_path: Path) -> None:
    uri = r2.publish("gpt-oss-data", FILES)
    dest = tmp_path / "gpt-oss-120b"
    done, lines = _fetch(_item(dest, uri), _token())
    assert {rel: (dest / rel).read_bytes() for rel in FILES} == FILES
    assert (dest / "gpt-oss-data.md5").read_text() == md5_listing(FILES)   # kept, as the downloader keeps it
    manifest = json.loads((dest / MANIFEST).read_text())
    assert {rel: meta["sha256"] for rel, meta in manifest.items() if rel in FILES} == {
        rel: hashlib.sha256(data).hexdigest() for rel, data in FILES.items()}
    record = json.loads((dest / FETCHED).read_text())
    assert record["mlcommons_uri"] == uri and record["base_url"] == f"{r2.url}/gpt-oss-data"
    assert record["md5"] == {rel: hashlib.md5(data).hexdigest() for rel, data in FILES.items()}
    assert record["manifest_sha256"] == manifest_digest(manifest)
    assert (done.files, done.fetched, done.kept) == (4, 4, 0)   # three files and the listing
    assert not list(dest.rglob("*.part"))
    assert all(headers.get("cf-access-token") == TOKEN for _, headers in r2.requests)

    seen = len(r2.requests)
    again, lines = _fetch(_item(dest, uri), ANONYMOUS)   # no credentials needed: nothing is asked
    assert len(r2.requests) == seen and (again.fetched, again.kept) == (0, 4)
    assert any("nothing to fetch" in line for line in lines)

    (dest / "acc/acc_eval_inputs.parquet").write_bytes(b"changed")
    third, _ = _fetch(_item(dest, uri), _token())
    assert (dest / "acc/acc_eval_inputs.parquet").read_bytes() == FILES["acc/acc_eval_inputs.parquet"]
    assert r2.served["gpt-oss-data/acc/acc_eval_inputs.parquet"] == 2 * 3000   # only it fetched again
    assert r2.served["gpt-oss-data/perf/perf_eval_ref.parquet"] == 5000
    assert (third.fetched, third.kept) == (2, 2)   # the file and the listing


@pytest.mark.parametrize("form", ["token", "service token"])
def test_both_credential_forms_from_the_environment_are_let_in(r2: FakeR2, tmp_path: Path, form: str) -> None:
    env = {"CF_ACCESS_TOKEN": TOKEN} if form == "token" else {
        "CF_ACCESS_CLIENT_ID": CLIENT[0], "CF_ACCESS_CLIENT_SECRET": CLIENT[1]}
    item = _item(tmp_path / "data", r2.publish("gpt-oss-data", FILES))
    access = access_from(env, [item], lambda: pytest.fail("a Prefect server is not asked when the environment sets "
                                                          "credentials"))
    assert all(value not in repr(access) for value in env.values())
    done, _ = _fetch(item, access)
    assert done.fetched == 4
    sent = {k: v for _, headers in r2.requests for k, v in headers.items() if k.startswith("cf-access")}
    assert sent == ({"cf-access-token": TOKEN} if form == "token" else
                    {"cf-access-client-id": CLIENT[0], "cf-access-client-secret": CLIENT[1]})


@pytest.mark.parametrize("refusal", [403, 302])
def test_a_refusal_names_the_missing_or_refused_credentials_and_how_to_get_them(
        r2: FakeR2, tmp_path: Path, refusal: int) -> None:
    r2.refusal = refusal   # 302: Cloudflare Access' redirect to its login page
    item = _item(tmp_path / "data", r2.publish("gpt-oss-data", FILES))
    with pytest.raises(PlanError) as none:
        fetch_all([item], access=ANONYMOUS, say=lambda line: None)
    assert "no credentials are set (CF_ACCESS_TOKEN, or CF_ACCESS_CLIENT_ID and CF_ACCESS_CLIENT_SECRET)" in str(
        none.value)
    assert f"cloudflared access token --app={item.source.mlcommons_uri}" in str(none.value)
    wrong = access_from({"CF_ACCESS_TOKEN": "cf-wrong"}, [item], lambda: False)
    with pytest.raises(PlanError) as refused:
        fetch_all([item], access=wrong, say=lambda line: None)
    assert "the credentials in CF_ACCESS_TOKEN were refused" in str(refused.value)
    assert "cf-wrong" not in str(refused.value)
    assert ("a redirect to Cloudflare Access' login" if refusal == 302 else "(403)") in str(refused.value)
    assert not (tmp_path / "data").exists()


def test_half_a_service_token_or_both_forms_are_refused_and_nothing_is_read_for_a_plan_without_the_source(
        tmp_path: Path) -> None:
    item = _item(tmp_path, GPT_OSS_URI)
    with pytest.raises(PlanError, match="CF_ACCESS_CLIENT_ID is set without CF_ACCESS_CLIENT_SECRET"):
        access_from({"CF_ACCESS_CLIENT_ID": CLIENT[0]}, [item], lambda: False)
    with pytest.raises(PlanError, match="keep one"):
        access_from({"CF_ACCESS_TOKEN": TOKEN, "CF_ACCESS_CLIENT_SECRET": CLIENT[1]}, [item], lambda: False)
    assert access_from({}, [item], lambda: False) == ANONYMOUS   # none set, no Prefect server: none sent
    url_only = FetchItem("fetch.x", "x", FetchSource(url="https://example.org/x", sha256="ab" * 32), None)
    assert access_from({}, [url_only], lambda: pytest.fail("no mlcommons_uri: nothing read")) == ANONYMOUS


def test_credentials_go_to_the_uri_and_base_hosts_only_never_along_a_redirect_nor_over_plain_http(
        r2: FakeR2, tmp_path: Path) -> None:
    files = FakeR2(token=TOKEN).start()   # the base URL on another host, as the .uri may name
    elsewhere = FakeR2().start()          # where a file redirects to
    try:
        uri = r2.publish("gpt-oss-data", FILES, base=f"{files.url}/gpt-oss-data")
        files.publish("gpt-oss-data", FILES)
        done, _ = _fetch(_item(tmp_path / "a", uri), _token())
        assert done.fetched == 4 and r2.paths() == ["metadata/gpt-oss-data.uri", "metadata/gpt-oss-data.md5"]
        assert sorted(files.paths()) == sorted(f"gpt-oss-data/{rel}" for rel in FILES)
        files.redirect["gpt-oss-data/acc/acc_eval_inputs.parquet"] = f"{elsewhere.url}/stolen"
        with pytest.raises(StorageError, match="answered 302"):
            fetch_all([_item(tmp_path / "b", uri)], access=_token(), say=lambda line: None)
        assert elsewhere.requests == []   # not followed: the token never left the two hosts
    finally:
        files.stop()
        elsewhere.stop()
    item = _item(tmp_path / "c", "http://inference.mlcommons-storage.org/metadata/gpt-oss-data.uri")
    with pytest.raises(PlanError, match="go over https only"):
        _token().headers(item, str(item.source.mlcommons_uri))


def test_an_md5_mismatch_is_refused_naming_the_file_and_nothing_is_placed(r2: FakeR2, tmp_path: Path) -> None:
    item = _item(tmp_path / "data", r2.publish("gpt-oss-data", FILES))
    r2.corrupt.add("gpt-oss-data/perf/perf_eval_ref.parquet")
    with pytest.raises(ChecksumMismatch) as e:
        fetch_all([item], access=_token(), say=lambda line: None)
    assert "perf/perf_eval_ref.parquet" in str(e.value) and hashlib.md5(
        FILES["perf/perf_eval_ref.parquet"]).hexdigest() in str(e.value)
    perf = tmp_path / "data/perf"
    assert not (perf / "perf_eval_ref.parquet").exists() and not (perf / "perf_eval_ref.parquet.part").exists()
    assert not (tmp_path / "data" / FETCHED).exists() and not (tmp_path / "data" / MANIFEST).exists()
    r2.corrupt.clear()
    done, _ = _fetch(item, _token())   # the files placed before the mismatch are kept, not fetched again
    assert done.fetched == 2 and r2.served["gpt-oss-data/acc/acc_eval_inputs.parquet"] == 3000


@pytest.mark.parametrize("path", ["/etc/passwd", "../outside", "acc/../../outside", "./../outside", "acc//x",
                                  "acc/./x", ".podium-fetch.json", "gpt-oss-data.md5", "acc\\x"])
def test_a_listed_path_that_could_leave_the_folder_is_refused_before_anything_is_fetched(
        r2: FakeR2, tmp_path: Path, path: str) -> None:
    listing = md5_listing(FILES) + f"{'0' * 32}  {path}\n"
    item = _item(tmp_path / "data", r2.publish("gpt-oss-data", FILES, listing=listing))
    with pytest.raises(PlanError) as e:
        fetch_all([item], access=_token(), say=lambda line: None)
    assert f"line 4 lists {path.removeprefix('./')!r}" in str(e.value) and "nothing was fetched" in str(e.value)
    assert r2.paths() == ["metadata/gpt-oss-data.uri", "metadata/gpt-oss-data.md5"]
    assert not (tmp_path / "data").exists() and not (tmp_path / "outside").exists()


@pytest.mark.parametrize(("text", "base"), [
    ("https://r2.example.org/gpt-oss-data\n", "https://r2.example.org/gpt-oss-data"),
    ("https://r2.example.org/gpt-oss-data/", "https://r2.example.org/gpt-oss-data"),
    ("https://r2.example.org/a\nhttps://r2.example.org/b\n", None),
    ("<html>login</html>", None), ("r2.example.org/gpt-oss-data", None), ("https://r2.example.org/x?sig=1", None),
    ("", None)])
def test_a_uri_is_the_downloaders_one_line_base_url(text: str, base: str | None) -> None:
    item = _item(Path("d"), GPT_OSS_URI)
    if base is not None:
        assert parse_uri(item, GPT_OSS_URI, text) == base
        return
    with pytest.raises(PlanError, match=r"is not the R2 downloader's \.uri"):
        parse_uri(item, GPT_OSS_URI, text)


def test_a_listing_is_md5sums_format_and_anything_else_is_named_by_its_line() -> None:
    item, url = _item(Path("d"), GPT_OSS_URI), GPT_OSS_URI.replace(".uri", ".md5")
    md5 = "d41d8cd98f00b204e9800998ecf8427e"
    assert parse_listing(item, url, f"{md5}  ./b.npy\n{md5} *a/c.parquet\n\n", ()) == {"a/c.parquet": md5,
                                                                                        "b.npy": md5}
    for bad in (f"{md5} b.npy", f"{md5.upper()}  b.npy", f"{md5[:31]}  b.npy", "b.npy", f"\\{md5}  b\\nc"):
        with pytest.raises(PlanError, match="line 2 is not md5sum's"):
            parse_listing(item, url, f"{md5}  a.npy\n{bad}\n", ())
    with pytest.raises(PlanError, match="listed twice"):
        parse_listing(item, url, f"{md5}  a.npy\n{md5}  ./a.npy\n", ())
    with pytest.raises(PlanError, match="lists no file"):
        parse_listing(item, url, "\n", ())


def test_the_source_is_a_uri_url_alone() -> None:
    assert FetchSource(mlcommons_uri=GPT_OSS_URI).describe() == GPT_OSS_URI
    for bad, field in ((dict(mlcommons_uri="https://inference.mlcommons-storage.org/metadata/gpt-oss-data.md5"),
                        "mlcommons_uri"), (dict(mlcommons_uri="ftp://host/x.uri"), "mlcommons_uri"),
                       (dict(mlcommons_uri=GPT_OSS_URI, sha256="ab" * 32), "sha256"),
                       (dict(mlcommons_uri=GPT_OSS_URI, revision="a" * 40), "revision"),
                       (dict(mlcommons_uri=GPT_OSS_URI, url="https://example.org/x"), "name one source")):
        with pytest.raises(ValueError, match=field):
            FetchSource(**bad)


def test_the_shipped_gpt_oss_plan_fetches_its_data_sets_from_mlcommons_storage() -> None:
    plan = plans.load(PLANS / "gpt-oss-120b-trtllm-k8s.yaml")
    [data] = [item for item in plan.fetches() if item.source.kind == "mlcommons_uri"]
    assert data.source.mlcommons_uri == GPT_OSS_URI
    dataset = plan.benchmarks[0].dataset
    for path in (dataset.performance, dataset.accuracy, *dataset.compliance.values()):
        assert str(path).startswith(data.dest.rstrip("/") + "/")   # every data set file lands in its folder
    [model] = [item for item in plan.fetches() if item.dest == plan.benchmarks[0].model.source]
    assert model.source.repo == "openai/gpt-oss-120b"   # the weights stay on Hugging Face


def test_podium_fetch_killed_mid_file_resumes_with_a_range_and_never_shows_the_token(
        r2: FakeR2, tmp_path: Path) -> None:
    files = {**FILES, "perf/perf_eval_ref.parquet": random.Random(3).randbytes(BIG)}
    r2.publish("gpt-oss-data", files)
    r2.stall = ("gpt-oss-data/perf/perf_eval_ref.parquet", BIG // 2)
    data = yaml.safe_load((PLANS / "gpt-oss-120b-trtllm-k8s.yaml").read_text())
    data.pop("fetch")
    bench = data["benchmarks"][0]
    bench["fetch"] = {dest: src for dest, src in bench["fetch"].items() if "mlcommons_uri" in src}
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "CF_ACCESS_", "HF_"))}
    env |= {"CF_ACCESS_TOKEN": TOKEN, "PODIUM_MLCOMMONS_STORAGE_URL": r2.url}
    argv = [str(Path(sys.executable).parent / "podium"), "fetch", str(plan), "--dest", str(out)]
    dest = out / "mnt/mlperf/data/gpt-oss-120b"
    part = dest / "perf/perf_eval_ref.parquet.part"
    log = tmp_path / "killed.log"
    with log.open("wb") as sink:
        first = subprocess.Popen(argv, env=env, stdout=sink, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 300   # a bound against a hang, not a timing: the condition is the part
            while not (part.is_file() and part.stat().st_size >= 1 << 20) and first.poll() is None \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            first.kill()
            first.wait()
    r2.release.set()
    assert first.returncode == -signal.SIGKILL, log.read_text()
    kept = part.stat().st_size
    assert 1 << 20 <= kept < BIG
    assert not (dest / "perf/perf_eval_ref.parquet").exists()
    r2.stall = None
    before = r2.served["gpt-oss-data/perf/perf_eval_ref.parquet"]
    second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert second.returncode == 0, second.stderr
    assert (dest / "perf/perf_eval_ref.parquet").read_bytes() == files["perf/perf_eval_ref.parquet"]
    ranges = [h.get("range") for p, h in r2.requests if p == "gpt-oss-data/perf/perf_eval_ref.parquet"]
    assert ranges == [None, f"bytes={kept}-"]
    assert r2.served["gpt-oss-data/perf/perf_eval_ref.parquet"] - before == BIG - kept   # the kept bytes not re-sent
    assert f"resuming after {kept:,}" in second.stderr
    assert f"{dest}: {GPT_OSS_URI}, 4 file(s)" in second.stdout
    third = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert third.returncode == 0 and " 0 fetched, 4 verified in place" in third.stdout
    shown = log.read_bytes() + (second.stdout + second.stderr + third.stdout + third.stderr).encode()
    assert TOKEN.encode() not in shown
    assert not any(TOKEN.encode() in p.read_bytes() for p in out.rglob("*") if p.is_file())
