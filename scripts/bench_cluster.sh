#!/usr/bin/env bash
# Cluster mode: advance latency with 1, 3 and 5 members, and the equal-token write path with
# cluster mode on and off. Members are daemons on one machine over one tmpfs backing, with a
# local single-node etcd (all in a temp dir, always torn down). Called by scripts/bench.sh per
# round; prints "KEY VALUE" lines:
#   adv_mM_p50_ms, adv_mM_p99_ms   one `advance / N` through member 1's ctl, N advances in a row
#                                  (prepare, every member's acknowledgement, commit), M members
#   eq_write_{cluster,plain}_tT    4 KiB pwrites/s by a job bound to the current epoch, on a
#                                  1-member cluster mount and on a plain mount, timeout=T (0, 5)
# Usage: scripts/bench_cluster.sh FENCEFS N_ADVANCES N_WRITES
set -euo pipefail
FENCEFS=$1 N=${2:-300} W=${3:-20000}
D=$(mktemp -d /dev/shm/fencefs-bench-cluster.XXXXXX)
ETCD_PID=
cleanup() {
  for m in "$D"/m*; do grep -q " $m " /proc/mounts && fusermount3 -u "$m"; done
  # etcd exits 143 on SIGTERM: under set -e a bare failing wait would end the cleanup here.
  if [ -n "$ETCD_PID" ] && kill "$ETCD_PID" 2>/dev/null; then wait "$ETCD_PID" 2>/dev/null || true; fi
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
for _ in $(seq 50); do
  ETCDCTL_API=3 etcdctl --endpoints="127.0.0.1:$CP" endpoint health >/dev/null 2>&1 && break
  sleep 0.1
done

mount_member() {  # mount_member NAME CLUSTER|"" [OPTS] -> mounts $D/NAME over $D/data
  mkdir -p "$D/data" "$D/$1"
  local o="state=$D/$1.state${3:+,$3}"
  [ -n "$2" ] && o="$o,cluster=$2,etcd=127.0.0.1:$CP,member=$1"
  "$FENCEFS" "$D/data" "$D/$1" -o "$o" 2>>"$D/fencefs.log"
}
unmount_all() { for m in "$D"/m*; do grep -q " $m " /proc/mounts && fusermount3 -u "$m"; done; sleep 0.2; }

advances() {  # advances MNT FIRST N -> p50 p99 in ms
  python3 - "$1" "$2" "$3" <<'PY'
import os, sys, time
mnt, first, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lat = []
for e in range(first, first + n):
    fd = os.open(mnt + "/.fencefs/ctl", os.O_WRONLY | os.O_TRUNC)
    t = time.perf_counter()
    os.write(fd, b"advance / %d" % e)
    lat.append((time.perf_counter() - t) * 1000)
    os.close(fd)
lat.sort()
print("%.2f %.2f" % (lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))]))
PY
}

writes() {  # writes MNT EPOCH N -> pwrites/s
  python3 - "$1" "$2" "$3" <<'PY'
import os, sys, time
mnt, epoch, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fd = os.open(mnt + "/.fencefs/ctl", os.O_WRONLY | os.O_TRUNC)
os.write(fd, b"bind / %d" % epoch)
os.close(fd)
f = os.open(mnt + "/bench.dat", os.O_WRONLY | os.O_CREAT, 0o644)
buf = b"x" * 4096
t = time.perf_counter()
for i in range(n):
    os.pwrite(f, buf, (i % 256) * 4096)
print("%.0f" % (n / (time.perf_counter() - t)))
PY
}

epoch=1
for m in 1 3 5; do
  rm -rf "$D"/m* "$D"/*.state "$D/data"
  ETCDCTL_API=3 etcdctl --endpoints="127.0.0.1:$CP" del --prefix /fencefs/ >/dev/null
  for i in $(seq "$m"); do mount_member "m$i" "b$m"; done
  read -r p50 p99 < <(advances "$D/m1" "$epoch" "$N")
  echo "adv_m${m}_p50_ms $p50"
  echo "adv_m${m}_p99_ms $p99"
  unmount_all
done

rm -rf "$D"/m* "$D"/*.state "$D/data"
ETCDCTL_API=3 etcdctl --endpoints="127.0.0.1:$CP" del --prefix /fencefs/ >/dev/null
# The same kernel cache setting on both sides (cluster mode defaults to timeout=0): the
# difference left is the fence's own admission path.
for t in 0 5; do
  rm -rf "$D"/m* "$D"/*.state "$D/data"
  ETCDCTL_API=3 etcdctl --endpoints="127.0.0.1:$CP" del --prefix /fencefs/ >/dev/null
  mount_member m1 bw "timeout=$t"
  advances "$D/m1" 1 1 >/dev/null
  echo "eq_write_cluster_t$t $(writes "$D/m1" 1 "$W")"
  unmount_all
  rm -rf "$D"/m* "$D"/*.state "$D/data"
  mount_member m1 "" "timeout=$t"
  advances "$D/m1" 1 1 >/dev/null
  echo "eq_write_plain_t$t $(writes "$D/m1" 1 "$W")"
  unmount_all
done
