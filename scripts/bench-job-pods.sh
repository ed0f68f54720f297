#!/usr/bin/env bash
# Benchmark (not a test): a job of two pods on two nodes against one pod alone, on the container
# path (issue 37): the containerd e2e's two nodes with their pod network, kubelet's calls made by
# the e2e's CRI client. Prints one line: the stop's checkpoint (StopContainer) of one pod and of
# the job (both members at one cut), the cut's skew, and the replacement's start (the resume) of
# one pod and of the job's two started together; each a median of REPS, with its ratio to one
# pod alone. Needs root and what scripts/setup.sh installs (containerd, runc, CRIU).
# Usage: REPS=5 scripts/bench-job-pods.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
TEST=$BUILD_DIR/e2e/containerd/cri_e2e_test
[ -x "$TEST" ] || { echo "missing $TEST: run scripts/setup.sh" >&2; exit 1; }
log=$(mktemp /tmp/cryo-bench-job-pods-XXXXXX.log)
if ! CRYO_BENCH_REPS=${REPS:-3} "$TEST" --gtest_also_run_disabled_tests \
    --gtest_filter='ContainerModeE2e.DISABLED_BenchJobPodsAgainstOnePodAlone' >"$log" 2>&1; then
  tail -40 "$log" >&2
  echo "bench-job-pods: failed; the whole log: $log" >&2
  exit 1
fi
grep '^\[bench\]' "$log"
rm -f "$log"
