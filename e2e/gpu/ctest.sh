#!/usr/bin/env bash
# The GPU suite as a ctest entry (gpu.suite). Without an NVIDIA GPU (CI never has one) it says
# so and exits 77, which ctest reports as "Skipped", not as passed. With one, it bundles this
# build (bundle.sh) and runs the whole suite from the bundle (lease-run.sh); CRYO_GPU_* pass
# through (see run.sh).
#
#   e2e/gpu/ctest.sh BUILD_DIR
set -uo pipefail
BUILD=${1:?build dir}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/e2e/gpu/gpu_check.sh"
WHY=$(no_gpu_reason)
if [ -n "$WHY" ]; then
  echo "SKIP: $WHY (docs/gpu.md)"
  exit 77
fi
T=$(mktemp -d /var/tmp/cryo-gpu-ctest-XXXXXX)
bash "$ROOT/e2e/gpu/bundle.sh" "$BUILD" "$T/gpu-bundle" || { echo "FAIL: bundle.sh"; exit 1; }
bash "$T/gpu-bundle/lease-run.sh" "$T/gpu-bundle" "$T/out"
rc=$?
echo "results in $T/out"
exit "$rc"
