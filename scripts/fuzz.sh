#!/usr/bin/env bash
# Builds every libFuzzer target (tests/fuzz/NAME.cc -> build-fuzz/NAME) with clang, ASan and UBSan,
# then runs each for a bounded time. Exits non-zero if anything fails to build, or if any target
# reports a crash, sanitizer error, leak, timeout or out-of-memory; the offending input is kept in
# build-fuzz/fuzz-artifacts/NAME/ and the command to reproduce it is printed.
#
# Usage: scripts/fuzz.sh [NAME...]          (default: every tests/fuzz/*.cc)
# Environment:
#   FUZZ_SECONDS   time per target, passed to -max_total_time (default 60)
#   FUZZ_JOBS      build parallelism (default 2)
#   FUZZ_BUILD_DIR build directory (default build-fuzz)
#   CC, CXX        clang compilers (default clang, clang++)
#
# Seeds come from tests/fuzz/corpus/NAME/ (or tests/fuzz/corpus/ itself), and a dictionary from
# tests/fuzz/corpus/NAME.dict when present. New corpus entries go to build-fuzz/fuzz-corpus/NAME/,
# never into the source tree.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}
SECS=${FUZZ_SECONDS:-60}
JOBS=${FUZZ_JOBS:-2}
CC=${CC:-clang}
CXX=${CXX:-clang++}

die() { echo "fuzz: $*" >&2; exit 2; }

[[ $SECS =~ ^[1-9][0-9]*$ ]] || die "FUZZ_SECONDS must be a positive integer, got '$SECS'"
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || die "FUZZ_JOBS must be a positive integer, got '$JOBS'"
command -v "$CXX" >/dev/null || die "$CXX not found (apt-get install clang libclang-rt-14-dev)"
command -v "$CC" >/dev/null || die "$CC not found (apt-get install clang libclang-rt-14-dev)"

# --- Can this clang link a libFuzzer binary at all? ----------------------------------------------
# Debian ships the libFuzzer runtime (libclang_rt.fuzzer-ARCH.a) in libclang-rt-N-dev, separately
# from clang itself; without it every fuzz target fails at link time with "cannot find
# .../libclang_rt.fuzzer-x86_64.a". Probe once, with the same sanitizers, and say what to install.
probe_dir=$(mktemp -d)
trap 'rm -rf "$probe_dir"' EXIT
printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
  'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' \
  >"$probe_dir/probe.cc"
if ! "$CXX" -fsanitize=fuzzer,address,undefined "$probe_dir/probe.cc" -o "$probe_dir/probe" \
    2>"$probe_dir/err"; then
  cat "$probe_dir/err" >&2
  runtime=$("$CXX" -print-resource-dir 2>/dev/null)/lib/linux/libclang_rt.fuzzer-$(uname -m).a
  major=$("$CXX" -dumpversion 2>/dev/null | cut -d. -f1)
  if [ ! -e "$runtime" ]; then
    die "$CXX cannot link -fsanitize=fuzzer: $runtime is missing; install libclang-rt-${major}-dev"
  fi
  die "$CXX cannot link -fsanitize=fuzzer (see the error above)"
fi

# --- Targets --------------------------------------------------------------------------------------
targets=()
if [ $# -gt 0 ]; then
  for t in "$@"; do
    [ -f "tests/fuzz/$t.cc" ] || die "no fuzz target tests/fuzz/$t.cc"
    targets+=("$t")
  done
else
  for src in tests/fuzz/*.cc; do
    [ -e "$src" ] || continue
    targets+=("$(basename "$src" .cc)")
  done
fi
[ ${#targets[@]} -gt 0 ] || die "no fuzz targets in tests/fuzz/"

# --- Build ------------------------------------------------------------------------------------------
# -fsanitize=fuzzer-no-link puts libFuzzer's coverage instrumentation into the libraries too: the
# CMake target only adds -fsanitize=fuzzer to the harness itself, and a fuzzer blind to the parser's
# branches degenerates into random testing.
echo "fuzz: configuring $BUILD (clang, ASan+UBSan, libFuzzer)"
mkdir -p "$BUILD"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link" -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link" \
  -DFENCEFS_FUZZ=ON -DFENCEFS_SANITIZE=address,undefined -DFENCEFS_BUILD_TESTS=OFF \
  -DFENCEFS_BUILD_BENCH=OFF >"$BUILD/fuzz-configure.log" 2>&1 ||
  { cat "$BUILD/fuzz-configure.log" >&2; die "cmake configure failed"; }
echo "fuzz: building ${targets[*]}"
cmake --build "$BUILD" --target "${targets[@]}" -j"$JOBS" || die "build failed"

# --- Run ------------------------------------------------------------------------------------------
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

failed=()
for t in "${targets[@]}"; do
  corpus="$BUILD/fuzz-corpus/$t"
  artifacts="$BUILD/fuzz-artifacts/$t"
  log="$BUILD/fuzz-logs/$t.log"
  mkdir -p "$corpus" "$(dirname "$log")"
  rm -rf "$artifacts" && mkdir -p "$artifacts"

  args=(-max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$artifacts/")
  seeds=()
  if [ -d "tests/fuzz/corpus/$t" ]; then
    seeds=("$ROOT/tests/fuzz/corpus/$t")
  elif [ -d tests/fuzz/corpus ]; then
    seeds=("$ROOT/tests/fuzz/corpus")
  fi
  [ -f "tests/fuzz/corpus/$t.dict" ] && args+=(-dict="$ROOT/tests/fuzz/corpus/$t.dict")

  echo "fuzz: running $t for ${SECS}s (log: $log)"
  rc=0
  # The outer timeout only guards against a wedged fuzzer; libFuzzer stops itself at SECS.
  timeout --kill-after=10 $((SECS + 120)) \
    "$BUILD/$t" "${args[@]}" "$corpus" "${seeds[@]}" >"$log" 2>&1 || rc=$?

  findings=$(find "$artifacts" -type f | head -5)
  if [ "$rc" -ne 0 ] || [ -n "$findings" ] || ! grep -q '^Done [0-9]* runs' "$log"; then
    echo "fuzz: FAIL $t (exit $rc)" >&2
    tail -n 60 "$log" >&2
    while IFS= read -r f; do
      [ -n "$f" ] && echo "fuzz: finding kept at $f; reproduce with: $BUILD/$t '$f'" >&2
    done <<<"$findings"
    failed+=("$t")
  else
    grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "$log" | sed "s/^/fuzz: $t: /"
    echo "fuzz: ok $t ($(find "$corpus" -type f | wc -l) corpus entries)"
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: all ${#targets[@]} target(s) ran ${SECS}s with no findings"
