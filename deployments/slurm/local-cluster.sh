#!/usr/bin/env bash
# A real Slurm cluster of 4 nodes on this one machine: munged, slurmctld, and one slurmd per node name
# (`slurmd -N nodeX`, each on its own port), all on 127.0.0.1, state and logs under one folder. For the Slurm
# launcher's tests and for trying it by hand. Not for production (docs/slurm.md).
#
#   local-cluster.sh install   install the Debian packages (slurmctld slurmd slurm-client munge) when missing
#   local-cluster.sh up        start the cluster (installs first when missing); prints the SLURM_CONF to use
#   local-cluster.sh down      cancel every job of this cluster, stop its daemons (by their pid files)
#   local-cluster.sh status    exit 0 when every daemon runs and every node answers
#   local-cluster.sh env       print `export SLURM_CONF=...`
#
# Settings (environment): PODIUM_SLURM_DIR (default <repo>/.podium/slurm), PODIUM_SLURM_NODES (4),
# PODIUM_SLURM_CPUS (CPUs each node advertises, 4), PODIUM_SLURM_GPUS (GPUs each node advertises, 4; 0 for none).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
DIR=$(realpath -m "${PODIUM_SLURM_DIR:-$REPO/.podium/slurm}")
NODES=${PODIUM_SLURM_NODES:-4}
CPUS=${PODIUM_SLURM_CPUS:-4}
GPUS=${PODIUM_SLURM_GPUS:-4}
CONF=$DIR/slurm.conf
# munged wants every folder above its socket to be searchable by all; a test's 0700 tmp folder is not, so the
# socket lives in a short folder of its own under /tmp, named after $DIR
SOCKET_DIR=/tmp/podium-munge-$(echo -n "$DIR" | sha256sum | cut -c1-12)
PACKAGES=(slurmctld slurmd slurm-client munge)
BINARIES=(slurmctld slurmd srun salloc scancel squeue sinfo scontrol munged)
READY_S=30

say() { echo "local-cluster: $*" >&2; }
die() { say "error: $*"; exit 1; }

missing() {
    local b
    for b in "${BINARIES[@]}"; do command -v "$b" >/dev/null || [ -x "/usr/sbin/$b" ] || echo "$b"; done
}

install() {
    if [ -z "$(missing)" ]; then return 0; fi
    local sudo=()
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null || die "installing ${PACKAGES[*]} needs root; run this as root or install them"
        sudo=(sudo)
    fi
    say "installing ${PACKAGES[*]} (Debian packages)"
    # The packages' scripts would start the system-wide daemons; this cluster runs its own, so none start now.
    local policy=/usr/sbin/policy-rc.d made_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
        "${sudo[@]}" chmod 755 "$policy"
        made_policy=1
    fi
    local rc=0
    { "${sudo[@]}" apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >/dev/null 2>&1 ||
        { "${sudo[@]}" apt-get update -q >/dev/null &&
          DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends \
              "${PACKAGES[@]}" >/dev/null; }; } || rc=$?
    if [ "$made_policy" = 1 ]; then "${sudo[@]}" rm -f "$policy"; fi
    [ "$rc" = 0 ] || die "apt-get install ${PACKAGES[*]} failed (exit $rc)"
    [ -z "$(missing)" ] || die "still missing after the install: $(missing | tr '\n' ' ')"
}

export PATH="$PATH:/usr/sbin:/sbin"
export SLURM_CONF=$CONF

# pid_alive FILE WORD: the pid in FILE runs and its command line holds WORD (a recycled pid is not ours)
pid_alive() {
    local pid
    pid=$(cat "$1" 2>/dev/null) || return 1   # a daemon removes its pid file as it exits
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$2"
}

node_names() { local i; for i in $(seq 1 "$NODES"); do echo "node$i"; done; }

free_ports() {  # N ports free on 127.0.0.1 now
    python3 - "$1" <<'EOF'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

write_config() {
    local ports ctld i lines="" node port gres=""
    read -r -a ports <<<"$(free_ports $((NODES + 1)))"
    ctld=${ports[0]}
    if [ "$GPUS" -gt 0 ]; then gres=" Gres=gpu:$GPUS"; fi
    for i in $(seq 1 "$NODES"); do
        node=node$i port=${ports[$i]}
        lines+="NodeName=$node NodeHostname=localhost NodeAddr=127.0.0.1 Port=$port CPUs=$CPUS${gres} State=UNKNOWN\n"
    done
    sed -e "s|@DIR@|$DIR|g" -e "s|@SOCKET@|$SOCKET_DIR/munge.socket|g" -e "s|@CTLD_PORT@|$ctld|g" -e "s|@NODES@|$NODES|g" -e "s|@NODE_RANGE@|node[1-$NODES]|g" \
        -e "s|@NODE_LINES@|${lines%\\n}|" "$HERE/slurm.conf.in" >"$CONF.tmp"
    if [ "$GPUS" -gt 0 ]; then
        sed -e "s|@DIR@|$DIR|g" -e "s|@GPUS@|$GPUS|g" -e "s|@LAST_GPU@|$((GPUS - 1))|g" \
            -e "s|@NODE_RANGE@|node[1-$NODES]|g" "$HERE/gres.conf.in" >"$DIR/gres.conf"
        mkdir -p "$DIR/dev"
        for i in $(seq 0 $((GPUS - 1))); do
            [ -c "$DIR/dev/gpu$i" ] || mknod "$DIR/dev/gpu$i" c 1 3
        done
    else
        sed -i '/^GresTypes=/d' "$CONF.tmp"
        : >"$DIR/gres.conf"
    fi
    mv "$CONF.tmp" "$CONF"
}

status() {
    [ -f "$CONF" ] || { say "down (no $CONF)"; return 1; }
    local ok=0 node
    pid_alive "$DIR/munge/munged.pid" munged || { say "munged is not running"; ok=1; }
    pid_alive "$DIR/run/slurmctld.pid" "$CONF" || { say "slurmctld is not running"; ok=1; }
    for node in $(node_names); do
        pid_alive "$DIR/run/slurmd-$node.pid" "$CONF" || { say "slurmd of $node is not running"; ok=1; }
    done
    [ "$ok" = 0 ] || return 1
    local states
    states=$(sinfo --noheader --Node --format='%N %t' 2>/dev/null | sort -u) || { say "slurmctld does not answer"; return 1; }
    if echo "$states" | awk '$2 !~ /^(idle|mix|alloc)$/ {bad=1} END {exit !bad}'; then
        say "not every node is up:"; echo "$states" >&2; return 1
    fi
    return 0
}

up() {
    install
    if status 2>/dev/null; then say "already up: export SLURM_CONF=$CONF"; return 0; fi
    down >/dev/null 2>&1 || true
    local socket=$SOCKET_DIR/munge.socket node
    slurmd -h 2>&1 | grep -q -- '-N node' || die "this slurmd has no -N (one slurmd per node name); see docs/slurm.md"
    rm -rf "$DIR/ctld" "$DIR/spool" "$DIR/run" "$DIR/log"
    mkdir -p "$DIR/munge" "$DIR/ctld" "$DIR/run" "$DIR/log"
    for node in $(node_names); do mkdir -p "$DIR/spool/$node"; done
    mkdir -p "$SOCKET_DIR"
    chmod 755 "$SOCKET_DIR"   # munged wants its socket folder readable by all, writable by its owner only
    chmod 700 "$DIR/munge"
    if [ ! -s "$DIR/munge/munge.key" ]; then
        if command -v mungekey >/dev/null || [ -x /usr/sbin/mungekey ]; then
            mungekey --create --keyfile="$DIR/munge/munge.key"
        else
            dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
        fi
    fi
    chmod 400 "$DIR/munge/munge.key"
    munged --socket="$socket" --key-file="$DIR/munge/munge.key" --pid-file="$DIR/munge/munged.pid" \
        --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed" ||
        die "munged did not start: $(tail -n 3 "$DIR/log/munged.log" 2>/dev/null)"
    write_config
    slurmctld -f "$CONF" || die "slurmctld did not start: $(tail -n 5 "$DIR/log/slurmctld.log" 2>/dev/null)"
    for node in $(node_names); do
        slurmd -f "$CONF" -N "$node" ||
            die "slurmd of $node did not start: $(tail -n 5 "$DIR/log/slurmd-$node.log" 2>/dev/null)"
    done
    local waited=0
    until status 2>/dev/null; do
        sleep 0.5
        waited=$((waited + 1))
        if [ "$waited" -gt $((READY_S * 2)) ]; then
            status || true
            die "the nodes did not come up in ${READY_S} s; logs in $DIR/log"
        fi
    done
    say "up: $NODES nodes ($CPUS CPUs, $GPUS GPUs each) in $DIR"
    echo "export SLURM_CONF=$CONF"
}

stop_pid() {  # stop_pid FILE WORD: TERM the daemon of FILE, KILL it after 10 s
    local file=$1 word=$2 pid i
    pid_alive "$file" "$word" || { rm -f "$file"; return 0; }
    pid=$(cat "$file" 2>/dev/null) || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 40); do pid_alive "$file" "$word" || break; sleep 0.25; done
    if pid_alive "$file" "$word"; then kill -KILL "$pid" 2>/dev/null || true; fi
    rm -f "$file"
}

down() {
    [ -d "$DIR" ] || return 0
    local node i jobs
    if [ -f "$CONF" ] && pid_alive "$DIR/run/slurmctld.pid" "$CONF"; then
        # every job of this private cluster belongs to its tests or its user: cancel them all, by id
        jobs=$(squeue --noheader --format=%i 2>/dev/null || true)
        if [ -n "$jobs" ]; then
            # shellcheck disable=SC2086
            scancel $jobs 2>/dev/null || true
            for i in $(seq 1 60); do
                [ -z "$(squeue --noheader --format=%i 2>/dev/null)" ] && break
                sleep 0.25
            done
        fi
    fi
    for node in $(node_names); do stop_pid "$DIR/run/slurmd-$node.pid" "$CONF"; done
    stop_pid "$DIR/run/slurmctld.pid" "$CONF"
    stop_pid "$DIR/munge/munged.pid" munged
    rm -rf "$SOCKET_DIR"
    say "down ($DIR kept: logs in $DIR/log)"
}

case "${1:-}" in
    install) install ;;
    up) up ;;
    down) down ;;
    status) if status; then say "up: export SLURM_CONF=$CONF"; sinfo; else exit 1; fi ;;
    env) echo "export SLURM_CONF=$CONF" ;;
    *) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 2 ;;
esac
