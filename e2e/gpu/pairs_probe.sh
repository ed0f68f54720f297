#!/usr/bin/env bash
# Which CUcheckpointRestoreArgs.gpuPairs the driver takes to move a process to another GPU, on a
# 2-GPU machine: in-place lock/checkpoint/restore/unlock through cryo-gpuctl (no CRIU) of a
# 1 GiB job, with and without CUDA_VISIBLE_DEVICES, one pair or a pair for every GPU. Prints one
# line per variant: the restore's answer, whether the job verified afterwards, where it runs.
#   pairs_probe.sh BUNDLE_DIR RESULTS_DIR
set -uo pipefail
B=$1 RES=$2
mkdir -p "$RES"
GPUCTL="$B/bin/cryo-gpuctl" LOAD="$B/bin/cryo-gpu-testload"
u0=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0)
u1=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 1)
st() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d[sys.argv[2]])' "$@" 2>/dev/null; }
probe() {  # probe NAME CVD MAP...
  local name=$1 cvd=$2; shift 2
  local s="$RES/$name.status.json" maps=()
  for m in "$@"; do maps+=(--map "$m"); done
  rm -f "$s"
  if [ -n "$cvd" ]; then env CUDA_VISIBLE_DEVICES="$cvd" "$LOAD" --gib 1 --status "$s" >/dev/null 2>&1 &
  else "$LOAD" --gib 1 --status "$s" >/dev/null 2>&1 & fi
  local pid=$!
  for _ in $(seq 600); do [ "$(st "$s" ready)" = True ] && break; sleep 0.05; done
  "$GPUCTL" --timeout-ms 10000 lock "$pid" >/dev/null && "$GPUCTL" checkpoint "$pid" >/dev/null
  local out; out=$("$GPUCTL" "${maps[@]}" restore "$pid" 2>&1 | tr -d '\n' | grep -o '"message": *"[^"]*"\|"ok": *true')
  "$GPUCTL" unlock "$pid" >/dev/null 2>&1 || "$GPUCTL" rollback "$pid" >/dev/null 2>&1
  local s0; s0=$(st "$s" steps); sleep 3
  local where; where=$(nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader | awk -F', ' -v p="$pid" '$1==p {print $2}')
  [ "$where" = "$u0" ] && where=GPU0; [ "$where" = "$u1" ] && where=GPU1
  echo "$name: cvd=${cvd:-unset} pairs=[$*] restore=${out:-?} steps ${s0}->$(st "$s" steps) verified=$(st "$s" verified) on=$where"
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
}
# The same swap on a process that CRIU dumped and restored first (as cryod does).
criu_swap() {
  local s="$RES/criu-swap.status.json" d="$RES/criu-swap.img"
  rm -rf "$s" "$d"; mkdir -p "$d"
  env CUDA_VISIBLE_DEVICES=0 setsid "$LOAD" --gib 1 --status "$s" </dev/null >/dev/null 2>&1 &
  local pid=$!
  for _ in $(seq 600); do [ "$(st "$s" ready)" = True ] && break; sleep 0.05; done
  "$GPUCTL" --timeout-ms 10000 lock "$pid" >/dev/null && "$GPUCTL" checkpoint "$pid" >/dev/null
  "$B/bin/criu" dump -t "$pid" -D "$d" -o dump.log >/dev/null 2>&1 || { echo "criu-swap: dump failed"; return; }
  wait "$pid" 2>/dev/null
  "$B/bin/criu" restore -D "$d" -o restore.log --restore-detached >/dev/null 2>&1 || { echo "criu-swap: restore failed"; return; }
  local out; out=$("$GPUCTL" --map "$u0=$u1" --map "$u1=$u0" restore "$pid" 2>&1 | tr -d '\n' | grep -o '"message": *"[^"]*"\|"ok": *true')
  "$GPUCTL" unlock "$pid" >/dev/null 2>&1 || "$GPUCTL" rollback "$pid" >/dev/null 2>&1
  local s0; s0=$(st "$s" steps); sleep 3
  echo "criu-swap: restore=${out:-?} steps ${s0}->$(st "$s" steps) verified=$(st "$s" verified)"
  kill "$pid" 2>/dev/null; rm -rf "$d"
}
if [ "${PROBE_ONLY:-}" = criu ]; then criu_swap; exit 0; fi
probe cvd0-one-pair 0 "$u0=$u1"
probe cvd0-swap 0 "$u0=$u1" "$u1=$u0"
probe all-one-pair "" "$u0=$u1"
probe all-swap "" "$u0=$u1" "$u1=$u0"
