"""The official verification: `<inference_src>/compliance/<TESTxx>/run_verification.py` of a local checkout of
mlcommons/inference, run on the same audit run, its verdict read from the files it leaves and compared with
Podium's. It runs in a scratch folder of its own (the scripts write into their working directory), with argv
lists; its output is kept in `official.log` there.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tasks.compliance import Audit, AuditJob
from tasks.compliance.common import AUDIT_CONFIG

TIMEOUT_S = 3600   # TEST07 scores a whole compliance set through the accuracy script
TAIL_LINES = 20


@dataclass(frozen=True)
class Official:
    verdict: str            # PASS | FAIL | "not run: <why>"
    argv: tuple[str, ...] = ()
    log: str | None = None

    def disagreement(self, podium_passed: bool) -> str | None:
        """What differs from Podium's verdict; None when they agree (or the official script gave none)."""
        if self.verdict not in ("PASS", "FAIL") or (self.verdict == "PASS") == podium_passed:
            return None
        return (f"official run_verification.py says {self.verdict}, Podium says {'PASS' if podium_passed else 'FAIL'}"
                f"; see {self.log}")


def script_for(inference_src: str, test: str) -> Path:
    return Path(inference_src) / "compliance" / test / "run_verification.py"


def run_official(impl: Audit, job: AuditJob, run_dir: Path) -> Official:
    """Run the checkout's verification for `job`'s audit run in `run_dir/official/`; never raises for its verdict."""
    assert job.inference_src is not None
    script = script_for(job.inference_src, job.test)
    if not script.is_file():
        return Official(f"not run: {script} does not exist (inference_src: the folder `podium fetch-inference` prints)")
    work = run_dir / "official"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    (work / AUDIT_CONFIG).write_text("\n".join(job.spec.audit_config) + "\n")   # for --audit-config
    out = work / "output"
    argv = impl.official_argv(script, run_dir, out, job, work)
    log = work / "official.log"
    try:
        done = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)  # noqa: S603
        code, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as e:
        code, output = None, f"{e.stdout or ''}{e.stderr or ''}\ntimed out after {TIMEOUT_S} s"
    log.write_text(f"argv: {json.dumps(argv)}\ncwd: {work}\nexit code: {code}\n\n{output}")
    verdict = impl.official_verdict(out / job.test)
    for bulky in ("accuracy", "performance"):   # copies of the run's logs; the verify files stay
        shutil.rmtree(out / job.test / bulky, ignore_errors=True)
    if verdict is None:
        tail = " | ".join(output.strip().splitlines()[-3:])
        return Official(f"not run: {script.name} exited {code} and left no verdict ({tail})", tuple(argv), str(log))
    return Official("PASS" if verdict else "FAIL", tuple(argv), str(log))
