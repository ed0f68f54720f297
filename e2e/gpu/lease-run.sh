#!/usr/bin/env bash
# Runs the GPU suite from a bundle on a lent GPU machine and packs what it found into one
# folder that comes back whole (the lease returns at most 8 files): the summary, the benchmark
# table and a tarball of every result and log.
#
#   e2e/gpu/lease-run.sh BUNDLE_DIR OUT_DIR
#
# The suite's own settings pass through (CRYO_GPU_PARTS, CRYO_GPU_SIZES, CRYO_GPU_BENCH_SIZES,
# CRYO_GPU_THP, ...; see run.sh). Typical calls, each well inside a 10-minute command:
#   CRYO_GPU_PARTS="plugin cryod" CRYO_GPU_BENCH_SIZES="1 8 32" lease-run.sh b out   # 1 GPU
#   CRYO_GPU_PARTS="torch refuse" lease-run.sh b out                                 # 1 GPU
#   CRYO_GPU_PARTS="multi" lease-run.sh b out                                        # 2 GPUs
# Cross-node (two leases, one after the other): part "export" leaves the packed checkpoint in
# OUT (xnode.tar.xz.N); carry those files to the next machine and run part "import" there with
# CRYO_GPU_IMPORT_DIR naming where they are (and CRYO_GPU_NODE=gpu-node-b).
set -uo pipefail
B=$(cd "${1:?bundle dir}" && pwd)
OUT=${2:?out dir}
mkdir -p "$OUT"
RES=$(mktemp -d /var/tmp/cryo-gpu-results-XXXXXX)
export CRYO_GPU_EXPORT_DIR=${CRYO_GPU_EXPORT_DIR:-$OUT}
# The machine's GPUs are shared with nobody during the lease, but NVLink multicast must stay off.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{
  echo "== $(date -u +%FT%TZ) $(uname -r), $(nproc) cores, $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>&1
  df -h /var/tmp | tail -1
} | tee "$OUT/machine.txt"
# The log goes straight to OUT: if the lease's time limit stops the suite, what ran comes back.
CRYO_GPU_RESULTS=$RES bash "$B/run.sh" 2>&1 | tee "$OUT/suite.log" |
  grep -E '^\[gpu-e2e\] [a-z0-9-]+: (PASS|FAIL|SKIP)|^==|^SKIP|^FAIL|^[a-z0-9-]+ +(PASS|FAIL|SKIP)'
rc=${PIPESTATUS[0]}
sed -n '/== GPU e2e summary/,$p' "$OUT/suite.log" >"$OUT/summary.txt"
[ -f "$RES/bench-table.txt" ] && cp "$RES/bench-table.txt" "$OUT/"
tar -C "$RES" -czf "$OUT/results.tar.gz" . 2>/dev/null
echo "suite exit $rc; results in $OUT"
exit "$rc"
