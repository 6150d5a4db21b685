"""The `## Replicas` section of report.md: for each run of an engine of replicas (`RunRecord.replicas`, from the
head's dispatch, tasks/harness/dispatch.py), one row per replica (its samples, their output tokens, errors, p99 TTFT
and TPOT or latency, the samples moved from it, when it was lost), a flag on each replica whose share of the samples
is more than `SHARE_TOLERANCE` off the mean share (judged only where a replica's mean is at least `JUDGED_FROM`
samples: 16 accuracy samples over 64 replicas say nothing of the dispatch), and a line per replica lost mid-run. The
rows sum to the samples the run issued: each sample is counted once, at the replica that answered it.
"""

from __future__ import annotations

from collections.abc import Sequence

from submission.base import markdown as md
from submission.results.runs import RunRecord

SHARE_TOLERANCE = 0.10   # a replica's share more than 10 % off the mean is flagged
JUDGED_FROM = 100        # samples a replica on average before shares are judged (10 % of 100 is about 1 sigma)
COLUMNS = ("replica", "node", "samples", "vs_mean", "output_tokens", "errors", "ttft_p99_ms", "tpot_p99_ms",
           "latency_p99_ms", "moved", "lost_at", "flag")


def mean_samples(record: RunRecord) -> float:
    return sum(r.samples for r in record.replicas) / len(record.replicas)


def rows(record: RunRecord) -> list[dict]:
    """The run's replica rows, each with its share against the mean and its flag."""
    mean = mean_samples(record)
    out, judged = [], mean >= JUDGED_FROM
    for r in record.replicas:
        off = (r.samples - mean) / mean if mean else 0.0
        out.append(r.model_dump(exclude={"lost_why"}) | {
            "vs_mean": f"{off:+.1%}", "flag": f"share {abs(off):.0%} {'over' if off > 0 else 'under'} the mean"
            if judged and abs(off) > SHARE_TOLERANCE else None})
    return out


def flagged(record: RunRecord) -> list[str]:
    """The replicas whose share is more than SHARE_TOLERANCE off the mean."""
    return [row["replica"] for row in rows(record) if row["flag"]]


def markdown(records: Sequence[RunRecord]) -> list[str]:
    """The section, one table per run of replicas; nothing when no run had replicas."""
    runs = [r for r in records if r.replicas]
    if not runs:
        return []
    lines = ["", "## Replicas", "", f"One row per replica of each run of an engine of replicas; `flag` marks a share "
             f"of the samples more than {SHARE_TOLERANCE:.0%} off the mean (`vs_mean`), where the replicas served at "
             f"least {JUDGED_FROM} samples each on average."]
    for record in runs:
        total, mean = sum(r.samples for r in record.replicas), mean_samples(record)
        judged = f"{len(flagged(record))} flagged" if mean >= JUDGED_FROM else \
            f"shares not judged ({mean:.3g} a replica on average, under {JUDGED_FROM})"
        lines += ["", f"### {record.label}", "",
                  f"{total} samples over {len(record.replicas)} replicas (the rows sum to the samples issued), "
                  f"{judged}.", "",
                  *md.table(COLUMNS, rows(record))]
        lost = [r for r in record.replicas if r.lost_at]
        if lost:
            lines += [""] + [f"- {r.replica} on {r.node or '?'} was lost at {r.lost_at}: {r.lost_why}; {r.moved} "
                             "sample(s) moved to live replicas" for r in lost]
    return lines
