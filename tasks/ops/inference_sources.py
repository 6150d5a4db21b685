"""The mlcommons/inference sources Podium's official checks run from (`podium check --inference-src`, a plan's
`inference_src`), fetched at the commit the round's rules pin (`inference_sources` in submission/rules/<round>.yaml).

Only what Podium uses is fetched (`PATHS`): one commit, shallow (`--depth 1`), blobs on demand
(`--filter=blob:none`) and only those of a sparse checkout, so a few MB instead of the whole repository and its
large sample logs. The checks themselves never fetch: `podium fetch-inference` does, once, where the network is.

`<root>/<commit>/` is a finished fetch: a git work tree at that commit. The work happens in `<commit>.partial/` and
is renamed only once verified (HEAD at the commit, no tracked file changed, the checker and the audits present), so
an interrupted fetch resumes there and a folder without `.partial` is always whole. A later call checks the finished
folder again, without the network, and reuses it; a folder that no longer matches its commit is refused, not fixed.

Where GitHub is out of reach, `podium fetch-inference --archive PATH` takes a `git archive` of the commit instead
(`unpack_archive`; CI's copy of the official tools is one): the commit read from the archive's pax header (`git
get-tar-commit-id` reads the same), another commit refused, then the archive copied to `<root>/<commit>.tar.gz` and
unpacked into `<root>/<commit>/` as `podium fetch` unpacks a GitHub archive (tasks/staging/fetch_http.py and
unpack.py's rules, `.podium-manifest.json` and `.podium-fetch.json` written). Either kind of folder is accepted the
same way everywhere (`check`, which preflight's `inference_src` check runs too): a checkout at the commit with no
tracked file changed, or an unpacked archive whose record names the commit and whose manifest's files are all there,
unchanged (hashed: a few MB).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from submission.base.errors import CommandError, PodiumError
from submission.base.files import replace_atomic, sha256_file, temporary
from submission.checks.official import CHECKER_DIR
from submission.plan.fetch import FetchItem, FetchSource
from submission.rules import SourcePin
from tasks.staging.fetch_http import ARCHIVE, FETCHED, _unpack, read_json, tar_commit
from tasks.staging.sources import MANIFEST, manifest_digest

# What Podium runs or reads from the checkout, with who uses it (the sparse checkout; one path a line).
PATHS = (
    f"{CHECKER_DIR.as_posix()}/submission_checker/",  # the checker: submission/checks/official.py runs it
    f"{CHECKER_DIR.as_posix()}/log_parser.py",  # the log reader beside it
    f"{CHECKER_DIR.as_posix()}/truncate_accuracy_log.py",  # the truncation submission/tree/truncate.py does as well
    f"{CHECKER_DIR.as_posix()}/submission_checker_old.py",  # the file lists submission/tree/paths.py tolerates, and
    # what preprocess_submission.py imports
    f"{CHECKER_DIR.as_posix()}/preprocess_submission.py",  # `podium submit` runs it: submission/checks/preprocess.py
    "compliance/",  # TESTxx/run_verification.py and audit.config: tasks/compliance/official_scripts.py
    "loadgen/mlperf.conf",  # the round's loadgen settings the rules data cites
    "language/gpt-oss-120b/",  # the accuracy script tasks/accuracy/gpt_oss.py follows
    "language/deepseek-r1/",  # the accuracy script tasks/accuracy/deepseek_r1.py follows
    "multimodal/qwen3-vl/",  # the accuracy script tasks/accuracy/qwen3_vl.py follows
)
# What a whole fetch must hold: without these it is not the checkout the checks need.
REQUIRED = (CHECKER_DIR / "submission_checker" / "main.py", Path("compliance"))
PARTIAL = ".partial"
GITHUB_NAME = "mlcommons/inference"   # as a `podium fetch` plan names it (`github:`)
FETCH_TIMEOUT_S = 1800  # one shallow commit; a slow link still finishes well inside it
GIT_TIMEOUT_S = 120  # the local steps (init, config, rev-parse, status)
TAIL_LINES = 8


@dataclass(frozen=True)
class Fetched:
    path: Path  # what --inference-src takes
    commit: str
    reused: bool  # True: it was already there, checked, and nothing was fetched


def fetch(pin: SourcePin, root: Path, *, repository: str | None = None) -> Fetched:
    """mlcommons/inference at `pin.commit` in `root/<commit>/`, fetched from `repository` (default `pin.repository`)
    unless a verified copy is already there. PodiumError (naming git, the URL and the fix) when it cannot be."""
    url = repository or pin.repository
    if Path(url).exists():   # a local path: git runs in the work folder, so make it absolute
        url = str(Path(url).resolve())
    folder = Path(root).resolve() / pin.commit
    if folder.exists():
        check(folder, pin.commit)
        return Fetched(folder, pin.commit, reused=True)
    git = require_git(url, pin.commit)
    work = folder.with_name(folder.name + PARTIAL)
    work.mkdir(parents=True, exist_ok=True)
    for args in (("init", "--quiet"), ("config", "remote.origin.url", url), ("config", "core.sparseCheckout", "true"),
                 ("config", "core.sparseCheckoutCone", "false")):
        run_git(git, work, *args)
    # the sparse-checkout file itself, not `git sparse-checkout set --no-cone` (git >= 2.35), so git >= 2.19 will do
    (work / ".git" / "info").mkdir(exist_ok=True)
    (work / ".git" / "info" / "sparse-checkout").write_text("".join(f"/{path}\n" for path in PATHS))
    _fetch_commit(git, work, url, pin.commit, folder)
    run_git(git, work, "-c", "advice.detachedHead=false", "checkout", "--quiet", "--force", "--detach", pin.commit,
            timeout_s=FETCH_TIMEOUT_S,   # the checkout fetches the blobs it needs from the same remote
            fix=f"check the network to {url}, then run `podium fetch-inference` again: it resumes")
    verify(git, work, pin.commit, url=url)
    work.rename(folder)
    return Fetched(folder, pin.commit, reused=False)


def unpack_archive(pin: SourcePin, archive: Path, root: Path, *, name: str = GITHUB_NAME,
                   required: tuple[Path, ...] = REQUIRED, make_var: str = "INFERENCE_ARCHIVE") -> Fetched:
    """`name` (mlcommons/inference, or another pinned source: the MATH-500 grader) at `pin.commit` in
    `root/<commit>/`, unpacked from `archive` (a `git archive` of that commit, as tar or tar.gz) unless a verified
    copy of the same archive is already there; an unpacked copy of another archive of the commit is replaced.
    PodiumError naming the archive and the fix when it cannot be, or when it lacks a `required` path."""
    archive = Path(archive).expanduser().resolve()
    how = "with git" if name == GITHUB_NAME else "from GitHub"
    fix = (f"pass the `git archive` of {name} at {pin.commit} (`git archive --format=tar.gz "
           f"{pin.commit[:12]}` in a clone, or GitHub's {pin.repository}/archive/{pin.commit}.tar.gz; make: "
           f"{make_var}=PATH), or leave out --archive to fetch it {how}")
    if not archive.is_file():
        raise PodiumError(f"--archive {archive}: no such file", fix=fix)
    try:
        commit = tar_commit(archive)
    except (OSError, tarfile.TarError) as error:
        raise PodiumError(f"--archive {archive} is not a tar archive ({error})", fix=fix) from None
    if commit != pin.commit:
        said = f"the archive of commit {commit}" if commit else "an archive that names no commit (no pax comment)"
        raise PodiumError(f"--archive {archive} is {said}, not the pinned {pin.commit}", fix=fix)
    folder = Path(root).resolve() / commit
    digest = sha256_file(archive)
    if folder.exists() and (read_json(folder / FETCHED) or {}).get("archive_sha256") in (digest, None):
        check(folder, commit, name=name, required=required)   # this archive's, or a git checkout: reused once verified
        return Fetched(folder, commit, reused=True)
    kept = folder.with_name(folder.name + ARCHIVE)   # kept beside the folder, as `podium fetch` keeps a GitHub archive
    kept.parent.mkdir(parents=True, exist_ok=True)
    copy = temporary(kept)
    shutil.copyfile(archive, copy)
    replace_atomic(copy, kept)
    # what `podium fetch` unpacks: its field names the option in an error, its source gives the cap (max_unpacked_gib)
    item = FetchItem(field="--archive", dest=str(folder), source=FetchSource(github=name), revision=commit)
    _unpack(item, kept, folder, {"archive": str(archive), "archive_sha256": digest, "commit": commit})
    missing = [str(path) for path in required if not (folder / path).exists()]
    if missing:
        shutil.rmtree(folder)
        raise PodiumError(f"--archive {archive} (commit {commit[:12]}) has no {', '.join(missing)}: not what "
                          f"Podium runs of {name}", fix=fix)
    return Fetched(folder, commit, reused=False)


def check(folder: Path, commit: str, *, name: str = GITHUB_NAME, required: tuple[Path, ...] = REQUIRED) -> None:
    """`folder` holds mlcommons/inference (or `name`) at `commit` as Podium fetches it (the module's doc), with the
    `required` paths in it (the checker and the audits); PodiumError naming what differs otherwise."""
    if (folder / FETCHED).is_file():
        verify_unpacked(folder, commit, name=name, required=required)
    else:
        verify(require_git(str(folder), commit), folder, commit)


def verify_unpacked(folder: Path, commit: str, *, name: str = GITHUB_NAME, required: tuple[Path, ...] = REQUIRED,
                    ) -> None:
    """`folder` is an archive of `commit` as `podium fetch-inference --archive` (`fetch-grader`) or `podium fetch`
    unpacked it: its record names the commit, its manifest is the one recorded, and every file of it is there,
    unchanged."""
    command = "fetch-inference" if name == GITHUB_NAME else "fetch-grader"
    fix = f"remove {folder} (rm -rf) and run `podium {command}` again (with its --archive, if it came from one)"
    record, files = read_json(folder / FETCHED), read_json(folder / MANIFEST)
    if record is None or files is None or record.get("manifest_sha256") != manifest_digest(files):
        raise PodiumError(f"{folder}: its {MANIFEST} is missing or differs from the one {FETCHED} records, so its "
                          "files cannot be checked", fix=fix)
    if record.get("commit") != commit:
        raise PodiumError(f"{folder}: it is the archive of commit {str(record.get('commit') or 'none')[:12]}, not "
                          f"the pinned {commit[:12]}", fix=fix)
    changed = [name for name, meta in sorted(files.items()) if not _unchanged(folder / name, meta)]
    if changed:
        raise PodiumError(f"{folder}: files of its manifest are missing or changed since it was unpacked "
                          f"({len(changed)}, e.g. {changed[0]})", fix=fix)
    missing = [str(path) for path in required if not (folder / path).exists()]
    if missing:
        raise PodiumError(f"{folder}: it has no {', '.join(missing)}: not {name}", fix=fix)


def _unchanged(path: Path, meta: dict) -> bool:
    return path.is_file() and not path.is_symlink() and path.stat().st_size == meta.get("size") \
        and sha256_file(path) == meta.get("sha256")


def require_git(url: str, commit: str) -> str:
    git = shutil.which("git")
    if git is None:
        raise PodiumError(f"git is not installed, and fetching mlcommons/inference at {commit[:12]} from {url} "
                          "needs it",
                          fix="install git (e.g. `apt-get install git`), or copy a checkout of mlcommons/inference "
                              f"at {commit} here and pass it as --inference-src")
    return git


def verify(git: str, folder: Path, commit: str, *, url: str | None = None) -> None:
    """`folder` is a checkout of `commit` whose tracked files are unchanged and hold what the checks need."""
    fix = f"remove {folder} (rm -rf) and run `podium fetch-inference` again"
    if not (folder / ".git").is_dir():
        raise PodiumError(f"{folder} is not a git checkout, so its commit cannot be checked", fix=fix)
    head = run_git(git, folder, "rev-parse", "HEAD")
    if head != commit:
        raise PodiumError(f"{folder} is at commit {head[:12] or 'none'}, not the pinned {commit[:12]}", fix=fix)
    changed = run_git(git, folder, "status", "--porcelain", "--untracked-files=no").splitlines()
    if changed:
        raise PodiumError(f"{folder}: {len(changed)} tracked file(s) differ from commit {commit[:12]}, e.g. "
                          f"{changed[0].strip()}", fix=fix)
    missing = [str(path) for path in REQUIRED if not (folder / path).exists()]
    if missing:
        source = f" of {url}" if url else ""
        raise PodiumError(f"commit {commit[:12]}{source} has no {', '.join(missing)}: not mlcommons/inference",
                          fix="pass --repository a clone or mirror of https://github.com/mlcommons/inference")


def run_git(git: str, cwd: Path, *args: str, timeout_s: float = GIT_TIMEOUT_S, fix: str | None = None) -> str:
    """`git args` in `cwd`, its stdout stripped; CommandError with the tail of its output when it fails."""
    argv = [git, *args]
    done = _run(argv, cwd, timeout_s)
    if done.returncode != 0:
        raise CommandError(argv, done.returncode, _tail(done), fix=fix)
    return done.stdout.strip()


def _fetch_commit(git: str, work: Path, url: str, commit: str, folder: Path) -> None:
    done = _run([git, "fetch", "--quiet", "--depth", "1", "--filter=blob:none", "origin", commit], work,
                FETCH_TIMEOUT_S)
    if done.returncode != 0:
        raise PodiumError(
            f"git could not fetch commit {commit} from {url} (exit code {done.returncode}):\n{_tail(done)}",
            fix=f"check that this machine reaches {url} (git honours https_proxy and http.proxy) and that the "
                f"repository has that commit, or pass --repository a mirror that has it; without a network, pass "
                f"--archive a `git archive` of {commit[:12]} (make: INFERENCE_ARCHIVE=PATH), or run `podium "
                f"fetch-inference` where there is one and copy {folder} here (any checkout of mlcommons/inference at "
                f"{commit[:12]} works as --inference-src)")


def _run(argv: list[str], cwd: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    # never a credential prompt: a wrong URL on a forge asks for a password, which would hang a batch job
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    try:
        return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s,  # noqa: S603
                              check=False)
    except subprocess.TimeoutExpired as error:
        raise PodiumError(f"`git {' '.join(argv[1:])}` ran over {timeout_s:g} s and was stopped",
                          fix="check the network to the repository, then run `podium fetch-inference` again: it "
                              "resumes") from error


def _tail(done: subprocess.CompletedProcess[str]) -> str:
    return "\n".join((done.stderr or done.stdout).strip().splitlines()[-TAIL_LINES:])
