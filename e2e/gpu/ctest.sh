#!/usr/bin/env bash
# The GPU suite as a ctest entry (gpu.suite). Without an NVIDIA GPU (CI never has one) it says
# so and exits 77, which ctest reports as "Skipped", not as passed. With one, it bundles this
# build (bundle.sh) and runs the whole suite from the bundle (lease-run.sh); CRYO_GPU_* pass
# through (see run.sh).
#
#   e2e/gpu/ctest.sh BUILD_DIR
set -uo pipefail
BUILD=${1:?build dir}
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "SKIP: no NVIDIA GPU on this machine (nvidia-smi not found); the GPU suite needs one (docs/gpu.md)"
  exit 77
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP: nvidia-smi finds no usable GPU: $(nvidia-smi -L 2>&1 | head -1)"
  exit 77
fi
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d /var/tmp/cryo-gpu-ctest-XXXXXX)
bash "$ROOT/e2e/gpu/bundle.sh" "$BUILD" "$T/gpu-bundle" || { echo "FAIL: bundle.sh"; exit 1; }
bash "$T/gpu-bundle/lease-run.sh" "$T/gpu-bundle" "$T/out"
rc=$?
echo "results in $T/out"
exit "$rc"
