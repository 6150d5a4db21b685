#!/usr/bin/env bash
# Debian packages the tests need, installed on a fresh machine by `make system-deps` (which `make test` runs).
# One package per line in PACKAGES; each is installed only when missing, so re-runs are quick and offline-safe.
#   faketime: the checker corpus (tests/unit/test_checker_corpus.py) runs the real loadgen under an accelerated
#             clock (libfaketime), so a 600 s closed-division run takes seconds.
#   etcd-server: Dynamo's multi-node discovery (`discovery: etcd`); the netns Slurm test
#             (tests/integration/test_slurm_netns.py) runs etcd as a step on the frontend's node (bookworm: 3.4.23).
#             Its package scripts would start a system-wide etcd; the test runs its own, so none starts here.
#   ShellCheck (package shellcheck): every shell script under deployments/ passes it
#             (tests/unit/test_gpu_acceptance.py).
set -euo pipefail

PACKAGES=(
  faketime
  etcd-server
  shellcheck
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d exit 101: package scripts start no service (etcd-server would start one on 127.0.0.1:2379)
POLICY=/usr/sbin/policy-rc.d
if [ ! -e "$POLICY" ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
  $SUDO chmod 755 "$POLICY"
  trap '$SUDO rm -f "$POLICY"' EXIT
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
