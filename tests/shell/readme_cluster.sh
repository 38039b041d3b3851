#!/usr/bin/env bash
# Runs the README's two-mount cluster walkthrough as a new user would paste it (a real etcd on
# 127.0.0.1:2379), and checks what they see.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
BUILD=${1:-build}
script=$(awk '/^## Several hosts/{w=1} w&&/^```sh$/{c=1;next} c&&/^```$/{exit} c{print}' README.md)
[ -n "$script" ] || { echo "no cluster block in README.md"; echo "0 passed, 1 failed"; exit 1; }
script=${script//build\//$BUILD/}
D=/tmp/cdemo
cleanup() {
  for m in host1 host2; do fusermount3 -u -z $D/$m 2>/dev/null; done
  pkill -f "data-dir $D/etcd" 2>/dev/null
  rm -rf $D
}
cleanup
trap cleanup EXIT
out=$(bash -c "$script" 2>&1)
pass=0 fail=0
check() {
  if grep -qE -- "$1" <<<"$out"; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "walkthrough output lacks: $1"; fi
}
check "domain / advanced to epoch 5"
check "host1 +live .*/=5"
check "host2 +live .*/=5"
check "Stale file handle"
check "^B: fresh$"
check "fence_local_kill|domain / advanced to epoch 7"
check "host2 +live .*/=7"
check "host1.*Transport endpoint is not connected"
if grep -qE "^host1 " <<<"$(tail -n 3 <<<"$out")"; then
  fail=$((fail + 1)); echo "host1 is still a member after the fence"
else pass=$((pass + 1)); fi
for m in host1 host2; do
  if grep -q " $D/$m " /proc/mounts; then fail=$((fail + 1)); echo "$m still mounted"; else pass=$((pass + 1)); fi
done
[ $fail -eq 0 ] || printf '%s\n' "$out"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
