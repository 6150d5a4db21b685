"""Accuracy-log truncation: exact sizes, the hash line, backups, refusal of a second pass, compliance and endpoints."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from submission.base.errors import PodiumError
from submission.tree.truncate import ELLIPSIS, is_truncated, truncate_accuracy_dir, truncate_tree

SCORES = "{'exact_match': 83.1, 'tokens_per_sample': 1280.5}\n"
SCENARIO = Path("closed/Podium/results/1xH200/gpt-oss-120b/Offline")


def _log(n_bytes: int) -> str:
    """A loadgen-like accuracy log of exactly `n_bytes` ASCII bytes."""
    entries = []
    i = 0
    while sum(map(len, entries)) < n_bytes:
        entries.append(f'{{"seq_id": {i}, "qsl_idx": {i * 7 % 6396}, "data": "{i * 2654435761 % 2**32:08X}"}},\n')
        i += 1
    return ("[\n" + "".join(entries))[:n_bytes - 2] + "]\n"


def _acc_dir(root: Path, log: str, scores: str | None = SCORES) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "mlperf_log_accuracy.json").write_text(log)
    if scores is not None:
        (root / "accuracy.txt").write_text(scores)
    return root


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_large_log_is_cut_to_head_and_tail_with_the_hash_of_the_original(tmp_path: Path) -> None:
    original = _log(100 * 1024)
    assert len(original.encode()) == 100 * 1024
    acc = _acc_dir(tmp_path / "accuracy", original)
    assert not is_truncated(acc)

    digest = truncate_accuracy_dir(acc, backup_dir=tmp_path / "backup")

    short = (acc / "mlperf_log_accuracy.json").read_text()
    assert len(short) == 4096 + len("\n\n...\n\n") + 4096 == 8199
    assert short == original[:4096] + ELLIPSIS + original[-4096:]
    assert (acc / "mlperf_log_accuracy.json").stat().st_size <= 10 * 1024
    assert digest == _sha(original)
    assert (acc / "accuracy.txt").read_text() == f"{SCORES}hash={digest}\n"
    assert (tmp_path / "backup" / "mlperf_log_accuracy.json").read_text() == original
    assert is_truncated(acc)
    assert sorted(p.name for p in acc.iterdir()) == ["accuracy.txt", "mlperf_log_accuracy.json"]  # no temp files


def test_a_small_log_stays_intact_but_gets_the_hash(tmp_path: Path) -> None:
    original = _log(10 * 1024)  # exactly at the limit: not larger, so not cut
    acc = _acc_dir(tmp_path, original, scores="{'exact_match': 83.1}")  # no final newline
    digest = truncate_accuracy_dir(acc)
    assert (acc / "mlperf_log_accuracy.json").read_text() == original
    assert (acc / "accuracy.txt").read_text() == f"{{'exact_match': 83.1}}\nhash={_sha(original)}\n"
    assert digest == _sha(original)


def test_a_second_truncation_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    acc = _acc_dir(tmp_path, _log(50 * 1024))
    truncate_accuracy_dir(acc)
    before = {p.name: p.read_bytes() for p in acc.iterdir()}
    with pytest.raises(PodiumError, match="already has a hash line") as caught:
        truncate_accuracy_dir(acc)
    assert caught.value.fix
    assert {p.name: p.read_bytes() for p in acc.iterdir()} == before


def test_a_main_folder_without_scores_is_refused(tmp_path: Path) -> None:
    acc = _acc_dir(tmp_path / "accuracy", _log(20 * 1024), scores=None)
    with pytest.raises(PodiumError, match=r"accuracy\.txt: missing"):
        truncate_accuracy_dir(acc)


def test_a_backup_holding_another_log_is_not_overwritten(tmp_path: Path) -> None:
    acc = _acc_dir(tmp_path / "accuracy", _log(20 * 1024))
    (tmp_path / "backup").mkdir()
    (tmp_path / "backup" / "mlperf_log_accuracy.json").write_text("[]\n")
    with pytest.raises(PodiumError, match="different accuracy log"):
        truncate_accuracy_dir(acc, backup_dir=tmp_path / "backup")
    assert not is_truncated(acc)


def _tree(root: Path) -> dict[str, str]:
    logs = {"main": _log(30 * 1024), "TEST01": _log(40 * 1024), "TEST07": _log(60 * 1024), "TEST09": _log(4 * 1024)}
    scenario = root / SCENARIO
    _acc_dir(scenario / "accuracy", logs["main"])
    _acc_dir(scenario / "TEST01" / "accuracy", logs["TEST01"], scores="TEST01 accuracy scores\n")
    _acc_dir(scenario / "TEST07" / "accuracy", logs["TEST07"], scores=None)
    _acc_dir(scenario / "TEST09" / "accuracy", logs["TEST09"], scores=None)
    endpoints = root / "closed/Podium/results/1xH200/qwen3-vl-235b-a22b/Offline"
    _acc_dir(endpoints / "accuracy", _log(30 * 1024), scores=None)
    (endpoints / "config.yaml").write_text("type: offline\n")
    return logs


def test_truncate_tree_handles_main_and_compliance_folders_and_skips_endpoints(tmp_path: Path) -> None:
    tree, backup = tmp_path / "tree", tmp_path / "backup"
    logs = _tree(tree)
    endpoints_log = (tree / "closed/Podium/results/1xH200/qwen3-vl-235b-a22b/Offline/accuracy/mlperf_log_accuracy.json")
    endpoints_before = endpoints_log.read_bytes()

    done = truncate_tree(tree, backup)

    scenario = tree / SCENARIO
    folders = {"main": scenario / "accuracy", **{t: scenario / t / "accuracy" for t in ("TEST01", "TEST07", "TEST09")}}
    assert done == sorted(folders.values())
    for name, folder in folders.items():
        assert is_truncated(folder), name
        kept = backup / folder.relative_to(tree) / "mlperf_log_accuracy.json"
        assert kept.read_text() == logs[name], name
    assert (folders["main"] / "accuracy.txt").read_text() == f"{SCORES}hash={_sha(logs['main'])}\n"
    assert (folders["TEST01"] / "accuracy.txt").read_text() == f"TEST01 accuracy scores\nhash={_sha(logs['TEST01'])}\n"
    assert (folders["TEST07"] / "accuracy.txt").read_text() == f"hash={_sha(logs['TEST07'])}\n"
    assert (folders["TEST09"] / "accuracy.txt").read_text() == f"hash={_sha(logs['TEST09'])}\n"
    assert (folders["TEST09"] / "mlperf_log_accuracy.json").read_text() == logs["TEST09"]  # small: intact
    assert len((folders["TEST07"] / "mlperf_log_accuracy.json").read_text()) == 8199
    assert endpoints_log.read_bytes() == endpoints_before
    assert not (endpoints_log.parent / "accuracy.txt").exists()


def test_truncate_tree_checks_every_folder_before_changing_any(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    _tree(tree)
    scenario = tree / SCENARIO
    (scenario / "accuracy" / "accuracy.txt").unlink()
    (scenario / "TEST07" / "accuracy" / "accuracy.txt").write_text("hash=abc\n")
    with pytest.raises(PodiumError) as caught:
        truncate_tree(tree, tmp_path / "backup")
    assert str(caught.value).count("\n  - ") == 2
    assert not is_truncated(scenario / "TEST01" / "accuracy")
    assert not (tmp_path / "backup").exists()


def test_a_second_truncate_tree_is_refused(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    _tree(tree)
    truncate_tree(tree, tmp_path / "backup")
    with pytest.raises(PodiumError, match="already has a hash line"):
        truncate_tree(tree, tmp_path / "backup")
