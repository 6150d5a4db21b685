"""Accuracy-log truncation with the hash line, as MLPerf requires before submission (reference §1.3).

For each accuracy folder: the sha256 of the full `mlperf_log_accuracy.json` goes into `accuracy.txt` as a line
`hash=<hex>`, and a log larger than the round's `max_accuracy_log_bytes` is cut to its first and last
`VIEWABLE_CHARS` characters around `ELLIPSIS` (tools/submission/truncate_accuracy_log.py does the same).
TEST07/TEST09 accuracy folders have no accuracy.txt of their own: they get one holding only the hash line.
Truncation is never applied twice (an accuracy.txt with a hash line is refused), the full log can be kept in a
backup folder first, and every file is written atomically (submission.base.files: temp file, fsync, then rename).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from submission.base.errors import PodiumError, RuleViolation
from submission.base.files import replace_atomic, sha256_file, write_atomic
from submission.rules import load_rules

ACCURACY_LOG = "mlperf_log_accuracy.json"
ACCURACY_TXT = "accuracy.txt"
ENDPOINTS_MARKER = "config.yaml"  # an endpoints (loadgen-less) scenario folder; the checker reads no hash there
VIEWABLE_CHARS = 4096  # truncate_accuracy_log.py VIEWABLE_SIZE
ELLIPSIS = "\n\n...\n\n"  # what truncate_accuracy_log.py writes between head and tail
HASH_LINE = re.compile(r"^hash=([\w\d]+)$", re.MULTILINE)  # the checker's pattern for accuracy.txt
HASH_ONLY_TESTS = ("TEST07", "TEST09")  # their accuracy.txt is written here and holds only the hash
OPTIONAL_TXT_TESTS = ("TEST01", *HASH_ONLY_TESTS)  # may lack an accuracy.txt before truncation (reference §1.5)
TREE_PATTERNS = ("*/*/results/*/*/*/accuracy", "*/*/results/*/*/*/TEST0[179]/accuracy")
_ENCODING = {"encoding": "utf-8", "errors": "surrogateescape"}  # any byte survives the round trip


def _head_and_tail(path: Path) -> str:
    """The first and last VIEWABLE_CHARS characters around ELLIPSIS, without reading the whole (large) log."""
    size = path.stat().st_size
    with path.open("rb") as stream:
        head = stream.read(4 * VIEWABLE_CHARS).decode(**_ENCODING)[:VIEWABLE_CHARS]
        stream.seek(max(0, size - 4 * VIEWABLE_CHARS - 3))  # 3 more: a cut multi-byte character at the start
        tail = stream.read().decode(**_ENCODING)[-VIEWABLE_CHARS:]
    return head + ELLIPSIS + tail


def _test_name(acc_dir: Path) -> str | None:
    return acc_dir.parent.name if acc_dir.parent.name.startswith("TEST") else None


def _scenario_dir(acc_dir: Path) -> Path:
    return acc_dir.parent if _test_name(acc_dir) is None else acc_dir.parent.parent


def _has_hash(acc_dir: Path) -> bool:
    txt = acc_dir / ACCURACY_TXT
    return txt.is_file() and HASH_LINE.search(txt.read_text(**_ENCODING)) is not None


def is_truncated(acc_dir: Path, *, round: str = "v6.1") -> bool:
    """True when accuracy.txt has its hash line and the log is within the round's size limit."""
    log = acc_dir / ACCURACY_LOG
    limit = load_rules(round).max_accuracy_log_bytes
    return _has_hash(acc_dir) and log.is_file() and log.stat().st_size <= limit


def _problems(acc_dir: Path, backup_dir: Path | None) -> list[str]:
    """Why `acc_dir` cannot be truncated now, one line each; empty when it can."""
    problems = []
    log = acc_dir / ACCURACY_LOG
    if not log.is_file():
        problems.append(f"{log}: missing; run the accuracy-mode run (or the audit) that writes it")
    if _has_hash(acc_dir):
        problems.append(f"{acc_dir / ACCURACY_TXT}: already has a hash line, so its log was truncated before; "
                        f"restore the full log and accuracy.txt from the backup to truncate again")
    elif not (acc_dir / ACCURACY_TXT).is_file() and _test_name(acc_dir) not in OPTIONAL_TXT_TESTS:
        problems.append(f"{acc_dir / ACCURACY_TXT}: missing; score the accuracy log first (the hash is appended "
                        f"to the scores)")
    backup = None if backup_dir is None else backup_dir / ACCURACY_LOG
    if backup is not None and backup.exists() and log.is_file() and sha256_file(backup) != sha256_file(log):
        problems.append(f"{backup}: holds a different accuracy log; move it away or choose another backup folder")
    return problems


def truncate_accuracy_dir(acc_dir: Path, *, backup_dir: Path | None = None, round: str = "v6.1") -> str:
    """Hash, back up, record and truncate one accuracy folder; returns the sha256 of the full log.

    Order: backup (when asked), then accuracy.txt with the hash line, then the truncated log, so an interrupted run
    never loses the full log or its hash.
    """
    problems = _problems(acc_dir, backup_dir)
    if problems:
        raise PodiumError(f"cannot truncate {acc_dir}: " + "; ".join(problems),
                          fix="see each problem above; the tree was not changed")
    log = acc_dir / ACCURACY_LOG
    digest = sha256_file(log)
    limit = load_rules(round).max_accuracy_log_bytes
    short = _head_and_tail(log).encode(**_ENCODING) if log.stat().st_size > limit else None
    if short is not None and len(short) > limit:  # only possible with many multi-byte characters in the log
        raise RuleViolation(f"{log}: truncated log is {len(short)} bytes, over the {limit}-byte limit",
                            fix="check the log for non-ASCII content; loadgen writes hex data only")
    if backup_dir is not None:
        backup_dir.mkdir(parents=True, exist_ok=True)
        if not (backup_dir / ACCURACY_LOG).exists():
            temp = backup_dir / f".{ACCURACY_LOG}.partial"
            shutil.copyfile(log, temp)
            replace_atomic(temp, backup_dir / ACCURACY_LOG)
    txt = acc_dir / ACCURACY_TXT
    keep = txt.is_file() and _test_name(acc_dir) not in HASH_ONLY_TESTS
    text = txt.read_text(**_ENCODING) if keep else ""
    separator = "\n" if text and not text.endswith("\n") else ""
    write_atomic(txt, f"{text}{separator}hash={digest}\n".encode(**_ENCODING))
    if short is not None:
        write_atomic(log, short)
    return digest


def accuracy_dirs(tree_root: Path) -> list[Path]:
    """The accuracy folders of a submission tree that take a hash line; endpoints scenario folders are left out."""
    found = {path for pattern in TREE_PATTERNS for path in tree_root.glob(pattern) if path.is_dir()}
    return sorted(path for path in found if not (_scenario_dir(path) / ENDPOINTS_MARKER).exists())


def truncate_tree(tree_root: Path, backup_root: Path, *, round: str = "v6.1") -> list[Path]:
    """Truncate every accuracy folder of the tree, full logs kept under `backup_root` at the same relative path.

    Every folder is checked before any is changed; problems are raised together. Returns the folders processed
    (each got its hash line; those over the size limit were also cut).
    """
    folders = accuracy_dirs(tree_root)
    backups = {folder: backup_root / folder.relative_to(tree_root) for folder in folders}
    problems = [problem for folder in folders for problem in _problems(folder, backups[folder])]
    if problems:
        lines = "\n".join(f"  - {problem}" for problem in problems)
        raise PodiumError(f"cannot truncate the accuracy logs under {tree_root}:\n{lines}",
                          fix="correct each folder listed above; nothing was changed")
    for folder in folders:
        truncate_accuracy_dir(folder, backup_dir=backups[folder], round=round)
    return folders
