# The GPU fast path (docs/gpu.md, "Fast path"), sourced by run.sh after cryod.sh (which defines
# start_job, end_job, verified_pass, rate, $W, $JOB_ENV).
#
# Part "fastpath-proof": the library alone, driven by cryo-gpuctl (no cryod):
#   fp-torch-default, fp-torch-expandable  a PyTorch training loop with the library loaded
#       (default caching allocator; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) is drained
#       into files, checkpointed and restored by the driver, refilled, mid-run: its per-step
#       losses are bit-identical to an uninterrupted run without the library
#   fp-overhead  steady-state PyTorch steps/s with and without the library, alternating runs
#   fp-inplace-N-files / -host  a job holding N GiB with the library: drain (into files with
#       parallel direct I/O / into the job's own memory), driver checkpoint and restore, refill;
#       timings; every word verified afterwards
#   fp-driver-N  the same job on the driver's path alone (the library loaded, not used)
#   fp-criu-N    drain into files, driver checkpoint, CRIU dump, kill; CRIU restore, driver
#       restore, refill from the files: the job goes on from its step, every word verified
#
# Env: CRYO_GPU_FP_SIZES (GiB, default "1 8"), CRYO_GPU_FP_WRITERS (files per process, default 4),
# CRYO_GPU_FP_THREADS (copy threads, default nproc), CRYO_GPU_FP_CRIU_GIB (default 8).

FPLIB="$B/lib/cryo/libcryo_gpu_fastpath.so"
FP_SIZES=${CRYO_GPU_FP_SIZES:-1 8}
FP_WRITERS=${CRYO_GPU_FP_WRITERS:-4}
FP_THREADS=${CRYO_GPU_FP_THREADS:-$(nproc)}

fp_start_job() {  # fp_start_job NAME ARGS...: the test program with the library loaded
  JOB_ENV=("LD_PRELOAD=$FPLIB")
  start_job "$@"
  local rc=$?
  JOB_ENV=()
  return $rc
}

fp_inplace() {  # fp_inplace GIB files|host|driver
  local gib=$1 mode=$2 k="fp$1$2"
  local name; name=$([ "$mode" = driver ] && echo "fp-driver-$gib" || echo "fp-inplace-$gib-$mode")
  fp_start_job "$k" --gib "$gib" || { result "$name" FAIL "job did not start: $(tail -2 "$RES/$k.load.log")"; return; }
  local pid=$LOAD_PID
  wait_until 120 steps_past "$LOAD_STATUS" 10
  "$GPUCTL" fastpath-status "$pid" >"$RES/$k.fpstatus.json" 2>&1
  local args=(--timeout-ms 10000)
  case $mode in
    files) rm -rf "$W/$k"; mkdir -p "$W/$k"
           args+=(--fast --threads "$FP_THREADS" --files "$W/$k" --writers "$FP_WRITERS") ;;
    host) args+=(--fast --threads "$FP_THREADS") ;;
  esac
  if ! "$GPUCTL" "${args[@]}" cycle "$pid" >"$RES/$k.cycle.json" 2>"$RES/$k.cycle.err"; then
    result "$name" FAIL "cycle: $(jget "$RES/$k.cycle.json" 'd.get("error")') $(tail -2 "$RES/$k.cycle.err")"
    end_job "$pid"; rm -rf "${W:?}/$k"; return
  fi
  local msg
  if ! msg=$(verified_pass "$k" "$LOAD_STATUS" "$gib"); then
    result "$name" FAIL "$msg"; end_job "$pid"; rm -rf "${W:?}/$k"; return
  fi
  result "$name" PASS "$(jget "$RES/$k.cycle.json" '"vacate %d ms (drain %d, lock %d, driver d2h %d), files written by %s, restore %d + unlock %d, refill %d ms; GPU freed by the drain %.2f GiB, by the driver %.2f GiB" % (d["vacate_ms"], d.get("drain_ms", 0), d["lock_ms"], d["checkpoint_ms"], ("%d ms" % d["saved_ms"]) if "saved_ms" in d else "-", d["restore_ms"], d["unlock_ms"], d.get("refill_ms", 0), (d.get("gpu_free_after_drain_bytes", d["gpu_free_before_bytes"]) - d["gpu_free_before_bytes"]) / 2**30, (d["gpu_free_after_checkpoint_bytes"] - d.get("gpu_free_after_drain_bytes", d["gpu_free_before_bytes"])) / 2**30)')"
  end_job "$pid"
  rm -rf "${W:?}/$k"
}

fp_criu() {  # fp_criu GIB: the fast path with CRIU in the middle, by hand
  local gib=$1 k="fpcriu$1" name="fp-criu-$1" dir="$W/fpcriu$1"
  fp_start_job "$k" --gib "$gib" || { result "$name" FAIL "job did not start"; return; }
  local pid=$LOAD_PID
  wait_until 120 steps_past "$LOAD_STATUS" 10
  rm -rf "$dir"; mkdir -p "$dir/img"
  local t0 t1 t2 t3 t4 t5 t6 t7
  t0=$(date +%s%N)
  "$GPUCTL" --files "$dir" --writers "$FP_WRITERS" --threads "$FP_THREADS" --timeout-ms 10000 \
    fastpath-drain "$pid" >"$RES/$k.drain.json" 2>&1 || { result "$name" FAIL "drain: $(head -c 400 "$RES/$k.drain.json")"; end_job "$pid"; return; }
  t1=$(date +%s%N)
  { "$GPUCTL" --timeout-ms 10000 lock "$pid" && "$GPUCTL" checkpoint "$pid"; } >"$RES/$k.d2h.json" 2>&1 || { result "$name" FAIL "driver checkpoint: $(head -c 400 "$RES/$k.d2h.json")"; end_job "$pid"; return; }
  t2=$(date +%s%N)
  "$B/bin/criu" dump -t "$pid" -D "$dir/img" -o dump.log -v4 --file-locks >/dev/null 2>&1 || { result "$name" FAIL "criu dump: $(grep -a Error "$dir/img/dump.log" | tail -2)"; "$GPUCTL" rollback "$pid" >/dev/null 2>&1; end_job "$pid"; return; }
  t3=$(date +%s%N)
  wait "$pid" 2>/dev/null
  t4=$(date +%s%N)
  "$B/bin/criu" restore -D "$dir/img" -o restore.log -v4 --file-locks --restore-detached >/dev/null 2>&1 || { result "$name" FAIL "criu restore: $(grep -a Error "$dir/img/restore.log" | tail -2)"; return; }
  t5=$(date +%s%N)
  { "$GPUCTL" restore "$pid" && "$GPUCTL" unlock "$pid"; } >"$RES/$k.h2d.json" 2>&1 || { result "$name" FAIL "driver restore: $(head -c 400 "$RES/$k.h2d.json")"; end_job "$pid"; return; }
  t6=$(date +%s%N)
  "$GPUCTL" --files "$dir" --threads "$FP_THREADS" fastpath-refill "$pid" >"$RES/$k.refill.json" 2>&1 || { result "$name" FAIL "refill: $(head -c 400 "$RES/$k.refill.json")"; end_job "$pid"; return; }
  t7=$(date +%s%N)
  local msg
  if ! msg=$(verified_pass "$k" "$LOAD_STATUS" "$gib"); then result "$name" FAIL "$msg"; end_job "$pid"; return; fi
  local img; img=$(du -sb "$dir/img" | cut -f1)
  local data; data=$(du -sb "$dir/gpu" | cut -f1)
  python3 -c "
import json
ns=[$t0,$t1,$t2,$t3,$t4,$t5,$t6,$t7]; ms=lambda a,b:(ns[b]-ns[a])//1000000
print(json.dumps({'gib':$gib,'drain_ms':ms(0,1),'driver_ckpt_ms':ms(1,2),'dump_ms':ms(2,3),'checkpoint_ms':ms(0,3),
 'criu_restore_ms':ms(4,5),'driver_restore_ms':ms(5,6),'refill_ms':ms(6,7),'restore_ms':ms(4,7),
 'image_bytes':$img,'fastpath_bytes':$data}))" >"$RES/$k.summary.json"
  result "$name" PASS "$(jget "$RES/$k.summary.json" '"checkpoint %d ms (drain+save %d, driver %d, dump %d), restore %d ms (criu %d, driver %d, refill %d); images %.2f GiB, fast-path files %.2f GiB" % (d["checkpoint_ms"], d["drain_ms"], d["driver_ckpt_ms"], d["dump_ms"], d["restore_ms"], d["criu_restore_ms"], d["driver_restore_ms"], d["refill_ms"], d["image_bytes"]/2**30, d["fastpath_bytes"]/2**30)')"
  end_job "$pid"
  rm -rf "$dir"
}

fp_torch_ok() { python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; }

fp_torch() {  # fp_torch NAME ALLOC_CONF: a training loop with the library, a fast cycle mid-run
  local name=$1 conf=$2 steps=${CRYO_GPU_TORCH_STEPS:-200}
  local ref="$RES/fp.torch.ref.txt" run="$RES/$name.txt" dir="$W/$name"
  if [ ! -s "$ref" ]; then
    setsid -w python3 "$B/train_losses.py" --steps "$steps" --step-ms 20 --out "$ref" </dev/null >"$RES/fp.torch.ref.log" 2>&1
  fi
  rm -f "$run"; rm -rf "$dir"; mkdir -p "$dir"
  env LD_PRELOAD="$FPLIB" ${conf:+PYTORCH_CUDA_ALLOC_CONF=$conf} \
    setsid python3 "$B/train_losses.py" --steps "$steps" --step-ms 20 --out "$run" </dev/null >"$RES/$name.log" 2>&1 &
  local tpid=$!
  PIDS+=("$tpid")
  local mid=$(( steps / 3 ))
  wait_until 300 bash -c "[ \$(wc -l 2>/dev/null <'$run' || echo 0) -ge $mid ]" || { result "$name" FAIL "training did not start: $(tail -3 "$RES/$name.log")"; end_job "$tpid"; return; }
  "$GPUCTL" fastpath-status "$tpid" >"$RES/$name.fpstatus.json" 2>&1
  if ! "$GPUCTL" --fast --files "$dir" --writers "$FP_WRITERS" --threads "$FP_THREADS" --timeout-ms 10000 \
      cycle "$tpid" >"$RES/$name.cycle.json" 2>"$RES/$name.cycle.err"; then
    result "$name" FAIL "cycle: $(jget "$RES/$name.cycle.json" 'd.get("error")') $(tail -2 "$RES/$name.cycle.err")"
    end_job "$tpid"; return
  fi
  local at; at=$(wc -l <"$run")
  if ! wait_until 300 grep -qx done "$run"; then
    result "$name" FAIL "training did not finish ($(wc -l <"$run") lines): $(tail -3 "$RES/$name.log")"; end_job "$tpid"; return
  fi
  wait "$tpid" 2>/dev/null
  local what; what=$(jget "$RES/$name.fpstatus.json" '"owned %.0f MiB in %d allocations (%d cudaMalloc); launches seen %d" % (d["processes"][0]["owned_bytes"]/2**20, d["processes"][0]["owned_allocations"], d["processes"][0]["owned_cumemalloc"], sum(v for k, v in d["processes"][0]["calls"].items() if k.startswith("cuLaunch")))')
  local cyc; cyc=$(jget "$RES/$name.cycle.json" '"vacate %d ms (drain %d), refill %d ms" % (d["vacate_ms"], d["drain_ms"], d["refill_ms"])')
  if cmp -s "$ref" "$run"; then
    result "$name" PASS "$steps steps, drained/checkpointed/refilled after step $((at - 1)), losses bit-identical to a run without the library; $what; $cyc"
  else
    result "$name" FAIL "losses differ: $(diff "$ref" "$run" | head -3 | tr '\n' ' '); $what; $cyc"
  fi
  rm -rf "$dir"
}

fp_overhead() {  # steady-state steps/s, with and without the library, alternating
  local with=() without=() i r
  for i in 1 2; do
    rm -f "$RES/fp.oh.txt"
    setsid -w python3 "$B/train_losses.py" --steps 400 --step-ms 0 --out "$RES/fp.oh.txt" --rate-out "$RES/fp.oh.rate" </dev/null >/dev/null 2>&1
    without+=("$(cat "$RES/fp.oh.rate" 2>/dev/null)")
    rm -f "$RES/fp.oh.txt"
    env LD_PRELOAD="$FPLIB" setsid -w python3 "$B/train_losses.py" --steps 400 --step-ms 0 --out "$RES/fp.oh.txt" --rate-out "$RES/fp.oh.rate" </dev/null >/dev/null 2>&1
    with+=("$(cat "$RES/fp.oh.rate" 2>/dev/null)")
  done
  r=$(python3 -c "import sys; a=[float(x) for x in sys.argv[1].split()]; b=[float(x) for x in sys.argv[2].split()]; print('without %s, with %s steps/s: ratio %.4f' % (a, b, (sum(b)/len(b))/(sum(a)/len(a))))" "${without[*]}" "${with[*]}" 2>&1)
  echo "{\"without\": [${without[*]// /, }], \"with\": [${with[*]// /, }]}" >"$RES/fp.overhead.json"
  result fp-overhead PASS "$r"
}

run_fastpath_parts() {
  [ -f "$FPLIB" ] || { result fastpath SKIP "bundle has no $FPLIB"; return; }
  case " $PARTS " in *" fastpath-proof "*)
    if fp_torch_ok; then
      fp_torch fp-torch-default ""
      fp_torch fp-torch-expandable "expandable_segments:True"
      fp_overhead
    else
      result fp-torch SKIP "no PyTorch with CUDA here"
    fi
    for gib in $FP_SIZES; do
      fp_inplace "$gib" files
      fp_inplace "$gib" host
      fp_inplace "$gib" driver
    done
    fp_criu "${CRYO_GPU_FP_CRIU_GIB:-8}" ;;
  esac
}
