#!/usr/bin/env bash
# GPU e2e suite, run from a bundle made by bundle.sh (or from a build dir with CRYO_BUNDLE set).
# Needs root and an NVIDIA GPU with driver >= 570 (checkpoint API); skips when there is none.
#
# Env: CRYO_GPU_PARTS   which parts run (default "plugin cryod torch refuse multi"): plugin =
#                       in-place cycles through cryo-gpuctl (no CRIU); the others, and "export"
#                       / "import" (the cross-node test over two machines), are in cryod.sh;
#                       "fastpath-proof", "fastpath", "fast-store", "drain-scale", "periodic-stall", "incremental",
#                       "driver-floor", "park", "fastpath-multi" and
#                       "node-preempt" (the fast-path library; the last two need two GPUs or more) in
#                       fastpath.sh; "pods" (GPU pods through containerd and the shim) in pods.sh;
#                       "multi-node" the pods part's jobs across two nodes and their one-node
#                       baseline alone (issue 37: one GPU per node on a two-GPU machine; on one
#                       GPU both nodes share it)
#      CRYO_GPU_BENCH_SIZES  GiB per cryod checkpoint/restore and its hand-run baseline (cryod.sh)
#      CRYO_GPU_SIZES   GiB held by the test program per in-place cycle (default "1 8")
#      CRYO_GPU_THP     1: repeat the largest size with THP=always during checkpoint
#      CRYO_GPU_RESULTS where JSON results and logs go (default ./results)
#      CRYO_GPU_CRYOD_ARGS more flags for the suite's cryod (e.g. "--gpu-fast-path-threads 8")
#      CRYO_GPU_TOUCH_GIB  write and free this much host memory twice before the parts, logging
#                       each pass's rate (results/touch.txt): a VM's memory backed on first touch
#
# Tests (each prints PASS/FAIL/SKIP):
# (A size listed twice runs twice: on VMs whose memory grows on first touch, the first large run
# also pays for that growth.)
#   inplace-N     lock, checkpoint, restore, unlock a live job holding N GiB; the job verifies
#                 every word of its device memory afterwards; timings and GPU memory freed
#   inplace-1-pairs  the same, restoring with explicit GPU pairs (the remap path)
#   lock-timeout  a kernel that runs 5 s: lock with a 500 ms bound fails with DEADLINE_EXCEEDED
#                 and the job keeps running
#   managed       a job using managed (UVM) memory: what discover and the driver say
set -uo pipefail

B=${CRYO_BUNDLE:-$(cd "$(dirname "$0")" && pwd)}
RES=${CRYO_GPU_RESULTS:-$PWD/results}
SIZES=${CRYO_GPU_SIZES:-1 8}
PARTS=${CRYO_GPU_PARTS:-plugin cryod torch refuse multi}
GPUCTL="$B/bin/cryo-gpuctl"
LOAD="$B/bin/cryo-gpu-testload"
mkdir -p "$RES"
declare -a SUMMARY=()
FAILED=0
PIDS=()

log() { printf '[gpu-e2e] %s\n' "$*" >&2; }
result() {  # result NAME PASS|FAIL|SKIP detail
  SUMMARY+=("$(printf '%-14s %-4s %s' "$1" "$2" "$3")")
  [ "$2" = FAIL ] && FAILED=1
  log "$1: $2 $3"
}
cleanup() { for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT

. "$(dirname "${BASH_SOURCE[0]}")/gpu_check.sh"
WHY=$(no_gpu_reason)
if [ -n "$WHY" ]; then
  echo "SKIP: $WHY"
  exit 0
fi
[ "$(id -u)" = 0 ] || { echo "FAIL: the GPU checkpoint API needs root"; exit 1; }

# jget FILE EXPR: a field of a JSON file (python3 is on every machine we target).
jget() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {"d": d}))' "$1" "$2" 2>/dev/null; }

# wait_until TIMEOUT_S CMD...: polls CMD every 50 ms.
wait_until() {
  local deadline=$(( $(date +%s%N) + $1 * 1000000000 )); shift
  until "$@"; do
    [ "$(date +%s%N)" -gt "$deadline" ] && return 1
    sleep 0.05
  done
}
status_ready() { [ -s "$1" ] && [ "$(jget "$1" 'd["ready"]')" = True ]; }
steps_past() { [ -s "$1" ] && [ "$(jget "$1" 'd["steps"]')" -ge "$2" ] 2>/dev/null; }

start_load() {  # start_load NAME ARGS... -> sets LOAD_PID, LOAD_STATUS
  local name=$1; shift
  LOAD_STATUS="$RES/$name.status.json"
  rm -f "$LOAD_STATUS"
  "$LOAD" --status "$LOAD_STATUS" "$@" >"$RES/$name.load.log" 2>&1 &
  LOAD_PID=$!
  PIDS+=("$LOAD_PID")
  wait_until 300 status_ready "$LOAD_STATUS"
}

log "bundle $(cat "$B/VERSION" 2>/dev/null), $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=index,name,uuid,memory.total,driver_version --format=csv | tee "$RES/gpus.csv" >&2
"$GPUCTL" status | tee "$RES/status.json" >&2
cat /proc/driver/nvidia/version /proc/driver/nvidia/gpus/*/information >"$RES/driver-info.txt" 2>&1
THP_FILE=/sys/kernel/mm/transparent_hugepage/enabled
log "THP: $(cat $THP_FILE 2>/dev/null || echo unknown)"

inplace() {  # inplace NAME GIB [gpuctl options]
  local name=$1 gib=$2; shift 2
  if ! start_load "$name" --gib "$gib"; then
    result "$name" FAIL "test program did not get ready ($(tail -1 "$RES/$name.load.log"))"
    return
  fi
  local pid=$LOAD_PID
  wait_until 60 steps_past "$LOAD_STATUS" 20 || true
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader >"$RES/$name.apps-before.csv"
  "$GPUCTL" "$@" --timeout-ms 10000 cycle "$pid" >"$RES/$name.cycle.json" 2>"$RES/$name.cycle.err"
  local rc=$?
  local after_unlock
  after_unlock=$(jget "$LOAD_STATUS" 'd["steps"]')
  # A full pass over every chunk after the restore proves the data came back intact.
  local chunks
  chunks=$(python3 -c "print(max(1, round($gib * 4)))")  # 256 MiB chunks
  if [ $rc -ne 0 ]; then
    result "$name" FAIL "cycle failed: $(jget "$RES/$name.cycle.json" 'd.get("error")')"
  elif ! wait_until 120 steps_past "$LOAD_STATUS" $(( after_unlock + chunks + 2 )); then
    result "$name" FAIL "job did not run on after restore ($(cat "$LOAD_STATUS"))"
  elif [ "$(jget "$LOAD_STATUS" 'd["verified"]')" != True ]; then
    result "$name" FAIL "pattern mismatch after restore: $(cat "$LOAD_STATUS")"
  else
    result "$name" PASS "$(jget "$RES/$name.cycle.json" '"lock %.0f ms, checkpoint %.0f ms, restore %.0f ms, unlock %.0f ms, freed %.2f GiB" % (d["lock_ms"], d["checkpoint_ms"], d["restore_ms"], d["unlock_ms"], d["gpu_freed_bytes"]/2**30)')"
  fi
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
}

log "host memory: $(grep -E 'MemTotal|MemAvailable' /proc/meminfo | tr -s ' ' | tr '\n' ' ')"
log "parts: $PARTS"

# CRYO_GPU_TOUCH_GIB=N: before any part, write N GiB of host memory (a tmpfs, 16 writers) and
# free it, twice, logging each pass's rate. On a VM whose hypervisor backs guest memory on first
# touch the first pass pays for that; a second pass as slow says the guest gives freed memory
# back (free page reporting), so no warm-up lasts and only memory held (staging) avoids it.
touch_host_memory() {
  local gib=$1 dir pass t0 t1 w per
  dir=$(mktemp -d /tmp/cryo-touch.XXXXXX)
  mount -t tmpfs -o "size=$(( gib + 1 ))g,huge=within_size" cryo-touch "$dir" || { log "touch: no tmpfs"; rmdir "$dir"; return; }
  per=$(( gib * 1024 / 16 ))
  for pass in 1 2; do
    t0=$(date +%s%N)
    for w in $(seq 1 16); do dd if=/dev/zero of="$dir/t$w" bs=4M count=$(( per / 4 )) status=none & done
    wait
    t1=$(date +%s%N)
    log "touch pass $pass: $gib GiB in $(( (t1 - t0) / 1000000 )) ms ($(awk -v b="$gib" -v ns=$(( t1 - t0 )) 'BEGIN { printf "%.1f", b * 1.073741824 / (ns / 1e9) }') GB/s)"
    echo "pass $pass $gib GiB $(( (t1 - t0) / 1000000 )) ms" >>"$RES/touch.txt"
    rm -f "$dir"/t*
  done
  umount "$dir"; rmdir "$dir"
}
[ "${CRYO_GPU_TOUCH_GIB:-0}" -gt 0 ] && touch_host_memory "$CRYO_GPU_TOUCH_GIB"

plugin_part() {
declare -A SEEN=()
for gib in $SIZES; do
  n=${SEEN[$gib]:-0}; SEEN[$gib]=$((n + 1))
  inplace "inplace-$gib$([ "$n" -gt 0 ] && echo "-r$((n + 1))")" "$gib"
done
# The remap path (CUcheckpointRestoreArgs.gpuPairs) onto the same GPU: works on one GPU.
inplace inplace-1-pairs 1 --plugin-options '{"cuda": {"always_pass_gpu_pairs": true}}'
if [ "${CRYO_GPU_THP:-0}" = 1 ]; then
  if [ -w "$THP_FILE" ]; then
    big=${CRYO_GPU_THP_GIB:-$(echo $SIZES | awk '{print $NF}')}
    inplace "inplace-$big-thp" "$big" --thp always
    log "THP after: $(cat $THP_FILE)"
  else
    result "inplace-thp" SKIP "$THP_FILE not writable"
  fi
fi

# A kernel that runs 5 s: the lock must give up at its bound and leave the job running.
if start_load lock-timeout --gib 1 --spin-ms 5000; then
  pid=$LOAD_PID
  wait_until 30 steps_past "$LOAD_STATUS" 1 || true
  t0=$(date +%s%N)
  "$GPUCTL" --timeout-ms 500 lock "$pid" >"$RES/lock-timeout.json" 2>&1
  rc=$?
  took=$(( ($(date +%s%N) - t0) / 1000000 ))
  code=$(jget "$RES/lock-timeout.json" 'd["error"]["code"]')
  s0=$(jget "$LOAD_STATUS" 'd["steps"]')
  if [ $rc -ne 0 ] && [ "$code" = DEADLINE_EXCEEDED ] && wait_until 30 steps_past "$LOAD_STATUS" $((s0 + 2)); then
    result lock-timeout PASS "DEADLINE_EXCEEDED after ${took} ms, job ran on"
  else
    result lock-timeout FAIL "rc=$rc code=$code after ${took} ms: $(cat "$RES/lock-timeout.json")"
    "$GPUCTL" rollback "$pid" >/dev/null 2>&1
  fi
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
else
  result lock-timeout FAIL "test program did not start"
fi

# Managed memory: record what is visible from outside, then what the driver does with it.
if start_load managed --gib 1 --managed-mib 64; then
  pid=$LOAD_PID
  grep -c nvidia-uvm /proc/$pid/maps >"$RES/managed.uvm-maps-count" 2>/dev/null
  grep nvidia /proc/$pid/maps >"$RES/managed.maps" 2>/dev/null
  "$GPUCTL" discover "$pid" >"$RES/managed.discover.json" 2>&1
  "$GPUCTL" --timeout-ms 10000 cycle "$pid" >"$RES/managed.cycle.json" 2>&1
  rc=$?
  s0=$(jget "$LOAD_STATUS" 'd["steps"]')
  alive=no; wait_until 30 steps_past "$LOAD_STATUS" $((s0 + 6)) && alive=yes
  result managed "$([ $alive = yes ] && echo PASS || echo FAIL)" "cycle rc=$rc ($(jget "$RES/managed.cycle.json" 'd.get("error", {}).get("message", "ok")')), job alive=$alive, verified=$(jget "$LOAD_STATUS" 'd["verified"]')"
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
fi
# For comparison: the maps of a job without managed memory.
if start_load plain --gib 1; then
  grep -c nvidia-uvm /proc/$LOAD_PID/maps >"$RES/plain.uvm-maps-count" 2>/dev/null
  grep nvidia /proc/$LOAD_PID/maps >"$RES/plain.maps" 2>/dev/null
  ls -l /proc/$LOAD_PID/fd 2>/dev/null | grep nvidia >"$RES/plain.fds"
  kill "$LOAD_PID" 2>/dev/null; wait "$LOAD_PID" 2>/dev/null
fi

}
case " $PARTS " in *" plugin "*) plugin_part ;; esac

# Through cryod and CRIU.
. "$B/cryod.sh"
case " $PARTS " in *" cryod "*|*" torch "*|*" refuse "*|*" multi "*|*" export "*|*" import "*) run_cryod_parts ;; esac

# The fast path (the library loaded into jobs), alone and through cryod.
. "$B/fastpath.sh"
case " $PARTS " in *" fastpath"*|*" fast-store "*|*" node-preempt "*|*" drain-scale "*|*" periodic-stall "*|*" incremental "*|*" driver-floor "*|*" park "*) run_fastpath_parts ;; esac

# GPU pods: the containerd e2e's two nodes on this machine's GPUs.
. "$B/pods.sh"
case " $PARTS " in *" pods "*) run_pods_part ;; esac
case " $PARTS " in *" multi-node "*) CRYO_GPU_POD_TESTS='GpuPodE2e.AOneNode*:GpuPodE2e.ATwoNode*' run_pods_part ;; esac

echo
echo "== GPU e2e summary ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)) =="
printf '%s\n' "${SUMMARY[@]}"
exit $FAILED
