#!/usr/bin/env bash
# Runs every test: sets the machine up (idempotent), builds, then ctest. Unit tests first, then
# the integration suites (real CRIU, real containerd). GPU tests skip here and say so: they run
# on a GPU machine with e2e/gpu/run.sh. Arguments go to that first ctest (e.g. -R PATTERN).
#
# Then two more build directories, each skipped with its variable set to 0:
#   CRYO_TEST_FUZZ      build-fuzz: clang, -DCRYO_FUZZ=ON; every libFuzzer target (test/fuzz) runs
#                       for CRYO_FUZZ_SECONDS (45) from its seeds (ctest -L fuzz).
#   CRYO_TEST_SANITIZE  build-asan: -DCRYO_SANITIZE=address,undefined; the unit tests and the
#                       process e2e tests again under AddressSanitizer + UndefinedBehaviorSanitizer,
#                       every finding fatal.
# Both are compiled at the lowest priority while the first ctest runs; their tests run after it.
# The script fails if any of the three failed; all three run regardless.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}
SANITIZE_BUILD_DIR=${SANITIZE_BUILD_DIR:-$ROOT/build-asan}
export BUILD_DIR
bash "$ROOT/scripts/setup.sh"
jobs=$(nproc)
failed=()

configure_fuzz() {
  # Only what the fuzz targets link is built (no plugins, shim, tests or CUDA programs).
  CC=clang-14 CXX=clang++-14 cmake -S "$ROOT" -B "$FUZZ_BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCRYO_FUZZ=ON -DCRYO_FUZZ_SECONDS="${CRYO_FUZZ_SECONDS:-45}" \
    -DCRYO_BUILD_TESTS=OFF -DCRYO_WITH_PLUGINS=OFF -DCRYO_WITH_SHIM=OFF -DCRYO_WERROR=OFF \
    -DCRYO_BUILD_CUDA_TESTS=OFF >/dev/null
}

configure_sanitize() {
  # kubectl-cryo is linked dynamically here: the sanitizers' runtimes are shared libraries.
  # -O0 and line tables only: the instrumented -O1 build cost twice the compile time on CI's
  # two cores, and the sanitizers' reports still name file and line.
  cmake -S "$ROOT" -B "$SANITIZE_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Sanitize \
    -DCMAKE_C_FLAGS="-O0 -g1" -DCMAKE_CXX_FLAGS="-O0 -g1" \
    -DCRYO_SANITIZE=address,undefined -DCRYO_KUBECTL_STATIC=OFF -DCRYO_BUILD_CUDA_TESTS=OFF \
    >/dev/null
}

# The fuzz and sanitizer builds compile while the main tests run, at the lowest CPU priority:
# those tests (-j1) mostly wait on CRIU, containerd and the disk, and a waiting core would
# otherwise be idle for their 20 minutes. Each build's result is a file the later steps read.
side_log="$BUILD_DIR/test-side-builds.log"
rm -f "$BUILD_DIR"/.side-fuzz-ok "$BUILD_DIR"/.side-sanitize-ok
(
  if [ "${CRYO_TEST_FUZZ:-1}" = 1 ]; then
    configure_fuzz && nice -n 19 cmake --build "$FUZZ_BUILD_DIR" -j"$jobs" --target cryo_fuzzers &&
      touch "$BUILD_DIR/.side-fuzz-ok"
  fi
  if [ "${CRYO_TEST_SANITIZE:-1}" = 1 ]; then
    configure_sanitize && nice -n 19 cmake --build "$SANITIZE_BUILD_DIR" -j"$jobs" &&
      touch "$BUILD_DIR/.side-sanitize-ok"
  fi
) >"$side_log" 2>&1 &
side_pid=$!
# A failed or interrupted run does not leave the builds compiling behind it.
kill_tree() {
  local c
  for c in $(pgrep -P "$1" || true); do kill_tree "$c"; done
  kill "$1" 2>/dev/null || true
}
trap 'kill_tree $side_pid' EXIT

# -j1: the integration tests mount, kill daemons and need their pids free.
(cd "$BUILD_DIR" && ctest --output-on-failure -j1 "$@") || failed+=(tests)

echo "test.sh: waiting for the fuzz and sanitizer builds ($side_log)"
wait "$side_pid" || true
trap - EXIT
side_failed() {
  echo "test.sh: the $1 build failed; the end of $side_log:" >&2
  tail -n 60 "$side_log" >&2
  failed+=("$1-build")
}

if [ "${CRYO_TEST_FUZZ:-1}" = 1 ]; then
  if [ -e "$BUILD_DIR/.side-fuzz-ok" ]; then
    (cd "$FUZZ_BUILD_DIR" && ctest --output-on-failure -j1 -L fuzz) || failed+=(fuzz)
  else
    side_failed fuzz
  fi
fi

if [ "${CRYO_TEST_SANITIZE:-1}" = 1 ]; then
  if [ -e "$BUILD_DIR/.side-sanitize-ok" ]; then
    export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=1
    export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
    # The formatting and chart checks are not programs of ours: once is enough.
    (cd "$SANITIZE_BUILD_DIR" && ctest --output-on-failure -j1 -L unit -E '^(lint|deploy)\.') ||
      failed+=(sanitize-unit)
    (cd "$SANITIZE_BUILD_DIR" &&
      ctest --output-on-failure -j1 -L e2e -R '^(ProcessTest|CriuOptionsTest|ProcessCredentialsE2e)\.') ||
      failed+=(sanitize-e2e)
  else
    side_failed sanitize
  fi
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "test.sh: failed: ${failed[*]}" >&2
  exit 1
fi
echo "test.sh: all passed"
