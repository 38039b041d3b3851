#!/usr/bin/env bash
# Benchmarks fencefs against the raw backing directory and the FUSE overlays users pick instead
# (libfuse's passthrough_ll, with and without default_permissions, and passthrough_hp examples,
# mergerfs, bindfs), interleaved (every contender in turn, in an order that changes each round, for
# BENCH_ROUNDS rounds), counts the FUSE requests each daemon is sent per small-file job (kernel
# tracepoint fuse:fuse_request_send), and writes
# bench/results/latest.{md,json} (plus a timestamped copy). Not part of the tests. Runs as root
# (FUSE mounts, tmpfs, tracefs).
#
# Usage: scripts/bench.sh
# Environment (defaults in brackets; BENCH_QUICK=1 makes every size tiny, for a smoke test):
#   BENCH_ROUNDS [5]              rounds of every workload, interleaved across contenders
#   BENCH_QUICK [0]               1 = tiny sizes and short runtimes
#   BENCH_CONTENDERS ["raw passthrough_ll passthrough_ll_dp passthrough_hp mergerfs bindfs fencefs"]
#   BENCH_FIO_SIZE [256M]         fio file size           BENCH_FIO_RUNTIME [5]    seconds per fio job
#   BENCH_LEGACY_FILES [5000]     files per legacy-job run (split over 1 or 4 threads)
#   BENCH_META_FILES [10000]      files for create/stat/list/unlink
#   BENCH_META_LISTINGS [3]       listings of the directory per run (at least)
#   BENCH_META_SECONDS [2]        seconds the stat, list and cold-stat phases each last at least
#                                 (repeated passes; each cold pass after dropping the dentries, 10 at most)
#   BENCH_RSS_INODES [100000]     files looked up through the mount for the RSS rows
#   BENCH_BOUND_PROCS [1000]      live bound processes for the RSS row
#   BENCH_RSS_ROUNDS [1]          rounds of the RSS rows
#   BENCH_ADVANCE_SECONDS [5]     seconds per advances/s measurement
#   BENCH_JOURNAL_RECORDS [1000000]  records in the recovery journal
#   BENCH_TOKEN_RUNS [200]        fencectl runs per token-acquisition measurement
#   BENCH_TMPFS_SIZE [4G]         size of the tmpfs backing the overlay rows
#   BENCH_DISK_DIR [/var/tmp]     where the journal rows put their state (the real disk)
#   BENCH_OUT [bench/results]     report directory
#   BENCH_SKIP_SETUP [0]          1 = do not run scripts/setup.sh (use the existing build/)
#   BENCH_TIMEOUT [600]           seconds before any single workload command is abandoned
#   BENCH_FENCEFS, BENCH_FENCECTL [build/fencefs, build/fencectl]  binaries to benchmark
#   BENCH_FENCEFS_OPTS [auto]     options every fencefs mount here gets; auto: "-o uring" where
#                                 the kernel has FUSE over io_uring (its enable_uring is set to Y
#                                 for the run and put back), else none
#   BENCH_JOURNAL_BENCH [build/bench/journal_bench]  journal helper (built with the library it times)
# The workload programs (bench/*.c, bench/journal_bench.cc) are CMake targets (FENCEFS_BUILD_BENCH)
# built into build/bench/; only libfuse's examples (passthrough_ll, and passthrough_hp where Debian
# ships its source) are compiled here. mergerfs and bindfs are Debian's packages.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

QUICK=${BENCH_QUICK:-0}
q() { if [ "$QUICK" = 1 ]; then echo "$2"; else echo "$1"; fi; }
ROUNDS=${BENCH_ROUNDS:-5}
CONTENDERS=${BENCH_CONTENDERS:-raw passthrough_ll passthrough_ll_dp passthrough_hp mergerfs bindfs fencefs}
FIO_SIZE=${BENCH_FIO_SIZE:-$(q 256M 16M)}
FIO_RUNTIME=${BENCH_FIO_RUNTIME:-$(q 5 1)}
# The random-write job runs a second time held on one CPU (the first this process may use), where
# the scheduler cannot move the writer to another CPU when a reply wakes it.
HELD_CPU=$(awk '/^Cpus_allowed_list:/ { sub(/[-,].*/, "", $2); print $2 }' /proc/$$/status)
[[ $HELD_CPU =~ ^[0-9]+$ ]] || { echo "bench: cannot tell which CPUs this process may use" >&2; exit 1; }
LEGACY_FILES=${BENCH_LEGACY_FILES:-$(q 5000 200)}
META_FILES=${BENCH_META_FILES:-$(q 10000 500)}
META_LISTINGS=${BENCH_META_LISTINGS:-3}
META_SECONDS=${BENCH_META_SECONDS:-$(q 2 0.2)}
[[ $META_SECONDS =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "bench: BENCH_META_SECONDS must be a number of seconds, not $META_SECONDS" >&2; exit 2; }
RSS_INODES=${BENCH_RSS_INODES:-$(q 100000 2000)}
BOUND_PROCS=${BENCH_BOUND_PROCS:-$(q 1000 20)}
RSS_ROUNDS=${BENCH_RSS_ROUNDS:-1}
ADV_SECS=${BENCH_ADVANCE_SECONDS:-$(q 5 1)}
JOURNAL_RECORDS=${BENCH_JOURNAL_RECORDS:-$(q 1000000 10000)}
TOKEN_RUNS=${BENCH_TOKEN_RUNS:-$(q 200 20)}
TMPFS_SIZE=${BENCH_TMPFS_SIZE:-4G}
DISK_DIR=${BENCH_DISK_DIR:-/var/tmp}
OUT=${BENCH_OUT:-bench/results}
TIMEOUT=${BENCH_TIMEOUT:-600}
CLK_TCK=$(getconf CLK_TCK)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)  # the machine may be shared: the report states its load

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
has() { case " $CONTENDERS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

[ "$(id -u)" -eq 0 ] || die "run as root (FUSE mounts with allow_other, tmpfs)"
# Both daemons keep an O_PATH fd per looked-up inode (passthrough_ll does not raise its own limit):
# give every process started here room for the RSS rows' lookups.
NOFILE=$((RSS_INODES + 65536))
[ "$NOFILE" -gt "$(cat /proc/sys/fs/nr_open)" ] && NOFILE=$(cat /proc/sys/fs/nr_open)
if [ "$(ulimit -Hn)" != unlimited ] && [ "$(ulimit -Hn)" -lt "$NOFILE" ]; then ulimit -Hn "$NOFILE" 2>/dev/null || true; fi
if [ "$(ulimit -Sn)" != unlimited ] && [ "$(ulimit -Sn)" -lt "$NOFILE" ]; then ulimit -Sn "$(ulimit -Hn)" 2>/dev/null || true; fi
FD_LIMIT=$(ulimit -Sn)
# Where the fd limit cannot be raised (a container without CAP_SYS_RESOURCE), a daemon that holds an
# fd per inode cannot cache RSS_INODES inodes: then also measure at a count that fits under it.
RSS_SMALL=""
if [ "$FD_LIMIT" != unlimited ] && [ "$FD_LIMIT" -lt "$((RSS_INODES + 4096))" ]; then
  RSS_SMALL=$(((FD_LIMIT - 4096) / 1000 * 1000))
  [ "$RSS_SMALL" -ge 1000 ] || RSS_SMALL=""
fi

# ---------------------------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------------------------
SETUP_NOTE=""
SETUP_STATUS=skipped
if [ "${BENCH_SKIP_SETUP:-0}" != 1 ]; then
  log "scripts/setup.sh"
  SETUP_STATUS=ok
  if ! scripts/setup.sh >&2; then
    SETUP_STATUS="failed (benchmarked the binaries already in build/)"
    SETUP_NOTE="scripts/setup.sh failed"
    log "warning: $SETUP_NOTE; continuing with whatever build/ holds"
  fi
fi
for tool in fio fusermount3 cc pkg-config python3 timeout; do
  command -v "$tool" >/dev/null || die "$tool not found (run scripts/setup.sh)"
done

B=$ROOT/build/bench
mkdir -p "$B/src"
EX=/usr/share/doc/libfuse3-dev/examples
has_example() { [ -f "$EX/$1" ] || [ -f "$EX/$1.gz" ]; }
fetch_example() {  # the examples may be installed gzipped
  if [ -f "$EX/$1" ]; then cp "$EX/$1" "$B/src/$1"
  elif [ -f "$EX/$1.gz" ]; then gzip -dc "$EX/$1.gz" >"$B/src/$1"
  else die "$EX/$1 not found (is libfuse3-dev installed?)"; fi
}
fetch_example passthrough_ll.c
fetch_example passthrough_helpers.h
# shellcheck disable=SC2046
cc -O2 -o "$B/passthrough_ll" "$B/src/passthrough_ll.c" $(pkg-config --cflags --libs fuse3) \
  2>"$B/passthrough_ll.build.log" || die "passthrough_ll did not build: $(tail -5 "$B/passthrough_ll.build.log")"
cmake --build "$ROOT/build" --target bench >"$B/bench.build.log" 2>&1 ||
  log "warning: the bench target did not build: $(grep -m1 -E 'error' "$B/bench.build.log" | cut -c1-160)"
for prog in legacy_job meta advance groups_cost; do
  [ -x "$B/$prog" ] || die "$B/$prog missing (configure build/ with -DFENCEFS_BUILD_BENCH=ON)"
done
PT_BIN=$B/passthrough_ll
# passthrough_hp (C++, needs cxxopts.hpp): only where the installed libfuse3-dev ships its source.
HP_BIN=""
HP_REASON=""
if has passthrough_hp; then
  if ! has_example passthrough_hp.cc; then
    HP_REASON="not built: Debian's libfuse3-dev $(pkg-config --modversion fuse3) ships no passthrough_hp.cc in $EX (only the C examples)"
  else
    fetch_example passthrough_hp.cc
    if has_example cxxopts.hpp; then fetch_example cxxopts.hpp
    elif [ -f /usr/include/cxxopts.hpp ]; then cp /usr/include/cxxopts.hpp "$B/src/"; fi
    # shellcheck disable=SC2046
    if [ ! -f "$B/src/cxxopts.hpp" ]; then
      HP_REASON="not built: cxxopts.hpp is neither in $EX nor in /usr/include (libcxxopts-dev)"
    elif c++ -std=c++17 -O2 -I"$B/src" -o "$B/passthrough_hp" "$B/src/passthrough_hp.cc" \
        $(pkg-config --cflags --libs fuse3) -lpthread 2>"$B/passthrough_hp.build.log"; then
      HP_BIN=$B/passthrough_hp
    else
      HP_REASON="did not build: $(grep -m1 error "$B/passthrough_hp.build.log" | cut -c1-200)"
    fi
  fi
  [ -n "$HP_BIN" ] || log "passthrough_hp: $HP_REASON"
fi
for tool in mergerfs bindfs; do
  if has $tool && ! command -v $tool >/dev/null; then die "$tool not found (run scripts/setup.sh)"; fi
done
FENCEFS=${BENCH_FENCEFS:-$ROOT/build/fencefs}     # override to compare another build (before/after)
FENCECTL=${BENCH_FENCECTL:-$ROOT/build/fencectl}

# The journal helper links the project's journal library (fencefs::journal::StateStore).
JB=${BENCH_JOURNAL_BENCH:-$B/journal_bench}
JB_REASON=""
if [ ! -x "$JB" ]; then
  JB_REASON="$JB not built (see $B/bench.build.log)"
  JB=""
fi
[ -n "$JB" ] || log "journal helper unavailable: $JB_REASON"

# ---------------------------------------------------------------------------------------------
# Work dirs, mounts, cleanup
# ---------------------------------------------------------------------------------------------
W=$(mktemp -d /tmp/fencefs-bench.XXXXXX)
mkdir -p "$DISK_DIR"
J=$(mktemp -d "$DISK_DIR/fencefs-bench.XXXXXX")
T=$W/tmpfs
mkdir -p "$T"
RES=$W/results.tsv   # key  contender  round  value
NOTES=$W/notes.tsv   # key  contender  note
REQ_OPS=$W/req_ops.tsv  # FUSE opcode  contender  requests per small-file job
: >"$RES"; : >"$NOTES"; : >"$REQ_OPS"

MOUNTS=()    # FUSE mountpoints we created
DPIDS=()     # daemons we started
TMPFS=()     # tmpfs mounts we created
SLEEPERS=()  # bound sleep processes we started

is_mounted() { grep -q " $1 " /proc/mounts; }

cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  local p m
  for p in "${SLEEPERS[@]}"; do kill "$p" 2>/dev/null; done
  for m in "${MOUNTS[@]}"; do
    if is_mounted "$m"; then fusermount3 -u "$m" 2>/dev/null || fusermount3 -u -z "$m" 2>/dev/null; fi
  done
  for p in "${DPIDS[@]}"; do
    if kill -0 "$p" 2>/dev/null; then
      kill -TERM "$p" 2>/dev/null
      for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
      kill -KILL "$p" 2>/dev/null
    fi
  done
  for m in "${TMPFS[@]}"; do is_mounted "$m" && umount -l "$m"; done
  if [ -n "${TI:-}" ] && [ -d "$TI" ]; then echo 0 >"$TI/events/enable"; rmdir "$TI"; fi
  if [ -n "${URING_WAS:-}" ]; then echo "$URING_WAS" >"$URING_PARAM"; fi
  # Remove the work dirs only when nothing is mounted below them any more.
  local d
  for d in "$W" "$J"; do
    if [ -n "$d" ] && ! grep -q " $d/" /proc/mounts; then rm -rf "$d"; else log "left $d (still mounted)"; fi
  done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mount -t tmpfs -o size="$TMPFS_SIZE" bench-tmpfs "$T"
TMPFS+=("$T")

# wait_mount MNT PID: 0 when MNT appears, 1 when the daemon exits or 20 s pass.
wait_mount() {
  local m=$1 pid=$2 i
  for ((i = 0; i < 2000; i++)); do
    is_mounted "$m" && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.01
  done
  return 1
}

# start_overlay CONTENDER BACKING MNT: sets DPID. Every daemon in the foreground (DPID is the
# daemon), with its default options except where noted in the report's method section.
start_overlay() {
  local c=$1 b=$2 m=$3 lg=$T/$1.log
  mkdir -p "$m"
  case $c in
    passthrough_ll) "$PT_BIN" -f -o source="$b" "$m" >>"$lg" 2>&1 & ;;
    # The same daemon with the kernel checking mode bits, as fencefs has it (permissions apply).
    passthrough_ll_dp) "$PT_BIN" -f -o source="$b" -o default_permissions "$m" >>"$lg" 2>&1 & ;;
    passthrough_hp) "$HP_BIN" --nocache "$b" "$m" >>"$lg" 2>&1 & ;;
    # minfreespace: mergerfs refuses creates on a branch with less free space (default 4G).
    mergerfs) mergerfs -f -o minfreespace=16M "$b" "$m" >>"$lg" 2>&1 & ;;
    bindfs) bindfs -f "$b" "$m" >>"$lg" 2>&1 & ;;
    *) die "start_overlay: $c" ;;
  esac
  DPID=$!
  DPIDS+=("$DPID"); MOUNTS+=("$m")
  wait_mount "$m" "$DPID" || { log "$c did not mount: $(tail -3 "$lg")"; stop_fs "$m" "$DPID"; return 1; }
}

# fencefs' options for every mount here. The kernel's switch for FUSE over io_uring is global:
# the other daemons never ask for the rings, so it changes nothing for them.
URING_PARAM=/sys/module/fuse/parameters/enable_uring
FF_OPTS=${BENCH_FENCEFS_OPTS-auto}
if [ "$FF_OPTS" = auto ]; then
  FF_OPTS=""
  if [ -w "$URING_PARAM" ]; then
    URING_WAS=$(cat "$URING_PARAM")
    echo Y >"$URING_PARAM"
    FF_OPTS="-o uring"
  fi
fi
read -r -a FF_ARGS <<<"$FF_OPTS"

# start_ff BACKING MNT: sets DPID. Retries with --init when the binary asks for it.
FF_LOG=$T/fencefs.log   # on tmpfs: the daemon's own logging must not wait on the disk
: >"$FF_LOG"
start_ff() {
  local b=$1 m=$2
  mkdir -p "$m"
  local before
  before=$(wc -c <"$FF_LOG")
  "$FENCEFS" -f "${FF_ARGS[@]}" "$b" "$m" >>"$FF_LOG" 2>&1 &
  DPID=$!
  DPIDS+=("$DPID"); MOUNTS+=("$m")
  wait_mount "$m" "$DPID" && return 0
  stop_fs "$m" "$DPID"
  if tail -c +"$((before + 1))" "$FF_LOG" | grep -q -- '--init'; then
    "$FENCEFS" -f --init "${FF_ARGS[@]}" "$b" "$m" >>"$FF_LOG" 2>&1 &
    DPID=$!
    DPIDS+=("$DPID")
    wait_mount "$m" "$DPID" && return 0
    stop_fs "$m" "$DPID"
  fi
  return 1
}

# stop_fs MNT PID: clean unmount, wait for the daemon.
stop_fs() {
  local m=$1 pid=$2 i
  if is_mounted "$m"; then fusermount3 -u "$m" 2>/dev/null || fusermount3 -u -z "$m" || true; fi
  for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null || true
}

daemon_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }  # utime+stime (all threads)
status_kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }

record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$RES"; log "r$3 $1 $2: $4"; }
note() {
  local msg
  msg=$(printf '%s' "$3" | tr '\t\n' '  ' | sed 's/  */ /g; s/ *$//' | cut -c1-300)
  printf '%s\t%s\t%s\n' "$1" "$2" "$msg" >>"$NOTES"
  log "$1 $2: n/a ($msg)"
}
kv() { awk -v k="$1" '$1 == k { print $2 }' "$2"; }  # value of "KEY VALUE" line in a file

# ---------------------------------------------------------------------------------------------
# Contenders
# ---------------------------------------------------------------------------------------------
FF_OK=0
FF_REASON=""
if has fencefs; then
  if [ ! -x "$FENCEFS" ] || [ ! -x "$FENCECTL" ]; then
    FF_REASON="$FENCEFS or $FENCECTL missing${SETUP_NOTE:+ ($SETUP_NOTE)}"
  else
    mkdir -p "$T/ff" "$W/mnt"
    if ! start_ff "$T/ff" "$W/mnt/ff"; then
      FF_REASON="$FENCEFS did not mount: $(tail -2 "$FF_LOG" | tr '\n' ' ')"
    elif ! timeout 30 "$FENCECTL" run --mount "$W/mnt/ff" --domain / --token 1 -- \
        sh -c "mkdir -p '$W/mnt/ff/work' && echo probe > '$W/mnt/ff/work/probe'" 2>"$W/probe.err"; then
      FF_REASON="a bound write through fencefs failed: $(tail -1 "$W/probe.err")"
    else
      FF_OK=1; FF_PID=$DPID; FF_MNT=$W/mnt/ff
    fi
    if [ "$FF_OK" = 0 ] && [ -n "${DPID:-}" ]; then stop_fs "$W/mnt/ff" "$DPID"; fi
  fi
  [ "$FF_OK" = 1 ] || log "fencefs unavailable: $FF_REASON"
fi

ACTIVE=()
declare -A MNT_OF=() PID_OF=() SKIP_REASON=()
for c in $CONTENDERS; do
  case $c in
    raw) mkdir -p "$T/raw/work"; ACTIVE+=(raw) ;;
    passthrough_ll | passthrough_ll_dp | passthrough_hp | mergerfs | bindfs)
      if [ "$c" = passthrough_hp ] && [ -z "$HP_BIN" ]; then SKIP_REASON[$c]=$HP_REASON; continue; fi
      mkdir -p "$T/$c/work"
      start_overlay "$c" "$T/$c" "$W/mnt/$c" || die "$c did not mount"
      PID_OF[$c]=$DPID; MNT_OF[$c]=$W/mnt/$c; ACTIVE+=("$c") ;;
    fencefs) if [ "$FF_OK" = 1 ]; then PID_OF[$c]=$FF_PID; MNT_OF[$c]=$FF_MNT; ACTIVE+=(fencefs); fi ;;
    *) die "unknown contender $c" ;;
  esac
done

workdir() {  # the directory a contender's workloads run in
  if [ "$1" = raw ]; then echo "$T/raw/work"; else echo "${MNT_OF[$1]}/work"; fi
}
daemon_pid() { echo "${PID_OF[$1]:-}"; }

# as CONTENDER CMD...: runs CMD as the contender needs it (fencefs: bound to token 1 for /).
as() {
  local c=$1; shift
  if [ "$c" = fencefs ]; then
    timeout -k 10 "$TIMEOUT" "$FENCECTL" run --mount "$FF_MNT" --domain / --token 1 -- "$@"
  else
    timeout -k 10 "$TIMEOUT" "$@"
  fi
}

OVERLAY_KEYS=(fio_seqwrite_1m fio_randwrite_4k fio_randwrite_4k_held fio_randread_4k coldread_seq reread_1m legacy_t1 legacy_t4
  cpu_legacy_t1 cpu_legacy_t4 meta_create meta_stat meta_stat_cold meta_list meta_unlink
  cpu_fio_seqwrite_1m cpu_fio_randwrite_4k cpu_fio_randwrite_4k_held cpu_fio_randread_4k cpu_coldread_seq cpu_meta_create cpu_meta_stat cpu_meta_stat_cold cpu_meta_unlink)
DAEMON_KEYS=(cpu_legacy_t1 cpu_legacy_t4 cpu_fio_seqwrite_1m cpu_fio_randwrite_4k cpu_fio_randwrite_4k_held cpu_fio_randread_4k
  cpu_coldread_seq cpu_meta_create cpu_meta_stat cpu_meta_stat_cold cpu_meta_unlink)
if has fencefs && [ "$FF_OK" = 0 ]; then
  for k in "${OVERLAY_KEYS[@]}" req_legacy_t1 req_legacy_t1_self req_rdwr_write moves_randwrite_4k rss_inode_growth rss_inode_growth_small rss_peak rss_peak_small rss_bound_growth; do
    note "$k" fencefs "$FF_REASON"
  done
fi
if has raw; then
  for k in "${DAEMON_KEYS[@]}" req_legacy_t1 req_rdwr_write moves_randwrite_4k rss_inode_growth rss_inode_growth_small rss_peak rss_peak_small rss_bound_growth; do note "$k" raw "no daemon"; done
fi
for c in passthrough_ll passthrough_ll_dp passthrough_hp mergerfs bindfs; do
  if has $c && [ -z "${SKIP_REASON[$c]:-}" ]; then note rss_bound_growth $c "no process binding in $c"; fi
done
if [ -n "${SKIP_REASON[passthrough_hp]:-}" ]; then
  for k in "${OVERLAY_KEYS[@]}" req_legacy_t1 req_rdwr_write moves_randwrite_4k rss_inode_growth rss_inode_growth_small rss_peak rss_peak_small rss_bound_growth; do
    note "$k" passthrough_hp "${SKIP_REASON[passthrough_hp]}"
  done
fi

# ---------------------------------------------------------------------------------------------
# Overlay workloads on tmpfs, interleaved: for each round, for each workload, every contender
# (in the round's order, below).
# ---------------------------------------------------------------------------------------------
run_fio() {  # run_fio KEY CONTENDER ROUND RW BS FIELD [CPU]: with CPU, fio is held on that CPU
  local key=$1 c=$2 r=$3 rw=$4 bs=$5 field=$6 d out pid t0 t1 held=()
  [ -n "${7:-}" ] && held=(taskset -c "$7")
  d=$(workdir "$c")
  out=$W/fio-$key-$c-$r.json
  pid=$(daemon_pid "$c")
  [ -n "$pid" ] && t0=$(daemon_ticks "$pid")
  if as "$c" "${held[@]}" fio --name="$key" --filename="$d/fio.dat" --rw="$rw" --bs="$bs" --size="$FIO_SIZE" \
      --ioengine=psync --runtime="$FIO_RUNTIME" --time_based --output-format=json \
      --output="$out" >"$W/fio.err" 2>&1; then
    [ -n "$pid" ] && t1=$(daemon_ticks "$pid")
    local v ios
    read -r v ios < <(python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
side = "read" if sys.argv[2].endswith("read") else "write"
print("%.1f" % (j[side]["bw_bytes"] / 1e6 if sys.argv[3] == "mbps" else j[side]["iops"]), j[side]["total_ios"])
' "$out" "$rw" "$field")
    record "$key" "$c" "$r" "$v"
    # Daemon CPU per read(2) or write(2) of the run: the steadier figure beside its throughput.
    if [ -n "$pid" ] && [ "${ios:-0}" -gt 0 ]; then
      record "cpu_$key" "$c" "$r" \
        "$(awk -v a="$t0" -v b="$t1" -v n="$ios" -v hz="$CLK_TCK" 'BEGIN { printf "%.2f", (b - a) * 1e6 / hz / n }')"
    fi
  else
    note "$key" "$c" "round $r: fio failed: $(tail -2 "$W/fio.err")"
  fi
}

# Reads of a file nothing changes (a config, a header, a script), each a fresh open, read of the
# whole file and close, for FIO_RUNTIME seconds: MB/s.
run_reread() {  # run_reread CONTENDER ROUND
  local c=$1 r=$2 d v
  d=$(workdir "$c")
  if as "$c" dd if=/dev/urandom of="$d/reread.dat" bs=1M count=1 status=none 2>"$W/reread.err" &&
    v=$(as "$c" python3 -c 'import os, sys, time
path, secs = sys.argv[1], float(sys.argv[2])
n, t0 = 0, time.monotonic()
while True:
    fd = os.open(path, os.O_RDONLY)
    while True:
        b = os.read(fd, 1 << 20)
        if not b: break
        n += len(b)
    os.close(fd)
    t = time.monotonic() - t0
    if t >= secs: break
print("%.1f" % (n / t / 1e6))' "$d/reread.dat" "$FIO_RUNTIME" 2>>"$W/reread.err"); then
    record reread_1m "$c" "$r" "$v"
  else
    note reread_1m "$c" "round $r: $(tail -1 "$W/reread.err")"
  fi
  as "$c" rm -f "$d/reread.dat" || true
}

# A cold sequential read (cp, tar or rsync reading a file that is not in the page cache): the
# kernel's clean pages dropped (vm.drop_caches=1; tmpfs keeps its own), then the fio file read
# through in 1 MiB read(2)s: MB/s, and daemon CPU per MiB.
run_coldread() {  # run_coldread CONTENDER ROUND
  local c=$1 r=$2 d pid t0 t1 out
  d=$(workdir "$c")
  pid=$(daemon_pid "$c")
  sync
  echo 1 >/proc/sys/vm/drop_caches
  [ -n "$pid" ] && t0=$(daemon_ticks "$pid")
  if out=$(as "$c" python3 -c 'import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
n, t0 = 0, time.monotonic()
while True:
    b = os.read(fd, 1 << 20)
    if not b: break
    n += len(b)
print("%.1f %d" % (n / (time.monotonic() - t0) / 1e6, n))' "$d/fio.dat" 2>"$W/cold.err"); then
    [ -n "$pid" ] && t1=$(daemon_ticks "$pid")
    local v bytes
    read -r v bytes <<<"$out"
    record coldread_seq "$c" "$r" "$v"
    if [ -n "$pid" ] && [ "${bytes:-0}" -gt 0 ]; then
      record cpu_coldread_seq "$c" "$r" \
        "$(awk -v a="$t0" -v b="$t1" -v n="$bytes" -v hz="$CLK_TCK" 'BEGIN { printf "%.1f", (b - a) * 1e6 / hz / (n / 1048576) }')"
    fi
  else
    note coldread_seq "$c" "round $r: $(tail -1 "$W/cold.err")"
  fi
}

run_legacy() {  # run_legacy CONTENDER ROUND THREADS
  local c=$1 r=$2 th=$3 d pid t0 t1 out=$W/legacy.out
  d=$(workdir "$c")/legacy-$r-$th
  pid=$(daemon_pid "$c")
  [ -n "$pid" ] && t0=$(daemon_ticks "$pid")
  if as "$c" "$B/legacy_job" "$d" "$LEGACY_FILES" "$th" >"$out" 2>"$W/legacy.err"; then
    [ -n "$pid" ] && t1=$(daemon_ticks "$pid")
    local files
    files=$(kv files "$out")
    record "legacy_t$th" "$c" "$r" "$(kv files_per_s "$out")"
    if [ -n "$pid" ]; then
      record "cpu_legacy_t$th" "$c" "$r" \
        "$(awk -v a="$t0" -v b="$t1" -v n="$files" -v hz="$CLK_TCK" 'BEGIN { printf "%.1f", (b - a) * 1e6 / hz / n }')"
    fi
  else
    note "legacy_t$th" "$c" "round $r: $(tail -1 "$W/legacy.err")"
    [ -n "$pid" ] && note "cpu_legacy_t$th" "$c" "round $r: the legacy-job run failed"
  fi
  as "$c" rm -rf "$d" || true
}

run_meta() {  # run_meta CONTENDER ROUND
  local c=$1 r=$2 d out=$W/meta.out
  d=$(workdir "$c")/meta-$r
  if as "$c" mkdir -p "$d" &&
    as "$c" env META_DAEMON_PID="$(daemon_pid "$c")" META_SECONDS="$META_SECONDS" META_COLD=1 "$B/meta" run "$d" "$META_FILES" "$META_LISTINGS" >"$out" 2>"$W/meta.err"; then
    record meta_create "$c" "$r" "$(kv create_ops_per_s "$out")"
    record meta_stat "$c" "$r" "$(kv stat_ops_per_s "$out")"
    record meta_stat_cold "$c" "$r" "$(kv stat_cold_ops_per_s "$out")"
    record meta_list "$c" "$r" "$(kv list_entries_per_s "$out")"
    record meta_unlink "$c" "$r" "$(kv unlink_ops_per_s "$out")"
    local k
    for k in create stat stat_cold unlink; do
      if [ -n "$(kv "${k}_daemon_us_per_op" "$out")" ]; then
        record "cpu_meta_$k" "$c" "$r" "$(kv "${k}_daemon_us_per_op" "$out")"
      fi
    done
  else
    note meta_create "$c" "round $r: $(tail -1 "$W/meta.err")"
  fi
  as "$c" rm -rf "$d" || true
}

# The order changes every round, as a Williams Latin square over the n contenders that run: round
# r (from 0) runs contender (W[j] + r) mod n at place j, W = 0, 1, n-1, 2, n-2, ... Over n rounds
# each runs once at every place and, for an even n, right after every other once: no contender
# always runs first or after the same neighbour (what the one before leaves: dirty pages, a warm
# CPU). Only the overlay rows change order.
WILLIAMS=()
lo=1 hi=$((${#ACTIVE[@]} - 1))
if ((${#ACTIVE[@]} > 0)); then WILLIAMS=(0); fi
while ((${#WILLIAMS[@]} < ${#ACTIVE[@]})); do
  WILLIAMS+=("$lo") && lo=$((lo + 1))
  if ((${#WILLIAMS[@]} < ${#ACTIVE[@]})); then WILLIAMS+=("$hi") && hi=$((hi - 1)); fi
done
log "overlay rows: contenders ${ACTIVE[*]:-none}, $ROUNDS rounds, order changed each round"
for ((r = 1; r <= ROUNDS && ${#ACTIVE[@]} > 0; r++)); do
  ORDER=()
  for w in "${WILLIAMS[@]}"; do ORDER+=("${ACTIVE[(w + r - 1) % ${#ACTIVE[@]}]}"); done
  log "round $r: ${ORDER[*]}"
  for c in "${ORDER[@]}"; do run_fio fio_seqwrite_1m "$c" "$r" write 1M mbps; done
  for c in "${ORDER[@]}"; do run_fio fio_randwrite_4k "$c" "$r" randwrite 4k iops; done
  for c in "${ORDER[@]}"; do run_fio fio_randwrite_4k_held "$c" "$r" randwrite 4k iops "$HELD_CPU"; done
  for c in "${ORDER[@]}"; do run_fio fio_randread_4k "$c" "$r" randread 4k iops; done
  for c in "${ORDER[@]}"; do run_coldread "$c" "$r"; done
  for c in "${ORDER[@]}"; do run_reread "$c" "$r"; done
  for c in "${ORDER[@]}"; do run_legacy "$c" "$r" 1; done
  for c in "${ORDER[@]}"; do run_legacy "$c" "$r" 4; done
  for c in "${ORDER[@]}"; do run_meta "$c" "$r"; done
done
for c in "${ACTIVE[@]}"; do as "$c" rm -f "$(workdir "$c")/fio.dat" || true; done

# ---------------------------------------------------------------------------------------------
# FUSE requests per small-file job (not timed): the kernel's fuse:fuse_request_send tracepoint,
# filtered to one mount's connection, counts what every daemon is sent, by opcode, the same way
# for all of them. Per job = (requests for 2N jobs - requests for N jobs) / N, so the fixed cost
# of a run (its directories, fencectl's bind) cancels. FORGET and INTERRUPT are not requests to
# this tracepoint (the kernel queues them apart); fencefs' own counters are read as a cross-check.
# ---------------------------------------------------------------------------------------------
TRACEFS=/sys/kernel/tracing
TI=""
TRACE_REASON=""
if [ ! -d "$TRACEFS/events" ]; then mount -t tracefs nodev "$TRACEFS" 2>/dev/null || true; fi
if [ ! -d "$TRACEFS/events/fuse/fuse_request_send" ]; then
  TRACE_REASON="no fuse:fuse_request_send tracepoint in $TRACEFS (kernel $(uname -r))"
elif ! mkdir "$TRACEFS/instances/fencefs-bench-$$" 2>/dev/null; then
  TRACE_REASON="cannot create a tracefs instance under $TRACEFS/instances"
else
  TI=$TRACEFS/instances/fencefs-bench-$$
  echo 16384 >"$TI/buffer_size_kb"
fi
conn_of() { awk -v m="$1" '$5 == m { split($3, d, ":"); print d[1] * 1048576 + d[2]; exit }' /proc/self/mountinfo; }
# ff_requests: fencefs' own per-opcode counters as "op count" lines (forgets left out).
ff_requests() {
  # Series carry other labels (mount="…") beside op.
  sed -n 's/^fencefs_fuse_requests_total{.*\bop="\([a-z_]*\)".*} \([0-9]*\)$/\1 \2/p' "$FF_MNT/.fencefs/metrics" |
    grep -v -E '^(forget|batch_forget) '
}
# count_workload KIND CONTENDER DIR N: the counted workload. legacy: N one-thread small-file
# jobs. rdwr: N 4 KiB pwrites into one file opened O_RDWR (as fio and databases open theirs).
count_workload() {
  local kind=$1 c=$2 d=$3 n=$4
  case $kind in
    legacy) as "$c" "$B/legacy_job" "$d" "$n" 1 ;;
    rdwr) as "$c" python3 -c 'import os, sys
os.makedirs(sys.argv[1], exist_ok=True)
fd = os.open(sys.argv[1] + "/f", os.O_RDWR | os.O_CREAT, 0o644)
for i in range(int(sys.argv[2])): os.pwrite(fd, b"x" * 4096, (i % 256) * 4096)
os.close(fd)' "$d" "$n" ;;
  esac
}
# trace_all_kept: true when the instance's buffer kept every event written to it
# ("entries-in-buffer/entries-written: KEPT/WRITTEN"); else says how many in count.err.
trace_all_kept() {
  local kept
  kept=$(awk '/entries-in-buffer\/entries-written:/ { split($3, a, "/"); print (a[1] == a[2]) ? "ok" : a[1] "/" a[2]; exit }' "$TI/trace")
  [ "$kept" = ok ] || { echo "trace buffer overran ($kept events kept)" >"$W/count.err"; return 1; }
}
# trace_jobs CONTENDER N OUT [KIND]: runs N units of the KIND workload (count_workload; legacy by
# default) in a fresh directory with the tracepoint on; OUT gets "op count" lines (the kernel's
# opcode names) and a "total" line. fencefs: OUT.ff gets the daemon's own counters' difference.
trace_jobs() {
  local c=$1 n=$2 out=$3 kind=${4:-legacy} d ev=$TI/events/fuse/fuse_request_send conn
  d=$(workdir "$c")/count-$n
  conn=$(conn_of "${MNT_OF[$c]}")
  [ -n "$conn" ] || { echo "no mountinfo line for ${MNT_OF[$c]}" >"$W/count.err"; return 1; }
  # (Called in a condition, so set -e does not apply: every step checks for itself.)
  if ! { echo "connection == $conn" >"$ev/filter" && : >"$TI/trace"; }; then
    echo "cannot set the tracepoint's filter in $TI" >"$W/count.err"; return 1
  fi
  if [ "$c" = fencefs ]; then ff_requests >"$W/ff.before" || { echo "cannot read $FF_MNT/.fencefs/metrics" >"$W/count.err"; return 1; }; fi
  echo 1 >"$ev/enable" || { echo "cannot enable the tracepoint in $TI" >"$W/count.err"; return 1; }
  local rc=0
  count_workload "$kind" "$c" "$d" "$n" >/dev/null 2>"$W/count.err" || rc=1
  echo 0 >"$ev/enable"
  if [ "$c" = fencefs ]; then ff_requests >"$W/ff.after" || rc=1; fi
  as "$c" rm -rf "$d" || true
  [ "$rc" = 0 ] || return 1
  trace_all_kept || return 1
  awk '/ opcode [0-9]+ \(FUSE_/ { match($0, /\(FUSE_[A-Z_0-9]+\)/); op = tolower(substr($0, RSTART + 6, RLENGTH - 7)); n[op]++; t++ }
       END { for (o in n) print o, n[o]; print "total", t + 0 }' "$TI/trace" >"$out"
  if [ "$c" = fencefs ]; then
    awk 'NR == FNR { b[$1] = $2; next } { d = $2 - b[$1]; if (d) print $1, d; t += d } END { print "total", t + 0 }' \
      "$W/ff.before" "$W/ff.after" >"$out.ff"
  fi
}
# count_moves CONTENDER: prints how often the kernel moved fio to another CPU per 4 KiB random
# write, over a 2-second fio run with the tracepoint sched:sched_migrate_task on, filtered to
# processes named fio (fio's own parent among them, which seldom moves). The file is sized first
# (truncate: not every daemon here has fallocate), so that fio has nothing to lay out; each write
# is then the first to its page, where the timed row overwrites a written file.
count_moves() {
  local c=$1 d ev=$TI/events/sched/sched_migrate_task out=$W/moves.json ios moves
  d=$(workdir "$c")/moves
  [ -d "$ev" ] || { echo "no sched:sched_migrate_task tracepoint in $TRACEFS" >"$W/count.err"; return 1; }
  if ! { as "$c" mkdir -p "$d" && as "$c" truncate -s "$FIO_SIZE" "$d/fio.dat"; } 2>"$W/count.err"; then
    as "$c" rm -rf "$d" || true
    return 1
  fi
  if ! { echo 'comm == "fio"' >"$ev/filter" && : >"$TI/trace" && echo 1 >"$ev/enable"; }; then
    echo "cannot enable sched:sched_migrate_task in $TI" >"$W/count.err"
    echo 0 >"$ev/enable" || true
    as "$c" rm -rf "$d" || true
    return 1
  fi
  local rc=0
  as "$c" fio --name=moves --filename="$d/fio.dat" --rw=randwrite --bs=4k --size="$FIO_SIZE" \
    --ioengine=psync --runtime=2 --time_based --output-format=json --output="$out" \
    >/dev/null 2>"$W/count.err" || rc=1
  echo 0 >"$ev/enable"
  as "$c" rm -rf "$d" || true
  [ "$rc" = 0 ] || return 1
  trace_all_kept || return 1
  moves=$(grep -c 'sched_migrate_task:' "$TI/trace")
  ios=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["jobs"][0]["write"]["total_ios"])' "$out" 2>"$W/count.err") ||
    { echo "cannot read fio's output $out" >>"$W/count.err"; return 1; }
  [ "${ios:-0}" -gt 0 ] || { echo "fio wrote nothing" >"$W/count.err"; return 1; }
  awk -v m="$moves" -v n="$ios" 'BEGIN { printf "%.3f", m / n }'
}
# per_job A B N: "op value" lines, (B - A) / N for every op in either file.
per_job() {
  awk -v n="$3" 'NR == FNR { a[$1] = $2; next } { b[$1] = $2 } END {
      for (o in a) if (!(o in b)) b[o] = 0
      for (o in b) printf "%s %.2f\n", o, (b[o] - a[o]) / n }' "$1" "$2"
}
COUNT_ACTIVE=()
for c in "${ACTIVE[@]}"; do [ "$c" = raw ] || COUNT_ACTIVE+=("$c"); done
if [ -z "$TI" ]; then
  for c in "${COUNT_ACTIVE[@]}"; do
    note req_legacy_t1 "$c" "$TRACE_REASON"
    note req_rdwr_write "$c" "$TRACE_REASON"
    note moves_randwrite_4k "$c" "$TRACE_REASON"
  done
else
  log "request counts: ${COUNT_ACTIVE[*]:-none}, $LEGACY_FILES and $((2 * LEGACY_FILES)) one-thread jobs"
  for c in "${COUNT_ACTIVE[@]}"; do
    if trace_jobs "$c" "$LEGACY_FILES" "$W/req1" && trace_jobs "$c" "$((2 * LEGACY_FILES))" "$W/req2"; then
      per_job "$W/req1" "$W/req2" "$LEGACY_FILES" >"$W/req.per"
      record req_legacy_t1 "$c" 1 "$(kv total "$W/req.per")"
      while read -r op v; do
        [ "$op" = total ] || printf '%s\t%s\t%s\n' "$op" "$c" "$v" >>"$W/req_ops.tsv"
      done <"$W/req.per"
      if [ "$c" = fencefs ]; then
        per_job "$W/req1.ff" "$W/req2.ff" "$LEGACY_FILES" >"$W/req.per.ff"
        record req_legacy_t1_self fencefs 1 "$(kv total "$W/req.per.ff")"
        while read -r op v; do
          [ "$op" = total ] || printf '%s\t%s\t%s\n' "$op" fencefs-self "$v" >>"$W/req_ops.tsv"
        done <"$W/req.per.ff"
      fi
    else
      note req_legacy_t1 "$c" "$(tail -1 "$W/count.err")"
    fi
    if trace_jobs "$c" "$LEGACY_FILES" "$W/req1" rdwr && trace_jobs "$c" "$((2 * LEGACY_FILES))" "$W/req2" rdwr; then
      per_job "$W/req1" "$W/req2" "$LEGACY_FILES" >"$W/req.per"
      record req_rdwr_write "$c" 1 "$(kv total "$W/req.per")"
      log "requests per 4 KiB write (O_RDWR), $c: $(grep -v '^total ' "$W/req.per" | awk '$2 + 0 != 0' | sort | tr '\n' ' ')"
    else
      note req_rdwr_write "$c" "$(tail -1 "$W/count.err")"
    fi
    if v=$(count_moves "$c"); then
      record moves_randwrite_4k "$c" 1 "$v"
    else
      note moves_randwrite_4k "$c" "$(tail -1 "$W/count.err")"
    fi
  done
  rmdir "$TI" 2>/dev/null || log "left tracefs instance $TI"
  TI=""
fi
# What a daemon that checked permissions itself would pay per request for the caller's groups
# (the request carries only uid, gid and pid): beside the daemon CPU per request above.
if has fencefs; then
  for ((r = 1; r <= ROUNDS; r++)); do
    if "$B/groups_cost" 20000 >"$W/groups.out" 2>"$W/groups.err"; then
      record groups_read fencefs "$r" "$(kv us_per_read "$W/groups.out")"
    else
      note groups_read fencefs "round $r: $(tail -1 "$W/groups.err")"
    fi
  done
fi

# ---------------------------------------------------------------------------------------------
# Daemon memory: RSS growth per cached inode (and per bound process for fencefs). Fresh mounts.
# ---------------------------------------------------------------------------------------------
rss_run() {  # rss_run CONTENDER ROUND
  # One fresh mount over RSS_INODES files made in BACKING. fencefs: first BOUND_PROCS live bound
  # processes (growth per process), kept bound; then, for both daemons, lookups of every file
  # (growth per inode); the peak (VmHWM) at the end covers both.
  local c=$1 r=$2 b=$T/rss-$1-$2 m=$W/mnt/rss-$1-$2 pid rss0 rss1 i p first=${#SLEEPERS[@]}
  mkdir -p "$b/many"
  "$B/meta" create "$b/many" "$RSS_INODES" >/dev/null
  if [ "$c" != fencefs ]; then start_overlay "$c" "$b" "$m" || { note rss_inode_growth "$c" "mount failed"; return; }
  else start_ff "$b" "$m" || { note rss_inode_growth "$c" "mount failed: $(tail -1 "$FF_LOG")"; return; }; fi
  pid=$DPID
  stat "$m" "$m/many" >/dev/null
  sleep 0.2
  if [ "$c" = fencefs ]; then
    local bound_ok=1
    rss0=$(status_kb "$pid" VmRSS)
    : >"$W/bind.err"
    for ((i = 0; i < BOUND_PROCS; i++)); do
      sh -c 'echo "bind / 1" > "$1/.fencefs/ctl" || exit 1; exec sleep 600' sh "$m" 2>>"$W/bind.err" &
      SLEEPERS+=("$!")
    done
    # Bound = the shell exec'd sleep (the bind write succeeded); a failed bind exits the shell.
    for p in "${SLEEPERS[@]:$first}"; do
      for ((i = 0; i < 3000; i++)); do
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = sleep ] && break
        kill -0 "$p" 2>/dev/null || break
        sleep 0.01
      done
      [ "$(cat "/proc/$p/comm" 2>/dev/null)" = sleep ] || bound_ok=0
    done
    if [ "$bound_ok" = 1 ]; then
      rss1=$(status_kb "$pid" VmRSS)
      record rss_bound_growth "$c" "$r" "$(awk -v a="$rss0" -v b="$rss1" -v n="$BOUND_PROCS" 'BEGIN { printf "%.1f", (b - a) * 1024 / n }')"
    else
      note rss_bound_growth "$c" "round $r: not every process could bind: $(tail -1 "$W/bind.err")"
    fi
  fi
  rss0=$(status_kb "$pid" VmRSS)
  local done_n=0 ok=1
  if [ -n "$RSS_SMALL" ]; then
    if "$B/meta" stat "$m/many" "$RSS_SMALL" >/dev/null 2>"$W/rss.err"; then
      rss1=$(status_kb "$pid" VmRSS)
      record rss_inode_growth_small "$c" "$r" "$(awk -v a="$rss0" -v b="$rss1" -v n="$RSS_SMALL" 'BEGIN { printf "%.1f", (b - a) * 1024 / n }')"
      record rss_peak_small "$c" "$r" "$(status_kb "$pid" VmHWM)"
      done_n=$RSS_SMALL
    else
      note rss_inode_growth_small "$c" "round $r: $(tail -1 "$W/rss.err")"
      ok=0
    fi
  fi
  if [ "$ok" = 1 ] && "$B/meta" stat "$m/many" "$RSS_INODES" "$done_n" >/dev/null 2>"$W/rss.err"; then
    rss1=$(status_kb "$pid" VmRSS)
    record rss_inode_growth "$c" "$r" "$(awk -v a="$rss0" -v b="$rss1" -v n="$RSS_INODES" 'BEGIN { printf "%.1f", (b - a) * 1024 / n }')"
    record rss_peak "$c" "$r" "$(status_kb "$pid" VmHWM)"
  else
    local why
    why=$(tail -1 "$W/rss.err")
    case $why in *"open files"*) why="$why (the daemon's fd limit is $FD_LIMIT and cannot be raised here)" ;; esac
    note rss_inode_growth "$c" "round $r: $why"
    note rss_peak "$c" "round $r: the lookups failed"
  fi
  for p in "${SLEEPERS[@]:$first}"; do kill "$p" 2>/dev/null || true; done
  for p in "${SLEEPERS[@]:$first}"; do wait "$p" 2>/dev/null || true; done
  SLEEPERS=("${SLEEPERS[@]:0:$first}")
  stop_fs "$m" "$pid"
  rm -rf "$b"
}
RSS_ACTIVE=()
for c in "${ACTIVE[@]}"; do [ "$c" = raw ] || RSS_ACTIVE+=("$c"); done
log "memory rows: ${RSS_ACTIVE[*]:-none}, $RSS_INODES inodes, $BOUND_PROCS bound processes"
for ((r = 1; r <= RSS_ROUNDS; r++)); do
  for c in "${RSS_ACTIVE[@]}"; do rss_run "$c" "$r"; done
done

# The overlay mounts are done with.
for c in "${!PID_OF[@]}"; do stop_fs "${MNT_OF[$c]}" "${PID_OF[$c]}"; done

# ---------------------------------------------------------------------------------------------
# Journal rows (fencefs only) on the real disk.
# ---------------------------------------------------------------------------------------------
JOURNAL_KEYS=(adv_d1 adv_d4 adv_d16 recovery_lib recovery_mount recovery_mount_empty)
evict() {  # fsync, then drop from the page cache, every file below $1 (a cold read for recovery)
  python3 - "$1" <<'EOF'
import os, sys
for d, _, files in os.walk(sys.argv[1]):
    for f in files:
        p = os.path.join(d, f)
        if os.path.islink(p) or not os.path.isfile(p):
            continue
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
EOF
}
# time_mount BACKING MNT: sets MOUNT_SECS to the time from starting fencefs to the mount showing in
# /proc/mounts (polled every 10 ms); unmounts again.
time_mount() {
  local t0 t1
  t0=$(date +%s%N)
  start_ff "$1" "$2" || return 1
  t1=$(date +%s%N)
  stop_fs "$2" "$DPID"
  MOUNT_SECS=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
}

if ! has fencefs; then
  :
elif [ "$FF_OK" = 0 ]; then
  for k in "${JOURNAL_KEYS[@]}"; do note "$k" fencefs "$FF_REASON"; done
else
  # Advances per second at 1, 4 and 16 concurrent domains.
  log "journal rows on $DISK_DIR: advances/s at 1, 4, 16 domains"
  ab=$J/adv
  mkdir -p "$ab"
  for i in $(seq 1 16); do mkdir -p "$ab/d$i"; done
  if start_ff "$ab" "$J/mnt-adv"; then
    apid=$DPID
    dom_ok=1
    for i in $(seq 1 16); do
      if ! "$FENCECTL" domain add "$J/mnt-adv/d$i" >"$W/dom.err" 2>&1; then dom_ok=0; break; fi
    done
    if [ "$dom_ok" = 1 ]; then
      for ((r = 1; r <= ROUNDS; r++)); do
        for k in 1 4 16; do
          if timeout -k 10 "$TIMEOUT" "$B/advance" "$J/mnt-adv" "$k" "$ADV_SECS" 1 \
              >"$W/adv.out" 2>"$W/adv.err"; then
            record "adv_d$k" fencefs "$r" "$(kv advances_per_s "$W/adv.out")"
          else
            note "adv_d$k" fencefs "round $r: $(tail -1 "$W/adv.err")"
          fi
        done
      done
    else
      for k in 1 4 16; do note "adv_d$k" fencefs "fencectl domain add failed: $(tail -1 "$W/dom.err")"; done
    fi
    stop_fs "$J/mnt-adv" "$apid"
  else
    for k in 1 4 16; do note "adv_d$k" fencefs "mount on $DISK_DIR failed: $(tail -1 "$FF_LOG")"; done
  fi
  rm -rf "$ab"

  # Cluster mode (scripts/bench_cluster.sh: its own members and a local single-node etcd).
  log "cluster rows: advance latency with 1, 3, 5 members; equal-token writes on and off"
  for ((r = 1; r <= ROUNDS; r++)); do
    if timeout -k 10 "$TIMEOUT" scripts/bench_cluster.sh "$FENCEFS" "$(q 300 30)" "$(q 20000 2000)" \
        >"$W/cl.out" 2>"$W/cl.err"; then
      for m in 1 3 5; do
        record "cl_adv_m${m}_p50" fencefs "$r" "$(kv "adv_m${m}_p50_ms" "$W/cl.out")"
        record "cl_adv_m${m}_p99" fencefs "$r" "$(kv "adv_m${m}_p99_ms" "$W/cl.out")"
      done
      record cl_eq_on fencefs "$r" "$(kv eq_write_cluster_t5 "$W/cl.out")"
      record cl_eq_off fencefs "$r" "$(kv eq_write_plain_t5 "$W/cl.out")"
    else
      note cl_adv_m1_p50 fencefs "round $r: $(tail -1 "$W/cl.err")"
    fi
  done

  # Recovery of a JOURNAL_RECORDS-record journal.
  if [ -z "$JB" ]; then
    for k in recovery_lib recovery_mount recovery_mount_empty; do note "$k" fencefs "$JB_REASON"; done
  else
    log "journal rows: generating a $JOURNAL_RECORDS-record journal (on tmpfs, then copied to $DISK_DIR)"
    # (a) Library: StateStore::open on a state dir holding only the generated journal.
    if timeout -k 10 "$TIMEOUT" "$JB" generate "$T/jgen" "$JOURNAL_RECORDS" 16 >"$W/jgen.out" 2>"$W/jgen.err"; then
      log "generated: $(tr '\n' ' ' <"$W/jgen.out")"
      cp -a "$T/jgen" "$J/jmaster"; rm -rf "$T/jgen"
      for ((r = 1; r <= ROUNDS; r++)); do
        rm -rf "$J/jtrial"; cp -a "$J/jmaster" "$J/jtrial"; evict "$J/jtrial"
        if timeout -k 10 "$TIMEOUT" "$JB" recover "$J/jtrial" >"$W/jrec.out" 2>"$W/jrec.err"; then
          replayed=$(kv records_replayed "$W/jrec.out")
          if [ "${replayed:-0}" -ge "$JOURNAL_RECORDS" ]; then
            record recovery_lib fencefs "$r" "$(kv seconds "$W/jrec.out")"
          else
            note recovery_lib fencefs "round $r: replayed only ${replayed:-?} of $JOURNAL_RECORDS records (compacted?)"
          fi
        else
          note recovery_lib fencefs "round $r: $(tail -1 "$W/jrec.err")"
        fi
      done
      rm -rf "$J/jtrial" "$J/jmaster"
    else
      note recovery_lib fencefs "generation failed: $(tail -1 "$W/jgen.err")"
    fi
    # (b) Mount: time from starting fencefs to the mount appearing, on a backing whose state
    # journal holds JOURNAL_RECORDS more records, against the same backing with a fresh state.
    mb=$T/mrec
    mkdir -p "$mb"
    if start_ff "$mb" "$W/mnt/mrec"; then
      stop_fs "$W/mnt/mrec" "$DPID"
      sdir=$(find "$mb/.fencefs" -maxdepth 3 -type f -name journal -printf '%h\n' 2>/dev/null | head -1)
      if [ -z "$sdir" ]; then
        for k in recovery_mount recovery_mount_empty; do note "$k" fencefs "no journal file found under BACKING/.fencefs"; done
      else
        cp -a "$mb" "$J/mrec_empty"
        if timeout -k 10 "$TIMEOUT" "$JB" generate "$sdir" "$JOURNAL_RECORDS" 0 >"$W/mgen.out" 2>"$W/mgen.err"; then
          cp -a "$mb" "$J/mrec_full"
          for ((r = 1; r <= ROUNDS; r++)); do
            for kind in empty full; do
              key=recovery_mount; [ "$kind" = empty ] && key=recovery_mount_empty
              rm -rf "$J/mtrial"; cp -a "$J/mrec_$kind" "$J/mtrial"; evict "$J/mtrial"
              if time_mount "$J/mtrial" "$J/mnt-rec"; then
                record "$key" fencefs "$r" "$MOUNT_SECS"
              else
                note "$key" fencefs "round $r: mount failed: $(tail -1 "$FF_LOG")"
              fi
            done
          done
        else
          note recovery_mount fencefs "generation in BACKING/.fencefs failed: $(tail -1 "$W/mgen.err")"
          note recovery_mount_empty fencefs "skipped with the recovery_mount row"
        fi
      fi
    else
      for k in recovery_mount recovery_mount_empty; do note "$k" fencefs "mount failed: $(tail -1 "$FF_LOG")"; done
    fi
    rm -rf "$mb" "$J/mtrial" "$J/mrec_empty" "$J/mrec_full"
  fi
fi

# Token acquisition (scripts/bench_tokens.sh: its own mount and a local single-node etcd).
if has fencefs; then
  log "token rows: acquisitions/s through --acquire and etcd, lease-loss reaction"
  for ((r = 1; r <= ROUNDS; r++)); do
    if timeout -k 10 "$TIMEOUT" scripts/bench_tokens.sh "$FENCEFS" "$FENCECTL" "$TOKEN_RUNS" \
        >"$W/tok.out" 2>"$W/tok.err"; then
      record tok_acquire fencefs "$r" "$(kv acquire_per_s "$W/tok.out")"
      record tok_etcd fencefs "$r" "$(kv etcd_per_s "$W/tok.out")"
      record tok_lease_loss fencefs "$r" "$(kv lease_loss_s "$W/tok.out")"
    else
      for k in tok_acquire tok_etcd tok_lease_loss; do note "$k" fencefs "round $r: $(tail -1 "$W/tok.err")"; done
    fi
  done
fi

# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------
mkdir -p "$OUT"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
export BENCH_R_NPROC BENCH_R_MODEL BENCH_R_KERNEL BENCH_R_DATE BENCH_R_LIBFUSE BENCH_R_FIO BENCH_R_MEM \
  BENCH_R_MERGERFS BENCH_R_BINDFS BENCH_R_LOAD
BENCH_R_NPROC=$(nproc)
BENCH_R_MODEL=${model:-unknown}
BENCH_R_KERNEL=$(uname -r)
BENCH_R_DATE=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
BENCH_R_LIBFUSE=$(pkg-config --modversion fuse3)
BENCH_R_FIO=$(fio --version)
BENCH_R_MEM=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576; exit }' /proc/meminfo)
BENCH_R_MERGERFS=$(dpkg-query -W -f='${Version}' mergerfs 2>/dev/null || echo none)
BENCH_R_BINDFS=$(dpkg-query -W -f='${Version}' bindfs 2>/dev/null || echo none)
BENCH_R_LOAD="$LOAD_START at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end"
python3 bench/report.py --results "$RES" --notes "$NOTES" --out-md "$OUT/latest.md" --out-json "$OUT/latest.json" \
  --contenders "${CONTENDERS}" --req-ops "$REQ_OPS" --history "$OUT" \
  --config "rounds=$ROUNDS" "quick=$QUICK" "fio_size=$FIO_SIZE" "fio_runtime_s=$FIO_RUNTIME" \
  "legacy_files=$LEGACY_FILES" "meta_files=$META_FILES" "meta_listings=$META_LISTINGS" "meta_seconds=$META_SECONDS" "meta_cold=1" "order=williams" "held_cpu=$HELD_CPU" \
  "rss_inodes=$RSS_INODES" "bound_procs=$BOUND_PROCS" "rss_rounds=$RSS_ROUNDS" \
  "advance_seconds=$ADV_SECS" "journal_records=$JOURNAL_RECORDS" "token_runs=$TOKEN_RUNS" "tmpfs_size=$TMPFS_SIZE" \
  "disk_dir=$DISK_DIR" "clk_tck=$CLK_TCK" "fd_limit=$FD_LIMIT" "rss_inodes_small=$RSS_SMALL" \
  "setup=$SETUP_STATUS" "fencefs_binary=$FENCEFS" "fencefs_options=$FF_OPTS"
cp "$OUT/latest.md" "$OUT/$stamp.md"
cp "$OUT/latest.json" "$OUT/$stamp.json"
log "wrote $OUT/latest.md, $OUT/latest.json (and $stamp.*)"
