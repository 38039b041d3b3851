#!/usr/bin/env bash
# Runs the README's etcd example (a paused holder losing its lease) as a new user would paste it,
# on a free port and a private dir instead of 2379 and /tmp/demo, and checks what they see.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
BUILD=${1:-build}
script=$(awk '/^## Getting tokens/{g=1} g&&/^```sh$/{n++; if(n==2){c=1;next}} c&&/^```$/{exit} c{print}' README.md)
[ -n "$script" ] || { echo "no etcd example in README.md"; echo "0 passed, 1 failed"; exit 1; }
D=$(mktemp -d /tmp/fencefs-readme-etcd.XXXXXX)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
CP=$(port) PP=$(port)
script=${script//build\//$BUILD/}
script=${script//\/tmp\/demo/$D}
script=${script//127.0.0.1:2379/127.0.0.1:$CP}
script=${script//etcd --data-dir/etcd --listen-client-urls http://127.0.0.1:$CP --advertise-client-urls http://127.0.0.1:$CP --listen-peer-urls http://127.0.0.1:$PP --initial-advertise-peer-urls http://127.0.0.1:$PP --initial-cluster default=http://127.0.0.1:$PP --data-dir}
SPID=
cleanup() {
  [ -n "$SPID" ] && kill -KILL -- "-$SPID" 2>/dev/null  # the example's process group (etcd too)
  fusermount3 -u -z "$D/mnt" 2>/dev/null
  rm -rf "$D"
}
trap cleanup EXIT
# Its own process group, so that whatever it left running is stopped by id.
setsid bash -c "$script" >"$D/out" 2>&1 &
SPID=$!
for _ in $(seq 1200); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
wait "$SPID" 2>/dev/null
out=$(cat "$D/out")
pass=0 fail=0
check() {
  if grep -qF -- "$1" <<<"$out"; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "etcd example output lacks: $1"; fi
}
check "Stale file handle"
check "A: refused"
check "lease lost"
check "exit 208"
check "B: fresh report"
if grep -q "A: part" <<<"$(cat "$D/mnt/report" 2>/dev/null)"; then fail=$((fail + 1)); echo "A's data landed"; else pass=$((pass + 1)); fi
if grep -q " $D/mnt " /proc/mounts; then fail=$((fail + 1)); echo "still mounted"; else pass=$((pass + 1)); fi
[ $fail -eq 0 ] || printf '%s\n' "$out"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
