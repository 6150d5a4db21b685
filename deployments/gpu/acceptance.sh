#!/usr/bin/env bash
# shellcheck disable=SC2317  # the step functions run through `bash -c` (exported), which shellcheck cannot follow
# GPU acceptance (docs/engines.md "GPU acceptance"): one prepared script for a GPU node, on NVIDIA's platform (CUDA)
# or AMD's (ROCm), chosen by the node's tool (amd-smi and no nvidia-smi: rocm) or by PODIUM_GPU_PLATFORM=cuda|rocm.
# On CUDA, a node with one NVIDIA GPU in one of two settings, chosen by whether a package index answers (or by
# PODIUM_GPU_SETTING=registry|carried):
#
#   registry  the node reaches PyPI or a mirror (a cluster's GPU node at bring-up): vLLM 0.31.0, Dynamo 1.6.1 and
#             NIXL are installed from deployments/gpu/engines.lock.txt, and Podium's smoke scenarios run on vLLM,
#             then on Dynamo with a prefill and a decode worker on the GPU (NIXL)
#   carried   it reaches no index and takes a small carry (a lent GPU machine): the node's own Python and torch,
#             plus the wheels of deployments/gpu/carry.txt carried in deployments/gpu/wheels (`make gpu-carry`
#             fetches them): the smoke engine on the GPU through Podium's harness and the real loadgen, without
#             Prefect (deployments/gpu/smoke_leg.py); the vLLM and Dynamo legs are NOT RUN, and the table says why
#
#   registry: 1 gpu, 2 uv, 3 install-engines (in the background, beside 4 install-podium and 5 plans), then 6 assets
#             beside 7 argv, 8 vllm, 9 dynamo
#   carried:  1 gpu, 2 wheels, 3 assets, 4 review, 5 smoke; 8 vllm and 9 dynamo NOT RUN
#
# On ROCm, an AMD Instinct node (MI355X) before a round, always carried (the engine is the ROCm image's; the lock's
# wheels are CUDA builds): the checks of deployments/gpu/rocm_checks.py, then the carried legs with the smoke model
# on GPU 0 through the image's ROCm torch:
#
#   rocm:     1 gpu (amd-smi lists the GPUs, ROCm >= 7.0), 2 devices (/dev/kfd and the render nodes usable),
#             3 plugin (the node offers amd.com/gpu: PODIUM_GPU_K8S_NODE=<node>, else NOT RUN), 4 engine (the image's
#             Python, PODIUM_GPU_ENGINE_PYTHON, imports ROCm torch and PODIUM_GPU_ENGINE=vllm|sglang), 5 wheels,
#             6 assets, 7 review, 8 smoke; vllm and dynamo NOT RUN
#
# then one table (step, status, seconds, limit, key figures: tokens/s, VALID/INVALID, latencies, accuracy), and
# everything under one folder: $OUT when it is set (the device tool brings back what is written there; the logs come
# as logs.tar.gz), else .podium/gpu-acceptance/<UTC time>/.
#
#   deployments/gpu/acceptance.sh             the real thing
#   deployments/gpu/acceptance.sh --dry-run   no installs and no GPU: checks the plans, says what every other step
#                                             would run (on ROCm: what each check would check, where this host
#                                             cannot pass it), rehearses a leg killed mid-run and its clean-up
#
# Each step runs under its own `timeout`, and a deadline (PODIUM_GPU_DEADLINE_S, 570 s) caps every limit, so the
# script ends within 10 minutes and a failed step still leaves the others' rows in the table. After every leg,
# finished or killed, its engines and S3 server are ended (tasks/ops/cleanup.py). A step that needs a failed one is
# SKIPped with the reason. Exit 0 only when every step of the setting passed. A mirror instead of PyPI: UV_INDEX_URL
# (or UV_FIND_LINKS with UV_OFFLINE=1 for a folder of wheels) and PIP_INDEX_URL (for uv itself).
set -uo pipefail

usage() { awk 'NR > 2 && /^#/ {sub(/^# ?/, ""); print; next} NR > 2 {exit}' "${BASH_SOURCE[0]}"; }

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
PYTHON=${PODIUM_GPU_PYTHON:-python3}   # 3.11 or newer: registry, it makes both virtualenvs; carried, it runs Podium
GPU_VENV=.venv-gpu                     # deployments/gpu/dynamo.yaml names .venv-gpu/bin/python
PODIUM_VENV=.venv
WORKSPACE=.podium                      # the plans read the smoke assets from .podium/store
WHEELS=${PODIUM_GPU_WHEELS:-$HERE/wheels}   # carried: the wheels of carry.txt, as `make gpu-carry` fetches them
SITE=$ROOT/$WORKSPACE/gpu-site         # carried: where they are installed (pip --target), first on PYTHONPATH
UV_VERSION=0.13.9
MIN_PYTHON=3.11      # pyproject's requires-python; the lock resolves for 3.11 and newer
MIN_DRIVER=580       # torch 2.13.0 (vLLM 0.31.0's pin) is built for CUDA 13.0 on PyPI, which needs driver R580+
MIN_DISK_GB=30       # .venv-gpu is about 9 GB, the uv cache as much again (hard-linked where it can be)
MIN_GLIBC=2.34       # the newest manylinux tag among the locked wheels (every one has a wheel: nothing is built)
ENGINE=${PODIUM_GPU_ENGINE:-vllm}                # rocm: the engine the ROCm image must hold (vllm or sglang)
ENGINE_PYTHON=${PODIUM_GPU_ENGINE_PYTHON:-$PYTHON}   # rocm: the Python of the engine's ROCm image or wheels
K8S_NODE=${PODIUM_GPU_K8S_NODE:-}                # rocm on Kubernetes: this node's name, for the device plugin check

# Step limits in seconds; the longest path of each setting, with what may follow the last step (STEP_RESERVE_S),
# fits the deadline, and the table comes after it (tests/unit/test_gpu_acceptance.py checks the sums).
# registry: install-podium and plans run beside install-engines, argv beside assets:
#   gpu + uv + install-engines + max(assets, argv) + vllm + dynamo = 535 s
# carried: gpu + wheels + assets + review + smoke = 255 s; rehearsal: the dry run's leg, killed MID_RUN_S after its
# engine is on record (its limit bounds the wait for that)
# rocm: gpu + devices + plugin + engine + wheels + assets + review + smoke = 345 s
declare -A LIMIT=([gpu]=15 [uv]=20 [install-engines]=150 [install-podium]=80 [plans]=30 [assets]=40 [argv]=40
                  [vllm]=150 [dynamo]=160 [wheels]=30 [review]=20 [smoke]=150 [rehearsal]=120 [devices]=10
                  [plugin]=20 [engine]=60)
BESIDE_ENGINES=(install-podium plans)
BESIDE_ASSETS=(argv)
DEADLINE_S=${PODIUM_GPU_DEADLINE_S:-570}
KILL_AFTER_S=10      # KILL this long after a step's TERM, if it is still running
GRACE_S=5            # then TERM what is left of its process group, and KILL it after this long
AFTER_S=20           # a leg's after_leg: engines and S3 server ended, figures and reports copied
STEP_RESERVE_S=$(( KILL_AFTER_S + GRACE_S + AFTER_S ))
MID_RUN_S=3          # the rehearsal is KILLed this long after its first engine is on record (pids/ of its workspace)

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RESULTS=${PODIUM_GPU_RESULTS:-${OUT:-$ROOT/$WORKSPACE/gpu-acceptance/$STAMP}}
# The legs' own workspace, new each time: Podium caches every finished loadgen run by its content, so a re-run in one
# workspace would measure nothing again. The smoke assets stay in .podium/store, where the plans read them.
RUN_WS=$ROOT/$WORKSPACE/gpu-acceptance/ws-$STAMP
LOGS=$RESULTS/logs
mkdir -p "$LOGS" || exit 2
T0=$(date +%s)
export ROOT HERE PYTHON GPU_VENV PODIUM_VENV WORKSPACE WHEELS SITE RUN_WS UV_VERSION MIN_PYTHON MIN_DRIVER MIN_DISK_GB \
  MIN_GLIBC LOGS DRY ENGINE ENGINE_PYTHON K8S_NODE
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
ready() { [[ $(status_of "$1") == PASS || $(status_of "$1") == DRY ]]; }   # passed, or said what it would run

skip() {   # skip ORDER NAME REASON
  echo "== $2: SKIP ($3)"
  record "$1" "$2" SKIP 0 "${LIMIT[$2]}" "" "$3"
}

not_run() {   # not_run ORDER NAME REASON: a step this setting cannot run (named in the verdict, not a failure)
  echo "== $2: NOT RUN ($3)"
  record "$1" "$2" "NOT RUN" 0 "${LIMIT[$2]}" "" "$3"
}

last_line() { grep -v '^[[:space:]]*$' "$1" 2>/dev/null | tail -n 1 | cut -c1-240; }

# step ORDER NAME FUNCTION [AFTER [EXPECT]]: FUNCTION under `timeout` (the step's limit, or less when the deadline is
# nearer), its output in logs/NAME.log. Whatever of its process group outlives it (a `podium run` still winding down
# after the TERM) is ended by that group's id: TERM, GRACE_S, then KILL. Then AFTER (at most AFTER_S, outside the
# limit, its output in logs/NAME.after.log: what a killed step left is ended too); a failed AFTER fails the step.
# Record PASS, FAIL, TIMEOUT or DRY with the seconds and the figure FUNCTION or AFTER wrote to logs/NAME.figure; the
# note is the step's own last line. EXPECT=timeout: the step is meant to be KILLed mid-run (the rehearsal: MID_RUN_S
# after its first engine is on record, however long the start took, so that nothing of it can stop its own engines),
# and PASSes only then; one still starting at its limit FAILs. Those extras reserve STEP_RESERVE_S of the deadline, so the last step ends by it.
step() {
  local order=$1 name=$2 fn=$3 after=${4:-} expect=${5:-} limit=${LIMIT[$2]} left start rc status note figure group
  local waited after_rc=0 watcher=
  left=$(( DEADLINE_S - ($(date +%s) - T0) - STEP_RESERVE_S ))
  if (( left < 5 )); then
    skip "$order" "$name" "no time left before the ${DEADLINE_S} s deadline"
    return 1
  fi
  (( limit > left )) && limit=$left
  echo "== $name (limit ${limit} s, log $LOGS/$name.log)"
  start=$(date +%s.%N)
  [[ $expect == timeout ]] && touch "$LOGS/$name.start"
  # timeout makes its own process group (its pid) for everything the step starts; engines and the S3 server make
  # their own groups and are ended by `podium run` itself, or by AFTER from their pid files
  # (the rehearsal's timeout sends KILL at once: the worst case, a run that cannot stop its own engines)
  STEP=$name timeout --signal="$([[ $expect == timeout ]] && echo KILL || echo TERM)" --kill-after="$KILL_AFTER_S" \
    "$limit" bash -euo pipefail -c "$fn" > "$LOGS/$name.log" 2>&1 &
  group=$!
  if [[ $expect == timeout ]]; then kill_mid_run "$group" "$name" & watcher=$!; fi
  wait "$group"
  rc=$?
  if [[ -n $watcher ]]; then kill "$watcher" 2> /dev/null; wait "$watcher" 2> /dev/null; fi
  if kill -TERM -- "-$group" 2> /dev/null; then
    for (( waited = 0; waited < GRACE_S; waited++ )); do kill -0 -- "-$group" 2> /dev/null || break; sleep 1; done
    kill -KILL -- "-$group" 2> /dev/null && echo "ended what was left of step $name (process group $group)" \
      >> "$LOGS/$name.log"
  fi
  if [[ -n $after ]]; then
    STEP=$name timeout --kill-after=2 "$AFTER_S" bash -uo pipefail -c "$after" > "$LOGS/$name.after.log" 2>&1
    after_rc=$?
  fi
  case $rc in
    0) status=PASS ;;
    124|137) status=TIMEOUT ;;
    *) status=FAIL ;;
  esac
  [[ $status == PASS && -f $LOGS/$name.dry ]] && status=DRY
  note=$(last_line "$LOGS/$name.log")
  if [[ $expect == timeout ]]; then
    if [[ -f $LOGS/$name.killed ]]; then status=PASS note="killed mid-run; last line: $note"
    elif [[ $status == TIMEOUT ]]; then status=FAIL note="no engine started within ${limit} s; last line: $note"
    else status=FAIL note="meant to be killed mid-run: $note"; fi
  fi
  [[ $status == TIMEOUT ]] && note="killed after ${limit} s; last line: $note"
  if (( after_rc != 0 )); then
    status=FAIL
    note="clean-up: $(last_line "$LOGS/$name.after.log"); step: $note"
  fi
  figure=$(cat "$LOGS/$name.figure" 2>/dev/null)
  record "$order" "$name" "$status" "$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {print b - a}')" "$limit" \
    "$figure" "$note"
  echo "   $name: $status${figure:+: $figure}"
  [[ $status == PASS || $status == DRY ]]
}

kill_mid_run() {   # kill_mid_run GROUP NAME: KILL step NAME's process group MID_RUN_S after an engine record appears
                   # under the run's workspace (pids/<node>/, newer than NAME.start), and leave NAME.killed
  local group=$1 name=$2
  until [[ -n $(find "$RUN_WS/pids" -type f -newer "$LOGS/$name.start" -print -quit 2> /dev/null) ]]; do
    kill -0 "$group" 2> /dev/null || return 0
    sleep 0.5
  done
  sleep "$MID_RUN_S"
  kill -0 "$group" 2> /dev/null || return 0
  touch "$LOGS/$name.killed"
  kill -KILL -- "-$group" 2> /dev/null
}

figure() { printf '%s\n' "$*" > "$LOGS/$STEP.figure"; }
dry() { touch "$LOGS/$STEP.dry"; figure "would run: $*"; echo "dry run; would run: $*"; }

assets_figure() {   # the smoke assets both settings build: the model's hash and the data set's files
  local model=$WORKSPACE/store/models/tiny-llama
  figure "tiny-llama model.safetensors sha256 $(sha256sum "$model/model.safetensors" | cut -c1-16); smoke data set" \
         "$(find "$WORKSPACE/store/datasets/smoke" -name '*.parquet' -printf '%f ')"
}

index_reachable() {   # index_reachable [URL]: the package index answers within 10 s (uv's, unless URL is given)
  [[ $# == 0 && ( -n ${UV_FIND_LINKS:-} || -n ${UV_OFFLINE:-} ) ]] && return 0   # a folder of wheels: no probe
  local index=${1:-${UV_INDEX_URL:-https://pypi.org/simple}}
  "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1].rstrip("/") + "/uv/", timeout=10)' \
      "$index" && return 0
  echo "the package index $index is unreachable: this step installs from it (set UV_INDEX_URL and PIP_INDEX_URL," \
       "or UV_FIND_LINKS with UV_OFFLINE=1, for a mirror or a folder of wheels)"
  return 1
}

# ---- the steps both settings share --------------------------------------------------------------------------------

s_gpu() {
  local free_gb query name driver glibc version
  version=$("$PYTHON" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])') || {
    echo "no Python at $PYTHON (set PODIUM_GPU_PYTHON)"; return 1; }
  if [[ $(printf '%s\n' "$MIN_PYTHON" "$version" | sort -V | head -n 1) != "$MIN_PYTHON" ]]; then
    echo "$PYTHON is Python $version; Podium needs $MIN_PYTHON or newer (set PODIUM_GPU_PYTHON)"
    return 1
  fi
  free_gb=$(df -Pk "$ROOT" | awk 'NR == 2 {print int($4 / 1048576)}')
  glibc=$(getconf GNU_LIBC_VERSION | awk '{print $2}')
  echo "Python $version at $PYTHON; free disk under $ROOT: ${free_gb} GB; glibc $glibc; setting $SETTING"
  if [[ $SETTING == registry && $(printf '%s\n' "$MIN_GLIBC" "$glibc" | sort -V | head -n 1) != "$MIN_GLIBC" ]]; then
    echo "glibc $glibc is older than $MIN_GLIBC: the locked engine wheels (llguidance, runai-model-streamer) need it"
    return 1
  fi
  if ! command -v nvidia-smi > /dev/null; then
    if [[ $DRY == 1 ]]; then
      touch "$LOGS/$STEP.dry"; figure "no nvidia-smi here; Python $version; ${free_gb} GB disk free"; return 0
    fi
    echo "no nvidia-smi: this host has no NVIDIA GPU (or no driver)"
    return 1
  fi
  nvidia-smi
  query=$(nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader | head -n 1)
  name=${query%%,*}
  driver=$(echo "$query" | cut -d, -f2 | tr -d ' ')
  figure "$query (GPU 0 of $(nvidia-smi -L | wc -l)); Python $version; ${free_gb} GB disk free"
  [[ $SETTING == carried ]] && return 0   # the node's own torch brings its CUDA; no wheel here asks for more
  if (( ${driver%%.*} < MIN_DRIVER )); then
    echo "driver $driver on $name is older than R$MIN_DRIVER, which the CUDA 13.0 wheels (torch 2.13.0) need"
    return 1
  fi
  if (( free_gb < MIN_DISK_GB )); then echo "only ${free_gb} GB free; the engines need about $MIN_DISK_GB GB"; return 1; fi
}

after_leg() {   # what a leg (finished or killed) left: its engines and S3 server ended, its figures and reports copied
  local leg=$STEP run before dest=$LOGS/$STEP f
  # Podium's own clean-up ends exactly what the leg's runs recorded (each pid checked to still be the process Podium
  # started); it exits 1, failing the step, when anything is still alive after it
  podium_python -m tasks.ops.cleanup "$RUN_WS" || return 1
  command -v nvidia-smi > /dev/null && echo "GPU memory in use after the clean-up:" \
    "$(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"
  before=$(cat "$LOGS/$leg.before" 2>/dev/null)
  run=$(readlink -f "$RUN_WS/runs/latest" 2>/dev/null) || true
  if [[ -z $run || $run == "$before" || ! -d $run ]]; then echo "$leg: no run folder"; return 0; fi
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

after_rehearsal() {   # the rehearsal's clean-up, and proof that it had something to end
  after_leg || return 1
  local log=$LOGS/$STEP.after.log ended
  ended=$(grep -Eo 'ended [0-9]+ engine process group' "$log" | head -n 1)
  if [[ -z $ended ]]; then echo "the rehearsal was killed before its engine started: nothing was rehearsed"; return 1; fi
  if [[ $SETTING == registry ]] && ! grep -q 'stopped the S3 server' "$log"; then
    echo "the killed podium run left no S3 server to stop: nothing of it was rehearsed"; return 1
  fi
  figure "killed mid-run; the clean-up $ended(s)$([[ $SETTING == registry ]] && echo \
    ' and stopped the S3 server'); nothing left running"
}

# ---- registry: installs from the index, the vLLM and Dynamo legs ---------------------------------------------------

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
    dry "uv venv --allow-existing --python $PYTHON $GPU_VENV && uv pip install --python $GPU_VENV/bin/python" \
        "--no-deps -r $lock"
    return 0
  fi
  index_reachable
  # --allow-existing: a re-run after a partial install goes on where it stopped
  "$UV" venv --allow-existing --seed --python "$PYTHON" "$GPU_VENV"
  # --no-deps: the lock is the whole resolution (ai-dynamo[vllm]==1.6.1 without the aisimulate stub), nothing to solve
  "$UV" pip install --python "$GPU_VENV/bin/python" --no-deps -r "$lock"
  touch "$stamp"
  engines_figure ""
}

podium_present() { "$PODIUM_VENV/bin/python" -c 'import flows.cli, mlperf_loadgen' 2> /dev/null; }

s_install_podium() {
  if podium_present; then
    figure "$("$PODIUM_VENV/bin/python" -c 'import importlib.metadata as m; print("podium", m.version("podium"))') in $PODIUM_VENV (present, reused)"
    return 0
  fi
  # torch left out (--excludes): the assets step links the engines' own torch 2.13.0 from the uv cache once their
  # install has filled it, instead of a second cold download of its 2.8 GiB beside theirs
  local install=(pip install --python "$PODIUM_VENV/bin/python" -e '.[smoke]' --excludes "$HERE/podium-excludes.txt")
  if [[ $DRY == 1 ]]; then dry "uv venv --allow-existing --seed $PODIUM_VENV && uv ${install[*]}"; return 0; fi
  index_reachable
  "$UV" venv --allow-existing --seed --python "$PYTHON" "$PODIUM_VENV"
  "$UV" "${install[@]}"
  figure "$("$PODIUM_VENV/bin/python" -c 'import importlib.metadata as m
print(", ".join(f"{d} {m.version(d)}" for d in ("podium", "prefect", "mlcommons-loadgen", "transformers")))')"
}

s_assets_registry() {
  if ! "$PODIUM_VENV/bin/python" -c 'import torch' 2> /dev/null; then
    if [[ $DRY == 1 ]]; then
      dry "uv pip install -c $HERE/engines.lock.txt torch (into $PODIUM_VENV, from the uv cache) && podium dev" \
          "smoke-assets"
      return 0
    fi
    "$UV" pip install --python "$PODIUM_VENV/bin/python" -c "$HERE/engines.lock.txt" torch
  fi
  "$PODIUM_VENV/bin/podium" dev smoke-assets --workspace "$WORKSPACE"
  assets_figure
}

s_plans() {
  local leg
  for leg in vllm dynamo; do
    PATH=$ENGINE_PATH "$PODIUM_VENV/bin/podium" launch "$HERE/$leg.yaml" --dry-run --workspace "$RUN_WS" \
      | tee "$LOGS/dryrun-$leg.txt"
    PATH=$ENGINE_PATH "$PODIUM_VENV/bin/podium" launch "$HERE/$leg.yaml" --dry-run --json --workspace "$RUN_WS" \
      > "$LOGS/dryrun-$leg.json"
  done
  figure "$(processes_figure "$LOGS/dryrun-vllm.json" "$LOGS/dryrun-dynamo.json")"
}

processes_figure() {   # processes_figure REVIEW.json ...: which process gets which GPU, per reviewed engine
  "$PYTHON" -c 'import json, sys
out = []
for path in sys.argv[1:]:
    for review in json.load(open(path)):
        procs = ", ".join(p["name"] + " GPU " + p["env"].get("CUDA_VISIBLE_DEVICES", "-") for p in review["processes"])
        out.append(review["engine"] + " " + review["version"] + ": " + procs)
print("; ".join(out))' "$@"
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

s_leg() {   # the vllm and dynamo legs, and the registry's rehearsal: `podium run deployments/gpu/<leg>.yaml`
  local leg=$STEP
  if [[ $DRY == 1 && $leg != rehearsal ]]; then
    dry "PATH=$PODIUM_VENV/bin:$GPU_VENV/bin:\$PATH $PODIUM_VENV/bin/podium run $HERE/$leg.yaml --workspace $RUN_WS"
    return 0
  fi
  readlink -f "$RUN_WS/runs/latest" > "$LOGS/$leg.before" 2>/dev/null || true
  PATH=$ENGINE_PATH "$PODIUM_VENV/bin/podium" run "$HERE/$leg.yaml" --workspace "$RUN_WS"
}

# ---- carried: the node's own Python and torch, the carried wheels, the smoke engine on the GPU ----------------------

s_wheels() {
  local count size
  count=$( (find "$WHEELS" -maxdepth 1 -name '*.whl' 2> /dev/null || true) | wc -l)
  if (( count == 0 )); then
    if [[ $DRY == 1 ]]; then
      dry "$PYTHON -m pip install --no-index --no-deps --target $SITE $WHEELS/*.whl, then carry_check.py (no" \
          "wheels here: \`make gpu-carry\` fetches them)"
      return 0
    fi
    echo "no wheels in $WHEELS: run \`make gpu-carry\` where PyPI answers and carry that folder to this node"
    return 1
  fi
  size=$(du -sm "$WHEELS" | cut -f1)
  rm -rf "$SITE"
  "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --no-compile --no-cache-dir \
    --target "$SITE" "$WHEELS"/*.whl || {
    echo "the wheels in $WHEELS do not install on $PYTHON: fetch them for its Python where PyPI answers, e.g." \
         "\`make gpu-carry GPU_PYTHON_VERSION=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')\`"
    return 1; }
  "$PYTHON" "$HERE/carry_check.py" | tee "$LOGS/check.txt"
  figure "$count wheels ($size MB) into $SITE; $(tail -n 1 "$LOGS/check.txt")"
}

s_assets_carried() {
  podium_python "$HERE/smoke_leg.py" assets --workspace "$WORKSPACE"
  assets_figure
}

s_review() {
  podium_python "$HERE/smoke_leg.py" review "$HERE/smoke.yaml" --workspace "$RUN_WS"
  cp "$RUN_WS/smoke-leg-review.json" "$LOGS/dryrun-smoke.json"
  figure "$(processes_figure "$LOGS/dryrun-smoke.json")"
}

s_smoke() {   # the carried leg, and the carried rehearsal: deployments/gpu/smoke_leg.py run <plan>
  local leg=$STEP plan=$HERE/smoke.yaml
  [[ $leg == rehearsal ]] && plan=$HERE/rehearsal.yaml
  if [[ $DRY == 1 && $leg != rehearsal ]]; then
    dry "$PYTHON $HERE/smoke_leg.py run $plan --workspace $RUN_WS (PYTHONPATH=$SITE)"
    return 0
  fi
  readlink -f "$RUN_WS/runs/latest" > "$LOGS/$leg.before" 2>/dev/null || true
  podium_python "$HERE/smoke_leg.py" run "$plan" --workspace "$RUN_WS"
}

# ---- rocm: an AMD node's checks (deployments/gpu/rocm_checks.py), then the carried legs ------------------------------

rocm_check() {   # rocm_check PYTHON CHECK [ARG]: one check as the step; a dry run turns what this host cannot pass
                 # into what the check would check on the node
  local python=$1 out rc
  shift
  # the image's packages, not the carry (PYTHONPATH); under `set -e`, a failed check must still say why
  out=$(env -u PYTHONPATH "$python" "$ROOT/$HERE/rocm_checks.py" "$@" 2>&1) && rc=0 || rc=$?
  echo "$out"
  if (( rc == 0 )); then figure "$(last_line <(echo "$out"))"; return 0; fi
  [[ $DRY == 1 ]] || return 1
  touch "$LOGS/$STEP.dry"
  figure "would check: $("$PYTHON" "$ROOT/$HERE/rocm_checks.py" --what "$1"); here: $(last_line <(echo "$out"))"
}

s_gpu_rocm() { rocm_check "$PYTHON" gpu; }
s_devices() { rocm_check "$PYTHON" devices; }
s_plugin() { rocm_check "$PYTHON" plugin "$K8S_NODE"; }
s_engine() { rocm_check "$ENGINE_PYTHON" engine "$ENGINE"; }

rocm_steps() {   # the ROCm path: the node's checks, then the carried legs (the smoke model on GPU 0, ROCm torch)
  step 1 gpu s_gpu_rocm
  step 2 devices s_devices
  if [[ -n $K8S_NODE ]]; then step 3 plugin s_plugin
  else not_run 3 plugin "not on Kubernetes (PODIUM_GPU_K8S_NODE unset): no device plugin to check"; fi
  step 4 engine s_engine
  step 5 wheels s_wheels
  if ready wheels; then step 6 assets s_assets_carried; else skip 6 assets "the carried wheels are not installed"; fi
  if passed assets; then step 7 review s_review; else skip 7 review "no smoke model (step assets)"; fi
  if [[ $DRY == 1 ]]; then step 8 smoke s_smoke after_leg
  elif ! passed gpu || ! passed devices; then skip 8 smoke "no usable GPU (steps gpu, devices)"
  elif ! passed review; then skip 8 smoke "the plan was not reviewed (step review)"
  else step 8 smoke s_smoke after_leg; fi
  local legs
  legs="rocm: the vLLM and Dynamo legs install CUDA builds (engines.lock.txt); step engine checks the ROCm image's"
  not_run 9 vllm "$legs"
  not_run 9 dynamo "$legs"
  if [[ $DRY == 1 ]]; then
    if passed assets; then step 10 rehearsal s_smoke after_rehearsal timeout
    else skip 10 rehearsal "no smoke data set (step assets)"; fi
  fi
}

export -f figure dry assets_figure index_reachable last_line s_gpu after_leg after_rehearsal s_uv engines_figure \
  s_install_engines podium_present s_install_podium s_assets_registry s_plans processes_figure s_argv s_leg s_wheels \
  s_assets_carried s_review s_smoke rocm_check s_gpu_rocm s_devices s_plugin s_engine

# ---- the run ------------------------------------------------------------------------------------------------------

PLATFORM=${PODIUM_GPU_PLATFORM:-auto}
if [[ $PLATFORM == auto ]]; then
  PLATFORM=cuda
  if command -v amd-smi > /dev/null && ! command -v nvidia-smi > /dev/null; then PLATFORM=rocm; fi
fi
SETTING=${PODIUM_GPU_SETTING:-auto}
WHY="PODIUM_GPU_SETTING=$SETTING"
case $PLATFORM in
  cuda) ;;
  rocm) if [[ $SETTING == registry ]]; then
          echo "PODIUM_GPU_SETTING=registry installs deployments/gpu/engines.lock.txt, CUDA builds; on ROCm the" \
               "engine comes with its ROCm image: leave PODIUM_GPU_SETTING unset" >&2
          exit 2
        fi
        SETTING=carried WHY="rocm: the engine is the ROCm image's" ;;
  *) echo "PODIUM_GPU_PLATFORM=$PLATFORM: use cuda, rocm or auto" >&2; exit 2 ;;
esac
if [[ $SETTING == auto ]]; then
  if index_reachable > "$LOGS/index.log" 2>&1; then SETTING=registry; else SETTING=carried; fi
  WHY=$(last_line "$LOGS/index.log")
  [[ $SETTING == registry ]] && WHY="a package index answers"
fi
case $SETTING in
  registry) podium_python() { "$ROOT/$PODIUM_VENV/bin/python" "$@"; } ;;
  carried)  podium_python() { "$PYTHON" "$@"; }
            export PYTHONPATH=$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH} PATH=$SITE/bin:$PATH ;;
  *) echo "PODIUM_GPU_SETTING=$SETTING: use registry, carried or auto" >&2; exit 2 ;;
esac
export SETTING
export -f podium_python
NO_INDEX="carried setting ($WHY): vLLM 0.31.0, ai-dynamo 1.6.1 and NIXL with their CUDA libraries are about 9 GB, \
far over what a carry holds (64 MiB with the working tree); run the script where PyPI or a mirror answers"

echo "GPU acceptance, $PLATFORM platform, $SETTING setting ($WHY)$([[ $DRY == 1 ]] && echo '; dry run: no' \
     'installs, no GPU');" "everything goes to $RESULTS"

if [[ $PLATFORM == rocm ]]; then
  rocm_steps
elif [[ $SETTING == registry ]]; then
  step 1 gpu s_gpu
  need_uv() { [[ ! -f $GPU_VENV/.installed-$(sha256sum "$HERE/engines.lock.txt" | cut -c1-12) ]] || ! podium_present; }
  if need_uv; then step 2 uv s_uv; else record 2 uv PASS 0 "${LIMIT[uv]}" "not needed: both virtualenvs present" ""; fi
  engines=
  if ready uv; then
    echo "== install-engines runs in the background, beside ${BESIDE_ENGINES[*]}"
    step 3 install-engines s_install_engines &
    engines=$!
  else
    skip 3 install-engines "uv did not install"
  fi
  if ready uv || podium_present; then step 4 install-podium s_install_podium
  else skip 4 install-podium "uv did not install"; fi
  if passed install-podium; then step 5 plans s_plans; else skip 5 plans "Podium is not installed"; fi
  [[ -n $engines ]] && wait "$engines"

  argv=
  if [[ $(status_of plans) != PASS ]]; then skip 7 argv "no reviews (step plans)"
  elif ready install-engines; then
    echo "== ${BESIDE_ASSETS[*]} runs in the background, beside assets"
    step 7 argv s_argv &
    argv=$!
  else skip 7 argv "the engines are not installed"; fi
  if passed install-podium; then step 6 assets s_assets_registry; else skip 6 assets "Podium is not installed"; fi
  [[ -n $argv ]] && wait "$argv"

  leg_step() {   # leg_step ORDER NAME: `podium run deployments/gpu/NAME.yaml` as a step, when what it needs is there
    if [[ $DRY == 1 ]]; then step "$1" "$2" s_leg after_leg
    elif ! passed gpu; then skip "$1" "$2" "no usable GPU (step gpu)"
    elif ! passed install-engines; then skip "$1" "$2" "the engines are not installed"
    elif ! passed assets; then skip "$1" "$2" "no smoke model (step assets)"
    else step "$1" "$2" s_leg after_leg; fi
  }
  leg_step 8 vllm
  leg_step 9 dynamo   # runs whatever became of the vLLM leg: one failing step still reports the others
  if [[ $DRY == 1 ]]; then
    if passed assets; then step 10 rehearsal s_leg after_rehearsal timeout
    else skip 10 rehearsal "no smoke data set (step assets)"; fi
  fi
else
  step 1 gpu s_gpu
  step 2 wheels s_wheels
  if ready wheels; then step 3 assets s_assets_carried; else skip 3 assets "the carried wheels are not installed"; fi
  if passed assets; then step 4 review s_review; else skip 4 review "no smoke model (step assets)"; fi
  if [[ $DRY == 1 ]]; then step 5 smoke s_smoke after_leg
  elif ! passed gpu; then skip 5 smoke "no usable GPU (step gpu)"
  elif ! passed review; then skip 5 smoke "the plan was not reviewed (step review)"
  else step 5 smoke s_smoke after_leg; fi
  not_run 8 vllm "$NO_INDEX"
  not_run 9 dynamo "$NO_INDEX"
  if [[ $DRY == 1 ]]; then
    if passed assets; then step 10 rehearsal s_smoke after_rehearsal timeout
    else skip 10 rehearsal "no smoke data set (step assets)"; fi
  fi
fi

echo
"$PYTHON" "$HERE/report.py" table "$RESULTS" "$(( $(date +%s) - T0 ))" "$SETTING ($WHY), $PLATFORM platform"
verdict=$?
if [[ -n ${OUT:-} && $RESULTS == "$OUT" ]]; then   # the device tool brings back 8 files: the logs as one
  tar -czf "$RESULTS/logs.tar.gz" -C "$RESULTS" logs && rm -rf "$RESULTS/logs"
fi
echo "everything is under $RESULTS"
exit $verdict
