#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time: ctest's fuzz.<name> (test/fuzz/CMakeLists.txt).
#   fuzz-run.sh BINARY SEED_CORPUS SECONDS ARTIFACT_DIR
# The seeds in the repository are only read; what the run discovers goes to a scratch corpus.
# A crash, leak, timeout, out-of-memory or sanitizer report fails the test, and the input that
# caused it is kept in ARTIFACT_DIR (reproduce: BINARY ARTIFACT_DIR/crash-...).
set -euo pipefail
bin=$1 seeds=$2 secs=$3 artifacts=$4
work=$(mktemp -d /tmp/cryo-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$artifacts"
# -timeout: one input taking seconds is a hang worth failing on; -rss_limit_mb: so is one that
# needs gigabytes. -max_len lets the fuzzer build inputs larger than the small seeds.
if "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "$work/corpus" "$seeds"; then
  exit 0
fi
echo "fuzz: $(basename "$bin") failed; inputs kept in $artifacts:" >&2
ls -l "$artifacts" >&2
exit 1
