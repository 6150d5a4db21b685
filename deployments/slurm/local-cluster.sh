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
#   local-cluster.sh run CMD.. up, CMD (with SLURM_CONF set), down; exits with CMD's status. With PODIUM_SLURM_NETNS=1
#                              all of it runs in network, mount, UTS and PID namespaces of its own, made here
#
# PODIUM_SLURM_NETNS=1: nodes as on a real cluster. Each slurmd runs in a network, mount and UTS namespace of its own
# (host name nodeX, its own IPv4 on a bridge), the controller ("head", $SUBNET.1) and the client commands on the
# bridge itself; a hosts file naming them is bind-mounted over /etc/hosts in every mount namespace, and slurm.conf
# says NodeAddr=nodeX. Only under `run`, which makes network, mount, UTS and PID namespaces for all of it first (the
# bridge, the mount over /etc/hosts and the host name `head` live there, and no process outlives it); `run bash`
# gives a shell on the cluster.
#
# Settings (environment): PODIUM_SLURM_DIR (default <repo>/.podium/slurm), PODIUM_SLURM_NODES (4),
# PODIUM_SLURM_CPUS (CPUs each node advertises, 4), PODIUM_SLURM_GPUS (GPUs each node advertises, 4; 0 for none),
# PODIUM_SLURM_NETNS (0; 1: a namespace per node), PODIUM_SLURM_SUBNET (the bridge's /24 in netns mode, 10.77.0).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
DIR=$(realpath -m "${PODIUM_SLURM_DIR:-$REPO/.podium/slurm}")
NODES=${PODIUM_SLURM_NODES:-4}
CPUS=${PODIUM_SLURM_CPUS:-4}
GPUS=${PODIUM_SLURM_GPUS:-4}
NETNS=${PODIUM_SLURM_NETNS:-0}
SUBNET=${PODIUM_SLURM_SUBNET:-10.77.0}
BRIDGE=podium0
# netns mode: Slurm's own ports, the same on every node (each node has its own address)
CTLD_PORT=6817
SLURMD_PORT=6818
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
node_ip() { echo "$SUBNET.$((10 + $1))"; }   # node_ip 3 -> 10.77.0.13; the head is $SUBNET.1

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
    local ports ctld i lines="" node port gres="" host comm
    if [ "$NETNS" = 1 ]; then
        ctld=$CTLD_PORT host=head
        # each daemon is alone in its node's namespace: binding 0.0.0.0 there reaches that node only, as on a cluster
        comm="# netns mode: every daemon binds 0.0.0.0 of its own node's network namespace (Slurm's default)"
    else
        read -r -a ports <<<"$(free_ports $((NODES + 1)))"
        ctld=${ports[0]} host="localhost(127.0.0.1)"
        comm="# bind to the address each daemon's host name resolves to (127.0.0.1) instead of 0.0.0.0: slurmctld, slurmd, srun\nCommunicationParameters=NoInAddrAny,NoCtldInAddrAny"
    fi
    if [ "$GPUS" -gt 0 ]; then gres=" Gres=gpu:$GPUS"; fi
    for i in $(seq 1 "$NODES"); do
        node=node$i
        if [ "$NETNS" = 1 ]; then
            lines+="NodeName=$node NodeAddr=$node Port=$SLURMD_PORT CPUs=$CPUS${gres} State=UNKNOWN\n"
        else
            port=${ports[$i]}
            lines+="NodeName=$node NodeHostname=localhost NodeAddr=127.0.0.1 Port=$port CPUs=$CPUS${gres} State=UNKNOWN\n"
        fi
    done
    sed -e "s|@DIR@|$DIR|g" -e "s|@SOCKET@|$SOCKET_DIR/munge.socket|g" -e "s|@CTLD_PORT@|$ctld|g" -e "s|@NODES@|$NODES|g" -e "s|@NODE_RANGE@|node[1-$NODES]|g" \
        -e "s|@CTLD_HOST@|$host|" -e "s|@COMM_LINES@|$comm|" \
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

# --- netns mode -----------------------------------------------------------------------------------------------
private_namespaces() {  # this shell is the first process of the namespaces `run` made: nothing of the machine's
    # own is touched. (Network namespace ids are reused as soon as a namespace ends, so they identify nothing later.)
    [ "${PODIUM_SLURM_INSIDE:-}" = 1 ] && [ "$$" = 1 ] || return 1
    # and a network that holds nothing but loopback and what this script made
    ! ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | grep -qvE "^(lo|$BRIDGE|pn[0-9]+)$"
}

network_up() {  # the bridge and the head's address on it, the hosts file over /etc/hosts, host name `head`
    private_namespaces || die "PODIUM_SLURM_NETNS=1 creates a bridge, mounts over /etc/hosts and sets the host name: \
run it with \`$0 run CMD\` (CMD may be a shell), which makes those namespaces"
    local i
    { echo "127.0.0.1 localhost"; echo "$SUBNET.1 head"
      for i in $(seq 1 "$NODES"); do echo "$(node_ip "$i") node$i"; done; } >"$DIR/hosts"
    mount --bind "$DIR/hosts" /etc/hosts
    hostname head
    ip link set lo up
    ip link del "$BRIDGE" 2>/dev/null || true
    ip link add "$BRIDGE" type bridge
    ip addr add "$SUBNET.1/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    readlink /proc/self/ns/net | sed 's/^/head /' >"$DIR/run/netns"
}

node_up() {  # node_up I: node I's own network, mount and UTS namespaces (eth0 on the bridge), then its slurmd there
    local i=$1 name=node$1 holder ns=""
    # the namespaces live as long as a process is in them: this sleep until slurmd (a daemon) runs there
    unshare --net --mount --uts --propagation private -- sleep 120 &
    holder=$!
    for _ in $(seq 1 200); do
        ns=$(readlink "/proc/$holder/ns/net" 2>/dev/null) || true
        [ -n "$ns" ] && [ "$ns" != "$(readlink /proc/self/ns/net)" ] && break
        sleep 0.05
    done
    local in=(nsenter --target "$holder" --net --mount --uts --)
    ip link add "pn$i" type veth peer name eth0 netns "$holder"
    ip link set "pn$i" master "$BRIDGE" up
    "${in[@]}" hostname "$name"
    "${in[@]}" ip link set lo up
    "${in[@]}" ip addr add "$(node_ip "$i")/24" dev eth0
    "${in[@]}" ip link set eth0 up
    "${in[@]}" mount --bind "$DIR/hosts" /etc/hosts
    echo "$name $ns" >>"$DIR/run/netns"
    "${in[@]}" slurmd -f "$CONF" -N "$name" ||
        die "slurmd of $name did not start: $(tail -n 5 "$DIR/log/slurmd-$name.log" 2>/dev/null)"
    kill "$holder" 2>/dev/null || true
    wait "$holder" 2>/dev/null || true
}

leftovers() {  # every live process of this PID namespace but this shell: "pid argv0", with builtins only
    local proc pid stat cmd
    for proc in /proc/[0-9]*; do
        pid=${proc#/proc/}
        [ "$pid" = "$$" ] && continue
        IFS= read -r stat <"$proc/stat" 2>/dev/null || continue
        stat=${stat##*) }
        [ "${stat%% *}" = Z ] && continue   # a zombie is already dead (this shell, init here, reaps it)
        IFS= read -r -d '' cmd <"$proc/cmdline" 2>/dev/null || true
        echo "$pid $cmd"
    done
}

finish() {  # run's end: down; in netns mode, what is still running is reported (and ends with the namespace)
    local rc=$?
    down >&2 || rc=1
    if [ "$NETNS" = 1 ]; then
        local i
        for i in $(seq 1 40); do   # steps' slurmstepd end on their own once their job is gone: up to 10 s
            leftovers >"$DIR/run/left"
            [ -s "$DIR/run/left" ] || break
            sleep 0.25
        done
        if [ -s "$DIR/run/left" ]; then
            say "still running 10 s after down (ended with this namespace): $(tr '\n' ';' <"$DIR/run/left")"
            [ "$rc" != 0 ] || rc=3
        fi
    fi
    exit "$rc"
}

run_cmd() {  # run CMD...: up, CMD, down; CMD's exit status (3: it succeeded but left processes behind)
    [ "$#" -gt 0 ] || die "run: name the command to run on the cluster"
    if [ "$NETNS" = 1 ] && [ "${PODIUM_SLURM_INSIDE:-}" != 1 ]; then
        # a PID namespace too: when this script (its init) exits, the kernel ends whatever is left in it, and
        # --kill-child ends the script if unshare itself is killed; unshare ignores SIGTERM, the script stops the
        # cluster on it
        PODIUM_SLURM_INSIDE=1 exec unshare --net --mount --uts --pid --fork --mount-proc --kill-child \
            --propagation private -- "$0" run "$@"
    fi
    trap finish EXIT
    trap 'exit 143' TERM INT
    up >&2
    local rc=0
    "$@" || rc=$?
    return "$rc"
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
    if [ "$NETNS" = 1 ]; then network_up; fi
    munged --socket="$socket" --key-file="$DIR/munge/munge.key" --pid-file="$DIR/munge/munged.pid" \
        --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed" ||
        die "munged did not start: $(tail -n 3 "$DIR/log/munged.log" 2>/dev/null)"
    write_config
    slurmctld -f "$CONF" || die "slurmctld did not start: $(tail -n 5 "$DIR/log/slurmctld.log" 2>/dev/null)"
    local i
    for i in $(seq 1 "$NODES"); do
        node=node$i
        if [ "$NETNS" = 1 ]; then node_up "$i"; continue; fi
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
    say "up: $NODES nodes ($CPUS CPUs, $GPUS GPUs each) in $DIR$([ "$NETNS" = 1 ] && echo ", each in its own \
network namespace on $SUBNET.0/24")"
    echo "export SLURM_CONF=$CONF"
}

proc_alive() {  # proc_alive PID WORD: PID runs (not a zombie: its command line is empty) and its command line holds WORD
    [ -r "/proc/$1/cmdline" ] && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q -- "$2"
}

stop_pid() {  # stop_pid FILE WORD: TERM the daemon of FILE, KILL it after 10 s; wait until it has exited
    local file=$1 word=$2 pid i
    pid_alive "$file" "$word" || { rm -f "$file"; return 0; }
    pid=$(cat "$file" 2>/dev/null) || return 0
    kill -TERM "$pid" 2>/dev/null || true
    # the pid, not the file: a daemon removes its pid file before it has finished exiting
    for i in $(seq 1 40); do proc_alive "$pid" "$word" || break; sleep 0.25; done
    if proc_alive "$pid" "$word"; then
        kill -KILL "$pid" 2>/dev/null || true
        for i in $(seq 1 20); do proc_alive "$pid" "$word" || break; sleep 0.25; done
    fi
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
    # the nodes' namespaces ended with their slurmd; the bridge goes with this namespace, or now
    if [ "$NETNS" = 1 ] && private_namespaces; then ip link del "$BRIDGE" 2>/dev/null || true; fi
    say "down ($DIR kept: logs in $DIR/log)"
}

case "${1:-}" in
    install) install ;;
    up) up ;;
    down) down ;;
    status) if status; then say "up: export SLURM_CONF=$CONF"; sinfo; else exit 1; fi ;;
    env) echo "export SLURM_CONF=$CONF" ;;
    run) shift; run_cmd "$@" ;;
    *) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 2 ;;
esac
