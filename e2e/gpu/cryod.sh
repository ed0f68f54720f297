# The GPU suite's parts through cryod and CRIU, sourced by run.sh (which defines log, result,
# jget, wait_until, status_ready, steps_past, $B, $RES, $LOAD, $GPUCTL).
#
#   cryod-leave-running   checkpoint a live 1 GiB job with leave-running: it runs on, all of its
#                         device memory verified afterwards
#   cryod-restore-N       checkpoint (the job stops), kill, restore through cryod: the job goes
#                         on from its checkpointed step and verifies every word; stage times
#   baseline-N            the same by hand, one step after another (driver API through
#                         cryo-gpuctl, then criu dump; criu restore, then the driver's restore):
#                         the method of the CRIUgpu paper, in the same call, for comparison
#   overhead              steps/s of a job alone, beside an idle cryod, and after a restore
#   torch-losses          a PyTorch training loop checkpointed, killed and restored mid-run
#                         gives per-step losses bit-identical to an uninterrupted run
# Part "refuse" (bad input): a kernel that never ends (lock times out, the job runs on); managed
# memory (refused with the reason, the job runs on); a restore onto a GPU without enough free
# memory (refused before anything starts; it restores once the memory is free).
# Part "multi" (2 GPUs): restore onto the other GPU (--gpu-map); two jobs on two GPUs
# checkpointed at once, against one alone; a 2-rank DDP (NCCL) job checkpointed, killed and
# restored as one tree, its losses bit-identical to an uninterrupted run. With one GPU those
# SKIP, and what one GPU can show runs instead: two jobs on it checkpointed at once
# (parallel-1-gpu) and the DDP job over gloo with both ranks on GPU 0 (ddp-gloo-1-gpu).
# Parts "export" / "import": the cross-node restore, described above xnode_export.
#
# Env: CRYO_GPU_BENCH_SIZES (GiB, default "1"), CRYO_GPU_BENCH_ROUNDS (default 1; each round
# runs the baseline, then cryod: on VMs whose memory grows on first touch the first run of a
# size pays for that, so compare later rounds), CRYO_GPU_BENCH_FSYNC (e.g. "false true": the
# rounds once per store_fsync setting, numbered on), CRYO_GPU_STORE_FSYNC (cryod's store_fsync,
# default true), CRYO_GPU_NODE (cryod's node name), CRYO_GPU_WORK (scratch dir with the store;
# default /var/tmp/cryo-gpu-e2e, on local disk).

W=${CRYO_GPU_WORK:-/var/tmp/cryo-gpu-e2e}
BENCH_SIZES=${CRYO_GPU_BENCH_SIZES:-1}
BENCH_ROUNDS=${CRYO_GPU_BENCH_ROUNDS:-1}
CRYOD_PID=
STORE_FSYNC=${CRYO_GPU_STORE_FSYNC:-true}  # cryod's default: images on disk before publish
# cryod's journal on a tmpfs, off the store's disk, as the chart keeps it (the host's /run). The
# lent machines' /run is on their one disk: a small tmpfs is mounted there when it is not one.
JOURNAL=${CRYO_GPU_JOURNAL_DIR:-/run/cryo-gpu-e2e/journal}
rm -rf "$W" && mkdir -p "$W" "$JOURNAL"
if [ "$(stat -f -c %T "$JOURNAL")" != tmpfs ]; then
  mount -t tmpfs -o size=16m,mode=0700 cryo-journal "$JOURNAL" || echo "cryod.sh: the journal stays on $(stat -f -c %T "$JOURNAL")" >&2
fi
find "$JOURNAL" -mindepth 1 -delete
CRYO=("$B/bin/cryo" --socket "$W/cryod.sock")
JOB_ENV=()  # extra environment of the next start_job (e.g. CUDA_VISIBLE_DEVICES=1)

start_cryod() {
  # CRYO_GPU_CRYOD_BIN: another cryod (a baseline build measured in the same call).
  "${CRYO_GPU_CRYOD_BIN:-$B/bin/cryod}" --socket "$W/cryod.sock" --state-dir "$W/state" --store "${STORE_DIR:-$W/store}" --journal-dir "$JOURNAL" \
    --node-name "${CRYO_GPU_NODE:-gpu-node}" --criu "$B/bin/criu" --gpu-plugin-dir "$B/lib/cryo/gpu" \
    --store-fsync "$STORE_FSYNC" --metrics-address 127.0.0.1:0 --log-level info \
    ${CRYO_GPU_CRYOD_ARGS:-} >>"$RES/cryod.log" 2>&1 &
  CRYOD_PID=$!
  PIDS+=("$CRYOD_PID")
  wait_until 60 "${CRYO[@]}" node >/dev/null 2>&1
}

stop_cryod() {
  [ -n "$CRYOD_PID" ] || return 0
  kill "$CRYOD_PID" 2>/dev/null; wait "$CRYOD_PID" 2>/dev/null; CRYOD_PID=
}

# start_job NAME ARGS...: the test program in a session of its own, as a job runs (not a shell
# job), output to files. Sets LOAD_PID, LOAD_STATUS.
start_job() {
  local name=$1; shift
  LOAD_STATUS="$RES/$name.status.json"
  rm -f "$LOAD_STATUS"
  env "${JOB_ENV[@]}" setsid "$LOAD" --status "$LOAD_STATUS" "$@" </dev/null >"$RES/$name.load.log" 2>&1 &
  LOAD_PID=$!
  PIDS+=("$LOAD_PID")
  wait_until 300 status_ready "$LOAD_STATUS"
}

# After a restore the job is no child of ours: kill by pid and wait for it to go.
end_job() {
  kill "$1" 2>/dev/null
  wait "$1" 2>/dev/null
  wait_until 30 bash -c "! kill -0 $1 2>/dev/null" || kill -9 "$1" 2>/dev/null
}

# steps/s of the job over `secs` seconds.
rate() {  # rate STATUS SECS
  local s0 s1
  s0=$(jget "$1" 'd["steps"]'); sleep "$2"; s1=$(jget "$1" 'd["steps"]')
  python3 -c "print(round(($s1 - $s0) / $2, 1))"
}

# verified_pass NAME STATUS GIB: waits for a full pass over all chunks from now; PASS/FAIL text.
verified_pass() {
  local s0 chunks
  s0=$(jget "$2" 'd["steps"]')
  chunks=$(jget "$2" "d.get('chunks') or max(1, round($3 * 4))")
  if ! wait_until 180 steps_past "$2" $(( s0 + chunks + 2 )); then
    echo "job did not run on ($(cat "$2"))"; return 1
  fi
  [ "$(jget "$2" 'd["verified"]')" = True ] || { echo "pattern mismatch: $(cat "$2")"; return 1; }
}

held_gib() { nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits |
  awk -F', ' -v p="$1" '$1==p {printf "%.2f", $2/1024}'; }

cryod_leave_running() {
  start_job lr --gib 1 || { result cryod-leave-running FAIL "job did not start"; return; }
  local pid=$LOAD_PID
  wait_until 60 steps_past "$LOAD_STATUS" 10
  if ! "${CRYO[@]}" -o json checkpoint "$pid" --id lr --leave-running >"$RES/lr.json" 2>"$RES/lr.err"; then
    result cryod-leave-running FAIL "$(cat "$RES/lr.err" "$RES/lr.json" | tail -3)"
  elif msg=$(verified_pass lr "$LOAD_STATUS" 1); then
    result cryod-leave-running PASS "$(jget "$RES/lr.json" '"%d ms total, stages %s" % (sum(int(v) for v in d["stage_ms"].values()), d["stage_ms"])')"
  else
    result cryod-leave-running FAIL "$msg"
  fi
  end_job "$pid"
  "${CRYO[@]}" rm lr >/dev/null 2>&1
}

cryod_restore() {  # cryod_restore GIB [ROUND]
  local gib=$1 r=${2:-1} name="cryod-restore-$1-r${2:-1}${KR_TAG:-}" k="kr$1-r${2:-1}${KR_TAG:-}"
  start_job "$k" --gib "$gib" || { result "$name" FAIL "job did not start"; return; }
  local pid=$LOAD_PID
  wait_until 120 steps_past "$LOAD_STATUS" 10
  local held; held=$(held_gib "$pid")
  local before; before=$(rate "$LOAD_STATUS" 3)
  local step_at; step_at=$(jget "$LOAD_STATUS" 'd["steps"]')
  local t0; t0=$(date +%s%N)
  if ! "${CRYO[@]}" -o json checkpoint "$pid" --id "$k" >"$RES/$k.ckpt.json" 2>"$RES/$k.ckpt.err"; then
    result "$name" FAIL "checkpoint: $(tail -2 "$RES/$k.ckpt.err")"; end_job "$pid"; return
  fi
  local ckpt_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  wait "$pid" 2>/dev/null  # cryod killed it; reap it so its pid is free again
  local last; last=$(jget "$LOAD_STATUS" 'd["steps"]')
  t0=$(date +%s%N)
  if ! "${CRYO[@]}" -o json restore "$k" >"$RES/$k.restore.json" 2>"$RES/$k.restore.err"; then
    result "$name" FAIL "restore: $(tail -2 "$RES/$k.restore.err")"; return
  fi
  local restore_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  local msg
  if ! msg=$(verified_pass "$k" "$LOAD_STATUS" "$gib"); then
    result "$name" FAIL "$msg"; end_job "$pid"; return
  fi
  local after; after=$(rate "$LOAD_STATUS" 3)
  python3 - "$RES/$k.ckpt.json" "$RES/$k.restore.json" "$gib" "$held" "$ckpt_ms" "$restore_ms" "$before" "$after" "$step_at" "$last" >"$RES/$k.summary.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
r = json.load(open(sys.argv[2]))
print(json.dumps({"gib": float(sys.argv[3]), "held_gib": float(sys.argv[4] or 0),
    "checkpoint_ms": int(sys.argv[5]), "restore_ms": int(sys.argv[6]),
    "checkpoint_stages": {k: int(v) for k, v in c["stage_ms"].items()},
    "restore_stages": {k: int(v) for k, v in r["stage_ms"].items()},
    "image_bytes": int(c.get("size_bytes", 0)),
    "steps_per_s_before": float(sys.argv[7]), "steps_per_s_after": float(sys.argv[8]),
    "step_seen_before_checkpoint": int(sys.argv[9]), "last_step_in_status": int(sys.argv[10])}))
PY
  result "$name" PASS "$(jget "$RES/$k.summary.json" '"checkpoint %d ms (vacate %d ms: lock %d + d2h %d; dump %d), restore %d ms (verify %d, criu %d, gpu %d); %.1f -> %.1f steps/s" % (d["checkpoint_ms"], d["checkpoint_stages"].get("gpu_lock",0)+d["checkpoint_stages"].get("gpu_checkpoint",0), d["checkpoint_stages"].get("gpu_lock",0), d["checkpoint_stages"].get("gpu_checkpoint",0), d["checkpoint_stages"].get("dump",0), d["restore_ms"], d["restore_stages"].get("verify",0), d["restore_stages"].get("restore",0), d["restore_stages"].get("gpu_restore",0), d["steps_per_s_before"], d["steps_per_s_after"])')"
  end_job "$pid"
  "${CRYO[@]}" rm "$k" >/dev/null 2>&1
}

ms_of() { jget "$1" "d['$2']"; }

baseline() {  # baseline GIB [ROUND]: driver API and CRIU by hand, one after the other
  local gib=$1 r=${2:-1} name="baseline-$1-r${2:-1}" dir="$W/baseline-$1"
  start_job "bl$gib-r$r" --gib "$gib" || { result "$name" FAIL "job did not start"; return; }
  local pid=$LOAD_PID
  wait_until 120 steps_past "$LOAD_STATUS" 10
  rm -rf "$dir"; mkdir -p "$dir"
  local t0 t1 t2 t3 t4 t5 t6
  t0=$(date +%s%N)
  "$GPUCTL" --timeout-ms 10000 lock "$pid" >"$RES/bl$gib-r$r.lock.json" 2>&1 || { result "$name" FAIL "lock: $(cat "$RES/bl$gib-r$r.lock.json")"; end_job "$pid"; return; }
  t1=$(date +%s%N)
  "$GPUCTL" checkpoint "$pid" >"$RES/bl$gib-r$r.d2h.json" 2>&1 || { result "$name" FAIL "checkpoint: $(cat "$RES/bl$gib-r$r.d2h.json")"; "$GPUCTL" rollback "$pid" >/dev/null 2>&1; end_job "$pid"; return; }
  t2=$(date +%s%N)
  "$B/bin/criu" dump -t "$pid" -D "$dir" -o dump.log -v4 --file-locks >/dev/null 2>&1 || { result "$name" FAIL "criu dump: $(grep -a Error "$dir/dump.log" | tail -2)"; "$GPUCTL" rollback "$pid" >/dev/null 2>&1; end_job "$pid"; return; }
  t3=$(date +%s%N)
  wait "$pid" 2>/dev/null
  t4=$(date +%s%N)
  "$B/bin/criu" restore -D "$dir" -o restore.log -v4 --file-locks --restore-detached >/dev/null 2>&1 || { result "$name" FAIL "criu restore: $(grep -a Error "$dir/restore.log" | tail -2)"; return; }
  t5=$(date +%s%N)
  "$GPUCTL" restore "$pid" >"$RES/bl$gib-r$r.h2d.json" 2>&1 && "$GPUCTL" unlock "$pid" >"$RES/bl$gib-r$r.unlock.json" 2>&1 || { result "$name" FAIL "driver restore: $(cat "$RES/bl$gib-r$r.h2d.json")"; end_job "$pid"; return; }
  t6=$(date +%s%N)
  local msg
  if ! msg=$(verified_pass "bl$gib-r$r" "$LOAD_STATUS" "$gib"); then result "$name" FAIL "$msg"; end_job "$pid"; return; fi
  local bytes; bytes=$(du -sb "$dir" | cut -f1)
  python3 -c "
import json
ns=[$t0,$t1,$t2,$t3,$t4,$t5,$t6]; ms=lambda a,b:(ns[b]-ns[a])//1000000
print(json.dumps({'gib':$gib,'lock_ms':ms(0,1),'d2h_ms':ms(1,2),'dump_ms':ms(2,3),'checkpoint_ms':ms(0,3),
 'criu_restore_ms':ms(4,5),'h2d_unlock_ms':ms(5,6),'restore_ms':ms(4,6),'image_bytes':$bytes}))" >"$RES/bl$gib-r$r.summary.json"
  result "$name" PASS "$(jget "$RES/bl$gib-r$r.summary.json" '"checkpoint %d ms (lock %d, d2h %d, dump %d), restore %d ms (criu %d, h2d+unlock %d)" % (d["checkpoint_ms"], d["lock_ms"], d["d2h_ms"], d["dump_ms"], d["restore_ms"], d["criu_restore_ms"], d["h2d_unlock_ms"])')"
  end_job "$pid"
  rm -rf "$dir"
}

overhead() {
  # The same job: alone (no cryod), then beside cryod; the restored job's rate is in
  # cryod-restore-N (before -> after).
  start_job oh --gib 1 || { result overhead FAIL "job did not start"; return; }
  local pid=$LOAD_PID
  wait_until 60 steps_past "$LOAD_STATUS" 10
  local alone; alone=$(rate "$LOAD_STATUS" 5)
  start_cryod || { result overhead FAIL "cryod did not start: $(tail -3 "$RES/cryod.log")"; end_job "$pid"; return 1; }
  local beside; beside=$(rate "$LOAD_STATUS" 5)
  result overhead PASS "steps/s alone $alone, beside cryod $beside"
  echo "{\"alone\": $alone, \"beside_cryod\": $beside}" >"$RES/overhead.json"
  end_job "$pid"
}

torch_losses() {
  local py=python3 steps=${CRYO_GPU_TORCH_STEPS:-300}
  if ! $py -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
    result torch-losses SKIP "no PyTorch with CUDA here"; return
  fi
  local src="$B/train_losses.py" ref="$RES/torch.ref.txt" run="$RES/torch.run.txt"
  rm -f "$ref" "$run"
  setsid -w $py "$src" --steps "$steps" --out "$ref" </dev/null >"$RES/torch.ref.log" 2>&1
  local tpid
  setsid $py "$src" --steps "$steps" --out "$run" </dev/null >"$RES/torch.run.log" 2>&1 &
  tpid=$!
  PIDS+=("$tpid")
  local mid=$(( steps / 3 ))
  wait_until 300 bash -c "[ \$(wc -l 2>/dev/null <'$run' || echo 0) -ge $mid ]" || { result torch-losses FAIL "training did not start: $(tail -3 "$RES/torch.run.log")"; return; }
  if ! "${CRYO[@]}" -o json checkpoint "$tpid" --id torch >"$RES/torch.ckpt.json" 2>"$RES/torch.ckpt.err"; then
    result torch-losses FAIL "checkpoint: $(tail -2 "$RES/torch.ckpt.err")"; end_job "$tpid"; return
  fi
  local fpwhy
  if ! fpwhy=$(multi_fastpath_check "$RES/torch.ckpt.json"); then
    result torch-losses FAIL "$fpwhy"; end_job "$tpid"; "${CRYO[@]}" rm torch >/dev/null 2>&1; return
  fi
  wait "$tpid" 2>/dev/null
  local at; at=$(wc -l <"$run")
  if ! "${CRYO[@]}" -o json restore torch >"$RES/torch.restore.json" 2>"$RES/torch.restore.err"; then
    result torch-losses FAIL "restore: $(tail -2 "$RES/torch.restore.err")"; return
  fi
  if ! wait_until 300 grep -qx done "$run"; then
    result torch-losses FAIL "restored training did not finish ($(wc -l <"$run") lines)"; end_job "$tpid"; return
  fi
  if cmp -s "$ref" "$run"; then
    result torch-losses PASS "$steps steps, checkpointed after step $((at - 1)), losses bit-identical ($(jget "$RES/torch.ckpt.json" 'd["size_bytes"]') image bytes)"
  else
    result torch-losses FAIL "losses differ: $(diff "$ref" "$run" | head -3 | tr '\n' ' ')"
  fi
  "${CRYO[@]}" rm torch >/dev/null 2>&1
}

# The numbers of every round, side by side (what docs/benchmarks.md takes).
bench_table() {
  python3 - "$RES" <<'PY' | tee "$RES/bench-table.txt"
import glob, json, os, sys
res = sys.argv[1]
rows = []
for f in sorted(glob.glob(os.path.join(res, "*.summary.json"))):
    d = json.load(open(f))
    tag = os.path.basename(f).split(".")[0]
    if tag.startswith("kr"):
        c, r = d["checkpoint_stages"], d["restore_stages"]
        who = "cryod" + ("-nofs" if tag.endswith("-nofsync") else "")
        rows.append((tag, who, d["gib"], d.get("held_gib", 0), d["checkpoint_ms"],
                     c.get("gpu_lock", 0), c.get("gpu_checkpoint", 0), c.get("dump", 0),
                     c.get("checksum", 0) + c.get("publish", 0), d["restore_ms"],
                     r.get("verify", 0), r.get("restore", 0), r.get("gpu_restore", 0)))
    elif tag.startswith("bl"):
        rows.append((tag, "baseline", d["gib"], 0, d["checkpoint_ms"], d["lock_ms"], d["d2h_ms"],
                     d["dump_ms"], 0, d["restore_ms"], 0, d["criu_restore_ms"], d["h2d_unlock_ms"]))
print("%-12s %-10s %4s %6s | %7s %5s %6s %6s %6s | %7s %6s %6s %6s" % ("run", "who", "GiB", "held",
      "ckpt", "lock", "d2h", "dump", "sum+pub", "restore", "verify", "criu", "gpu"))
for r in rows:
    print("%-12s %-10s %4.0f %6.2f | %7d %5d %6d %6d %6d | %7d %6d %6d %6d" % r)
PY
}

# The error code of a failed `cryo -o json` call ("DEADLINE_EXCEEDED", ...).
err_code() { jget "$1" 'd["error"]["code"]'; }
err_msg() { jget "$1" 'd["error"]["message"]'; }

refuse_parts() {
  # A kernel that runs 5 s: the lock gives up at 500 ms, nothing is written, the job runs on.
  if start_job spin --gib 1 --spin-ms 5000; then
    local pid=$LOAD_PID
    wait_until 30 steps_past "$LOAD_STATUS" 1
    "${CRYO[@]}" -o json checkpoint "$pid" --id spin --leave-running --gpu-lock-timeout 500ms \
      >"$RES/spin.json" 2>&1
    local code; code=$(err_code "$RES/spin.json")
    local s0; s0=$(jget "$LOAD_STATUS" 'd["steps"]')
    if [ "$code" = DEADLINE_EXCEEDED ] && wait_until 60 steps_past "$LOAD_STATUS" $((s0 + 2)) &&
       ! "${CRYO[@]}" inspect spin >/dev/null 2>&1; then
      result cryod-lock-timeout PASS "$(err_msg "$RES/spin.json" | cut -c1-120); job ran on"
    else
      result cryod-lock-timeout FAIL "code=$code: $(cat "$RES/spin.json" | head -c 300)"
    fi
    end_job "$pid"
  fi
  # Managed memory: the driver cannot checkpoint it; refused with the reason, the job runs on.
  if start_job managed-cryod --gib 1 --managed-mib 64; then
    local pid=$LOAD_PID
    wait_until 30 steps_past "$LOAD_STATUS" 5
    "${CRYO[@]}" -o json checkpoint "$pid" --id managed >"$RES/managed-cryod.json" 2>&1
    local msg; msg=$(err_msg "$RES/managed-cryod.json")
    if [[ "$msg" == *"managed (UVM) memory"* ]] && msg2=$(verified_pass managed-cryod "$LOAD_STATUS" 1); then
      result cryod-managed PASS "refused: $(echo "$msg" | cut -c1-100); job ran on, verified"
    else
      result cryod-managed FAIL "$(head -c 300 "$RES/managed-cryod.json") ${msg2:-}"
    fi
    end_job "$pid"
  fi
  # Too little free GPU memory for the restore: refused before anything starts.
  if start_job short --gib 8; then
    local pid=$LOAD_PID
    wait_until 60 steps_past "$LOAD_STATUS" 10
    if "${CRYO[@]}" checkpoint "$pid" --id short >/dev/null 2>"$RES/short.err"; then
      wait "$pid" 2>/dev/null
      local status_keep=$LOAD_STATUS
      local total_gib; total_gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 | awk '{printf "%d", $1/1024}')
      start_job hog --gib $(( total_gib - 6 ))
      local hog=$LOAD_PID
      "${CRYO[@]}" -o json restore short >"$RES/short.json" 2>&1
      local code; code=$(err_code "$RES/short.json")
      local alive=no; kill -0 "$pid" 2>/dev/null && alive=yes
      end_job "$hog"
      LOAD_STATUS=$status_keep
      if [ "$code" = FAILED_PRECONDITION ] && [ $alive = no ] &&
         "${CRYO[@]}" restore short >/dev/null 2>"$RES/short2.err" &&
         msg=$(verified_pass short "$LOAD_STATUS" 8); then
        result cryod-short-memory PASS "refused: $(err_msg "$RES/short.json" | cut -c1-140); restored once free"
      else
        result cryod-short-memory FAIL "code=$code alive=$alive $(head -c 300 "$RES/short.json") $(cat "$RES/short2.err" 2>/dev/null) ${msg:-}"
      fi
      end_job "$pid"
    else
      result cryod-short-memory FAIL "checkpoint: $(tail -2 "$RES/short.err")"; end_job "$pid"
    fi
    "${CRYO[@]}" rm short >/dev/null 2>&1
  fi
}

gpu_uuid() { nvidia-smi --query-gpu=uuid --format=csv,noheader -i "$1"; }

# The part's jobs run with MULTI_ENV added to their environment and its results are named with
# MULTI_PREFIX: empty for part "multi" (the driver's path); part "fastpath-multi" (fastpath.sh)
# runs the same tests with the fast-path library preloaded, and then each checkpoint must show
# the bytes the library moved (multi_fastpath_check).
MULTI_ENV=()
MULTI_PREFIX=""

# multi_fastpath_check JSON: empty when the driver's path is asked for or the fast path moved
# the job's memory; else why not.
multi_fastpath_check() {
  [ ${#MULTI_ENV[@]} -eq 0 ] && return 0
  local b; b=$(jget "$1" 'int(d.get("gpu_fastpath_bytes", 0))' 2>/dev/null)
  [ "${b:-0}" -gt 0 ] && return 0
  echo "the fast path moved nothing ($(head -c 200 "$1"))"
  return 1
}

multi_parts() {
  local n P=$MULTI_PREFIX; n=$(nvidia-smi -L | wc -l)
  if [ "$n" -lt 2 ]; then
    result "${P}multi-gpu" SKIP "one GPU here: restore onto the other GPU, two GPUs in parallel and the NCCL DDP job need two"
    # What one GPU can show of the same paths: two jobs checkpointed at once (sharing the GPU),
    # and a 2-process CUDA job (DDP over gloo, both ranks on GPU 0) as one tree.
    parallel_pair "${P}parallel-1-gpu" 0 0 4
    ddp_losses "${P}ddp-gloo-1-gpu" --backend gloo --same-gpu
    return
  fi
  local u0 u1; u0=$(gpu_uuid 0); u1=$(gpu_uuid 1)
  local only=" ${CRYO_GPU_MULTI_TESTS:-other parallel ddp} "
  # Restore onto the other GPU.
  JOB_ENV=(CUDA_VISIBLE_DEVICES=0 "${MULTI_ENV[@]}")
  if [[ "$only" == *" other "* ]] && start_job "${P}other" --gib 8; then
    local pid=$LOAD_PID why=""
    wait_until 60 steps_past "$LOAD_STATUS" 10
    if "${CRYO[@]}" -o json checkpoint "$pid" --id other >"$RES/${P}other.ckpt.json" 2>"$RES/${P}other.err" &&
       why=$(multi_fastpath_check "$RES/${P}other.ckpt.json"); then
      wait "$pid" 2>/dev/null
      if "${CRYO[@]}" -o json restore other --gpu-map "$u0=$u1" >"$RES/${P}other.json" 2>"$RES/${P}other.err2" &&
         msg=$(verified_pass "${P}other" "$LOAD_STATUS" 8); then
        local where; where=$(nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader | awk -F', ' -v p="$pid" '$1==p {print $2}')
        if [ "$where" = "$u1" ]; then
          result "${P}restore-other-gpu" PASS "checkpointed on GPU 0, runs verified on GPU 1 ($u1)"
        else
          result "${P}restore-other-gpu" FAIL "restored job runs on '$where', not $u1"
        fi
      else
        result "${P}restore-other-gpu" FAIL "$(head -c 400 "$RES/${P}other.json") $(cat "$RES/${P}other.err2") ${msg:-}"
      fi
    else
      result "${P}restore-other-gpu" FAIL "checkpoint: $(tail -2 "$RES/${P}other.err") $why"
    fi
    end_job "$pid"
    "${CRYO[@]}" rm other >/dev/null 2>&1
  fi
  JOB_ENV=()
  [[ "$only" == *" ddp "* ]] && ddp_losses "${P}ddp-2-ranks"
  [[ "$only" == *" nccl-probe "* ]] && nccl_defaults_probe "${P}nccl-defaults-probe"
  # NCCL at its defaults: only with the fast path (part fastpath-multi), which carries what the
  # ranks share; the driver's path refuses it (nccl-probe shows that).
  if [ ${#MULTI_ENV[@]} -gt 0 ]; then
    [[ "$only" == *" ddp-defaults "* ]] && DDP_NCCL=defaults ddp_losses "${P}ddp-nccl-defaults"
    [[ "$only" == *" legacy-ipc-probe "* ]] && PROBE_NCCL_EXTRA=NCCL_CUMEM_ENABLE=0 nccl_defaults_probe "${P}nccl-legacy-ipc-probe"
    [[ "$only" == *" shm-probe "* ]] && PROBE_NCCL_EXTRA=NCCL_P2P_DISABLE=1 nccl_defaults_probe "${P}nccl-shm-probe"
    [[ "$only" == *" shm-register-probe "* ]] && PROBE_NCCL_EXTRA="NCCL_P2P_DISABLE=1 NCCL_CUMEM_HOST_ENABLE=0" nccl_defaults_probe "${P}nccl-shm-register-probe"
    [[ "$only" == *" ddp-shm "* ]] && DDP_NCCL=shm DDP_LAUNCH=torchrun ddp_losses "${P}ddp-torchrun-nccl-shm"
    [[ "$only" == *" ddp-shm-register "* ]] && DDP_NCCL=shm-register DDP_LAUNCH=torchrun ddp_losses "${P}ddp-torchrun-nccl-shm-register"
    [[ "$only" == *" ddp-legacy-ipc "* ]] && DDP_NCCL=legacy-ipc DDP_LAUNCH=torchrun ddp_losses "${P}ddp-torchrun-nccl-legacy-ipc"
    [[ "$only" == *" ipc-share "* ]] && ipc_share_probe "${P}ipc-share-torch-mp"
    [[ "$only" == *" ddp-torchrun "* ]] && DDP_NCCL=defaults DDP_LAUNCH=torchrun ddp_losses "${P}ddp-torchrun-nccl-defaults"
    [[ "$only" == *" ddp-torchrun-swap "* ]] && DDP_NCCL=defaults DDP_LAUNCH=torchrun DDP_GPU_SWAP=1 ddp_losses "${P}ddp-torchrun-nccl-defaults-gpu-map"
    [[ "$only" == *" ddp-defaults-swap "* ]] && DDP_NCCL=defaults DDP_GPU_SWAP=1 ddp_losses "${P}ddp-nccl-defaults-gpu-map"
    [[ "$only" == *" fsdp "* ]] && DDP_NCCL=defaults ddp_losses "${P}fsdp-2" --fsdp
    [[ "$only" == *" groups-torchrun "* ]] && DDP_NCCL=defaults DDP_LAUNCH=torchrun ddp_losses "${P}ddp-2-groups-torchrun" --groups 2
    [[ "$only" == *" fsdp-torchrun "* ]] && DDP_NCCL=defaults DDP_LAUNCH=torchrun ddp_losses "${P}fsdp-2-torchrun" --fsdp
    # Every GPU of the node, one rank each, when it has more than two.
    if [ "$n" -gt 2 ]; then
      [[ "$only" == *" ddp-defaults-all "* ]] && DDP_NCCL=defaults ddp_losses "${P}ddp-nccl-defaults-$n-ranks" --world "$n"
      [[ "$only" == *" fsdp-all "* ]] && DDP_NCCL=defaults ddp_losses "${P}fsdp-$n" --fsdp --world "$n"
      [[ "$only" == *" groups-torchrun-all "* ]] && DDP_NCCL=defaults DDP_LAUNCH=torchrun ddp_losses "${P}ddp-$n-ranks-2-groups-torchrun" --world "$n" --groups 2
    fi
  fi
  [[ "$only" == *" parallel "* ]] && parallel_pair "${P}parallel-2-gpus" 0 1 8
  return 0
}

# parallel_pair NAME GPU_A GPU_B GIB: two jobs checkpointed at once (leave-running), against one
# alone. On two GPUs the copies must not wait for each other; on one they share it.
parallel_pair() {
  local name=$1 ga=$2 gb=$3 gib=$4
  JOB_ENV=("CUDA_VISIBLE_DEVICES=$ga" "${MULTI_ENV[@]}"); start_job "$name-a" --gib "$gib"; local p0=$LOAD_PID s0=$LOAD_STATUS
  JOB_ENV=("CUDA_VISIBLE_DEVICES=$gb" "${MULTI_ENV[@]}"); start_job "$name-b" --gib "$gib"; local p1=$LOAD_PID s1=$LOAD_STATUS
  JOB_ENV=()
  wait_until 60 steps_past "$s0" 10; wait_until 60 steps_past "$s1" 10
  local t0 one both
  t0=$(date +%s%N)
  "${CRYO[@]}" -o json checkpoint "$p0" --id par-one --leave-running >"$RES/$name-one.json" 2>&1
  local r1=$?
  one=$(( ($(date +%s%N) - t0) / 1000000 ))
  t0=$(date +%s%N)
  "${CRYO[@]}" -o json checkpoint "$p0" --id par-a --leave-running >"$RES/$name-a.json" 2>&1 &
  local ca=$!
  "${CRYO[@]}" -o json checkpoint "$p1" --id par-b --leave-running >"$RES/$name-b.json" 2>&1
  local rb=$?; wait $ca; local ra=$?
  both=$(( ($(date +%s%N) - t0) / 1000000 ))
  local va vb
  va=$(verified_pass "$name-a" "$s0" "$gib") && vb=$(verified_pass "$name-b" "$s1" "$gib")
  local verified=$?
  local fp=""
  fp=$(multi_fastpath_check "$RES/$name-a.json") && fp=$(multi_fastpath_check "$RES/$name-b.json") || verified=1
  # The GPU's share: the driver's copy, or the fast path's drain (the stage that frees the GPU).
  local st=gpu_checkpoint; [ ${#MULTI_ENV[@]} -gt 0 ] && st=gpu_drain
  if [ $r1 -eq 0 ] && [ $ra -eq 0 ] && [ $rb -eq 0 ] && [ $verified -eq 0 ]; then
    result "$name" PASS "GPUs $ga and $gb, $gib GiB each: one job ${one} ms; two at once ${both} ms (ratio $(python3 -c "print(round($both/$one, 2))")); $st $(jget "$RES/$name-one.json" "d['stage_ms']['$st']") ms alone, $(jget "$RES/$name-a.json" "d['stage_ms']['$st']") and $(jget "$RES/$name-b.json" "d['stage_ms']['$st']") ms together; both jobs verified every word after"
    echo "{\"gpus\": \"$ga $gb\", \"gib\": $gib, \"one_ms\": $one, \"both_ms\": $both}" >"$RES/$name.json"
  else
    result "$name" FAIL "rc $r1/$ra/$rb: $(head -c 200 "$RES/$name-a.json") $(head -c 200 "$RES/$name-b.json") ${va:-} ${vb:-} $fp"
  fi
  end_job "$p0"; end_job "$p1"
  for id in par-one par-a par-b; do "${CRYO[@]}" rm "$id" >/dev/null 2>&1; done
}

# ddp_losses NAME [ddp_losses.py options]: a 2-rank DDP job checkpointed, killed and restored as
# one tree; its per-step losses must equal an uninterrupted run's.
ddp_losses() {
  local name=$1; shift
  local py=python3 steps=${CRYO_GPU_DDP_STEPS:-200}
  if ! $py -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
    result "$name" SKIP "no PyTorch with CUDA here"; return
  fi
  local src="$B/ddp_losses.py" ref="$RES/$name.ref.txt" run="$RES/$name.run.txt" ranks=2 a prev=""
  for a in "$@"; do [ "$prev" = --world ] && ranks=$a; prev=$a; done
  rm -f "$ref" "$run"
  # NCCL's shared-memory transports off (the driver's path cannot restore them), unless
  # DDP_NCCL=defaults: then NCCL runs as users run it (NVLS off) and the fast path carries what
  # the ranks share. DDP_GPU_SWAP=1 restores each rank onto the other GPU (--gpu-map).
  local nccl=(env NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_CUMEM_ENABLE=0 NCCL_CUMEM_HOST_ENABLE=0)
  [ "${DDP_NCCL:-}" = defaults ] && nccl=(env -u NCCL_P2P_DISABLE -u NCCL_SHM_DISABLE
    -u NCCL_CUMEM_ENABLE -u NCCL_CUMEM_HOST_ENABLE)
  # DDP_NCCL=legacy-ipc: NCCL's transports on, its cuMem off: P2P then shares cudaMalloc buffers
  # by legacy CUDA IPC (cudaIpcGetMemHandle), which the fast-path library serves itself.
  [ "${DDP_NCCL:-}" = legacy-ipc ] && nccl=(env -u NCCL_P2P_DISABLE -u NCCL_SHM_DISABLE
    -u NCCL_CUMEM_HOST_ENABLE NCCL_CUMEM_ENABLE=0)
  # DDP_NCCL=shm-register: P2P off, so the ranks meet through NCCL's SHM transport, on segments
  # of /dev/shm registered with the driver (cuMemHostRegister) rather than cuMem host memory.
  [ "${DDP_NCCL:-}" = shm-register ] && nccl=(env -u NCCL_SHM_DISABLE -u NCCL_CUMEM_ENABLE
    NCCL_P2P_DISABLE=1 NCCL_CUMEM_HOST_ENABLE=0)
  # DDP_NCCL=shm: P2P off, the rest at NCCL's defaults: the SHM transport then shares host
  # memory made with cuMemCreate as POSIX descriptors, which the fast-path library carries.
  [ "${DDP_NCCL:-}" = shm ] && nccl=(env -u NCCL_SHM_DISABLE -u NCCL_CUMEM_ENABLE
    -u NCCL_CUMEM_HOST_ENABLE NCCL_P2P_DISABLE=1)
  nccl+=(NCCL_NVLS_ENABLE=0 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo)
  # Rank 0 hosts PyTorch's TCPStore, whose libuv loop sets up an io_uring, which CRIU 4.1 cannot
  # dump ("Unknown shit 600 (anon_inode:[io_uring])", seen on the H200s; UV_USE_IO_URING=0 did
  # not remove it). Under the fast path the library refuses io_uring_setup and libuv falls back
  # to epoll; without it, USE_LIBUV=0 selects TCPStore's other backend.
  [ ${#MULTI_ENV[@]} -eq 0 ] && nccl+=(USE_LIBUV=0)
  local restore_args=()
  if [ "${DDP_GPU_SWAP:-0}" = 1 ]; then
    local u0 u1; u0=$(gpu_uuid 0); u1=$(gpu_uuid 1)
    restore_args=(--gpu-map "$u0=$u1" --gpu-map "$u1=$u0")
  fi
  # DDP_LAUNCH=torchrun: launched as users launch it, `torchrun --standalone`, no other option:
  # its agent (the tree's root) hosts the ranks' store with libuv, hard-wired. Without the fast
  # path the agent keeps its io_uring and cryod refuses the job before anything stops (runs
  # 42-43), so this needs MULTI_ENV.
  local launch=("$src")
  if [ "${DDP_LAUNCH:-}" = torchrun ]; then
    launch=(-m torch.distributed.run --standalone --nproc-per-node="$ranks" "$src")
  fi
  "${nccl[@]}" setsid -w $py "${launch[@]}" --steps "$steps" --out "$ref" --port 29561 "$@" </dev/null >"$RES/$name.ref.log" 2>&1
  if grep -q "FSDP unavailable" "$RES/$name.ref.log"; then result "$name" SKIP "this PyTorch has no FSDP"; return; fi
  grep -qx done "$ref" || { result "$name" FAIL "reference run failed: $(tail -3 "$RES/$name.ref.log")"; return; }
  # The reference runs without MULTI_ENV (the fast-path library): the library must not change
  # a single loss either.
  "${nccl[@]}" "${MULTI_ENV[@]}" setsid $py "${launch[@]}" --steps "$steps" --out "$run" --port 29562 "$@" </dev/null >"$RES/$name.run.log" 2>&1 &
  local tpid=$!
  PIDS+=("$tpid")
  local mid=$(( steps / 3 ))
  wait_until 300 bash -c "[ \$(wc -l 2>/dev/null <'$run' || echo 0) -ge $mid ]" || { result "$name" FAIL "training did not start: $(tail -3 "$RES/$name.run.log")"; return; }
  # What the job's processes map from devices and /dev/shm, for a failed dump's log.
  for p in $(ps -s "$tpid" -o pid=); do
    { echo "== $p $(tr '\0' ' ' </proc/$p/cmdline | cut -c1-80)"; grep -E 'nvidia|/dev/shm|deleted' /proc/$p/maps; } \
      >>"$RES/$name.maps.txt" 2>/dev/null
  done
  # The node's TCP sockets around the checkpoint, for a restore that cannot bind one.
  cat /proc/net/tcp /proc/net/tcp6 >"$RES/$name.tcp-before.txt" 2>&1
  if ! "${CRYO[@]}" -o json checkpoint "$tpid" --id "$name" --tcp-established >"$RES/$name.ckpt.json" 2>&1; then
    local dlog; dlog=$(grep -o 'log: [^"]*dump.log' "$RES/$name.ckpt.json" | cut -c6-)
    [ -n "$dlog" ] && cp "$dlog" "$RES/$name.dump.log"
    result "$name" FAIL "checkpoint: $(head -c 400 "$RES/$name.ckpt.json")"; end_job "$tpid"; return
  fi
  local fpwhy
  if ! fpwhy=$(multi_fastpath_check "$RES/$name.ckpt.json"); then
    result "$name" FAIL "$fpwhy"; end_job "$tpid"; "${CRYO[@]}" rm "$name" >/dev/null 2>&1; return
  fi
  wait "$tpid" 2>/dev/null
  local at; at=$(wc -l <"$run")
  cat /proc/net/tcp /proc/net/tcp6 >"$RES/$name.tcp-after.txt" 2>&1
  if ! "${CRYO[@]}" -o json restore "$name" "${restore_args[@]}" >"$RES/$name.restore.json" 2>&1; then
    local rlog; rlog=$(grep -o 'log: [^"]*restore.log' "$RES/$name.restore.json" | cut -c6-)
    [ -n "$rlog" ] && cp "$rlog" "$RES/$name.restore.log"
    cat /proc/net/tcp /proc/net/tcp6 >"$RES/$name.tcp-failed.txt" 2>&1
    mkdir -p "$RES/$name.img" && cp "$W"/store/checkpoints/"$name"/images/{inetsk,files,fdinfo-*}.img "$RES/$name.img/" 2>/dev/null
    result "$name" FAIL "restore: $(head -c 400 "$RES/$name.restore.json")"; return
  fi
  if ! wait_until 300 grep -qx done "$run"; then
    result "$name" FAIL "restored training did not finish ($(wc -l <"$run") lines)"; end_job "$tpid"; return
  fi
  local where=""
  if [ "${DDP_GPU_SWAP:-0}" = 1 ]; then
    where="; restored onto the swapped GPUs (ranks now on $(nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader | tr '\n' ' '))"
  fi
  if cmp -s "$ref" "$run"; then
    result "$name" PASS "$ranks ranks, $steps steps, NCCL ${DDP_NCCL:-transports off}, checkpointed after step $((at - 1)) as one tree ($(jget "$RES/$name.ckpt.json" 'len(d["pids"])') processes), losses bit-identical; $(jget "$RES/$name.ckpt.json" '"gpu drain %s + lock %s + checkpoint %s ms, dump %s ms, fast path %s bytes" % (d["stage_ms"].get("gpu_drain"), d["stage_ms"].get("gpu_lock"), d["stage_ms"].get("gpu_checkpoint"), d["stage_ms"].get("dump"), d.get("gpu_fastpath_bytes"))')$where"
  else
    result "$name" FAIL "losses differ: $(diff "$ref" "$run" | head -3 | tr '\n' ' ')"
  fi
  "${CRYO[@]}" rm "$name" >/dev/null 2>&1
}

# nccl_defaults_probe NAME: the DDP job with NCCL at its defaults (NVLS off), as users run it.
# Records what NCCL chose (its transports, from NCCL_DEBUG=INFO), what each rank called of the
# sharing entry points (the fast-path library's status, when MULTI_ENV preloads it) and what it
# maps; PASS when the checkpoint is refused before anything stops and the job runs on to the
# reference's losses. The facts for owning shared memory in the library (issue 22).
nccl_defaults_probe() {
  local name=$1 py=python3 steps=${CRYO_GPU_DDP_STEPS:-200}
  if ! $py -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
    result "$name" SKIP "no PyTorch with CUDA here"; return
  fi
  local src="$B/ddp_losses.py" ref="$RES/$name.ref.txt" run="$RES/$name.run.txt"
  rm -f "$ref" "$run"
  # NCCL's transports at their defaults (NVLS off), whatever the environment says.
  local defaults=(env -u NCCL_P2P_DISABLE -u NCCL_SHM_DISABLE -u NCCL_CUMEM_ENABLE
    -u NCCL_CUMEM_HOST_ENABLE -u NCCL_IB_DISABLE NCCL_NVLS_ENABLE=0 NCCL_SOCKET_IFNAME=lo)
  [ ${#MULTI_ENV[@]} -eq 0 ] && defaults+=(USE_LIBUV=0)
  # PROBE_NCCL_EXTRA: one more setting (NCCL_CUMEM_ENABLE=0: P2P by legacy CUDA IPC;
  # NCCL_P2P_DISABLE=1: the SHM transport between the GPUs).
  # shellcheck disable=SC2206 # a list of settings
  [ -n "${PROBE_NCCL_EXTRA:-}" ] && defaults+=($PROBE_NCCL_EXTRA)
  "${defaults[@]}" setsid -w $py "$src" --steps "$steps" --out "$ref" --port 29571 </dev/null >"$RES/$name.ref.log" 2>&1
  grep -qx done "$ref" || { result "$name" FAIL "reference run failed: $(tail -3 "$RES/$name.ref.log")"; return; }
  "${defaults[@]}" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P,SHM,ALLOC "${MULTI_ENV[@]}" \
    setsid $py "$src" --steps "$steps" --out "$run" --port 29572 </dev/null >"$RES/$name.run.log" 2>&1 &
  local tpid=$!
  PIDS+=("$tpid")
  wait_until 300 bash -c "[ \$(wc -l 2>/dev/null <'$run' || echo 0) -ge $(( steps / 3 )) ]" || { result "$name" FAIL "training did not start: $(tail -3 "$RES/$name.run.log")"; end_job "$tpid"; return; }
  local p calls=""
  for p in $(ps -s "$tpid" -o pid=); do
    { echo "== $p $(tr '\0' ' ' </proc/$p/cmdline | cut -c1-80)"; grep -E 'nvidia|/dev/shm|deleted' /proc/$p/maps; } \
      >>"$RES/$name.maps.txt" 2>/dev/null
    [ ${#MULTI_ENV[@]} -gt 0 ] && "$GPUCTL" fastpath-status "$p" >"$RES/$name.status.$p.json" 2>&1
  done
  if [ ${#MULTI_ENV[@]} -gt 0 ]; then
    calls=$(python3 - "$RES" "$name" <<'PY'
import glob, json, re, sys
want = re.compile(r"Export|Import|Ipc|HostRegister|Multicast|PeerAccess|MemCreate|MemMap$")
out = []
for f in sorted(glob.glob(f"{sys.argv[1]}/{sys.argv[2]}.status.*.json")):
    try:
        docs = json.load(open(f))
    except Exception:
        continue
    for d in docs.get("processes", []):
        c = {k: v for k, v in d.get("calls", {}).items() if want.search(k)}
        if c or d.get("owned_bytes"):
            out.append("pid %s owned %s in %s, foreign %s, %s" % (d.get("pid"), d.get("owned_bytes"), d.get("owned_allocations"), d.get("foreign_allocations"), c))
print("; ".join(out) or "no rank with CUDA answered")
PY
)
  fi
  # With the library the checkpoint must work and leave the job running (its shared memory
  # carried back); without it, it must be refused before anything stops.
  "${CRYO[@]}" -o json checkpoint "$tpid" --id "$name" --tcp-established --leave-running >"$RES/$name.ckpt.json" 2>&1
  local rc=$?
  local transports; transports=$(grep -oE 'via (P2P|SHM|NET)[A-Za-z/_]*' "$RES/$name.run.log" | sort | uniq -c | tr -s ' ' | tr '\n' ';')
  wait_until 300 grep -qx done "$run"
  local done_ok=$?
  end_job "$tpid"
  "${CRYO[@]}" rm "$name" >/dev/null 2>&1
  local facts="NCCL: ${transports:-no transport lines}; library: ${calls:-not preloaded}"
  if [ ${#MULTI_ENV[@]} -gt 0 ]; then
    if [ $rc -ne 0 ]; then
      result "$name" FAIL "leave-running checkpoint failed: $(head -c 400 "$RES/$name.ckpt.json"); $facts"
    elif [ $done_ok -ne 0 ] || ! cmp -s "$ref" "$run"; then
      result "$name" FAIL "checkpointed, but the job did not run on to the same losses; $facts"
    else
      result "$name" PASS "a leave-running checkpoint with NCCL at its defaults: the job ran on, losses bit-identical ($(jget "$RES/$name.ckpt.json" '"drain %s ms, fast path %s bytes" % (d["stage_ms"].get("gpu_drain"), d.get("gpu_fastpath_bytes"))')); $facts"
    fi
  elif [ $rc -eq 0 ]; then
    result "$name" FAIL "the checkpoint was taken, not refused (its restore is not known to work): $facts"
  elif ! grep -q FAILED_PRECONDITION "$RES/$name.ckpt.json"; then
    result "$name" FAIL "checkpoint failed, not refused up front: $(head -c 300 "$RES/$name.ckpt.json"); $facts"
  elif [ $done_ok -ne 0 ] || ! cmp -s "$ref" "$run"; then
    result "$name" FAIL "refused, but the job did not run on to the same losses; $facts"
  else
    result "$name" PASS "refused up front ($(grep -o 'NCCL_[A-Z_]*=[0-9]' "$RES/$name.ckpt.json" | head -4 | tr '\n' ' ')), the job ran on, losses bit-identical; $facts"
  fi
}

# ipc_share_probe NAME: a CUDA tensor shared between two processes through a torch.multiprocessing
# queue (legacy CUDA IPC and an IPC event, ipc_share.py), with the fast-path library: stopped and
# restored; PASS when the counts go on from where they were, every element right at every step.
ipc_share_probe() {
  local name=$1 py=python3 steps=${CRYO_GPU_IPC_STEPS:-300}
  if ! $py -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
    result "$name" SKIP "no PyTorch with CUDA here"; return
  fi
  local out="$RES/$name.counts.txt" p calls
  rm -f "$out"
  env "${MULTI_ENV[@]}" CUDA_VISIBLE_DEVICES=0 setsid $py "$B/ipc_share.py" --steps "$steps" --out "$out" </dev/null >"$RES/$name.run.log" 2>&1 &
  local tpid=$!
  PIDS+=("$tpid")
  wait_until 120 bash -c "[ \$(wc -l 2>/dev/null <'$out' || echo 0) -ge $((steps / 3)) ]" || { result "$name" FAIL "did not start: $(tail -3 "$RES/$name.run.log")"; end_job "$tpid"; return; }
  for p in $(ps -s "$tpid" -o pid=); do
    "$GPUCTL" fastpath-status "$p" >"$RES/$name.status.$p.json" 2>&1
  done
  calls=$(cat "$RES/$name".status.*.json 2>/dev/null | grep -oE '"cuIpc[A-Za-z_0-9]*": *[0-9]+' | sort | uniq -c | tr -s ' ' | tr '\n' ';')
  if ! "${CRYO[@]}" -o json checkpoint "$tpid" --id "$name" >"$RES/$name.ckpt.json" 2>&1; then
    result "$name" FAIL "checkpoint: $(head -c 400 "$RES/$name.ckpt.json"); library: ${calls:-none}"; end_job "$tpid"; return
  fi
  wait "$tpid" 2>/dev/null
  local at; at=$(wc -l <"$out")
  if ! "${CRYO[@]}" -o json restore "$name" >"$RES/$name.restore.json" 2>&1; then
    result "$name" FAIL "restore: $(head -c 400 "$RES/$name.restore.json")"; return
  fi
  if ! wait_until 120 grep -qx done "$out"; then
    result "$name" FAIL "the restored processes did not finish: $(tail -2 "$out" | tr '\n' ' ')"; end_job "$tpid"; return
  fi
  if [ "$(grep -c ' ok$' "$out")" = "$steps" ] && ! grep -q ' bad' "$out"; then
    result "$name" PASS "stopped after step $at and restored; the child's adds reached the parent's tensor at every one of $steps steps; $(jget "$RES/$name.ckpt.json" '"%s processes, drain %s ms, fast path %s bytes" % (len(d["pids"]), d["stage_ms"].get("gpu_drain"), d.get("gpu_fastpath_bytes"))'); library: ${calls:-none}"
  else
    result "$name" FAIL "wrong counts: $(grep -v ' ok$' "$out" | head -3 | tr '\n' ' ')"
  fi
  "${CRYO[@]}" rm "$name" >/dev/null 2>&1
}

# Parts "export" and "import" (two machines of one GPU each, one after the other): a checkpoint
# taken on one node is restored on another, onto that node's GPU. export checkpoints a small job
# (16 MiB of pattern, so that the packed checkpoint fits what a lease brings back) and writes the
# checkpoint, xz-packed and split into 15 MiB parts, to $CRYO_GPU_EXPORT_DIR; import, on the other
# machine, puts the parts from $CRYO_GPU_IMPORT_DIR into its store, restores the job through its
# cryod and checks that it goes on from its step and verifies every word on this node's GPU.
# The job's files must exist on both machines: its output goes to /dev/null, its working
# directory is /, its status file is under XNODE_DIR, and the bundle lies at the same path.
XNODE_DIR=/var/tmp/cryo-xnode

xnode_export() {
  local out=${CRYO_GPU_EXPORT_DIR:?CRYO_GPU_EXPORT_DIR names where the parts go}
  rm -rf "$XNODE_DIR" && mkdir -p "$XNODE_DIR" "$out"
  LOAD_STATUS=$XNODE_DIR/status.json
  # A restored process keeps its pid, so the job takes one far above what a fresh machine has
  # handed out (seen: a low pid taken by the other machine's cryod, and the restore refused).
  local pid_max; pid_max=$(cat /proc/sys/kernel/pid_max)
  [ "$pid_max" -ge 4096 ] && echo $(( pid_max / 2 )) >/proc/sys/kernel/ns_last_pid
  (cd / && exec setsid "$LOAD" --status "$LOAD_STATUS" --gib 0.015625 --chunk-mib 16 </dev/null >/dev/null 2>&1) &
  local pid=$!
  PIDS+=("$pid")
  if ! wait_until 120 status_ready "$LOAD_STATUS" || ! wait_until 60 steps_past "$LOAD_STATUS" 50; then
    result xnode-export FAIL "job did not start"; end_job "$pid"; return
  fi
  if ! "${CRYO[@]}" -o json checkpoint "$pid" --id xnode >"$RES/xnode.ckpt.json" 2>"$RES/xnode.ckpt.err"; then
    result xnode-export FAIL "checkpoint: $(tail -2 "$RES/xnode.ckpt.err")"; end_job "$pid"; return
  fi
  wait "$pid" 2>/dev/null
  local stage; stage=$(mktemp -d /var/tmp/cryo-xnode-pack-XXXXXX)
  cp "$LOAD_STATUS" "$stage/status.json"
  nvidia-smi --query-gpu=uuid,name,driver_version --format=csv,noheader -i 0 >"$stage/source-gpu.txt"
  rm -f "$out"/xnode.tar.xz.*
  tar -C "$W/store/checkpoints" -cf - xnode -C "$stage" status.json source-gpu.txt |
    xz -T0 -6 | split -b 15M -d -a 1 - "$out/xnode.tar.xz."
  local parts bytes src; parts=$(ls "$out"/xnode.tar.xz.* | wc -l); bytes=$(cat "$out"/xnode.tar.xz.* | wc -c)
  src=$(cat "$stage/source-gpu.txt")
  rm -rf "$stage"
  if [ "$parts" -gt 3 ]; then
    result xnode-export FAIL "packed checkpoint is $bytes bytes in $parts parts: too large to bring back"
  else
    result xnode-export PASS "pid $pid at step $(jget "$LOAD_STATUS" 'd["steps"]') on [$src]: $(jget "$RES/xnode.ckpt.json" 'd["size_bytes"]') image bytes, packed $bytes bytes in $parts parts"
  fi
}

xnode_import() {
  local in=${CRYO_GPU_IMPORT_DIR:?CRYO_GPU_IMPORT_DIR names where the parts are}
  if ! ls "$in"/xnode.tar.xz.* >/dev/null 2>&1; then
    result restore-other-node FAIL "no parts $in/xnode.tar.xz.*"; return
  fi
  local stage; stage=$(mktemp -d /var/tmp/cryo-xnode-unpack-XXXXXX)
  if ! cat "$in"/xnode.tar.xz.* | xz -d | tar -C "$stage" -xf -; then
    result restore-other-node FAIL "parts do not unpack"; return
  fi
  rm -rf "$XNODE_DIR" "$W/store/checkpoints/xnode" && mkdir -p "$XNODE_DIR" "$W/store/checkpoints"
  mv "$stage/xnode" "$W/store/checkpoints/xnode"
  cp "$stage/status.json" "$XNODE_DIR/status.json"
  local src; src=$(cat "$stage/source-gpu.txt")
  rm -rf "$stage"
  local here; here=$(nvidia-smi --query-gpu=uuid,name,driver_version --format=csv,noheader -i 0)
  local saved pid; saved=$(jget "$XNODE_DIR/status.json" 'd["steps"]'); pid=$(jget "$XNODE_DIR/status.json" 'd["pid"]')
  if ! "${CRYO[@]}" -o json restore xnode >"$RES/xnode.restore.json" 2>"$RES/xnode.restore.err"; then
    result restore-other-node FAIL "source GPU [$src], this GPU [$here]: $(tail -3 "$RES/xnode.restore.err") $(head -c 600 "$RES/xnode.restore.json")"
    return
  fi
  PIDS+=("$pid")
  local msg where
  if ! wait_until 60 steps_past "$XNODE_DIR/status.json" $(( saved + 1 )); then
    result restore-other-node FAIL "restored job did not go on from step $saved: $(cat "$XNODE_DIR/status.json")"
  elif ! msg=$(verified_pass xnode "$XNODE_DIR/status.json" 0.015625); then
    result restore-other-node FAIL "$msg"
  else
    where=$(nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader | awk -F', ' -v p="$pid" '$1==p {print $2}')
    result restore-other-node PASS "checkpointed on [$src] by node gpu-node, restored on this node (${CRYO_GPU_NODE:-gpu-node}) onto [$here]; pid $pid runs on ${where:-?}, went on from step $saved, every word verified; restore $(jget "$RES/xnode.restore.json" 'd.get("stage_ms")') ms"
  fi
  end_job "$pid"
}

run_cryod_parts() {
  [ -x "$B/bin/cryod" ] && [ -x "$B/bin/criu" ] || { result cryod SKIP "bundle has no cryod or CRIU"; return; }
  # The steady-state measurement goes with the benchmark; other parts only need cryod.
  case " $PARTS " in
    *" cryod "*) overhead || return ;;
    *) start_cryod || { result cryod FAIL "cryod did not start: $(tail -3 "$RES/cryod.log")"; return; } ;;
  esac
  case " $PARTS " in *" export "*) xnode_export ;; esac
  case " $PARTS " in *" import "*) xnode_import ;; esac
  case " $PARTS " in *" cryod "*)
    cryod_leave_running
    # CRYO_GPU_BENCH_FSYNC="true false" repeats the rounds with cryod's store_fsync off: the
    # baseline leaves its images in the page cache, cryod by default waits for the disk.
    local fs pass=0 n
    for fs in ${CRYO_GPU_BENCH_FSYNC:-$STORE_FSYNC}; do
      if [ "$fs" != "$STORE_FSYNC" ]; then
        stop_cryod; STORE_FSYNC=$fs
        start_cryod || { result cryod FAIL "cryod did not restart: $(tail -3 "$RES/cryod.log")"; return; }
      fi
      KR_TAG=$([ "$fs" = true ] || echo -nofsync)
      for gib in $BENCH_SIZES; do
        for r in $(seq 1 "$BENCH_ROUNDS"); do
          n=$(( pass * BENCH_ROUNDS + r ))  # rounds numbered on across passes
          baseline "$gib" "$n"
          cryod_restore "$gib" "$n"
        done
      done
      pass=$(( pass + 1 ))
    done
    KR_TAG=
    bench_table ;;
  esac
  case " $PARTS " in *" torch "*) torch_losses ;; esac
  case " $PARTS " in *" refuse "*) refuse_parts ;; esac
  case " $PARTS " in *" multi "*) multi_parts ;; esac
}
