#!/usr/bin/env bash
# Installs what fencefs needs (Debian packages, only when missing) and builds what a user needs
# into build/: fencefs and fencectl (the man pages, unit and completion are installed from the
# tree by `cmake --install build --strip`). scripts/test.sh builds the test suites.
# Usage: scripts/setup.sh [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."

# Build: compiler, libraries. Test: tools the integration tests drive as legacy jobs, promtool
# (prometheus), shellcheck for the scripts. Bench: mergerfs and bindfs, the overlays
# scripts/bench.sh compares against.
PKGS=(
  build-essential cmake pkg-config git
  libfuse3-dev fuse3 libfmt-dev libssl-dev libgtest-dev nlohmann-json3-dev libmount-dev libsystemd-dev
  liburing-dev
  attr rsync sqlite3 lmdb-utils tar fio fiu-utils libfiu-dev e2fsprogs openssl
  clang clang-tidy libclang-rt-14-dev util-linux procps python3
  libcurl4-openssl-dev etcd-server etcd-client
  systemd man-db groff-base jq file shellcheck
  prometheus mergerfs bindfs
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

[ "${1:-}" = "--no-build" ] && exit 0

BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo}
cmake -S . -B build -DCMAKE_BUILD_TYPE="$BUILD_TYPE" >/dev/null
cmake --build build -j"$(nproc)" --target fencefs fencectl
echo "setup: built build/fencefs and build/fencectl"
