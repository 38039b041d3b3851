#!/usr/bin/env bash
# Installs what is missing, builds, and runs every check and test suite. Used by .ci/run.
#   scripts/test.sh            everything
#   TEST_PARTS="format tidy"   only these parts, from: format tidy clang unit mount ring shell asan
#                              fuzz
#                              (unit, format, tidy and clang need no root and mount nothing)
#   SKIP_SANITIZE=1            skip the ASan/UBSan pass (same as leaving out "asan")
#   SKIP_FUZZ=1                skip the bounded fuzzing pass (same as leaving out "fuzz")
# Mounts made by the tests live below a directory of this run (FENCEFS_TEST_TMP), and the cleanup
# unmounts only those: other runs on the same machine are left alone.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
PARTS=" ${TEST_PARTS:-format tidy clang unit mount ring shell asan fuzz} "
[ -n "${SKIP_SANITIZE:-}" ] && PARTS=${PARTS/ asan / }
[ -n "${SKIP_FUZZ:-}" ] && PARTS=${PARTS/ fuzz / }
want() { case "$PARTS" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
JOBS=$(nproc)

scripts/setup.sh || exit 1
# setup.sh builds fencefs and fencectl only; the suites, the bench programs and the rest here.
cmake --build build -j"$JOBS" >/dev/null || { echo "build failed"; exit 1; }

failed=()
passed=0
# Each suite's output is also kept in build/test-logs/NAME.log (one run per tree at a time); a
# failed suite's is printed again at the end, where a CI log that shows only its last lines still
# has it.
LOGS=build/test-logs
rm -rf "$LOGS" && mkdir -p "$LOGS" || exit 1
log_of() { echo "$LOGS/${1//:/_}.log"; }
run() {  # run NAME CMD...
  local name=$1
  shift
  echo "=== $name"
  local start=$SECONDS log rc=0 pid
  log=$(log_of "$name")
  # The suite writes to a file that tail follows until the suite ends: its output still streams,
  # and a process it leaves behind holding the file cannot hold the run open (as a pipe to tee's
  # writer would). A background job starts with SIGINT and SIGQUIT ignored, which its daemons
  # would inherit (libfuse leaves an ignored signal alone): the subshell gives them back their
  # default, and the trap passes Ctrl-C on. CMD may be a shell function, so no exec.
  : >"$log" || { failed+=("$name"); return 1; }  # there before tail opens it
  (
    trap - INT QUIT
    "$@"
  ) >"$log" 2>&1 &
  pid=$!
  trap 'kill "$pid" 2>/dev/null; exit 130' INT
  tail -n +1 -f -s 0.2 --pid="$pid" "$log"
  wait "$pid" || rc=$?
  trap - INT
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1))
    echo "=== $name: ok ($((SECONDS - start)) s)"
  else
    failed+=("$name")
    echo "=== $name: FAILED ($((SECONDS - start)) s)"
    return 1
  fi
}

RUN_TMP=$(mktemp -d /tmp/fencefs-run-XXXXXX) || exit 1
chmod 755 "$RUN_TMP"  # the tests' unprivileged users must reach their mountpoints
export FENCEFS_TEST_TMP=$RUN_TMP
# Unmounts what this run's tests left mounted (an interrupted or crashed test), then removes the
# run's directory. Mounts elsewhere, other runs' included, are not touched.
cleanup() {
  awk -v top="$RUN_TMP/" '$3 ~ /^fuse/ && index($2, top) == 1 { print $2 }' /proc/mounts |
    sort -r | while read -r m; do fusermount3 -u -z "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
  if ! awk -v top="$RUN_TMP/" 'index($2, top) == 1 { found = 1 } END { exit !found }' /proc/mounts; then
    rm -rf --one-file-system "$RUN_TMP"
  fi
}
trap cleanup EXIT

B=build
if want format && command -v clang-format >/dev/null && git rev-parse --git-dir >/dev/null 2>&1; then
  run "clang-format" sh -c 'git ls-files "*.cc" "*.h" "*.c" | xargs clang-format --dry-run --Werror'
fi
if want format; then
  # Files over 500 lines and functions over 80 need a `// long: <reason>` comment.
  run "size" scripts/check_size.py src
  run "shellcheck" sh -c 'shellcheck -S warning scripts/*.sh tests/shell/*.sh .ci/run'
fi
if want tidy; then
  # .clang-tidy holds the checks (and why each disabled one is off) and makes findings errors;
  # build/compile_commands.json says how each file is compiled. Findings go to stdout.
  tidy() { git ls-files 'src/*.cc' | xargs -P"$JOBS" -n4 clang-tidy -p "$B" --quiet 2>/dev/null; }
  run "clang-tidy" tidy
fi
if want clang; then
  # The same tree with clang, warnings as errors (-Wthread-safety checks the lock annotations),
  # beside GCC's build/.
  clang_build() {
    CC=clang CXX=clang++ cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DFENCEFS_WERROR=ON >/dev/null && cmake --build build-clang -j"$JOBS" >/dev/null
  }
  if run "clang-build" clang_build && want unit; then
    run "clang:unit" ctest --test-dir build-clang -L unit -j"$JOBS" --output-on-failure --timeout 300
  fi
fi
if want unit; then
  run "unit" ctest --test-dir "$B" -L unit -j"$JOBS" --output-on-failure --timeout 300
fi
if want mount; then
  # One binary per suite (the suites share a mount per process where they can).
  for t in "$B"/*_test; do
    [ -x "$t" ] && run "$(basename "$t")" "$t" --gtest_brief=1
  done
fi
if want ring; then
  # The mount suites once more with every daemon taking its requests through FUSE over io_uring
  # (-o uring, where the kernel offers it). workers_test is about the /dev/fuse loop the rings
  # replace; ring_test sets the kernel's switch itself.
  uring=/sys/module/fuse/parameters/enable_uring
  if [ -w "$uring" ]; then
    was=$(cat "$uring")
    echo Y >"$uring"
    for t in "$B"/*_test; do
      case $t in */workers_test | */ring_test) continue ;; esac
      [ -x "$t" ] && run "ring:$(basename "$t")" env FENCEFS_TEST_MOUNT_OPTS="-o uring" "$t" --gtest_brief=1
    done
    echo "$was" >"$uring"
  else
    echo "=== ring: this kernel has no FUSE over io_uring ($uring)"
    failed+=("ring")
  fi
fi
if want shell; then
  for s in tests/shell/*.sh; do
    [ -f "$s" ] && run "$(basename "$s")" bash "$s" "$B"
  done
fi

if want asan; then
  # The whole suite once more under ASan and UBSan.
  echo "=== building with -fsanitize=address,undefined"
  if cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DFENCEFS_SANITIZE=address,undefined \
      >/dev/null && cmake --build build-asan -j"$JOBS" >/dev/null; then
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
    for t in build-asan/*_tests; do
      [ -x "$t" ] && run "asan:$(basename "$t")" "$t" --gtest_brief=1
    done
    if want mount; then
      for t in build-asan/*_test; do
        # libfiu's LD_PRELOAD cannot run beside ASan's runtime (it crashes at start), so the one
        # test that injects fsync errors with fiu-run runs in the plain pass only; under ASan the
        # same failure path is covered by journal_tests' fault-injecting file layer.
        [ -x "$t" ] && run "asan:$(basename "$t")" "$t" --gtest_brief=1 \
          --gtest_filter=-Durability.FsyncFailureFailsClosed:ExitCodes.JournalFailureIsJournalIo
      done
    fi
  else
    failed+=("asan-build")
  fi
fi

if want fuzz && [ -f scripts/fuzz.sh ]; then
  run "fuzz" env FUZZ_SECONDS="${FUZZ_SECONDS:-60}" bash scripts/fuzz.sh
fi

for name in "${failed[@]}"; do
  log=$(log_of "$name")
  [ -f "$log" ] || continue
  echo
  echo "=== $name failed; the last 150 lines of its output ($log):"
  tail -n 150 "$log"
done
echo
echo "suites: ${passed} passed, ${#failed[@]} failed${failed:+: ${failed[*]}}"
echo "${passed} passed, ${#failed[@]} failed"
[ ${#failed[@]} -eq 0 ]
