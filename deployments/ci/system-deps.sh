#!/usr/bin/env bash
# Debian packages the tests need, installed on a fresh machine by `make system-deps` (which `make test` runs).
# One package per line in PACKAGES; each is installed only when missing, so re-runs are quick and offline-safe.
#   faketime: the checker corpus (tests/unit/test_checker_corpus.py) runs the real loadgen under an accelerated
#             clock (libfaketime), so a 600 s closed-division run takes seconds.
set -euo pipefail

PACKAGES=(
  faketime
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
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
