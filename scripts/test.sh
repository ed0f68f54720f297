#!/usr/bin/env bash
# Runs every test: sets the machine up (idempotent), builds, then ctest. Unit tests first, then
# the integration suites (real CRIU, real containerd). GPU tests skip here and say so: they run
# on a GPU machine with e2e/gpu/run.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
export BUILD_DIR
bash "$ROOT/scripts/setup.sh"
cd "$BUILD_DIR"
# -j1: the integration tests mount, kill daemons and need their pids free.
ctest --output-on-failure -j1 "$@"
