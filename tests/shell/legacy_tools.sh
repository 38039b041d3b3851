#!/usr/bin/env bash
# Real programs as legacy jobs: they work unchanged for the current epoch and fail, leaving BACKING
# unchanged, with a superseded token or none.
#
# Usage: tests/shell/legacy_tools.sh [BUILD_DIR]     (default: build/ next to this checkout)
#
# Mounts fencefs on a fresh BACKING in /tmp and always unmounts (trap). Then:
#  1. current epoch: every job (cp -a, tar c/x, rsync -a, sed -i, git init/add/commit/gc, sqlite3
#     10,000 rows + integrity_check, the same with PRAGMA mmap_size, LMDB mdb_load of 10,000 keys
#     read back with mdb_dump and mdb_stat, shell > and >>, a logrotate-style rename chain) runs under
#     `fencectl run --token <current epoch>` in the mount and, unbound, in a plain directory on the
#     same filesystem. Each must exit 0 and leave the same tree (paths, types, modes, owners, sizes,
#     link counts, symlink targets, content hashes, user xattrs; mtimes where the tool preserves
#     them; git compared by `git log --format='%H %T'` and fsck, not by .git bytes) in the plain dir,
#     the mount and BACKING.
#  2. `fencectl advance` to a newer epoch, then a follow-up job per program (modify what phase 1
#     made) runs with the superseded token: each must exit non-zero and BACKING must be unchanged
#     (tree hash incl. mtimes, without BACKING/.fencefs). The same follow-up jobs succeed on the
#     plain dir, so they fail only because of the fence.
#  3. The same follow-up jobs with no token at all: each must fail, BACKING unchanged.
# Prints one PASS/FAIL line per check and finally exactly: "N passed, M failed". Exit status 0
# only if nothing failed.
set -uo pipefail

SELF=$(readlink -f "$0")

# ----------------------------------------------------------------------------------------- jobs
# A job: job_NAME WORKDIR SRC SRC2. Runs with `set -e`; prints what must match on stdout.

git_env() {
  export HOME="$1/.home" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
  export GIT_AUTHOR_NAME="Legacy Job" GIT_AUTHOR_EMAIL="job@example.invalid"
  export GIT_COMMITTER_NAME="Legacy Job" GIT_COMMITTER_EMAIL="job@example.invalid"
  export GIT_AUTHOR_DATE="2020-01-02T03:04:05Z" GIT_COMMITTER_DATE="2020-01-02T03:04:05Z"
}

job_cp_a() {
  mkdir -p "$1"
  cp -a "$2" "$1/copy"
}
job_cp_a_stale() { cp -a "$2" "$1/copy2"; }

job_tar() {
  mkdir -p "$1/x"
  tar --xattrs --xattrs-include='user.*' -C "$2" -cf "$1/src.tar" .
  tar --xattrs --xattrs-include='user.*' -C "$1/x" -xpf "$1/src.tar"
  tar -tvf "$1/src.tar" | wc -l
}
job_tar_stale() { tar --xattrs --xattrs-include='user.*' -C "$1/x" -xpf "$1/src.tar"; }

job_rsync() {
  mkdir -p "$1"
  rsync -aHX "$2/" "$1/r/"
  rsync -aHX --delete "$3/" "$1/r/"  # delta pass: changed, added and removed files
}
# Not -H here: rsync 3.x with -H hangs (all three processes in poll) when every file fails to
# write, natively too (reproduced on ext4 with chattr +i); -I forces every file to be rewritten.
job_rsync_stale() { rsync -aX -I "$2/" "$1/r/"; }

job_sed() {
  mkdir -p "$1"
  printf 'foo one\nbar\nfoo two foo\n' >"$1/s.txt"
  chmod 640 "$1/s.txt"
  sed -i 's/foo/baz/g' "$1/s.txt"
  sed -i.bak -e '2d' "$1/s.txt"
  cat "$1/s.txt"
}
job_sed_stale() { sed -i 's/baz/qux/' "$1/s.txt"; }

job_git() {
  git_env "$1"
  mkdir -p "$1/.home"
  git init -q -b main "$1/repo"
  cp -r "$2/dir" "$2/text.txt" "$2/binary.bin" "$1/repo/"
  git -C "$1/repo" add -A
  git -C "$1/repo" commit -q -m "first"
  echo "second line" >>"$1/repo/text.txt"
  git -C "$1/repo" mv binary.bin moved.bin
  git -C "$1/repo" commit -q -a -m "second"
  git -C "$1/repo" gc -q
  git -C "$1/repo" log --format='%H %T %s'
  git -C "$1/repo" fsck --full --no-progress 2>&1
  git -C "$1/repo" status --porcelain
}
job_git_stale() {
  git_env "$1"
  git -C "$1/repo" commit -q --allow-empty -m "stale"
}

job_sqlite() {
  mkdir -p "$1"
  sqlite3 -bail "$1/db.sqlite" <<'SQL'
CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT NOT NULL, n REAL);
CREATE INDEX t_v ON t(v);
BEGIN;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10000)
INSERT INTO t SELECT x, 'row-' || x, x * 0.5 FROM c;
COMMIT;
PRAGMA integrity_check;
SELECT count(*), sum(n) FROM t;
SQL
}
job_sqlite_stale() { sqlite3 -bail "$1/db.sqlite" "INSERT INTO t(v, n) VALUES ('stale', 1);"; }

# sqlite reading its database through a shared mapping while it writes it with pwrite. The last
# PRAGMA prints the mapping size in effect: sqlite turns it to 0 when mmap fails.
job_sqlite_mmap() {
  mkdir -p "$1"
  sqlite3 -bail "$1/mm.sqlite" <<'SQL'
PRAGMA mmap_size=268435456;
CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT NOT NULL, n REAL);
CREATE INDEX t_v ON t(v);
BEGIN;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10000)
INSERT INTO t SELECT x, 'row-' || x, x * 0.5 FROM c;
COMMIT;
UPDATE t SET n = n + 1 WHERE id % 100 = 0;
PRAGMA integrity_check;
SELECT count(*), sum(n) FROM t;
PRAGMA mmap_size;
SQL
}
job_sqlite_mmap_stale() {
  sqlite3 -bail "$1/mm.sqlite" "PRAGMA mmap_size=268435456; INSERT INTO t(v, n) VALUES ('stale', 1);"
}

# LMDB maps its data file shared (and its lock file shared and writable). Input in mdb_dump's
# format: keys FROM..TO.
lmdb_input() {
  awk -v from="$1" -v to="$2" 'BEGIN {
    print "VERSION=3"; print "format=print"; print "type=btree"; print "mapsize=67108864"
    print "maxreaders=126"; print "HEADER=END"
    for (i = from; i <= to; i++) printf " key%06d\n value-%06d-fencefs-lmdb\n", i, i
    print "DATA=END" }'
}
job_lmdb() {
  mkdir -p "$1/env"
  lmdb_input 1 10000 | mdb_load "$1/env"
  # read back: every key and value, in order
  diff <(lmdb_input 1 10000 | sed -n '/^HEADER=END$/,$p') \
    <(mdb_dump -p "$1/env" | sed -n '/^HEADER=END$/,$p')
  mdb_stat "$1/env"
  rm "$1/env/lock.mdb"  # reader slots of the last process: not comparable, recreated at open
}
job_lmdb_stale() { lmdb_input 10001 10100 | mdb_load "$1/env"; }

job_shell() {
  mkdir -p "$1"
  echo "one" >"$1/out.txt"
  echo "two" >>"$1/out.txt"
  printf '%s\n' a b c >>"$1/out.txt"
  : >"$1/empty.txt"
  cat "$1/out.txt" "$1/out.txt" >"$1/twice.txt"
  exec 3>>"$1/fd3.txt"
  echo "via fd 3" >&3
  echo "again" >&3
  exec 3>&-
  echo "replaced" >"$1/twice.txt.tmp" && mv "$1/twice.txt.tmp" "$1/replaced.txt"
  cat "$1/out.txt"
}
job_shell_stale() { echo "stale" >>"$1/out.txt"; }

job_logrotate() {
  mkdir -p "$1"
  cd "$1"
  echo "oldest" >log.2
  echo "older" >log.1
  exec 4>>log             # a daemon holding its log open across the rotation
  echo "current 1" >&4
  mv log.2 log.3
  mv log.1 log.2
  mv log log.1
  echo "after rename goes to log.1" >&4
  : >log
  exec 4>&-
  exec 4>>log
  echo "new log" >&4
  exec 4>&-
  gzip -n log.3
  cp -p log.1 log.1.copy && : >log.1.copy.truncated   # copytruncate style
  head -c 0 log && cat log log.1
}
job_logrotate_stale() {
  cd "$1"
  mv log.2 log.4
}

JOBS=(cp_a tar rsync sed git sqlite sqlite_mmap lmdb shell logrotate)

if [ "${1:-}" = "--job" ]; then
  name=$2
  shift 2
  set -e
  "job_$name" "$@"
  exit $?
fi

# ----------------------------------------------------------------------------------------- main

# FENCEFS_LEGACY_SELFTEST=1: no mount, a second plain dir stands in for it and only phase 1 runs
# (checks that the jobs and comparisons themselves are deterministic).
SELFTEST=${FENCEFS_LEGACY_SELFTEST:-}
ROOT_DIR=$(cd "$(dirname "$SELF")/../.." && pwd)
BUILD=${1:-$ROOT_DIR/build}
if [ -z "$SELFTEST" ]; then
  BUILD=$(cd "$BUILD" 2>/dev/null && pwd) || { echo "no build dir: ${1:-build}"; echo "0 passed, 1 failed"; exit 1; }
  FENCEFS=$BUILD/fencefs
  FENCECTL=$BUILD/fencectl
  for b in "$FENCEFS" "$FENCECTL"; do
    [ -x "$b" ] || { echo "missing $b"; echo "0 passed, 1 failed"; exit 1; }
  done
fi
for t in cp tar rsync sed git sqlite3 mdb_load mdb_dump mdb_stat gzip getfattr setfattr fusermount3; do
  command -v "$t" >/dev/null || { echo "missing tool: $t"; echo "0 passed, 1 failed"; exit 1; }
done

TMP=$(mktemp -d "${FENCEFS_TEST_TMP:-/tmp}/fencefs-legacy-XXXXXX")
chmod 755 "$TMP"
BACKING=$TMP/backing
MNT=$TMP/mnt
PLAIN=$TMP/plain
SRC=$TMP/src
SRC2=$TMP/src2
LOGS=$TMP/logs
mkdir -p "$BACKING" "$MNT" "$PLAIN" "$LOGS"
DPID=

cleanup() {
  if grep -q " $MNT " /proc/mounts; then
    fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -u -z "$MNT" 2>/dev/null
  fi
  if [ -n "$DPID" ]; then
    for _ in $(seq 100); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$DPID" 2>/dev/null
    wait "$DPID" 2>/dev/null
  fi
  if [ -z "${FENCEFS_KEEP_TEST_DIRS:-}" ]; then rm -rf "$TMP"; else echo "kept $TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PASS=0
FAIL=0
pass() { PASS=$((PASS + 1)); echo "PASS: $*"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL: $*"; }
finish() {
  echo "$PASS passed, $FAIL failed"
  [ "$FAIL" -eq 0 ]
  exit $?
}

if [ -n "$SELFTEST" ]; then
  BACKING=$MNT
  FENCEFS=true
  FENCECTL=fake_fencectl
  fake_fencectl() {
    if [ "$1" = run ]; then shift 8; "$@"; fi
  }
else
  "$FENCEFS" -f "$BACKING" "$MNT" >"$LOGS/daemon.log" 2>&1 &
  DPID=$!
fi
for _ in $(seq 200); do
  [ -n "$SELFTEST" ] && break
  grep -q " $MNT " /proc/mounts && break
  kill -0 "$DPID" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$SELFTEST" ] && ! grep -q " $MNT " /proc/mounts; then
  fail "mount fencefs ($(tail -5 "$LOGS/daemon.log" | tr '\n' ' '))"
  finish
fi
pass "mount fencefs on $MNT"

# The source tree every copying job reads (outside the mount): modes, owners, set-id bits,
# symlinks, hard links, a FIFO, a sparse file, xattrs, odd names and preserved timestamps.
make_source() {
  local s=$1
  mkdir -p "$s/dir/sub/deeper" "$s/private" "$s/shared" "$s/sticky" "$s/empty-dir"
  printf 'hello\nworld\n' >"$s/text.txt"
  head -c 200000 /dev/urandom >"$s/binary.bin"
  : >"$s/empty"
  echo "secret" >"$s/private/key"
  chmod 600 "$s/private/key"
  chmod 700 "$s/private"
  printf '#!/bin/sh\necho run\n' >"$s/dir/script.sh"
  chmod 755 "$s/dir/script.sh"
  echo "setuid" >"$s/dir/suid"
  chmod 4755 "$s/dir/suid"
  echo "deep" >"$s/dir/sub/deeper/file"
  echo "spaces" >"$s/dir/name with spaces ü.txt"
  ln -s ../text.txt "$s/dir/rel-link"
  ln -s /etc/hostname "$s/dir/abs-link"
  ln -s missing-target "$s/dir/dangling"
  ln "$s/text.txt" "$s/dir/hardlink"
  mkfifo -m 640 "$s/dir/fifo"
  truncate -s 5M "$s/sparse"
  echo "end of sparse" >>"$s/sparse"
  chown 65534:4242 "$s/shared"
  chmod 2775 "$s/shared"
  echo "group" >"$s/shared/g"
  chown 65534:4242 "$s/shared/g"
  chown 1000:1000 "$s/dir/sub"
  chmod 1777 "$s/sticky"
  setfattr -n user.color -v blue "$s/text.txt"
  setfattr -n user.empty "$s/dir/script.sh"
  setfattr -n user.dir -v yes "$s/dir/sub"
  # Fixed times in the past: a copy made in the same second as its source would let rsync treat
  # "now" and the source time as equal and skip setting it (seen with directory mtimes).
  find "$s" -depth -exec touch -h -d '2010-06-07 08:09:10.111111111' {} +
  touch -h -d '2001-02-03 04:05:06.123456789' "$s/dir/rel-link" "$s/text.txt" "$s/dir/sub/deeper"
  touch -d '1999-12-31 23:59:59' "$s/binary.bin" "$s/private"
}
make_source "$SRC"
cp -a "$SRC" "$SRC2"
echo "changed" >>"$SRC2/text.txt"
rm "$SRC2/empty"
echo "added" >"$SRC2/dir/added"
chmod 640 "$SRC2/dir/script.sh"
touch -d '2011-11-11 11:11:11' "$SRC2/dir" "$SRC2/dir/added" "$SRC2/text.txt" "$SRC2"

# user.* xattrs below ., one "xattr PATH NAME=VALUE" line each (not below ./.fencefs or .git).
user_xattrs() {
  getfattr -R -h -d -m '^user\.' --absolute-names . 2>/dev/null |
    awk '/^# file: /{f=substr($0,9); next} NF && f !~ /^\.\/\.fencefs/ && f !~ /\/\.git(\/|$)/ {print "xattr " f " " $0}'
}

# Tree listing for comparisons: path type mode owner size links target, sha256 of regular files,
# user.* xattrs. .git directories are left out (compared through git itself), and so is the mount's
# state dir at the top. $2=mtimes adds modification times (for tools that preserve them).
tree_list() {
  local d=$1 times=${2:-}
  (
    cd "$d" || exit 1
    local fmt='%p %y %m %U:%G %n'
    [ -n "$times" ] && fmt="$fmt %T@"
    find . \( -path ./.fencefs -o -name .git \) -prune -o \( -type d -printf "$fmt\n" \) \
      -o -printf "$fmt %s -> %l\n"
    find . \( -path ./.fencefs -o -name .git \) -prune -o -type f -print0 |
      sort -z | xargs -0 -r sha256sum
    user_xattrs
  ) | LC_ALL=C sort
}

# Hash of everything in BACKING that a refused job must not change (times included).
backing_hash() {
  (
    cd "$BACKING" || exit 1
    find . -path ./.fencefs -prune -o -printf '%p %y %m %U:%G %n %s %T@ %l\n' | LC_ALL=C sort
    find . -path ./.fencefs -prune -o -type f -print0 | sort -z | xargs -0 -r sha256sum
    user_xattrs
  ) | sha256sum | cut -d' ' -f1
}

TOKEN=5
NEWTOKEN=6
if "$FENCECTL" advance --mount "$MNT" / "$TOKEN" >"$LOGS/advance1.log" 2>&1; then
  pass "fencectl advance to the current epoch $TOKEN"
else
  fail "fencectl advance to $TOKEN: $(cat "$LOGS/advance1.log")"
fi

# Every job runs under a timeout: a hang is a failure, never a pass (also not in the phases where
# the job must fail).
JOB_TIMEOUT=${FENCEFS_LEGACY_TIMEOUT:-300}
plain() { timeout -k 5 "$JOB_TIMEOUT" "$@"; }
bound() {  # bound TOKEN CMD...
  local tok=$1
  shift
  if [ -n "$SELFTEST" ]; then "$@"; return; fi
  timeout -k 5 "$JOB_TIMEOUT" "$FENCECTL" run --mount "$MNT" --domain / --token "$tok" -- "$@"
}
hung() { [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; }

# Jobs whose output trees keep the source's mtimes: those times must match too.
declare -A TIMES_OF=([cp_a]=copy [tar]=x [rsync]=r)

# ------------------------------------------------------------ phase 1: the current epoch
for j in "${JOBS[@]}"; do
  t0=$(date +%s%N)
  plain bash "$SELF" --job "$j" "$PLAIN/$j" "$SRC" "$SRC2" >"$LOGS/$j.plain.out" 2>"$LOGS/$j.plain.err"
  rc_plain=$?
  t1=$(date +%s%N)
  bound "$TOKEN" bash "$SELF" --job "$j" "$MNT/$j" "$SRC" "$SRC2" >"$LOGS/$j.mnt.out" 2>"$LOGS/$j.mnt.err"
  rc_mnt=$?
  t2=$(date +%s%N)
  timing="plain $(((t1 - t0) / 1000000)) ms, fencefs $(((t2 - t1) / 1000000)) ms"
  if [ $rc_plain -ne 0 ]; then
    fail "$j on the plain dir exited $rc_plain: $(head -c 400 "$LOGS/$j.plain.err")"
    continue
  fi
  if [ $rc_mnt -ne 0 ]; then
    fail "$j under fencectl run (token $TOKEN) exited $rc_mnt: $(head -c 600 "$LOGS/$j.mnt.err")"
    continue
  fi
  pass "$j exits 0 on the plain dir and under fencectl run ($timing)"
  if diff -u "$LOGS/$j.plain.out" "$LOGS/$j.mnt.out" >"$LOGS/$j.out.diff"; then
    pass "$j printed the same output"
  else
    fail "$j output differs (plain vs fencefs):"$'\n'"$(head -40 "$LOGS/$j.out.diff")"
  fi
  tree_list "$PLAIN/$j" >"$LOGS/$j.plain.tree"
  tree_list "$MNT/$j" >"$LOGS/$j.mnt.tree"
  tree_list "$BACKING/$j" >"$LOGS/$j.backing.tree"
  if diff -u "$LOGS/$j.plain.tree" "$LOGS/$j.mnt.tree" >"$LOGS/$j.tree.diff"; then
    pass "$j left the same tree ($(wc -l <"$LOGS/$j.plain.tree") lines)"
  else
    fail "$j trees differ (plain vs fencefs mount):"$'\n'"$(head -60 "$LOGS/$j.tree.diff")"
  fi
  if diff -u "$LOGS/$j.mnt.tree" "$LOGS/$j.backing.tree" >"$LOGS/$j.backing.diff"; then
    pass "$j: the mount shows exactly what is in BACKING"
  else
    fail "$j mount view vs BACKING:"$'\n'"$(head -40 "$LOGS/$j.backing.diff")"
  fi
  if [ -n "${TIMES_OF[$j]:-}" ]; then
    sub=${TIMES_OF[$j]}
    if diff -u <(tree_list "$PLAIN/$j/$sub" times) <(tree_list "$MNT/$j/$sub" times) \
      >"$LOGS/$j.times.diff"; then
      pass "$j preserved the same mtimes"
    else
      fail "$j mtimes differ:"$'\n'"$(head -30 "$LOGS/$j.times.diff")"
    fi
  fi
done

# Content checks that do not depend on the comparison.
grep -qx ok "$LOGS/sqlite.mnt.out" && grep -qx '10000|25002500.0' "$LOGS/sqlite.mnt.out" &&
  pass "sqlite3: integrity_check ok, 10000 rows" ||
  fail "sqlite3 output: $(cat "$LOGS/sqlite.mnt.out" 2>/dev/null)"
grep -qx ok "$LOGS/sqlite_mmap.mnt.out" && grep -qx '10000|25002600.0' "$LOGS/sqlite_mmap.mnt.out" &&
  grep -qx 268435456 "$LOGS/sqlite_mmap.mnt.out" &&
  pass "sqlite3 with mmap_size=268435456: the mapping stayed in use, integrity_check ok, 10000 rows" ||
  fail "sqlite3 mmap output: $(cat "$LOGS/sqlite_mmap.mnt.out" 2>/dev/null)"
grep -qx '  Entries: 10000' "$LOGS/lmdb.mnt.out" &&
  pass "lmdb: mdb_load of 10000 keys, mdb_dump reads them back, mdb_stat counts them" ||
  fail "lmdb output: $(cat "$LOGS/lmdb.mnt.out" 2>/dev/null) $(head -c 300 "$LOGS/lmdb.mnt.err" 2>/dev/null)"
[ "$(grep -c '^[0-9a-f]\{40\} [0-9a-f]\{40\} ' "$LOGS/git.mnt.out" 2>/dev/null)" = 2 ] &&
  pass "git: two commits with identical ids and trees" ||
  fail "git log output: $(cat "$LOGS/git.mnt.out" 2>/dev/null)"

# ------------------------------------------------------------ phase 2: a superseded token
[ -n "$SELFTEST" ] && finish
# Readers need no token: sqlite3 opens its database read-write and falls back to read-only. A WAL
# database needs its -shm file writable even to be read (README): without a token, only
# ?immutable=1 reads it.
out=$(plain sqlite3 "$MNT/sqlite/db.sqlite" "SELECT count(*) FROM t;" 2>&1)
[ "$out" = 10000 ] && pass "sqlite3 reads a database without a token" ||
  fail "sqlite3 read without a token: $out"
bound "$TOKEN" sqlite3 "$MNT/wal.sqlite" \
  "PRAGMA journal_mode=wal; CREATE TABLE t(x); INSERT INTO t VALUES (1);" >/dev/null 2>&1
out=$(plain sqlite3 -readonly "$MNT/wal.sqlite" "SELECT count(*) FROM t;" 2>&1)
case $out in
  *"unable to open database file"*) pass "sqlite3 -readonly on a WAL database without a token is refused, as the README says" ;;
  *) fail "sqlite3 -readonly on a WAL database without a token: $out" ;;
esac
out=$(plain sqlite3 "file:$MNT/wal.sqlite?immutable=1" "SELECT count(*) FROM t;" 2>&1)
[ "$out" = 1 ] && pass "sqlite3 with ?immutable=1 reads a WAL database without a token" ||
  fail "sqlite3 ?immutable=1 on a WAL database: $out"
# The superseded holders: each follow-up job is bound to $TOKEN while that is current (a stale
# token is refused at bind time), then stops itself until the advance to $NEWTOKEN has acted.
declare -A HOLDER
for j in "${JOBS[@]}"; do
  rm -f "$LOGS/$j.holder.pid"
  bound "$TOKEN" bash -c 'echo $$ >"$1.tmp" && mv "$1.tmp" "$1" && kill -STOP $$; shift; exec "$@"' \
    _ "$LOGS/$j.holder.pid" bash "$SELF" --job "${j}_stale" "$MNT/$j" "$SRC" "$SRC2" \
    >"$LOGS/$j.superseded.out" 2>"$LOGS/$j.superseded.err" &
  HOLDER[$j]=$!
done
for j in "${JOBS[@]}"; do
  for _ in $(seq 1 2000); do
    [ -s "$LOGS/$j.holder.pid" ] && [ "$(awk '{print $3}' "/proc/$(cat "$LOGS/$j.holder.pid")/stat" 2>/dev/null)" = T ] && break
    sleep 0.01
  done
done
# A reader of the WAL database that stays open across the advance: sqlite keeps its database and
# -shm file open read-write and its -shm mapped, but reads are never fenced.
bound "$TOKEN" python3 -c '
import os, signal, sqlite3, sys
c = sqlite3.connect(sys.argv[1])
print(c.execute("SELECT count(*) FROM t").fetchone()[0], flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
print(c.execute("SELECT count(*) FROM t").fetchone()[0], flush=True)
c.close()' "$MNT/wal.sqlite" >"$LOGS/walreader.out" 2>&1 &
WALREADER=$!
for _ in $(seq 1 2000); do  # stopped after its first read
  pid=$(pgrep -f 'import os, signal, sqlite3' | head -1)
  [ -n "$pid" ] && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = T ] && break
  sleep 0.01
done
if "$FENCECTL" advance --mount "$MNT" / "$NEWTOKEN" >"$LOGS/advance2.log" 2>&1; then
  pass "fencectl advance to $NEWTOKEN supersedes token $TOKEN"
else
  fail "fencectl advance to $NEWTOKEN: $(cat "$LOGS/advance2.log")"
fi
pkill -CONT -f 'import os, signal, sqlite3' 2>/dev/null
wait "$WALREADER"
rc=$?
[ $rc = 0 ] && [ "$(tr '\n' ' ' <"$LOGS/walreader.out")" = "1 1 " ] &&
  pass "a superseded sqlite reader of a WAL database still reads after the advance" ||
  fail "superseded sqlite reader: exit $rc, $(head -c 300 "$LOGS/walreader.out")"

stale_round() {  # stale_round LABEL superseded|none
  local label=$1 mode=$2 j before after rc
  for j in "${JOBS[@]}"; do
    before=$(backing_hash)
    if [ "$mode" = superseded ]; then
      kill -CONT "$(cat "$LOGS/$j.holder.pid")"
      wait "${HOLDER[$j]}"
      rc=$?
      mv "$LOGS/$j.superseded.out" "$LOGS/$j.$label.out"
      mv "$LOGS/$j.superseded.err" "$LOGS/$j.$label.err"
      (exit $rc)
    else
      plain bash "$SELF" --job "${j}_stale" "$MNT/$j" "$SRC" "$SRC2" \
        >"$LOGS/$j.$label.out" 2>"$LOGS/$j.$label.err"
    fi
    rc=$?
    after=$(backing_hash)
    local why
    why=$(grep -v '^$' "$LOGS/$j.$label.err" | head -1 | cut -c1-160)
    if hung $rc; then
      fail "$j with $label hung (killed after ${JOB_TIMEOUT}s): $why"
    elif [ $rc -ne 0 ]; then
      pass "$j with $label fails (exit $rc: $why)"
    else
      fail "$j with $label exited 0"
    fi
    if [ "$before" = "$after" ]; then
      pass "$j with $label left BACKING unchanged"
    else
      fail "$j with $label changed BACKING"
    fi
  done
}

# Positive control: the follow-up jobs themselves work (on the plain dir).
for j in "${JOBS[@]}"; do
  if plain bash "$SELF" --job "${j}_stale" "$PLAIN/$j" "$SRC" "$SRC2" >"$LOGS/$j.ctl.out" 2>"$LOGS/$j.ctl.err"; then
    pass "follow-up job $j succeeds on the plain dir"
  else
    fail "follow-up job $j fails even on the plain dir: $(head -c 300 "$LOGS/$j.ctl.err")"
  fi
done

stale_round "superseded token $TOKEN" superseded

# ------------------------------------------------------------ phase 3: no token at all
stale_round "no token" none

# The current holder still works after all of that.
if bound "$NEWTOKEN" bash -c "echo fresh >>'$MNT/shell/out.txt'" 2>"$LOGS/final.err" &&
  [ "$(tail -1 "$MNT/shell/out.txt")" = fresh ]; then
  pass "the holder of epoch $NEWTOKEN still writes"
else
  fail "the holder of epoch $NEWTOKEN cannot write: $(cat "$LOGS/final.err")"
fi

# A clean unmount: the daemon exits 0 (no crash on the way out).
fusermount3 -u "$MNT" 2>"$LOGS/umount.err"
rc_umount=$?
wait "$DPID"
rc_daemon=$?
DPID=
if [ $rc_umount -eq 0 ] && [ $rc_daemon -eq 0 ]; then
  pass "fusermount3 -u unmounts and the daemon exits 0"
else
  fail "unmount: fusermount3 exit $rc_umount, daemon exit $rc_daemon: $(tail -5 "$LOGS/daemon.log" | tr '\n' ' ')"
fi

finish
