#!/usr/bin/env bash
# Token acquisition rates and lease-loss reaction time, on a fresh fencefs mount and a local
# single-node etcd (both in a temp dir, always torn down). Called by scripts/bench.sh per round;
# prints "KEY VALUE" lines:
#   acquire_per_s     `fencectl run --acquire -- true`, serially (one durable record each)
#   etcd_per_s        `fencectl run --etcd … --lock … -- true`: lease grant, lock, counter read,
#                     counter txn, acquire ioctl, lease revoke (5 etcd round trips + 1 ioctl)
#   lease_loss_s      from the lease's revocation in etcd (an expiry, as etcd sees it) to the
#                     job's process group gone (TTL 3 s: keepalive every second)
# Usage: scripts/bench_tokens.sh FENCEFS FENCECTL N
set -euo pipefail
FENCEFS=$1 FENCECTL=$2 N=${3:-200}
D=$(mktemp -d /tmp/fencefs-bench-tokens.XXXXXX)
ETCD_PID="" FF_PID=""
cleanup() {
  # etcd exits 143 on SIGTERM: under set -e a bare failing wait would end the cleanup here.
  if [ -n "$ETCD_PID" ] && kill "$ETCD_PID" 2>/dev/null; then wait "$ETCD_PID" 2>/dev/null || true; fi
  grep -q " $D/mnt " /proc/mounts && fusermount3 -u "$D/mnt"
  if [ -n "$FF_PID" ]; then wait "$FF_PID" 2>/dev/null || true; fi
  rm -rf "$D"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
CP=$(port) PP=$(port)
etcd --name b --data-dir "$D/etcd" --listen-client-urls "http://127.0.0.1:$CP" \
  --advertise-client-urls "http://127.0.0.1:$CP" --listen-peer-urls "http://127.0.0.1:$PP" \
  --initial-advertise-peer-urls "http://127.0.0.1:$PP" --initial-cluster "b=http://127.0.0.1:$PP" \
  --log-level warn >"$D/etcd.log" 2>&1 &
ETCD_PID=$!
E=127.0.0.1:$CP
ctl() { ETCDCTL_API=3 etcdctl --endpoints="$E" "$@"; }
for _ in $(seq 100); do ctl endpoint health >/dev/null 2>&1 && break; sleep 0.1; done
mkdir -p "$D/data" "$D/mnt"
"$FENCEFS" -f "$D/data" "$D/mnt" 2>"$D/fencefs.log" &
FF_PID=$!
for _ in $(seq 100); do grep -q " $D/mnt " /proc/mounts && break; sleep 0.05; done
M=$D/mnt
mkdir "$D/data/a" "$D/data/e" "$D/data/l"
for d in a e l; do "$FENCECTL" domain add "$M/$d" >/dev/null; done
now() { date +%s.%N; }

t0=$(now)
for ((i = 0; i < N; i++)); do "$FENCECTL" run --mount "$M" --domain /a --acquire -- true; done
t1=$(now)
awk -v n="$N" -v a="$t0" -v b="$t1" 'BEGIN { printf "acquire_per_s %.1f\n", n / (b - a) }'

t0=$(now)
for ((i = 0; i < N; i++)); do "$FENCECTL" run --mount "$M" --domain /e --etcd "$E" --lock b -- true; done
t1=$(now)
awk -v n="$N" -v a="$t0" -v b="$t1" 'BEGIN { printf "etcd_per_s %.1f\n", n / (b - a) }'

"$FENCECTL" run --mount "$M" --domain /l --etcd "$E" --lock loss --ttl 3 --grace 5 -- \
  sh -c "echo \$\$ > $D/job; exec sleep 600" 2>/dev/null &
RUNNER=$!
for _ in $(seq 200); do [ -s "$D/job" ] && break; sleep 0.02; done
job=$(cat "$D/job")
lease=$(ctl lease list | awk 'NR > 1 { print $1 }' | head -1)
t0=$(now)
ctl lease revoke "$lease" >/dev/null
while kill -0 -- "-$job" 2>/dev/null; do sleep 0.005; done
t1=$(now)
wait "$RUNNER" || true
awk -v a="$t0" -v b="$t1" 'BEGIN { printf "lease_loss_s %.3f\n", b - a }'
