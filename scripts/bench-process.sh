#!/usr/bin/env bash
# Benchmark (not a test): checkpoint and restore of one process through cryod, beside plain
# `criu dump` / `criu restore` of the same kind of process in the same run. Prints times,
# throughput and the ratio cryod/criu. Then, for leave-running (periodic) checkpoints, how long
# the job is held (the dump stage) by three cryods on the same store: CRIU writing everything into
# the store (dump_in_memory off, dump_copy_threads 0: the baseline), CRIU dumping into node memory
# (dump_copy_threads 0), and the default (into node memory, the job's private memory copied by
# cryod's threads at CRIU's post-dump); and the copy into the store that follows while the job
# runs on (dump_write).
# Usage: bench-process.sh [SIZE_MIB ...] (default 1024 4096); PARTS="stop leave" (default) or
# either alone; KEEP_LOG=FILE keeps cryod's log (its stages, the pages hashed beside CRIU).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
CRYOD=$BUILD_DIR/daemon/cryod
CRYO=$BUILD_DIR/clients/cryo
LOAD=$BUILD_DIR/e2e/workloads/cryo-testload
CRIU=${CRIU:-$(command -v criu || echo /usr/local/sbin/criu)}
REPS=${REPS:-3}
STORE_FSYNC=${STORE_FSYNC:-false}
# Each timed step starts from an empty page cache: on this kind of VM, how much cache is left
# from the previous step changed a 1 GiB dump from 0.5 s to 2.3 s, drowning what is compared.
DROP_CACHES=${DROP_CACHES:-1}
# Hand-run CRIU in the mode cryod uses by default (criu_hw_breakpoints=false), so both do
# the same work; on some VMs CRIU otherwise hangs (docs/troubleshooting.md).
export CRIU_FAULT=${CRIU_FAULT:-130}
PARTS=${PARTS:-stop leave}
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(1024 4096)
for b in "$CRYOD" "$CRYO" "$LOAD"; do [ -x "$b" ] || { echo "missing $b: run scripts/setup.sh" >&2; exit 1; }; done

W=$(mktemp -d /var/tmp/cryo-bench-XXXXXX)
SOCK=$W/cryod.sock
JOB=
cleanup() {
  [ -n "$JOB" ] && kill -9 "$JOB" 2>/dev/null || true
  [ -n "${DPID:-}" ] && kill "$DPID" 2>/dev/null && wait "$DPID" 2>/dev/null || true
  [ -n "${DPID2:-}" ] && kill "$DPID2" 2>/dev/null && wait "$DPID2" 2>/dev/null || true
  [ -n "${DPID3:-}" ] && kill "$DPID3" 2>/dev/null && wait "$DPID3" 2>/dev/null || true
  # KEEP_LOG=FILE: cryod's log kept for a look at its stages.
  [ -n "${KEEP_LOG:-}" ] && cp "$W/cryod.log" "$KEEP_LOG" 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT
now() { date +%s.%N; }
# Then as much memory as the step will fill is touched and freed: on these VMs memory the guest
# has not used for a while comes back through the host at a fraction of the speed of memory just
# freed (2026-11-30: after an unrelated 1 GiB CRIU round trip, cryod's 1 GiB dump took 2.0-3.1 s;
# with 3 GiB touched and freed first, 0.54-0.60 s; caches dropped, freed, fast as well). Without
# this, whichever side ran second paid for the VM, not for its own work.
settle() {
  sync
  if [ "$DROP_CACHES" = 1 ]; then echo 3 >/proc/sys/vm/drop_caches; fi
  python3 -c "b = b'x' * ((${CUR_MIB:-0} * 3 + 512) << 20)"
}
start_job() {  # $1 MiB; sets JOB
  rm -f "$W/status"
  setsid "$LOAD" --status "$W/status" --mem-mib "$1" --threads 4 </dev/null >/dev/null 2>&1 &
  JOB=$!
  until [ -s "$W/status" ] && grep -q '"main": [1-9]' "$W/status"; do sleep 0.05; done
  CHILD=$(grep -o '"child_pid": [0-9]*' "$W/status" | grep -o '[0-9]*$')
}
gone() { while kill -0 "$1" 2>/dev/null; do wait "$1" 2>/dev/null || sleep 0.01; done; }
# A killed tree's child is reparented and reaped by init; CRIU needs every pid free.
wait_pid_free() { for p in "$@"; do while [ -e /proc/$p ]; do sleep 0.01; done; done; }
kill_restored() { kill -9 "$1" "$2" 2>/dev/null || true; wait_pid_free "$1" "$2"; }

# store_fsync=false by default: raw criu leaves its images in the page cache too, so this
# compares the same work. STORE_FSYNC=true measures cryod's default (durable publish).
# cryod's copy at CRIU's post-dump with a thread per core (below 4 cores its default is none).
"$CRYOD" --socket "$SOCK" --state-dir "$W/state" --store "$W/store" --metrics-address "" \
  --store-fsync "$STORE_FSYNC" --dump-copy-threads "${DUMP_COPY_THREADS:-$(nproc)}" >"$W/cryod.log" 2>&1 &
DPID=$!
# The baseline of the leave-running rows: CRIU dumps into the store.
"$CRYOD" --socket "$W/cryod-store.sock" --state-dir "$W/state-store" --store "$W/store" \
  --metrics-address "" --store-fsync "$STORE_FSYNC" --dump-in-memory=false --dump-copy-threads 0 \
  >"$W/cryod-store.log" 2>&1 &
DPID2=$!
# CRIU dumps into node memory and copies the memory itself, with one thread.
"$CRYOD" --socket "$W/cryod-criu.sock" --state-dir "$W/state-criu" --store "$W/store" \
  --metrics-address "" --store-fsync "$STORE_FSYNC" --dump-copy-threads 0 >"$W/cryod-criu.log" 2>&1 &
DPID3=$!
until "$CRYO" --socket "$SOCK" node >/dev/null 2>&1; do sleep 0.05; done
until "$CRYO" --socket "$W/cryod-store.sock" node >/dev/null 2>&1; do sleep 0.05; done
until "$CRYO" --socket "$W/cryod-criu.sock" node >/dev/null 2>&1; do sleep 0.05; done

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
stage_ms() { python3 -c 'import json,sys; print(int(json.load(sys.stdin)["stage_ms"].get(sys.argv[1], 0)))' "$1"; }
printf '%-8s %-22s %10s %10s %8s\n' SIZE STEP "criu s" "cryod s" "ratio"
for mib in "${SIZES[@]}"; do
  case " $PARTS " in *" stop "*) ;; *) break ;; esac
  CUR_MIB=$mib
  : >"$W/t"
  for rep in $(seq "$REPS"); do
    # Baseline: criu dump (kills the job), then criu restore.
    start_job "$mib"
    rm -rf "$W/raw" && mkdir -p "$W/raw"
    settle  # write back the previous run's images outside the timed part
    t0=$(now); "$CRIU" dump -t "$JOB" -D "$W/raw" -o dump.log --file-locks; t1=$(now)
    { gone "$JOB"; } 2>/dev/null; wait_pid_free "$JOB" "$CHILD"
    settle
    t2=$(now); "$CRIU" restore -d -D "$W/raw" -o restore.log --file-locks --pidfile "$W/raw/pid"; t3=$(now)
    kill_restored "$JOB" "$CHILD"
    raw_bytes=$(du -sb "$W/raw" | cut -f1)
    # cryod: checkpoint (stops the job), then restore (verifies checksums first).
    start_job "$mib"
    id=b$mib-$rep
    settle
    t4=$(now); "$CRYO" --socket "$SOCK" -o json checkpoint "$JOB" --id "$id" >"$W/c.json"; t5=$(now)
    { gone "$JOB"; } 2>/dev/null; wait_pid_free "$JOB" "$CHILD"
    settle
    t6=$(now); "$CRYO" --socket "$SOCK" -o json restore "$id" >"$W/r.json"; t7=$(now)
    kill_restored "$JOB" "$CHILD"
    "$CRYO" --socket "$SOCK" rm "$id" >/dev/null
    # cryod's own account of its longest stages: CRIU's part (dump, restore) and the checksums
    # (verify), beside the CLI's wall time.
    echo "$(echo "$t1-$t0" | bc) $(echo "$t5-$t4" | bc) $(echo "$t3-$t2" | bc) $(echo "$t7-$t6" | bc) $raw_bytes" \
      "$(stage_ms dump <"$W/c.json") $(stage_ms restore <"$W/r.json") $(stage_ms verify <"$W/r.json")" >>"$W/t"
    rm -rf "$W/raw"
  done
  for col in dump restore; do
    if [ $col = dump ]; then a=1; b=2; else a=3; b=4; fi
    ra=$(cut -d' ' -f$a "$W/t" | median); rb=$(cut -d' ' -f$b "$W/t" | median)
    bytes=$(cut -d' ' -f5 "$W/t" | median)
    if [ $col = dump ]; then
      inside="dump $(cut -d' ' -f6 "$W/t" | median) ms"
    else
      inside="restore $(cut -d' ' -f7 "$W/t" | median) ms, verify $(cut -d' ' -f8 "$W/t" | median) ms"
    fi
    printf '%-8s %-22s %10.3f %10.3f %8.3f   (%s MB/s criu, %s MB/s cryod; %s MiB of images; cryod: %s)\n' \
      "${mib}MiB" "$([ $col = dump ] && echo checkpoint || echo restore)" "$ra" "$rb" \
      "$(echo "$rb/$ra" | bc -l)" "$(echo "$bytes/$ra/1000000" | bc)" \
      "$(echo "$bytes/$rb/1000000" | bc)" "$((bytes >> 20))" "$inside"
  done
done
# Leave-running: the job held for the dump, into the store (baseline) and into node memory.
printf '\n%-8s %-22s %10s %10s %10s %8s %8s\n' SIZE "LEAVE-RUNNING" "store s" "memory s" "+copy s" \
  "mem/st" "+cp/mem"
for mib in "${SIZES[@]}"; do
  case " $PARTS " in *" leave "*) ;; *) break ;; esac
  CUR_MIB=$mib
  : >"$W/lr"
  for rep in $(seq "$REPS"); do
    start_job "$mib"
    settle
    j=$("$CRYO" --socket "$W/cryod-store.sock" -o json checkpoint "$JOB" --id "s$mib-$rep" --leave-running)
    held_store=$(stage_ms dump <<<"$j")
    "$CRYO" --socket "$SOCK" rm "s$mib-$rep" >/dev/null
    settle
    j=$("$CRYO" --socket "$W/cryod-criu.sock" -o json checkpoint "$JOB" --id "c$mib-$rep" --leave-running)
    held_criu=$(stage_ms dump <<<"$j")
    "$CRYO" --socket "$SOCK" rm "c$mib-$rep" >/dev/null
    settle
    j=$("$CRYO" --socket "$SOCK" -o json checkpoint "$JOB" --id "m$mib-$rep" --leave-running)
    held_memory=$(stage_ms dump <<<"$j"); copy=$(stage_ms dump_write <<<"$j")
    "$CRYO" --socket "$SOCK" rm "m$mib-$rep" >/dev/null
    kill -9 "$JOB" 2>/dev/null || true; wait_pid_free "$JOB" "$CHILD"
    echo "$held_store $held_criu $held_memory $copy" >>"$W/lr"
  done
  hs=$(cut -d' ' -f1 "$W/lr" | median); hc=$(cut -d' ' -f2 "$W/lr" | median)
  hm=$(cut -d' ' -f3 "$W/lr" | median); cp_=$(cut -d' ' -f4 "$W/lr" | median)
  printf '%-8s %-22s %10.3f %10.3f %10.3f %8.3f %8.3f   (then dump_write %.3f s while the job runs on)\n' \
    "${mib}MiB" "job held (dump)" "$(echo "$hs/1000" | bc -l)" "$(echo "$hc/1000" | bc -l)" \
    "$(echo "$hm/1000" | bc -l)" "$(echo "$hc/$hs" | bc -l)" "$(echo "$hm/$hc" | bc -l)" \
    "$(echo "$cp_/1000" | bc -l)"
done
echo "median of $REPS runs each; cryod store_fsync=$STORE_FSYNC; caches dropped before each step: $DROP_CACHES (memory touched and freed before each: 3x the job's); machine: $(nproc) cores, $(free -g | awk '/Mem/{print $2}') GiB, $(uname -r); $(date -u +%F)"
