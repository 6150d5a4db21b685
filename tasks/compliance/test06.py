"""TEST06: LLM output consistency (llama2-70b-99.9, llama3.1-8b, deepseek-r1).

100 samples are logged in performance mode; each logged output must (a) outside Offline, start with the tokens
reported to `FirstTokenComplete` (`token_data`), (b) end in at most one EOS token (an output of exactly two EOS
passes) and (c) carry `token_count == len(data) / 4` (int32 tokens). Leaves `TEST06/verify_accuracy.txt` with the
three lines the checker reads and `accuracy/mlperf_log_accuracy.json` (compliance/TEST06/run_verification.py).
The EOS ids come from the served model's generation_config.json (or config.json).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from submission.base.errors import PlanError
from submission.results.logs import AccuracyEntry, parse_accuracy_log
from submission.results.runs import AuditCheck
from submission.rules import load_rules
from tasks.compliance import AuditJob, Verdict
from tasks.compliance.common import ACCURACY_LOG, BaseAudit, check_lines

LINES = ("First token check pass", "EOS check pass", "Sample length check pass")


def eos_token_ids(model_dir: Path) -> tuple[int, ...]:
    """The model's EOS token ids: `eos_token_id` (an id or a list) of generation_config.json, else config.json."""
    for name in ("generation_config.json", "config.json"):
        path = model_dir / name
        if not path.is_file():
            continue
        value = json.loads(path.read_text()).get("eos_token_id")
        if value is not None:
            return tuple(int(v) for v in (value if isinstance(value, list) else [value]))
    raise PlanError(f"no eos_token_id in {model_dir}/generation_config.json or config.json",
                    fix="TEST06 checks trailing EOS tokens; serve a model folder whose config names its EOS token")


def _first_token_ok(entry: AccuracyEntry) -> bool:
    first, data = entry.first_tokens(), entry.tokens()
    return bool(first) and all(a == b for a, b in zip(data, first, strict=False))


def _trailing(tokens: list[int], eos: set[int]) -> int:
    count = 0
    for token in reversed(tokens):
        if token not in eos:
            break
        count += 1
    return count


def _line(name: str, passed: bool | None) -> str:
    return f"{name}: {'Skipped' if passed is None else passed}"


class Test06(BaseAudit):
    name = "TEST06"
    verify_files = ("verify_accuracy.txt",)   # the three LINES, not the TEST PASS line of the other audits
    accuracy_log = True
    needs_eos = True

    def verify(self, run_dir: Path, job: AuditJob) -> Verdict:
        if not job.eos_token_ids:
            raise PlanError(f"{job.label}: TEST06 needs the model's EOS token ids", fix="see eos_token_ids()")
        allowed = int(load_rules(job.spec.round).audit(self.name).criteria["max_trailing_eos"])
        eos = set(job.eos_token_ids)
        entries = parse_accuracy_log(run_dir / ACCURACY_LOG)
        offline = job.spec.loadgen_scenario == "Offline"
        first_bad = [e.qsl_idx for e in entries if not _first_token_ok(e)]
        eos_bad = []
        for e in entries:
            tokens = e.tokens()
            trailing = _trailing(tokens, eos)
            if trailing > allowed and not (trailing == len(tokens) == allowed + 1):
                eos_bad.append(e.qsl_idx)
        length_bad = [e.qsl_idx for e in entries if e.token_count != len(e.tokens())]

        def sample(bad: list[int]) -> str:
            return f"qsl_idx {sorted(set(bad))[:5]}" if bad else ""

        checks = (
            AuditCheck(name="samples logged", passed=bool(entries), measured=len(entries), bound="> 0"),
            AuditCheck(name="first token differs from the output", passed=None if offline else not first_bad,
                       measured=None if offline else len(first_bad), bound=f"== 0 of {len(entries)}",
                       detail="Offline: no first token" if offline else sample(first_bad)),
            AuditCheck(name=f"outputs ending in more than {allowed} EOS", passed=not eos_bad, measured=len(eos_bad),
                       bound=f"== 0 of {len(entries)}",
                       detail=" ".join(filter(None, (sample(eos_bad), f"EOS ids {sorted(eos)}")))),
            AuditCheck(name="token_count differs from the output length", passed=not length_bad,
                       measured=len(length_bad), bound=f"== 0 of {len(entries)}", detail=sample(length_bad)),
        )
        passed = all(c.passed is not False for c in checks)
        official = [_line(LINES[0], checks[1].passed), _line(LINES[1], checks[2].passed),
                    _line(LINES[2], checks[3].passed)]
        text = "\n".join([*official, f"TEST06 verification {'complete' if passed else 'failed'}", "",
                          "Podium checks:", *check_lines(checks), ""])
        return Verdict(self.name, checks, {"verify_accuracy.txt": text})

    def official_argv(self, script: Path, run_dir: Path, out_dir: Path, job: AuditJob, work: Path) -> list[str]:
        return [sys.executable, str(script), "-c", str(run_dir), "-o", str(out_dir), "-s", job.spec.loadgen_scenario,
                "--eos_token_id", str(job.eos_token_ids[0]), "--dtype", "int32"]

    def official_verdict(self, folder: Path) -> bool | None:
        path = folder / "verify_accuracy.txt"
        if not path.is_file():
            return None
        lines = {line.strip() for line in path.read_text(errors="replace").splitlines()}
        first = f"{LINES[0]}: True" in lines or f"{LINES[0]}: Skipped" in lines
        return first and f"{LINES[1]}: True" in lines and f"{LINES[2]}: True" in lines


AUDIT = Test06()
