#!/usr/bin/env bash
# shellcheck disable=SC2317  # the step functions run through `bash -c` (exported), which shellcheck cannot follow
# GPU acceptance (issue 12, item 7; docs/engines.md "GPU acceptance"). On a machine with one NVIDIA GPU and PyPI:
#
#   1 gpu              the GPU, its driver (R580+ for the CUDA 13.0 wheels) and free disk
#   2 uv               uv, the installer (into .podium/uv)
#   3 install-engines  vLLM 0.31.0 + ai-dynamo 1.6.1 (its vLLM worker) + NIXL 1.4.1 into .venv-gpu, from the lock
#                      deployments/gpu/engines.lock.txt; runs in the background beside steps 4-6
#   4 install-podium   Podium into .venv (`-e .[smoke]`, as `make install`); an existing .venv with podium is reused
#   5 assets           `podium dev smoke-assets`: the tiny seeded Llama and the smoke data set into .podium/store
#   6 plans            `podium launch PLAN --dry-run --json` of deployments/gpu/{vllm,dynamo}.yaml
#   7 argv             every engine command of those reviews through vLLM's and Dynamo's own argument parsers
#   8 vllm             `podium run deployments/gpu/vllm.yaml`: vLLM on the GPU, Offline, Server and Interactive
#                      performance runs and an accuracy run each, through the harness and the real loadgen
#   9 dynamo           `podium run deployments/gpu/dynamo.yaml`: Dynamo frontend + one prefill and one decode vLLM
#                      worker on the same GPU (NIXL), an Offline performance run and its accuracy run
#
# then prints one table (step, status, seconds, limit, key figures: tokens/s, VALID/INVALID, latencies, accuracy) and
# leaves everything under one folder: $OUT when it is set (the device tool brings back what is written there; the
# logs come as logs.tar.gz), else .podium/gpu-acceptance/<UTC time>/.
#
#   deployments/gpu/acceptance.sh             the real thing
#   deployments/gpu/acceptance.sh --dry-run   no installs and no launches: checks the plans (and, when .venv-gpu is
#                                             there, the engine commands) and says what every other step would run
#
# Each step runs under its own `timeout`, and a deadline (PODIUM_GPU_DEADLINE_S, 570 s) caps every limit, so the
# script ends within 10 minutes and a failed step still leaves the others' rows in the table. A step that needs a
# failed one is SKIPped with the reason. Exit 0 only when every step passed. A mirror instead of PyPI: UV_INDEX_URL
# (or UV_FIND_LINKS with UV_OFFLINE=1 for a folder of wheels) and PIP_INDEX_URL (for uv itself).
set -uo pipefail

usage() { sed -n '3,29p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

DRY=0
case "${1:-}" in
  "") ;;
  --dry-run|--plan-only) DRY=1 ;;
  -h|--help) usage; exit 0 ;;
  *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
esac

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 2
HERE=deployments/gpu
PYTHON=${PODIUM_GPU_PYTHON:-python3}   # 3.11 or newer: it makes both virtualenvs
GPU_VENV=.venv-gpu                     # deployments/gpu/dynamo.yaml names .venv-gpu/bin/python
PODIUM_VENV=.venv
WORKSPACE=.podium                      # the plans read the smoke assets from .podium/store
UV_VERSION=0.13.9
MIN_DRIVER=580       # torch 2.13.0 (vLLM 0.31.0's pin) is built for CUDA 13.0 on PyPI, which needs driver R580+
MIN_DISK_GB=30       # .venv-gpu is about 9 GB, the uv cache as much again (hard-linked where it can be)
MIN_GLIBC=2.34       # the newest manylinux tag among the locked wheels (every one has a wheel: nothing is built)

# Step limits in seconds. install-podium, assets and plans run beside install-engines, so the longest path is gpu +
# uv + install-engines + argv + vllm + dynamo = 535 s; with what may follow the last step (STEP_RESERVE_S) that is the
# deadline, and the table comes after it (tests/unit/test_gpu_acceptance.py checks the sums).
declare -A LIMIT=([gpu]=15 [uv]=20 [install-engines]=150 [install-podium]=80 [assets]=40 [plans]=30 [argv]=40
                  [vllm]=150 [dynamo]=160)
BESIDE_ENGINES=(install-podium assets plans)
DEADLINE_S=${PODIUM_GPU_DEADLINE_S:-570}
KILL_AFTER_S=10      # KILL this long after a step's TERM, if it is still running
GRACE_S=5            # then TERM what is left of its process group, and KILL it after this long
AFTER_S=20           # a leg's after_leg: engines ended, figures and reports copied
STEP_RESERVE_S=$(( KILL_AFTER_S + GRACE_S + AFTER_S ))

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RESULTS=${PODIUM_GPU_RESULTS:-${OUT:-$ROOT/$WORKSPACE/gpu-acceptance/$STAMP}}
# The legs' own workspace, new each time: Podium caches every finished loadgen run by its content, so a re-run in one
# workspace would measure nothing again. The smoke assets stay in .podium/store, where the plans read them.
RUN_WS=$ROOT/$WORKSPACE/gpu-acceptance/ws-$STAMP
LOGS=$RESULTS/logs
mkdir -p "$LOGS" || exit 2
T0=$(date +%s)
export ROOT HERE PYTHON GPU_VENV PODIUM_VENV WORKSPACE RUN_WS UV_VERSION MIN_DRIVER MIN_DISK_GB MIN_GLIBC LOGS DRY
export UV=$ROOT/$WORKSPACE/uv/bin/uv
export UV_CACHE_DIR=${UV_CACHE_DIR:-$ROOT/$WORKSPACE/uv-cache}   # beside the virtualenvs, so uv can hard-link
export UV_PYTHON_DOWNLOADS=never UV_NO_PROGRESS=1 PYTHONUNBUFFERED=1
export DO_NOT_TRACK=1 VLLM_NO_USAGE_STATS=1
export ENGINE_PATH=$ROOT/$PODIUM_VENV/bin:$ROOT/$GPU_VENV/bin:$PATH   # `vllm` for vllm.yaml, `weed` for Podium

# ---- bookkeeping ------------------------------------------------------------------------------------------------

record() {   # record ORDER NAME STATUS SECONDS LIMIT FIGURE NOTE
  "$PYTHON" "$HERE/report.py" step "$LOGS/steps.jsonl" "$@" && echo "$3" > "$LOGS/$2.status"
}

status_of() { cat "$LOGS/$1.status" 2>/dev/null || echo MISSING; }
passed() { [[ $(status_of "$1") == PASS ]]; }

skip() {   # skip ORDER NAME REASON
  echo "== $2: SKIP ($3)"
  record "$1" "$2" SKIP 0 "${LIMIT[$2]}" "" "$3"
}

# step ORDER NAME FUNCTION [AFTER]: FUNCTION under `timeout` (the step's limit, or less when the deadline is nearer),
# its output in logs/NAME.log. Whatever of its process group outlives it (a `podium run` still winding down after the
# TERM) is ended by that group's id: TERM, GRACE_S, then KILL. Then AFTER (at most AFTER_S, outside the limit: what a
# killed step left is collected too); record PASS, FAIL, TIMEOUT or DRY with the seconds and the figure FUNCTION or
# AFTER wrote to logs/NAME.figure. Those extras reserve STEP_RESERVE_S of the deadline, so the last step ends by it.
step() {
  local order=$1 name=$2 fn=$3 after=${4:-} limit=${LIMIT[$2]} left start rc status note figure group waited
  left=$(( DEADLINE_S - ($(date +%s) - T0) - STEP_RESERVE_S ))
  if (( left < 5 )); then
    skip "$order" "$name" "no time left before the ${DEADLINE_S} s deadline"
    return 1
  fi
  (( limit > left )) && limit=$left
  echo "== $name (limit ${limit} s, log $LOGS/$name.log)"
  start=$(date +%s.%N)
  # timeout makes its own process group (its pid) for everything the step starts; engines and the S3 server make
  # their own groups and are ended by `podium run` itself, or by after_leg from their pid files
  STEP=$name timeout --kill-after="$KILL_AFTER_S" "$limit" bash -euo pipefail -c "$fn" > "$LOGS/$name.log" 2>&1 &
  group=$!
  wait "$group"
  rc=$?
  if kill -TERM -- "-$group" 2> /dev/null; then
    for (( waited = 0; waited < GRACE_S; waited++ )); do kill -0 -- "-$group" 2> /dev/null || break; sleep 1; done
    kill -KILL -- "-$group" 2> /dev/null && echo "ended what was left of step $name (process group $group)" \
      >> "$LOGS/$name.log"
  fi
  [[ -n $after ]] && STEP=$name timeout "$AFTER_S" bash -uo pipefail -c "$after" >> "$LOGS/$name.log" 2>&1
  case $rc in
    0) status=PASS ;;
    124|137) status=TIMEOUT ;;
    *) status=FAIL ;;
  esac
  [[ $status == PASS && -f $LOGS/$name.dry ]] && status=DRY
  note=$(grep -v '^[[:space:]]*$' "$LOGS/$name.log" | tail -n 1 | cut -c1-240)
  [[ $status == TIMEOUT ]] && note="killed after ${limit} s; last line: $note"
  figure=$(cat "$LOGS/$name.figure" 2>/dev/null)
  record "$order" "$name" "$status" "$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {print b - a}')" "$limit" \
    "$figure" "$note"
  echo "   $name: $status${figure:+: $figure}"
  return $rc
}

figure() { printf '%s\n' "$*" > "$LOGS/$STEP.figure"; }
dry() { touch "$LOGS/$STEP.dry"; figure "would run: $*"; echo "dry run; would run: $*"; }

index_reachable() {   # index_reachable [URL]: the package index answers within 10 s (uv's, unless URL is given)
  [[ $# == 0 && ( -n ${UV_FIND_LINKS:-} || -n ${UV_OFFLINE:-} ) ]] && return 0   # a folder of wheels: no probe
  local index=${1:-${UV_INDEX_URL:-https://pypi.org/simple}}
  "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1].rstrip("/") + "/uv/", timeout=10)' \
      "$index" && return 0
  echo "the package index $index is unreachable: this step installs from it (set UV_INDEX_URL and PIP_INDEX_URL," \
       "or UV_FIND_LINKS with UV_OFFLINE=1, for a mirror or a folder of wheels)"
  return 1
}

# ---- the steps ----------------------------------------------------------------------------------------------------

s_gpu() {
  local free_gb query name driver glibc
  free_gb=$(df -Pk "$ROOT" | awk 'NR == 2 {print int($4 / 1048576)}')
  glibc=$(getconf GNU_LIBC_VERSION | awk '{print $2}')
  echo "free disk under $ROOT: ${free_gb} GB; glibc $glibc"
  if [[ $(printf '%s\n' "$MIN_GLIBC" "$glibc" | sort -V | head -n 1) != "$MIN_GLIBC" ]]; then
    echo "glibc $glibc is older than $MIN_GLIBC: the locked engine wheels (llguidance, runai-model-streamer) need it"
    return 1
  fi
  if ! command -v nvidia-smi > /dev/null; then
    if [[ $DRY == 1 ]]; then touch "$LOGS/$STEP.dry"; figure "no nvidia-smi here; ${free_gb} GB disk free"; return 0; fi
    echo "no nvidia-smi: this host has no NVIDIA GPU (or no driver)"
    return 1
  fi
  nvidia-smi
  query=$(nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader | head -n 1)
  name=${query%%,*}
  driver=$(echo "$query" | cut -d, -f2 | tr -d ' ')
  figure "$query (GPU 0 of $(nvidia-smi -L | wc -l)); ${free_gb} GB disk free"
  if (( ${driver%%.*} < MIN_DRIVER )); then
    echo "driver $driver on $name is older than R$MIN_DRIVER, which the CUDA 13.0 wheels (torch 2.13.0) need"
    return 1
  fi
  if (( free_gb < MIN_DISK_GB )); then echo "only ${free_gb} GB free; the engines need about $MIN_DISK_GB GB"; return 1; fi
}

s_uv() {
  if [[ -x $UV ]] && [[ $("$UV" --version) == "uv $UV_VERSION"* ]]; then figure "$("$UV" --version) (present)"; return 0; fi
  if [[ $DRY == 1 ]]; then dry "$PYTHON -m pip install --target $WORKSPACE/uv uv==$UV_VERSION"; return 0; fi
  index_reachable "${PIP_INDEX_URL:-https://pypi.org/simple}"
  "$PYTHON" -m pip install --quiet --disable-pip-version-check --target "$ROOT/$WORKSPACE/uv" "uv==$UV_VERSION"
  figure "$("$UV" --version)"
}

engines_figure() {
  local versions
  versions=$("$GPU_VENV/bin/python" -c 'import importlib.metadata as m
print(", ".join(f"{d} {m.version(d)}" for d in ("vllm", "ai-dynamo", "nixl-cu13", "torch", "flashinfer-python")))')
  figure "$versions; $(du -sh "$GPU_VENV/" | cut -f1)$1"
}

s_install_engines() {
  local lock=$HERE/engines.lock.txt stamp
  stamp=$GPU_VENV/.installed-$(sha256sum "$lock" | cut -c1-12)
  if [[ -f $stamp ]]; then engines_figure " (present)"; return 0; fi
  if [[ $DRY == 1 ]]; then
    dry "uv venv --python $PYTHON $GPU_VENV && uv pip install --python $GPU_VENV/bin/python --no-deps -r $lock"
    return 0
  fi
  index_reachable
  [[ -x $GPU_VENV/bin/python ]] || "$UV" venv --seed --python "$PYTHON" "$GPU_VENV"
  # --no-deps: the lock is the whole resolution (ai-dynamo[vllm]==1.6.1 without the aisimulate stub), nothing to solve
  "$UV" pip install --python "$GPU_VENV/bin/python" --no-deps -r "$lock"
  touch "$stamp"
  engines_figure ""
}

s_install_podium() {
  if [[ -x $PODIUM_VENV/bin/podium ]]; then
    figure "$("$PODIUM_VENV/bin/python" -c 'import importlib.metadata as m; print("podium", m.version("podium"))') in $PODIUM_VENV (present, reused)"
    return 0
  fi
  if [[ $DRY == 1 ]]; then dry "uv venv --seed $PODIUM_VENV && uv pip install -e '.[smoke]'"; return 0; fi
  index_reachable
  "$UV" venv --seed --python "$PYTHON" "$PODIUM_VENV"
  "$UV" pip install --python "$PODIUM_VENV/bin/python" -e '.[smoke]'
  figure "$("$PODIUM_VENV/bin/python" -c 'import importlib.metadata as m
print(", ".join(f"{d} {m.version(d)}" for d in ("podium", "prefect", "mlcommons-loadgen", "torch")))')"
}

s_assets() {
  local model=$WORKSPACE/store/models/tiny-llama
  "$PODIUM_VENV/bin/podium" dev smoke-assets --workspace "$WORKSPACE"
  figure "tiny-llama model.safetensors sha256 $(sha256sum "$model/model.safetensors" | cut -c1-16); smoke data set" \
         "$(find "$WORKSPACE/store/datasets/smoke" -name '*.parquet' -printf '%f ')"
}

s_plans() {
  local leg
  for leg in vllm dynamo; do
    PATH=$ENGINE_PATH "$PODIUM_VENV/bin/podium" launch "$HERE/$leg.yaml" --dry-run --workspace "$RUN_WS" \
      | tee "$LOGS/dryrun-$leg.txt"
    PATH=$ENGINE_PATH "$PODIUM_VENV/bin/podium" launch "$HERE/$leg.yaml" --dry-run --json --workspace "$RUN_WS" \
      > "$LOGS/dryrun-$leg.json"
  done
  figure "$("$PYTHON" -c 'import json, sys
out = []
for path in sys.argv[1:]:
    for review in json.load(open(path)):
        procs = ", ".join(p["name"] + " GPU " + p["env"].get("CUDA_VISIBLE_DEVICES", "-") for p in review["processes"])
        out.append(review["engine"] + " " + review["version"] + ": " + procs)
print("; ".join(out))' "$LOGS/dryrun-vllm.json" "$LOGS/dryrun-dynamo.json")"
}

s_argv() {
  local extra=()
  if [[ ! -x $GPU_VENV/bin/python ]]; then
    if [[ $DRY == 1 ]]; then dry "$GPU_VENV/bin/python $HERE/check_argv.py (no $GPU_VENV here)"; return 0; fi
    echo "no $GPU_VENV"
    return 1
  fi
  if command -v nvidia-smi > /dev/null && [[ $DRY == 0 ]]; then
    extra=(--engine-config)             # on the GPU vLLM resolves its whole engine config too
  else
    export VLLM_TARGET_DEVICE=cpu       # the CUDA build of vLLM picks no platform without a GPU
  fi
  "$GPU_VENV/bin/python" "$HERE/check_argv.py" "$LOGS/dryrun-vllm.json" "$LOGS/dryrun-dynamo.json" "${extra[@]}" \
    | tee "$LOGS/argv.txt"
  figure "$(grep -c '^ok ' "$LOGS/argv.txt") engine command(s) accepted by their own parsers$([[ ${#extra[@]} -gt 0 ]] \
    && echo ', vLLM engine configs resolved')"
}

s_leg() {   # run by s_vllm and s_dynamo
  local leg=$STEP
  if [[ $DRY == 1 ]]; then
    dry "PATH=$PODIUM_VENV/bin:$GPU_VENV/bin:\$PATH $PODIUM_VENV/bin/podium run $HERE/$leg.yaml --workspace $RUN_WS"
    return 0
  fi
  readlink -f "$RUN_WS/runs/latest" > "$LOGS/$leg.before" 2>/dev/null || true
  PATH=$ENGINE_PATH "$PODIUM_VENV/bin/podium" run "$HERE/$leg.yaml" --workspace "$RUN_WS"
}

after_leg() {   # what a leg (finished or killed) left: its engines ended, its run folder's figures and reports copied
  local leg=$STEP run before dest=$LOGS/$STEP f
  [[ $DRY == 1 ]] && return 0
  # a killed `podium run` leaves its engines (their pid files) and its S3 server (its server.json): Podium's own
  # helpers end exactly those, checking each recorded pid is still the process it started
  "$PODIUM_VENV/bin/python" -c 'import json, logging, sys
from pathlib import Path
from tasks import s3server
from tasks.launchers.local import reap_stale
logging.basicConfig(level=logging.INFO)
ws = Path(sys.argv[1])
print("ended", reap_stale(ws / "pids", logging.getLogger("gpu-acceptance")), "engine process group(s) left")
record = ws / "s3" / s3server.SERVER_FILE
pid = json.loads(record.read_text()).get("pid") if record.is_file() else None
if isinstance(pid, int):
    s3server.stop(s3server.S3Server(endpoint_url="", credentials=None, data_dir=(ws / "s3").resolve(), pid=pid),
                  grace_s=3)' "$RUN_WS"
  command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=memory.used --format=csv,noheader
  before=$(cat "$LOGS/$leg.before" 2>/dev/null)
  run=$(readlink -f "$RUN_WS/runs/latest" 2>/dev/null) || true
  if [[ -z $run || $run == "$before" || ! -d $run ]]; then echo "$leg: podium made no run folder"; return 0; fi
  echo "run folder: $run" | tee "$LOGS/$leg.run"
  mkdir -p "$dest"
  for f in report.md results.json summary.csv gates.json validation.json; do
    if [[ -f $run/$f ]]; then cp "$run/$f" "$dest/"; fi
  done
  # engine logs and loadgen summaries, each cut to its last 2 MB (the device tool brings back 16 MiB a file)
  (cd "$run" && find logs -type f \( -path 'logs/engine/*' -o -name 'mlperf_log_summary.txt' \)) | while read -r f; do
    mkdir -p "$dest/$(dirname "$f")"
    tail -c 2000000 "$run/$f" > "$dest/$f"
  done
  if [[ -f $run/results.json ]]; then
    "$PYTHON" "$ROOT/$HERE/report.py" leg "$run" "$LOGS/$leg.rows.json" > "$LOGS/$leg.figure"
  fi
}

export -f figure dry index_reachable engines_figure s_gpu s_uv s_install_engines s_install_podium s_assets s_plans \
  s_argv s_leg after_leg

# ---- the run ----------------------------------------------------------------------------------------------------

echo "GPU acceptance$([[ $DRY == 1 ]] && echo ' (dry run: no installs, no launches)'); everything goes to $RESULTS"
step 1 gpu s_gpu
need_uv() { [[ ! -f $GPU_VENV/.installed-$(sha256sum "$HERE/engines.lock.txt" | cut -c1-12) || ! -x $PODIUM_VENV/bin/podium ]]; }
if need_uv; then step 2 uv s_uv; else record 2 uv PASS 0 "${LIMIT[uv]}" "not needed: both virtualenvs present" ""; fi

if passed uv || [[ $(status_of uv) == DRY ]]; then
  echo "== install-engines runs in the background, beside ${BESIDE_ENGINES[*]}"
  step 3 install-engines s_install_engines &
  engines=$!
else
  skip 3 install-engines "uv did not install"
  engines=
fi
if passed uv || [[ $(status_of uv) == DRY ]] || [[ -x $PODIUM_VENV/bin/podium ]]; then
  step 4 install-podium s_install_podium
else
  skip 4 install-podium "uv did not install"
fi
if passed install-podium; then step 5 assets s_assets; else skip 5 assets "Podium is not installed"; fi
if passed install-podium; then step 6 plans s_plans; else skip 6 plans "Podium is not installed"; fi
[[ -n $engines ]] && wait "$engines"

if [[ $(status_of plans) != PASS ]]; then skip 7 argv "no reviews (step plans)"
elif [[ $(status_of install-engines) == PASS || $(status_of install-engines) == DRY ]]; then step 7 argv s_argv
else skip 7 argv "the engines are not installed"; fi

leg_step() {   # leg_step ORDER NAME: `podium run deployments/gpu/NAME.yaml` as a step, when what it needs is there
  if [[ $DRY == 1 ]]; then step "$1" "$2" s_leg after_leg
  elif ! passed gpu; then skip "$1" "$2" "no usable GPU (step gpu)"
  elif ! passed install-engines; then skip "$1" "$2" "the engines are not installed"
  elif ! passed assets; then skip "$1" "$2" "no smoke model (step assets)"
  else step "$1" "$2" s_leg after_leg; fi
}
leg_step 8 vllm
leg_step 9 dynamo   # runs whatever became of the vLLM leg: one failing step still reports the others

echo
"$PYTHON" "$HERE/report.py" table "$RESULTS" "$(( $(date +%s) - T0 ))"
verdict=$?
if [[ -n ${OUT:-} && $RESULTS == "$OUT" ]]; then   # the device tool brings back 8 files: the logs as one
  tar -czf "$RESULTS/logs.tar.gz" -C "$RESULTS" logs && rm -rf "$RESULTS/logs"
fi
echo "everything is under $RESULTS"
exit $verdict
