"""The accuracy folder of a loadgen scenario folder, and the hash line any truncated accuracy log needs.

Official (`checks/accuracy_check.py`, reference §1.3, §2.4): the exact file list (REQUIRED_ACC_FILES), every metric
of accuracy.txt at or over its target (ACC_PATTERN), under its upper limit, the `hash=` line, the log truncated to at
most MAX_ACCURACY_LOG_SIZE, no loadgen errors in the accuracy run, dataset coverage. Podium's own: the hash must
match an accuracy log that was small enough to stay whole, and the log must be an AccuracyOnly run of the folder's
scenario.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from submission.checks.findings import Context
from submission.checks.run import load
from submission.rules import ScenarioRules
from submission.tree.paths import ACCURACY_LOG, ACCURACY_TXT

HASH_LINE = re.compile(r"^hash=([\w\d]+)$", re.MULTILINE)  # the checker's pattern for accuracy.txt
TRUNCATION_MARK = "\n\n...\n\n"  # what truncate_accuracy_log.py writes between the head and the tail


def accuracy(ctx: Context, division: str, acc_dir: Path, sc: ScenarioRules) -> dict[str, str]:
    """Check the accuracy folder; return the metrics found (metric -> value as written), for the CSV."""
    if not acc_dir.is_dir():
        ctx.add("accuracy-files", acc_dir, "no accuracy folder", "run the accuracy run and assemble again")
        return {}
    names = ctx.rules.required_files.accuracy
    ctx.unexpected(acc_dir, files=set(names))
    if ctx.missing("accuracy-files", acc_dir, names):
        return {}
    text = (acc_dir / ACCURACY_TXT).read_text(encoding="utf-8", errors="replace")
    hash_line(ctx, acc_dir, text)
    found: dict[str, str] = {}
    for target in sc.accuracy:
        match = re.search(target.pattern, text, re.MULTILINE) if target.pattern else None
        if match is None:
            if target.required:
                ctx.add("accuracy-metric", acc_dir / ACCURACY_TXT, f"no {target.metric} value found",
                        "write the evaluator's output into accuracy.txt")
            continue
        found[target.metric] = match.group(1)
        value = float(match.group(1))
        enforce = "warning" if division == "open" else "error"  # open division: recorded, not enforced
        if target.target is not None and value < target.target:
            ctx.add("accuracy-target", acc_dir / ACCURACY_TXT, f"{target.metric} {value} is under the target "
                    f"{target.target}", "fix the model or engine configuration", severity=enforce)
        if target.upper_limit is not None and value > target.upper_limit:
            ctx.add("accuracy-upper-limit", acc_dir / ACCURACY_TXT, f"{target.metric} {value} is over the upper "
                    f"limit {target.upper_limit}", "check the generation settings (output length)", severity=enforce)
    run = load(ctx, "accuracy-files", acc_dir, "AccuracyOnly")
    if run is None:
        return found
    if run.scenario != sc.loadgen_scenario:
        ctx.add("scenario-mismatch", acc_dir, f"the accuracy log's scenario is {run.scenario}, the folder is "
                f"{sc.name}", f"run the accuracy run in the {sc.loadgen_scenario} scenario")
    if run.num_errors:
        ctx.add("accuracy-loadgen-errors", acc_dir, f"{run.num_errors} loadgen error(s) in the accuracy run: "
                f"{'; '.join(run.errors[:3])}", "fix the SUT and re-run the accuracy run")
    count = run.settings.accuracy_sample_count or run.qsl_total_count
    if count != sc.accuracy_sample_count:
        ctx.add("accuracy-coverage", acc_dir, f"accuracy run covered {count} samples, not {sc.accuracy_sample_count}",
                "run the accuracy run over the whole accuracy data set (no accuracy_sample_count_override)")
    return found


def hash_line(ctx: Context, acc_dir: Path, text: str | None) -> None:
    """accuracy.txt must carry `hash=<sha256 of the full log>` and the log must be at most the size limit; a log that
    was small enough to stay whole must hash to that value."""
    log = acc_dir / ACCURACY_LOG
    limit = ctx.rules.max_accuracy_log_bytes
    if log.is_file() and log.stat().st_size > limit:
        ctx.add("accuracy-truncated", log, f"{log.stat().st_size} bytes, over the {limit}-byte limit: not truncated",
                "truncate the accuracy logs (Podium's assemble step does; the full log stays in object storage)")
    match = HASH_LINE.search(text) if text is not None else None
    if match is None:
        where = acc_dir / ACCURACY_TXT
        ctx.add("accuracy-hash", where, "no hash= line" if text is not None else "missing, so no hash= line",
                "truncate the accuracy logs: it appends the sha256 of the full log")
        return
    if log.is_file() and log.stat().st_size <= limit:
        content = log.read_bytes()
        if TRUNCATION_MARK.encode() not in content and hashlib.sha256(content).hexdigest() != match.group(1):
            ctx.add("accuracy-hash", acc_dir / ACCURACY_TXT, "the hash does not match the (whole) accuracy log",
                    "restore the accuracy log and accuracy.txt that belong together")
