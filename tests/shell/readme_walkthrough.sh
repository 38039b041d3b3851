#!/usr/bin/env bash
# Runs the README's walkthrough exactly as a new user would paste it, and checks what they see.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
BUILD=${1:-build}
script=$(awk '/^## Walkthrough/{w=1} w&&/^```sh$/{c=1;next} c&&/^```$/{exit} c{print}' README.md)
[ -n "$script" ] || { echo "no walkthrough block in README.md"; echo "0 passed, 1 failed"; exit 1; }
script=${script//build\//$BUILD/}
cleanup() { fusermount3 -u -z /tmp/demo/mnt 2>/dev/null; rm -rf /tmp/demo; }
cleanup
trap cleanup EXIT
out=$(bash -c "$script" 2>&1)
pass=0 fail=0
check() {
  if grep -qF -- "$1" <<<"$out"; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "walkthrough output lacks: $1"; fi
}
check "Stale file handle"
check "B: fresh report"
check 'user.fencefs.epoch="2"'
check "stale=1"
check "Operation not permitted"
if grep -q " /tmp/demo/mnt " /proc/mounts; then fail=$((fail + 1)); echo "still mounted"; else pass=$((pass + 1)); fi
[ $fail -eq 0 ] || printf '%s\n' "$out"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
