# The GPU fast path (docs/gpu.md, "Fast path"), sourced by run.sh after cryod.sh (which defines
# start_job, end_job, verified_pass, rate, $W, $JOB_ENV).
#
# Part "fastpath-proof": the library alone, driven by cryo-gpuctl (no cryod):
#   fp-torch-default, fp-torch-expandable  a PyTorch training loop with the library loaded
#       (default caching allocator; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) is drained
#       into files, checkpointed and restored by the driver, refilled, mid-run: its per-step
#       losses are bit-identical to an uninterrupted run without the library
#   fp-overhead  steady-state PyTorch steps/s with and without the library, in pairs of alternating
#       order (CRYO_GPU_FP_OH_ROUNDS pairs, default 4): the median ratio
#   fp-inplace-N-files / -host  a job holding N GiB with the library: drain (into files with
#       parallel direct I/O / into the job's own memory), driver checkpoint and restore, refill;
#       timings; every word verified afterwards
#   fp-driver-N  the same job on the driver's path alone (the library loaded, not used)
#   fp-criu-N    drain into files, driver checkpoint, CRIU dump, kill; CRIU restore, driver
#       restore, refill from the files: the job goes on from its step, every word verified
#
# Part "fastpath": through cryod and CRIU, against the floors measured in the same call:
#   fp-floors-N  what the machine does at best for N GiB (cryo-gpu-floors): pinned device-to-host,
#       filling fresh host memory with one thread per core, writing and reading the store with
#       parallel direct I/O (4 files, as cryod's fast path writes them)
#   fp-cryod-N   a job holding N GiB with the library: cryo checkpoint (the job stops), cryo
#       restore; vacate (request -> GPU memory free), checkpoint and restore totals, stage times,
#       against the floors; every word verified after the restore. With CRYO_GPU_FP_COMPARE=1
#       (default) the driver's path through cryod (cryod-restore-N) and the hand-run baseline
#       (baseline-N) run beside it on the same sizes
#   fp-torch-cryod-default, fp-torch-cryod-expandable  the PyTorch loop checkpointed (stopped),
#       and restored through cryod with the library: losses bit-identical
#   fp-overhead  as in fastpath-proof
#   fp-launch-overhead-T  ns per kernel launch with and without the library (empty kernels back
#       to back on T threads: the worst case, a job that only launches)
#
# Part "fastpath-multi": part "multi" of cryod.sh with the library in every job (results named
#   fp-...): on 2 GPUs fp-parallel-2-gpus (two 8 GiB jobs, one per GPU, checkpointed at once
#   against one alone; goal: at most 1.1x), fp-restore-other-gpu (checkpointed on GPU 0, restored
#   with --gpu-map onto GPU 1, every word verified), fp-ddp-2-ranks (NCCL DDP, 2 ranks, losses
#   bit-identical to a run without the library); on one GPU fp-parallel-1-gpu, fp-ddp-gloo-1-gpu.
#   Each checkpoint must show bytes moved by the fast path. CRYO_GPU_MULTI_TESTS picks among
#   other, parallel, ddp, nccl-probe, ddp-defaults, ddp-torchrun (the same launched by
#   `torchrun --standalone`: fp-ddp-torchrun-nccl-defaults), ddp-torchrun-swap (restored onto the
#   GPUs swapped), ddp-defaults-swap, fsdp, fsdp-torchrun, groups-torchrun (the loss reduced in a
#   second process group: two NCCL communicators) and, on a node of more than two GPUs,
#   ddp-defaults-all, fsdp-all and groups-torchrun-all (one rank per GPU:
#   fp-ddp-nccl-defaults-N-ranks, fp-fsdp-N, fp-ddp-N-ranks-2-groups-torchrun). Other ways ranks
#   share memory: ddp-legacy-ipc and legacy-ipc-probe (NCCL_CUMEM_ENABLE=0: P2P by legacy CUDA
#   IPC), ddp-shm and shm-probe (NCCL_P2P_DISABLE=1: the SHM transport on cuMem host memory),
#   ddp-shm-register and shm-register-probe (the same with NCCL_CUMEM_HOST_ENABLE=0: /dev/shm
#   segments registered with the driver), ipc-share (fp-ipc-share-torch-mp: a CUDA tensor passed
#   through a torch.multiprocessing queue, legacy IPC and an IPC event; ipc_share.py).
#
# Part "drain-scale": fp-inplace-N-host for each N of CRYO_GPU_SCALE_GIB (default 16 32 56):
#   whether a drain's time grows with its size and nothing else.
#
# Part "node-preempt" (two GPUs or more): a node preempted whole. One job of CRYO_GPU_NODE_GIB
#   GiB (default 32) per GPU (every GPU, at most CRYO_GPU_NODE_GPUS), with the library, are
#   stopped at once through cryod and then restored at once, against one such job alone and
#   against the floors measured in the same call (the store's write and read floors are the
#   node's: the jobs share them). Reports each job's vacate, gpu_lock and gpu_drain beside the
#   lone job's, and the node's checkpoint and restore against N times the floors; every word of
#   every job verified after the restore. CRYO_GPU_NODE_STORE=tmpfs: the store on a tmpfs.
#
# Part "fast-store": fast-store-N (N from CRYO_GPU_FAST_STORE_GIB, default 32): fp-cryod-N with
#   cryod's store on a tmpfs, the tmpfs's write and read floors measured before and after in the
#   same call; checkpoint and restore against the better of them (with staging memory, pass
#   CRYO_GPU_CRYOD_ARGS="--gpu-staging-mib ..."). CRYO_GPU_FAST_STORE_AB (VAR=value words): the
#   job runs a second time with those added to its environment, as fast-store-N-ab, between the
#   same floors (an A/B of a library option on one machine, e.g.
#   CRYO_GPU_FASTPATH_REGISTER_WINDOWS=1). CRYO_GPU_FAST_STORE_BASE=1: then fast-store-N-base1,
#   -new2, -base2: the same job under $B/bin/cryod-base (bundle.sh with CRYO_BUNDLE_CRYOD_BASE),
#   the current cryod, and the baseline again, on the same store between the same floors.
#   CRYO_GPU_FAST_STORE_CRYOD_AB="--flag value": instead, fast-store-N-ab1, -new2, -ab2: this
#   cryod with those arguments added, as it is, and with them again (an A/B of a cryod option).
#
# Part "periodic-stall": periodic-stall-N (N from CRYO_GPU_STALL_GIB, default 32): two
#   leave-running checkpoints through cryod of a job holding N GiB, its data drained into cryod's
#   memory, refilled from there and written while the job runs on: the job's stall (the stages
#   it is held in) against the drain alone, and the background write; the job runs on verified
#   and restores from the second checkpoint, every word verified. fp-torch-periodic: the PyTorch
#   loop checkpointed three times leave-running, then stopped and restored: losses bit-identical
#   (CRYO_GPU_STALL_SINGLE=0 leaves it out). periodic-stall-ddp-R (R from CRYO_GPU_STALL_RANKS,
#   default "2 4"): a DDP training job of R ranks (AdamW, CRYO_GPU_STALL_WIDTH x
#   CRYO_GPU_STALL_DEPTH, default 8192 x 6; torchrun over NCCL with a GPU per rank, else all on
#   GPU 0 over gloo), two leave-running checkpoints with the job's own stall beside the stages,
#   then stopped and restored, losses bit-identical (CRYO_GPU_STALL_RESTORE=0: not stopped;
#   =periodic: killed and restored from the second periodic checkpoint instead);
#   CRYO_GPU_STALL_MODES "memory store" (default): again as periodic-stall-ddp-R-store, cryod
#   restarted with dump_in_memory off, in the same call; "criu" adds periodic-stall-ddp-R-criu,
#   cryod restarted with dump_copy_threads 0 (CRIU copies the job's memory, one thread); "nopre"
#   -nopre, cryod restarted with dump_pre_copy off (its copy all while the job is frozen);
#   "verify" -verify, cryod restarted with CRYO_PRE_COPY_VERIFY=1 (each page taken from the copy
#   ahead compared with the frozen job's; its log says how many differed); "shared" -shared,
#   cryod restarted with dump_pre_copy_shared on (shared memory copied ahead after the drain);
#   "sharedverify" -sharedverify, both; "pool" -pool, cryod restarted with dump_pages_pool_mib
#   CRYO_GPU_STALL_POOL_MIB (default 32768): each checkpoint after the first writes its pages
#   images over the last one's; "park" -park, cryod restarted with gpu_park on (each rank's GPU
#   data parked in GPU memory cryo-gpu-parker holds, instead of drained to the host while the
#   job is held; gpu_fastpath.h "Parking"); "parkshared" -parkshared, both gpu_park and
#   dump_pre_copy_shared on; "base" -base, cryod restarted from $B/bin/cryod-base, a build to
#   compare with in the same call (bundle.sh with CRYO_BUNDLE_CRYOD_BASE), with the same
#   CRYO_GPU_CRYOD_ARGS. CRYO_GPU_STALL_PARK=1 runs the single-process job parked too
#   (periodic-stall-GIB-park).
#
# Part "driver-floor" (issue 41): what the driver's own checkpoint and restore of a context cost,
#   by what the context holds, through `cryo-gpuctl cycle` (no CRIU). CRYO_GPU_FLOOR_SPECS, words
#   SHAPE:N (N processes at once on GPU 0; default "cuda:1 cuda:2 cuda:4 torch:1 torch:2 torch:4
#   train:1 train-lib:1 train-lib:2 train-lib:4"): "cuda" the test program holding 16 MiB (no PyTorch), "torch" a
#   PyTorch context with one tensor, "train" ctx_hold.py's trained 8192 x 6 model with its AdamW
#   state resident, "train-lib" the same with the library, its memory drained first (--fast):
#   what a periodic checkpoint of a training job leaves to the driver. Each process checks its
#   data after the cycle (ctx_hold.py's output, the test program's pattern).
#
# Part "park" (issue 41): cryo-gpu-park (see its header), CRYO_GPU_PARK_GIB (default 9): a job's
#   GPU data parked in GPU memory another process holds across the driver's checkpoint and
#   restore, copied back and checked word by word, against the same bytes copied device to host.
#
# Part "incremental": a job with CRYO_GPU_INC_GIB GiB of weights it never writes (default 16) and
#   half a GiB it rewrites, checkpointed twice leave-running through cryod: the second's bytes
#   written against the first's (goal: at most 10%), both background writes, then restored from
#   the second (its weights read through the first's files) with every word verified, weights
#   included.
#
# Env: CRYO_GPU_FP_SIZES (GiB, default "1 8"), CRYO_GPU_FP_WRITERS (files per process, default 4),
# CRYO_GPU_FP_THREADS (copy threads, default nproc), CRYO_GPU_FP_CRIU_GIB (default 8),
# CRYO_GPU_FP_BENCH_SIZES (part fastpath, default "1 8 32"), CRYO_GPU_FP_COMPARE (default 1),
# CRYO_GPU_FP_TORCH (default 1: the torch parts of part fastpath).

FPLIB="$B/lib/cryo/libcryo_gpu_fastpath.so"
# CRYO_GPU_FP_JOB_ENV: VAR=value words for every job with the library (e.g. the library's
# CRYO_GPU_FASTPATH_HOST_REGISTER=1: cryod's memory registered, the DMA straight into it).
read -r -a JOB_EXTRA_ENV <<<"${CRYO_GPU_FP_JOB_ENV:-}"
FP_SIZES=${CRYO_GPU_FP_SIZES:-1 8}
FP_WRITERS=${CRYO_GPU_FP_WRITERS:-4}
FP_THREADS=${CRYO_GPU_FP_THREADS:-$(nproc)}

fp_start_job() {  # fp_start_job NAME ARGS...: the test program with the library loaded
  JOB_ENV=("LD_PRELOAD=$FPLIB" "${JOB_EXTRA_ENV[@]}")
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

# fp_ab NAME CMD...: runs CMD (which leaves one number in $RES/fp.ab.out, and preloads
# $FP_PRELOAD into what it measures) without and with the library, in pairs whose order alternates (A B, B A, ...) so that a drift of the machine
# cancels out; prints the per-pair ratios (with / without) and their median.
fp_ab() {
  local name=$1; shift
  local rounds=${CRYO_GPU_FP_OH_ROUNDS:-4} i a b ratios=()
  local run_without=() run_with=()
  for i in $(seq 1 "$rounds"); do
    for order in $( [ $((i % 2)) = 1 ] && echo "0 1" || echo "1 0"); do
      rm -f "$RES/fp.ab.out"
      if [ "$order" = 1 ]; then FP_PRELOAD=$FPLIB "$@"; else FP_PRELOAD= "$@"; fi
      local v; v=$(cat "$RES/fp.ab.out" 2>/dev/null)
      if [ "$order" = 1 ]; then b=$v; run_with+=("$v"); else a=$v; run_without+=("$v"); fi
    done
    ratios+=("$(python3 -c "print('%.4f' % ($b / $a))" 2>/dev/null)")
  done
  local IFS=,
  echo "{\"name\": \"$name\", \"without\": [${run_without[*]}], \"with\": [${run_with[*]}], \"ratios\": [${ratios[*]}]}" >"$RES/$name.json"
  IFS=$' \t\n'
  python3 -c "import statistics as s, sys; r=[float(x) for x in sys.argv[1].split()]; print('median ratio %.4f (pairs %s); without %s, with %s' % (s.median(r), r, sys.argv[2], sys.argv[3]))" "${ratios[*]}" "${run_without[*]}" "${run_with[*]}"
}

fp_torch_rate() {  # one PyTorch run; its steps/s into $RES/fp.ab.out
  rm -f "$RES/fp.oh.txt"
  env ${FP_PRELOAD:+LD_PRELOAD=$FP_PRELOAD} setsid -w python3 "$B/train_losses.py" \
    --steps "${CRYO_GPU_FP_OH_STEPS:-400}" --step-ms 0 --out "$RES/fp.oh.txt" \
    --rate-out "$RES/fp.ab.out" </dev/null >/dev/null 2>&1
}

fp_overhead() {  # steady-state PyTorch steps/s with the library over without (ratio; 1 is none)
  result fp-overhead PASS "steps/s with the library over without: $(fp_ab fp.overhead fp_torch_rate)"
}

fp_launch_one() {  # fp_launch_one THREADS: ns per empty-kernel launch into $RES/fp.ab.out
  env ${FP_PRELOAD:+LD_PRELOAD=$FP_PRELOAD} "$B/bin/cryo-gpu-launchbench" --launches 400000 \
    --threads "$1" >"$RES/fp.lb.json" 2>&1 &&
    jget "$RES/fp.lb.json" 'd["ns_per_launch"]' >"$RES/fp.ab.out"
}

fp_launch_overhead() {  # ns per wrapped launch, with the library over without (ratio)
  local t
  for t in 1 4; do
    result "fp-launch-overhead-$t" PASS "ns per launch on $t thread(s), with the library over without: $(fp_ab "fp.launch-overhead-$t" fp_launch_one "$t")"
  done
}

fp_floors() {  # fp_floors GIB [DIR NAME]: the floors of the store (DIR; default the suite's) as NAME
  local gib=$1 dir=${2:-$W/store} fname=${3:-fpfloor$1}
  mkdir -p "$dir"
  # FLOORS_NODE=1: also every GPU's copy into host memory at once (node-preempt).
  if ! "$B/bin/cryo-gpu-floors" --gib "$gib" --dir "$dir" --threads "$FP_THREADS" \
      --files "$FP_WRITERS" --node "${FLOORS_NODE:-0}" >"$RES/$fname.json" 2>&1; then
    result "${fname/fpfloor/fp-floors-}" FAIL "$(cat "$RES/$fname.json")"; return 1
  fi
  result "${fname/fpfloor/fp-floors-}" PASS "$(jget "$RES/$fname.json" '"pinned d2h %.1f GB/s, fresh host fill %.1f GB/s (faulted in: %.1f; %d threads), store write %.2f GB/s, read %.2f GB/s (%d files, direct I/O): write %d ms, read %d ms; pipelined with the GPU through registered host memory (registered in %d ms): write %d ms, read %d ms; read straight to the GPU through a ring of pinned buffers %d ms, hashed %d ms" % (d["d2h_gbps"], d["fill_gbps"], d.get("warm_fill_gbps", 0), d["threads"], d["write_gbps"], d["read_gbps"], d["files"], d["write_ms"], d["read_ms"], d.get("register_ms", -1), d.get("pipe_write_ms", -1), d.get("pipe_read_ms", -1), d.get("ring_read_ms", -1), d.get("ring_read_hash_ms", -1)) + ("; into faulted host memory: GPU 0 alone %d ms, all %d GPUs at once %d ms (%.2fx)" % (d["d2h_one_ms"], d["gpus"], d["d2h_all_ms"], d["d2h_all_ms"] / d["d2h_one_ms"]) if d.get("d2h_one_ms", -1) > 0 else "")')"
}

# keep_criu_log LOG DEST: CRIU's LOG (dump.log, restore.log) of cryod's newest operation, copied
# to DEST (nothing when there is none).
keep_criu_log() {
  cp "$(ls -td "$W"/state/ops/*/ | head -1)$1" "$2" 2>/dev/null
}

fp_cryod() {  # fp_cryod GIB [KEY NAME]: checkpoint (stop) and restore through cryod with the fast path
  local gib=$1 k=${2:-kf$1} name=${3:-fp-cryod-$1}
  fp_start_job "$k" --gib "$gib" || { result "$name" FAIL "job did not start"; return; }
  local pid=$LOAD_PID
  wait_until 120 steps_past "$LOAD_STATUS" 10
  local held; held=$(held_gib "$pid")
  local t0; t0=$(date +%s%N)
  if ! "${CRYO[@]}" -o json checkpoint "$pid" --id "$k" >"$RES/$k.ckpt.json" 2>"$RES/$k.ckpt.err"; then
    result "$name" FAIL "checkpoint: $(tail -2 "$RES/$k.ckpt.err")"; end_job "$pid"; return
  fi
  local ckpt_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  keep_criu_log dump.log "$RES/$k.dump.log"
  wait "$pid" 2>/dev/null
  # With staging memory, restored as on a node whose slots are ready (the replacement's node),
  # not while this one zeroes the slot its drain used.
  wait_staging
  t0=$(date +%s%N)
  if ! "${CRYO[@]}" -o json restore "$k" >"$RES/$k.restore.json" 2>"$RES/$k.restore.err"; then
    result "$name" FAIL "restore: $(tail -2 "$RES/$k.restore.err")"; return
  fi
  local restore_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  keep_criu_log restore.log "$RES/$k.restore.log"
  local msg
  if ! msg=$(verified_pass "$k" "$LOAD_STATUS" "$gib"); then
    result "$name" FAIL "$msg"; end_job "$pid"; "${CRYO[@]}" rm "$k" >/dev/null 2>&1; return
  fi
  python3 - "$RES/$k.ckpt.json" "$RES/$k.restore.json" "$gib" "${held:-0}" "$ckpt_ms" "$restore_ms" "$RES/${FLOOR_NAME:-fpfloor$gib}.json" >"$RES/$k.summary.json" <<'PY'
import json, os, sys
c = json.load(open(sys.argv[1])); r = json.load(open(sys.argv[2]))
cs = {k: int(v) for k, v in c["stage_ms"].items()}; rs = {k: int(v) for k, v in r["stage_ms"].items()}
f = json.load(open(sys.argv[7])) if os.path.exists(sys.argv[7]) else {}
out = {"gib": float(sys.argv[3]), "held_gib": float(sys.argv[4] or 0),
       "checkpoint_ms": int(sys.argv[5]), "restore_ms": int(sys.argv[6]),
       "vacate_ms": cs.get("gpu_host_copy", 0) + cs.get("gpu_drain", 0) + cs.get("gpu_lock", 0) + cs.get("gpu_checkpoint", 0),
       "checkpoint_stages": cs, "restore_stages": rs,
       "fastpath_bytes": int(c.get("gpu_fastpath_bytes", 0)), "driver_bytes": int(c.get("gpu_driver_bytes", 0)),
       "image_bytes": int(c.get("size_bytes", 0))}
if f:
    out["floor_write_ms"] = f["write_ms"]; out["floor_read_ms"] = f["read_ms"]
    out["checkpoint_vs_write_floor"] = round(out["checkpoint_ms"] / f["write_ms"], 3)
    out["restore_vs_read_floor"] = round(out["restore_ms"] / f["read_ms"], 3)
print(json.dumps(out))
PY
  result "$name" PASS "$(jget "$RES/$k.summary.json" '"vacate %d ms (drain %d, lock %d, driver %d), checkpoint %d ms (%.2fx the store-write floor; save %d, dump %d, write %d), restore %d ms (%.2fx the read floor; verify %d, criu %d, driver %d, refill %d); fast path %.2f GiB, driver %.2f GiB" % (d["vacate_ms"], d["checkpoint_stages"].get("gpu_drain",0), d["checkpoint_stages"].get("gpu_lock",0), d["checkpoint_stages"].get("gpu_checkpoint",0), d["checkpoint_ms"], d.get("checkpoint_vs_write_floor", 0), d["checkpoint_stages"].get("gpu_save",0), d["checkpoint_stages"].get("dump",0), d["checkpoint_stages"].get("gpu_write",0), d["restore_ms"], d.get("restore_vs_read_floor", 0), d["restore_stages"].get("verify",0), d["restore_stages"].get("restore",0), d["restore_stages"].get("gpu_restore",0), d["restore_stages"].get("gpu_refill",0), d["fastpath_bytes"]/2**30, d["driver_bytes"]/2**30)')"
  end_job "$pid"
  "${CRYO[@]}" rm "$k" >/dev/null 2>&1
}

# fp_fast_store GIB: fp_cryod with the store on a tmpfs (a stand-in for local NVMe RAID or a
# parallel file system), cryod restarted onto it, the tmpfs's floors measured before and after.
fp_fast_store() {
  local gib=$1 name="fast-store-$1" fs=/var/tmp/cryo-fast-store
  mkdir -p "$fs"
  if ! mount -t tmpfs -o size=$(( gib * 2 + 16 ))g,mode=0700 cryo-fast-store "$fs"; then
    result "$name" SKIP "no tmpfs of $(( gib * 2 + 16 )) GiB"; return
  fi
  stop_cryod
  if STORE_DIR="$fs/store" start_cryod && fp_floors "$gib" "$fs/store" "fastfloor$gib-before"; then
    FLOOR_NAME="fastfloor$gib-before" fp_cryod "$gib"
    local runs=("kf$gib:$name")
    if [ -n "${CRYO_GPU_FAST_STORE_AB:-}" ]; then
      local plain=("${JOB_EXTRA_ENV[@]}") ab
      read -r -a ab <<<"$CRYO_GPU_FAST_STORE_AB"
      JOB_EXTRA_ENV+=("${ab[@]}")
      wait_staging
      FLOOR_NAME="fastfloor$gib-before" fp_cryod "$gib" "kf${gib}ab" "fp-cryod-$gib-ab"
      JOB_EXTRA_ENV=("${plain[@]}")
      runs+=("kf${gib}ab:$name-ab")
    fi
    # Rounds against a baseline, interleaved so that neither side has the VM's memory warmer:
    # base* under $B/bin/cryod-base, ab* under this cryod with CRYO_GPU_FAST_STORE_CRYOD_AB
    # added to its arguments, new2 this cryod as it is.
    local rounds=() round bin args
    if [ "${CRYO_GPU_FAST_STORE_BASE:-0}" = 1 ]; then
      if [ -x "$B/bin/cryod-base" ]; then
        rounds=(base1 new2 base2)
      else
        result "$name-base1" SKIP "no $B/bin/cryod-base in the bundle"
      fi
    elif [ -n "${CRYO_GPU_FAST_STORE_CRYOD_AB:-}" ]; then
      rounds=(ab1 new2 ab2)
    fi
    if [ ${#rounds[@]} -gt 0 ]; then
      for round in "${rounds[@]}"; do
        bin=$B/bin/cryod args=${CRYO_GPU_CRYOD_ARGS:-}
        case $round in
          base*) bin=$B/bin/cryod-base ;;
          ab*) args="$args $CRYO_GPU_FAST_STORE_CRYOD_AB" ;;
        esac
        stop_cryod
        STORE_DIR="$fs/store" CRYO_GPU_CRYOD_BIN=$bin CRYO_GPU_CRYOD_ARGS=$args start_cryod
        wait_staging
        FLOOR_NAME="fastfloor$gib-before" fp_cryod "$gib" "kf$gib$round" "fp-cryod-$gib-$round"
        runs+=("kf$gib$round:$name-$round")
      done
      stop_cryod
      STORE_DIR="$fs/store" start_cryod
    fi
    fp_floors "$gib" "$fs/store" "fastfloor$gib-after"
    local run k
    for run in "${runs[@]}"; do
      k=${run%%:*}
      fp_fast_store_result "$gib" "$k" "${run#*:}"
    done
  else
    result "$name" FAIL "cryod on the tmpfs store, or its floors: $(tail -3 "$RES/cryod.log")"
  fi
  stop_cryod
  umount "$fs"
  start_cryod
}

# fp_fast_store_result GIB KEY NAME: run KEY of fast-store against the floors before and after.
fp_fast_store_result() {
  local gib=$1 k=$2 name=$3
  if [ -s "$RES/$k.summary.json" ] && [ -s "$RES/fastfloor$gib-after.json" ]; then
    python3 - "$RES/$k.summary.json" "$RES/fastfloor$gib-before.json" "$RES/fastfloor$gib-after.json" >"$RES/$name.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2])); a = json.load(open(sys.argv[3]))
best_w = min(b["write_ms"], a["write_ms"]); best_r = min(b["read_ms"], a["read_ms"])
d.update({"floor_write_ms_before": b["write_ms"], "floor_write_ms_after": a["write_ms"],
          "floor_read_ms_before": b["read_ms"], "floor_read_ms_after": a["read_ms"],
          "checkpoint_vs_best_write_floor": round(d["checkpoint_ms"] / best_w, 2),
          "restore_vs_best_read_floor": round(d["restore_ms"] / best_r, 2)})
# The pipelines' floors (the GPU's copy handed 256 MiB at a time to or from the files through
# host memory): the best a checkpoint's write and a restore's read through host memory can do.
pw = [x["pipe_write_ms"] for x in (b, a) if x.get("pipe_write_ms", -1) > 0]
pr = [x["pipe_read_ms"] for x in (b, a) if x.get("pipe_read_ms", -1) > 0]
if pw and pr:
    d.update({"floor_pipe_write_ms": min(pw), "floor_pipe_read_ms": min(pr),
              "checkpoint_vs_pipe_write_floor": round(d["checkpoint_ms"] / min(pw), 2),
              "restore_vs_pipe_read_floor": round(d["restore_ms"] / min(pr), 2)})
print(json.dumps(d))
PY
    result "$name" PASS "$(jget "$RES/$name.json" '"store on a tmpfs: checkpoint %d ms (goal 2500; %.2fx the better write floor, %d / %d ms before / after), restore %d ms (goal 1500; %.2fx the better read floor, %d / %d ms); vacate %d ms, write %d ms, refill %d ms" % (d["checkpoint_ms"], d["checkpoint_vs_best_write_floor"], d["floor_write_ms_before"], d["floor_write_ms_after"], d["restore_ms"], d["restore_vs_best_read_floor"], d["floor_read_ms_before"], d["floor_read_ms_after"], d["vacate_ms"], d["checkpoint_stages"].get("gpu_write", 0), d["restore_stages"].get("gpu_refill", 0)) + ("; pipelines through host memory at best: checkpoint %d ms (%.2fx), restore %d ms (%.2fx)" % (d["floor_pipe_write_ms"], d["checkpoint_vs_pipe_write_floor"], d["floor_pipe_read_ms"], d["restore_vs_pipe_read_floor"]) if "floor_pipe_read_ms" in d else "")')"
  fi
}

# fp_stop_restore KEYS...: the jobs started as KEYS (LOAD_PID_<key>, LOAD_STATUS_<key>) stopped
# through cryod at once, then restored at once; wall times in NODE_CKPT_MS / NODE_RESTORE_MS.
# False (with NODE_WHY) when a checkpoint or a restore failed.
# With staging memory (CRYO_GPU_CRYOD_ARGS="--gpu-staging-mib ..."), waits until cryod says every
# slot is ready (filled, or zeroed after the last drain): each measured drain gets one.
# The slots' count as the running cryod last logged it: a restarted cryod's log follows its
# predecessor's in the same file, so only what comes after its own first line counts.
staging_all_ready() {
  awk '/staging memory for drains:/ { s = "" } /\([0-9]+ of [0-9]+ ready\)/ { s = $0 } END { print s }' \
    "$RES/cryod.log" | grep -o '([0-9]* of [0-9]* ready)' | grep -Eq '\(([0-9]+) of \1 ready\)'
}

wait_staging() {
  grep -q "staging memory" "$RES/cryod.log" 2>/dev/null || return 0
  wait_until 180 staging_all_ready ||
    echo "staging memory not all ready: $(grep 'staging memory' "$RES/cryod.log" | tail -1)" >&2
}

fp_stop_restore() {
  local k pids=() rc=0 t0
  wait_staging
  t0=$(date +%s%N)
  for k in "$@"; do
    local v="LOAD_PID_$k"
    "${CRYO[@]}" -o json checkpoint "${!v}" --id "$k" >"$RES/$k.ckpt.json" 2>"$RES/$k.ckpt.err" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  NODE_CKPT_MS=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ $rc -eq 0 ] || { NODE_WHY="checkpoint: $(for k in "$@"; do cat "$RES/$k.ckpt.err"; done | tail -c 400)"; return 1; }
  for k in "$@"; do
    local v="LOAD_PID_$k"
    wait "${!v}" 2>/dev/null
  done
  pids=(); t0=$(date +%s%N)
  for k in "$@"; do
    "${CRYO[@]}" -o json restore "$k" >"$RES/$k.restore.json" 2>"$RES/$k.restore.err" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  NODE_RESTORE_MS=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ $rc -eq 0 ] || { NODE_WHY="restore: $(for k in "$@"; do cat "$RES/$k.restore.err"; done | tail -c 400)"; return 1; }
}

# fp_node_preempt GIB: one job alone, then one job on every GPU of the machine at once (at most
# CRYO_GPU_NODE_GPUS), CRYO_GPU_NODE_ROUNDS times. With CRYO_GPU_NODE_STORE=tmpfs, cryod's store
# is on a tmpfs for the whole part (the scaling table's fast-store rows).
fp_node_preempt() {
  local gib=$1 name="node-preempt-$1" gpus
  gpus=$(nvidia-smi -L | wc -l)
  [ -n "${CRYO_GPU_NODE_GPUS:-}" ] && [ "$CRYO_GPU_NODE_GPUS" -lt "$gpus" ] && gpus=$CRYO_GPU_NODE_GPUS
  if [ "$gpus" -lt 2 ]; then result "$name" SKIP "one GPU here: a node of two or more is needed"; return; fi
  local fs="" store="$W/store"
  if [ "${CRYO_GPU_NODE_STORE:-}" = tmpfs ]; then
    fs=/var/tmp/cryo-node-store; name="node-preempt-tmpfs-$1"; store="$fs/store"
    mkdir -p "$fs"
    if ! mount -t tmpfs -o size=$(( gib * gpus + 16 ))g,mode=0700 cryo-node-store "$fs"; then
      result "$name" SKIP "no tmpfs of $(( gib * gpus + 16 )) GiB"; return
    fi
    stop_cryod
    if ! STORE_DIR="$store" start_cryod; then
      result "$name" FAIL "cryod on the tmpfs store: $(tail -3 "$RES/cryod.log")"
      umount "$fs"; start_cryod; return
    fi
  fi
  NODE_NAME=$name NODE_GPUS=$gpus fp_node_rounds "$gib" "$store"
  if [ -n "$fs" ]; then
    stop_cryod; umount "$fs"; start_cryod
  fi
}

fp_node_rounds() {  # fp_node_rounds GIB STORE (NODE_NAME, NODE_GPUS)
  local gib=$1 name=$NODE_NAME msg ok=1 ones
  FLOORS_NODE=1 fp_floors "$gib" "$2" "fpfloor$gib" || return
  # One job alone.
  JOB_ENV=("CUDA_VISIBLE_DEVICES=0" "LD_PRELOAD=$FPLIB"); start_job np1 --gib "$gib"; JOB_ENV=()
  LOAD_PID_np1=$LOAD_PID LOAD_STATUS_np1=$LOAD_STATUS
  wait_until 120 steps_past "$LOAD_STATUS_np1" 10
  if ! fp_stop_restore np1; then result "$name" FAIL "one job alone: $NODE_WHY"; end_job "$LOAD_PID_np1"; return; fi
  ones="$NODE_CKPT_MS $NODE_RESTORE_MS"
  msg=$(verified_pass np1 "$LOAD_STATUS_np1" "$gib") || { result "$name" FAIL "one job alone: $msg"; ok=0; }
  end_job "$LOAD_PID_np1"; "${CRYO[@]}" rm np1 >/dev/null 2>&1
  [ $ok = 1 ] || return
  local round
  for round in $(seq 1 "${CRYO_GPU_NODE_ROUNDS:-2}"); do
    fp_node_all "$gib" "$round" "$ones"
  done
}

# fp_node_all GIB ROUND "ALONE_CKPT_MS ALONE_RESTORE_MS": NODE_GPUS jobs at once, one per GPU.
# The first round on a fresh VM also pays for host memory the hypervisor backs on first touch
# (what the floors and the lone job did not touch yet); later rounds do not.
fp_node_all() {
  local gib=$1 round=$2 ones=$3 name="$NODE_NAME-r$2" msg ok=1 alls k g v keys=() ends=()
  for g in $(seq 0 $(( NODE_GPUS - 1 ))); do
    keys+=("npn$g")
    JOB_ENV=("CUDA_VISIBLE_DEVICES=$g" "LD_PRELOAD=$FPLIB"); start_job "npn$g" --gib "$gib"; JOB_ENV=()
    printf -v "LOAD_PID_npn$g" %s "$LOAD_PID"; printf -v "LOAD_STATUS_npn$g" %s "$LOAD_STATUS"
    ends+=("$LOAD_PID")
  done
  for k in "${keys[@]}"; do v="LOAD_STATUS_$k"; wait_until 120 steps_past "${!v}" 10; done
  if ! fp_stop_restore "${keys[@]}"; then
    result "$name" FAIL "$NODE_GPUS jobs at once: $NODE_WHY"
    for p in "${ends[@]}"; do end_job "$p"; done
    for k in "${keys[@]}"; do "${CRYO[@]}" rm "$k" >/dev/null 2>&1; done
    return
  fi
  alls="$NODE_CKPT_MS $NODE_RESTORE_MS"
  for k in "${keys[@]}"; do
    v="LOAD_STATUS_$k"
    msg=$(verified_pass "$k" "${!v}" "$gib") || { result "$name" FAIL "job $k: $msg"; ok=0; }
  done
  for p in "${ends[@]}"; do end_job "$p"; done
  for k in "${keys[@]}"; do "${CRYO[@]}" rm "$k" >/dev/null 2>&1; done
  [ $ok = 1 ] || return
  for k in "${keys[@]}"; do cp "$RES/$k.ckpt.json" "$RES/$k-$NODE_NAME-r$round.ckpt.json"; done
  python3 - "$RES" "$gib" $ones $alls "$round" "$NODE_GPUS" >"$RES/$name.json" <<'PY'
import json, sys
res, gib = sys.argv[1], float(sys.argv[2])
one_ckpt, one_rest, all_ckpt, all_rest = map(int, sys.argv[3:7])
rnd, n = int(sys.argv[7]), int(sys.argv[8])
keys = [f"npn{g}" for g in range(n)]
def stages(k, kind):
    return {s: int(v) for s, v in json.load(open(f"{res}/{k}.{kind}.json"))["stage_ms"].items()}
def vacate(s):
    return s.get("gpu_host_copy", 0) + s.get("gpu_drain", 0) + s.get("gpu_lock", 0) + s.get("gpu_checkpoint", 0)
f = json.load(open(f"{res}/fpfloor{sys.argv[2]}.json"))
one = stages("np1", "ckpt")
each = [stages(k, "ckpt") for k in keys]
out = {"gib": gib, "round": rnd, "gpus": n,
       "one": {"vacate_ms": vacate(one), "gpu_lock_ms": one.get("gpu_lock", 0), "gpu_drain_ms": one.get("gpu_drain", 0),
               "checkpoint_ms": one_ckpt, "restore_ms": one_rest},
       "each": [{"vacate_ms": vacate(s), "gpu_lock_ms": s.get("gpu_lock", 0), "gpu_drain_ms": s.get("gpu_drain", 0)} for s in each],
       "all_checkpoint_ms": all_ckpt, "all_restore_ms": all_rest,
       "floor_write_ms": f["write_ms"], "floor_read_ms": f["read_ms"],
       "floor_pipe_write_ms": f.get("pipe_write_ms", -1), "floor_pipe_read_ms": f.get("pipe_read_ms", -1),
       # Drained into cryod's staging memory (gpu_staging_mib), which cryod then wrote.
       "staged": sum("gpu_write" in s for s in [one] + each)}
out["vacate_ratio"] = round(max(t["vacate_ms"] for t in out["each"]) / max(1, out["one"]["vacate_ms"]), 2)
out["vacate_goal"] = {2: 1.3, 4: 1.6}.get(n)
# The node's own bound: every GPU's copy into faulted host memory at once against one alone.
if f.get("d2h_one_ms", -1) > 0 and f.get("d2h_all_ms", -1) > 0 and f.get("gpus", 0) == n:
    out["floor_d2h_one_ms"], out["floor_d2h_all_ms"] = f["d2h_one_ms"], f["d2h_all_ms"]
    out["floor_vacate_ratio"] = round(f["d2h_all_ms"] / f["d2h_one_ms"], 2)
out["one_checkpoint_vs_write_floor"] = round(one_ckpt / f["write_ms"], 2)
out["all_checkpoint_vs_node_write_floor"] = round(all_ckpt / (n * f["write_ms"]), 2)
out["one_restore_vs_read_floor"] = round(one_rest / f["read_ms"], 2)
out["all_restore_vs_node_read_floor"] = round(all_rest / (n * f["read_ms"]), 2)
# Where the drains' bytes go first: host memory. The node's rate of filling it bounds what the
# drains at once can do; a lone drain already near that rate cannot run n times as fast.
def moved(k):
    return int(json.load(open(f"{res}/{k}.ckpt.json")).get("gpu_fastpath_bytes", 0))
out["drain_gbps_one"] = round(moved("np1") / max(1, one.get("gpu_drain", 0)) / 1e6, 1)
out["drain_gbps_node"] = round(sum(moved(k) for k in keys) / max(1, max(s.get("gpu_drain", 0) for s in each)) / 1e6, 1)
out["fill_floor_gbps"] = round(float(f["fill_gbps"]), 1)
print(json.dumps(out))
PY
  result "$name" PASS "$(jget "$RES/$name.json" '"%g GiB per job, round %d. vacate: alone %d ms, %d at once %s ms (%.2fx; goal %s); gpu_lock alone %d, together %s ms; gpu_drain alone %d, together %s ms. checkpoint: alone %d ms (%.2fx its write floor), all %d ms (%.2fx %d times the floor); restore: alone %d ms (%.2fx the read floor), all %d ms (%.2fx %d times it); drains into host memory: alone %.1f GB/s, all together %.1f GB/s, fresh-fill floor of the node %.1f GB/s; %d of %d drains into staging memory; every job verified every word" % (d["gib"], d["round"], d["one"]["vacate_ms"], d["gpus"], "/".join(str(t["vacate_ms"]) for t in d["each"]), d["vacate_ratio"], ("%.1fx" % d["vacate_goal"]) if d["vacate_goal"] else "none", d["one"]["gpu_lock_ms"], "/".join(str(t["gpu_lock_ms"]) for t in d["each"]), d["one"]["gpu_drain_ms"], "/".join(str(t["gpu_drain_ms"]) for t in d["each"]), d["one"]["checkpoint_ms"], d["one_checkpoint_vs_write_floor"], d["all_checkpoint_ms"], d["all_checkpoint_vs_node_write_floor"], d["gpus"], d["one"]["restore_ms"], d["one_restore_vs_read_floor"], d["all_restore_ms"], d["all_restore_vs_node_read_floor"], d["gpus"], d["drain_gbps_one"], d["drain_gbps_node"], d["fill_floor_gbps"], d["staged"], d["gpus"] + 1) + ("; copy floor of the node: GPU 0 alone %d ms, all at once %d ms (%.2fx)" % (d["floor_d2h_one_ms"], d["floor_d2h_all_ms"], d["floor_vacate_ratio"]) if "floor_vacate_ratio" in d else "")')"
}

fp_torch_cryod() {  # fp_torch_cryod NAME ALLOC_CONF: the loop stopped and restored through cryod
  local name=$1 conf=$2 steps=${CRYO_GPU_TORCH_STEPS:-200}
  local ref="$RES/fp.torch.ref.txt" run="$RES/$name.txt"
  if [ ! -s "$ref" ]; then
    setsid -w python3 "$B/train_losses.py" --steps "$steps" --step-ms 20 --out "$ref" </dev/null >"$RES/fp.torch.ref.log" 2>&1
  fi
  rm -f "$run"
  env LD_PRELOAD="$FPLIB" ${conf:+PYTORCH_CUDA_ALLOC_CONF=$conf} \
    setsid python3 "$B/train_losses.py" --steps "$steps" --step-ms 20 --out "$run" </dev/null >"$RES/$name.log" 2>&1 &
  local tpid=$!
  PIDS+=("$tpid")
  wait_until 300 bash -c "[ \$(wc -l 2>/dev/null <'$run' || echo 0) -ge $(( steps / 3 )) ]" || { result "$name" FAIL "training did not start: $(tail -3 "$RES/$name.log")"; end_job "$tpid"; return; }
  fp_torch_stop_restore "$name" "$tpid" "$run" "$ref" "$steps" ""
  "${CRYO[@]}" rm "$name" >/dev/null 2>&1
}

# fp_torch_stop_restore NAME TPID RUN REF STEPS WHAT: the loop TPID (writing RUN) stopped through
# cryod as checkpoint NAME, restored, run to its end, its losses compared with REF's; WHAT leads
# the result's line.
fp_torch_stop_restore() {  # ... NAME TPID RUN REF STEPS WHAT [CHECKPOINT_ARG...]
  local name=$1 tpid=$2 run=$3 ref=$4 steps=$5 what=$6
  if ! "${CRYO[@]}" -o json checkpoint "$tpid" --id "$name" "${@:7}" >"$RES/$name.ckpt.json" 2>"$RES/$name.ckpt.err"; then
    result "$name" FAIL "checkpoint: $(tail -2 "$RES/$name.ckpt.err") $(head -c 400 "$RES/$name.ckpt.json")"; end_job "$tpid"; return
  fi
  wait "$tpid" 2>/dev/null
  local at; at=$(wc -l <"$run")
  if ! "${CRYO[@]}" -o json restore "$name" >"$RES/$name.restore.json" 2>"$RES/$name.restore.err"; then
    result "$name" FAIL "restore: $(tail -2 "$RES/$name.restore.err")"; return
  fi
  if ! wait_until 300 grep -qx done "$run"; then
    result "$name" FAIL "restored training did not finish ($(wc -l <"$run") lines)"; end_job "$tpid"; return
  fi
  local moved; moved=$(jget "$RES/$name.ckpt.json" '"fast path %.0f MiB, driver %.0f MiB; stages %s" % (int(d.get("gpu_fastpath_bytes", 0))/2**20, int(d.get("gpu_driver_bytes", 0))/2**20, d["stage_ms"])')
  if cmp -s "$ref" "$run"; then
    result "$name" PASS "${what}checkpointed after step $((at - 1)) of $steps, restored, losses bit-identical; $moved"
  else
    result "$name" FAIL "losses differ: $(diff "$ref" "$run" | head -3 | tr '\n' ' '); $moved"
  fi
}

# fp_torch_periodic: the PyTorch loop with the library checkpointed three times while it runs
# (leave-running, as the periodic schedule takes them: into cryod's memory, written in the
# background), then preempted (stopped) and restored: its losses bit-identical to a run never
# checkpointed.
fp_torch_periodic() {
  # Long enough (20 s) for four checkpoints while it runs.
  local name=fp-torch-periodic steps=${CRYO_GPU_TORCH_PERIODIC_STEPS:-1000} i
  local ref="$RES/fp.torch.ref.$steps.txt" run="$RES/$name.txt" stalls="" written=""
  if [ ! -s "$ref" ]; then
    setsid -w python3 "$B/train_losses.py" --steps "$steps" --step-ms 20 --out "$ref" </dev/null >"$RES/fp.torch.ref.$steps.log" 2>&1
  fi
  rm -f "$run"
  env LD_PRELOAD="$FPLIB" setsid python3 "$B/train_losses.py" --steps "$steps" --step-ms 20 --out "$run" </dev/null >"$RES/$name.log" 2>&1 &
  local tpid=$!
  PIDS+=("$tpid")
  for i in 1 2 3; do
    wait_until 300 bash -c "[ \$(wc -l 2>/dev/null <'$run' || echo 0) -ge $(( steps * i / 8 )) ]" || { result "$name" FAIL "training did not reach checkpoint $i: $(tail -3 "$RES/$name.log")"; end_job "$tpid"; return; }
    if ! "${CRYO[@]}" -o json checkpoint "$tpid" --id "$name-$i" --leave-running >"$RES/$name-$i.ckpt.json" 2>"$RES/$name-$i.ckpt.err"; then
      result "$name" FAIL "periodic checkpoint $i: $(tail -2 "$RES/$name-$i.ckpt.err")"; end_job "$tpid"; return
    fi
    # (Spelled out: a comprehension inside jget's eval cannot see d.)
    stalls="$stalls $(jget "$RES/$name-$i.ckpt.json" 'int(d["stage_ms"].get("gpu_drain", 0)) + int(d["stage_ms"].get("gpu_lock", 0)) + int(d["stage_ms"].get("gpu_checkpoint", 0)) + int(d["stage_ms"].get("gpu_save", 0)) + int(d["stage_ms"].get("dump", 0)) + int(d["stage_ms"].get("gpu_restore", 0)) + int(d["stage_ms"].get("gpu_refill", 0))')"
    # What each wrote (MB; referred chunks are not written): a training job's second is no
    # larger than its first.
    written="$written $(jget "$RES/$name-$i.ckpt.json" '(int(d.get("size_bytes", 0)) - int(d.get("referenced_bytes", 0))) >> 20')"
    "${CRYO[@]}" rm "$name-$((i - 1))" >/dev/null 2>&1
  done
  wait_until 300 bash -c "[ \$(wc -l 2>/dev/null <'$run' || echo 0) -ge $(( steps / 2 )) ]"
  # Then preempted: stopped, restored.
  fp_torch_stop_restore "$name" "$tpid" "$run" "$ref" "$steps" "3 leave-running checkpoints (stalls ms:$stalls; written MB:$written), then "
  # Newest first: one that a newer one refers to is kept until that one goes.
  for i in "" -3 -2 -1; do "${CRYO[@]}" rm "$name$i" >/dev/null 2>&1; done
}

# fp_ddp_periodic RANKS [TAG]: part "periodic-stall" with a multi-rank training job
# (ddp_losses.py grown to CRYO_GPU_STALL_WIDTH x CRYO_GPU_STALL_DEPTH with AdamW, the library
# preloaded): two leave-running checkpoints through cryod while it trains, each one's stages
# beside the job's own stall (its longest step around the checkpoint, less its median step),
# then stopped and restored: its losses bit-identical to a run never checkpointed. With a GPU per
# rank it runs under torchrun over NCCL at its defaults (NVLS and IB off); with fewer GPUs every
# rank shares GPU 0 and reduces through gloo (NCCL refuses two ranks on one GPU).
fp_ddp_periodic() {
  local ranks=$1 tag=${2:-} name="periodic-stall-ddp-$1${2:-}" i
  # Long enough to outlast two checkpoints whose calls wait for their background writes (a
  # store at 2 GB/s takes 12 s for a 2-rank job's 24 GB) and still be running at the stop: at
  # 1000 steps a 2-rank job ended during the stop's call on 2026-11-30 (H200 x2).
  local steps=${CRYO_GPU_STALL_STEPS:-2000}
  local model=(--width "${CRYO_GPU_STALL_WIDTH:-8192}" --depth "${CRYO_GPU_STALL_DEPTH:-6}" --adamw --step-ms 50)
  local envs=(env NCCL_NVLS_ENABLE=0 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo) launch how
  if [ "$(nvidia-smi -L | wc -l)" -ge "$ranks" ]; then
    launch=(-m torch.distributed.run --standalone --nproc-per-node="$ranks" "$B/ddp_losses.py")
    how="torchrun, NCCL"
  else
    launch=("$B/ddp_losses.py" --world "$ranks" --backend gloo --same-gpu --port $((29600 + ranks)))
    how="all on GPU 0, gloo"
  fi
  local ref="$RES/ddp-periodic-$ranks.ref.txt" run="$RES/$name.txt" times="$RES/$name.times.txt"
  if [ ! -s "$ref" ]; then
    "${envs[@]}" setsid -w python3 "${launch[@]}" --steps "$steps" --out "$ref" "${model[@]}" </dev/null >"$RES/ddp-periodic-$ranks.ref.log" 2>&1
    grep -qx done "$ref" || { result "$name" FAIL "reference run failed: $(tail -3 "$RES/ddp-periodic-$ranks.ref.log")"; return; }
  fi
  rm -f "$run" "$times"
  "${envs[@]}" LD_PRELOAD="$FPLIB" setsid python3 "${launch[@]}" --steps "$steps" --out "$run" --times-out "$times" "${model[@]}" </dev/null >"$RES/$name.log" 2>&1 &
  local tpid=$!
  PIDS+=("$tpid")
  for i in 1 2; do
    wait_until 300 bash -c "[ \$(wc -l 2>/dev/null <'$run' || echo 0) -ge $(( steps * i / 4 )) ]" || { result "$name" FAIL "training did not reach checkpoint $i: $(tail -3 "$RES/$name.log")"; kill -9 -- -"$tpid" 2>/dev/null; wait "$tpid" 2>/dev/null; return; }
    if grep -qx done "$run"; then
      result "$name" FAIL "the job ended before checkpoint $i: raise CRYO_GPU_STALL_STEPS (now $steps)"
      wait "$tpid" 2>/dev/null; return
    fi
    date +%s.%N >"$RES/$name-$i.t0"
    # The ranks talk over TCP (the store, gloo or NCCL's sockets): their connections are saved.
    if ! "${CRYO[@]}" -o json checkpoint "$tpid" --id "$name-$i" --leave-running --tcp-established >"$RES/$name-$i.ckpt.json" 2>"$RES/$name-$i.ckpt.err"; then
      result "$name" FAIL "periodic checkpoint $i: $(tail -2 "$RES/$name-$i.ckpt.err") $(head -c 400 "$RES/$name-$i.ckpt.json")"
      kill -9 -- -"$tpid" 2>/dev/null; wait "$tpid" 2>/dev/null; return
    fi
    date +%s.%N >"$RES/$name-$i.t1"
    # CRIU's log of each (which mappings it still copied itself, and where its time went).
    keep_criu_log dump.log "$RES/$name-$i.dump.log"
    "${CRYO[@]}" rm "$name-$((i - 1))" >/dev/null 2>&1
  done
  wait_until 300 bash -c "[ \$(wc -l 2>/dev/null <'$run' || echo 0) -ge $(( steps * 3 / 4 )) ]"
  local summary
  summary=$(python3 - "$RES/$name" "$times" <<'PY'
import json, statistics, sys
base, times = sys.argv[1], sys.argv[2]
t = [float(l.split()[1]) for l in open(times) if len(l.split()) == 2]
gaps = [(t[i], t[i] - t[i - 1]) for i in range(1, len(t))]
median = statistics.median(g for _, g in gaps[20:] or gaps)
held = ["gpu_drain", "gpu_lock", "gpu_checkpoint", "gpu_save", "dump", "gpu_restore", "gpu_refill"]
out = []
for i in (1, 2):
    d = json.load(open(f"{base}-{i}.ckpt.json"))
    st = {k: int(v) for k, v in d["stage_ms"].items()}
    t0, t1 = float(open(f"{base}-{i}.t0").read()), float(open(f"{base}-{i}.t1").read())
    own = max((g for end, g in gaps if t0 <= end <= t1 + 5), default=0) - median
    out.append("job's own stall %d ms, stages held %d ms (drain %d, lock %d, driver %d, dump %d, "
               "driver restore %d, refill %d), then dump_write %d ms, gpu_write %d ms" % (
                   own * 1000, sum(st.get(k, 0) for k in held), st.get("gpu_drain", 0),
                   st.get("gpu_lock", 0), st.get("gpu_checkpoint", 0), st.get("dump", 0),
                   st.get("gpu_restore", 0), st.get("gpu_refill", 0), st.get("dump_write", 0),
                   st.get("gpu_write", 0)))
print("; ".join(out) + "; median step %d ms" % (median * 1000))
PY
)
  if grep -qx done "$run"; then
    result "$name" FAIL "the job ended before its stop: raise CRYO_GPU_STALL_STEPS (now $steps); $summary"
    wait "$tpid" 2>/dev/null
  elif [ "${CRYO_GPU_STALL_RESTORE:-1}" = 1 ]; then
    fp_torch_stop_restore "$name" "$tpid" "$run" "$ref" "$steps" "$ranks ranks ($how), 2 leave-running checkpoints: $summary; then " --tcp-established
  elif [ "${CRYO_GPU_STALL_RESTORE:-1}" = periodic ]; then
    fp_restore_periodic "$name" "$tpid" "$run" "$ref" "$name-2" "$ranks ranks ($how), 2 leave-running checkpoints: $summary; then "
  else
    kill -9 -- -"$tpid" 2>/dev/null; wait "$tpid" 2>/dev/null
    result "$name" PASS "$ranks ranks ($how), 2 leave-running checkpoints: $summary (not stopped and restored: CRYO_GPU_STALL_RESTORE=0)"
  fi
  for i in "" -2 -1; do "${CRYO[@]}" rm "$name$i" >/dev/null 2>&1; done
}

# fp_restore_periodic NAME TPID RUN REF CHECKPOINT WHAT: the training job killed (a preemption
# with no checkpoint of its own) and restored from periodic checkpoint CHECKPOINT; its losses
# bit-identical to a run never checkpointed. The files under $RES it appends to (losses, times)
# are cut back first to their offset at that checkpoint, read from the checkpoint's files.img:
# it appends after whatever is there.
fp_restore_periodic() {
  local name=$1 tpid=$2 run=$3 ref=$4 ckpt=$5 what=$6
  kill -9 -- -"$tpid" 2>/dev/null; wait "$tpid" 2>/dev/null
  local cut
  if ! cut=$(python3 - "${STORE_DIR:-$W/store}/checkpoints/$ckpt/images/files.img" "$RES" <<'PY'
import os, struct, sys
img, under = sys.argv[1], sys.argv[2]
data = open(img, "rb").read()
def varint(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1; v |= (c & 0x7f) << s; s += 7
        if c < 0x80: return v, i
def fields(b):
    i, out = 0, []
    while i < len(b):
        key, i = varint(b, i)
        f, t = key >> 3, key & 7
        if t == 0: v, i = varint(b, i)
        elif t == 2:
            n, i = varint(b, i); v = b[i:i + n]; i += n
        elif t == 1: v = b[i:i + 8]; i += 8
        elif t == 5: v = b[i:i + 4]; i += 4
        else: raise SystemExit("files.img: wire type %d" % t)
        out.append((f, v))
    return out
i, cut = 8, []  # the common magic and files.img's own
while i + 4 <= len(data):
    (n,) = struct.unpack_from("<I", data, i); i += 4
    for f, v in fields(data[i:i + n]):
        if f != 3: continue  # FileEntry.reg
        reg = dict(fields(v))
        name = "/" + reg.get(6, b"").decode().lstrip("/")
        # Appended to by the job alone: its offset then (field pos) is the file's size then.
        at = reg.get(3)
        if name.startswith(under.rstrip("/") + "/") and at is not None and os.path.exists(name) \
                and os.path.getsize(name) > at:
            os.truncate(name, at); cut.append("%s to %d" % (os.path.basename(name), at))
    i += n
print(", ".join(cut) or "none")
PY
  ); then
    result "$name" FAIL "reading $ckpt's files.img: $cut"; return
  fi
  local at; at=$(($(wc -l <"$run") - 1))
  if ! "${CRYO[@]}" -o json restore "$ckpt" >"$RES/$name.restore.json" 2>"$RES/$name.restore.err"; then
    result "$name" FAIL "restore from $ckpt: $(tail -2 "$RES/$name.restore.err")"; return
  fi
  if ! wait_until 300 grep -qx done "$run"; then
    result "$name" FAIL "training restored from $ckpt did not finish ($(wc -l <"$run") lines)"
    end_job "$(jget "$RES/$name.restore.json" 'd["root_pid"]')"; return
  fi
  if cmp -s "$ref" "$run"; then
    result "$name" PASS "${what}killed, restored from $ckpt (after step $at; files cut back: $cut), losses bit-identical"
  else
    result "$name" FAIL "restored from $ckpt: losses differ: $(diff "$ref" "$run" | head -3 | tr '\n' ' ')"
  fi
}

# The fast path beside the driver's path, the hand-run baseline and the floors, per size.
# fp_periodic_stall GIB: leave-running checkpoints of a job holding GIB through cryod, as the
# periodic schedule takes them (the data into cryod's memory, refilled from there, the files
# written while the job runs on): the job's stall (every stage it is held in) against the drain
# alone, twice in a row; the job runs on verified, and then restores from the second checkpoint,
# every word verified. Goal (issue 23): 32 GiB stall at most 3 s on an H100.
fp_periodic_stall() {
  local gib=$1 k="ps$1${STALL_TAG:-}" name="periodic-stall-$1${STALL_TAG:-}"
  [ -n "${STALL_TAG:-}" ] || fp_floors "$gib"
  fp_start_job "$k" --gib "$gib" || { result "$name" FAIL "job did not start"; return; }
  local pid=$LOAD_PID msg r
  wait_until 120 steps_past "$LOAD_STATUS" 10
  for r in 1 2; do
    if ! "${CRYO[@]}" -o json checkpoint "$pid" --id "$k-$r" --leave-running >"$RES/$k-$r.ckpt.json" 2>"$RES/$k-$r.ckpt.err"; then
      result "$name" FAIL "checkpoint $r: $(tail -2 "$RES/$k-$r.ckpt.err")"; end_job "$pid"; return
    fi
    if ! msg=$(verified_pass "$k" "$LOAD_STATUS" "$gib"); then
      result "$name" FAIL "after checkpoint $r: $msg"; end_job "$pid"; return
    fi
    # The store holds one at a time at 32 GiB on these machines' disks (64 GiB).
    [ "$r" = 1 ] && "${CRYO[@]}" rm "$k-1" >/dev/null 2>&1
  done
  end_job "$pid"
  if ! "${CRYO[@]}" -o json restore "$k-2" >"$RES/$k.restore.json" 2>"$RES/$k.restore.err"; then
    result "$name" FAIL "restore: $(tail -2 "$RES/$k.restore.err")"; return
  fi
  if ! msg=$(verified_pass "$k" "$LOAD_STATUS" "$gib"); then
    result "$name" FAIL "after the restore: $msg"; end_job "$(jget "$RES/$k.restore.json" 'd["root_pid"]')"; return
  fi
  end_job "$(jget "$RES/$k.restore.json" 'd["root_pid"]')"
  python3 - "$RES/$k-1.ckpt.json" "$RES/$k-2.ckpt.json" "$gib" "$RES/fpfloor$gib.json" >"$RES/$k.summary.json" <<'PY'
import json, os, sys
stall = ["gpu_drain", "gpu_lock", "gpu_checkpoint", "gpu_save", "dump", "rootfs", "gpu_restore", "gpu_refill"]
out = {"gib": float(sys.argv[3]), "runs": []}
for p in sys.argv[1:3]:
    st = {k: int(v) for k, v in json.load(open(p))["stage_ms"].items()}
    s = sum(st.get(k, 0) for k in stall)
    out["runs"].append({"stall_ms": s, "drain_ms": st.get("gpu_drain", 0), "stages": st,
                        "stall_vs_drain": round(s / max(1, st.get("gpu_drain", 1)), 2),
                        "background_write_ms": st.get("gpu_write", 0)})
f = json.load(open(sys.argv[4])) if os.path.exists(sys.argv[4]) else {}
if f:
    out["floor_write_ms"] = f["write_ms"]; out["floor_d2h_ms"] = f["d2h_ms"]
print(json.dumps(out))
PY
  result "$name" PASS "$(jget "$RES/$k.summary.json" '"; ".join("stall %d ms = %.2fx the drain (drain %d, lock %d, driver %d, save %d, dump %d, driver restore %d, refill %d), then written in the background in %d ms" % (r["stall_ms"], r["stall_vs_drain"], r["drain_ms"], r["stages"].get("gpu_lock",0), r["stages"].get("gpu_checkpoint",0), r["stages"].get("gpu_save",0), r["stages"].get("dump",0), r["stages"].get("gpu_restore",0), r["stages"].get("gpu_refill",0), r["background_write_ms"]) for r in d["runs"]) + "; floors: d2h %d ms, store write %d ms" % (d.get("floor_d2h_ms",0), d.get("floor_write_ms",0))')"
  "${CRYO[@]}" rm "$k-2" >/dev/null 2>&1
}

# fp_driver_floor: part "driver-floor" (above).
fp_driver_floor() {
  local spec shape n i name st ok before cyc fast pids
  # PyTorch maps NCCL: the plugin refuses two such processes together unless NCCL's CUDA IPC is
  # off (a job's ranks would need it so; these processes never call NCCL).
  local noipc=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_CUMEM_ENABLE=0 NCCL_CUMEM_HOST_ENABLE=0)
  for spec in ${CRYO_GPU_FLOOR_SPECS:-cuda:1 cuda:2 cuda:4 torch:1 torch:2 torch:4 train:1 train-lib:1 train-lib:2 train-lib:4}; do
    shape=${spec%%:*}; n=${spec##*:}; name="driver-floor-$shape-$n"; pids=(); fast=()
    for i in $(seq 1 "$n"); do
      st="$RES/$name.$i.status.json"; rm -f "$st"
      case $shape in
        cuda) "$LOAD" --status "$st" --gib 0.015625 --chunk-mib 16 >"$RES/$name.$i.log" 2>&1 & ;;
        torch|train) env "${noipc[@]}" python3 "$B/ctx_hold.py" --shape "$shape" --status "$st" >"$RES/$name.$i.log" 2>&1 & ;;
        train-lib) env "${noipc[@]}" LD_PRELOAD="$FPLIB" "${JOB_EXTRA_ENV[@]}" python3 "$B/ctx_hold.py" --shape train --status "$st" >"$RES/$name.$i.log" 2>&1 & ;;
        *) result "$name" FAIL "unknown shape $shape"; continue 2 ;;
      esac
      pids+=("$!"); PIDS+=("$!")
    done
    [ "$shape" = train-lib ] && fast=(--fast --threads "$FP_THREADS")
    ok=1
    for i in $(seq 1 "$n"); do wait_until 300 status_ready "$RES/$name.$i.status.json" || ok=0; done
    if [ $ok = 0 ]; then
      result "$name" FAIL "not ready: $(tail -2 "$RES/$name.1.log")"
      kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null; continue
    fi
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits >"$RES/$name.apps.csv"
    local owned=""
    if [ "$shape" = train-lib ]; then
      "$GPUCTL" fastpath-status "${pids[0]}" >"$RES/$name.fpstatus.json" 2>&1
      owned=$(jget "$RES/$name.fpstatus.json" '"; the library owned %.2f GiB of the first in %d allocations" % (d["processes"][0]["owned_bytes"] / 2**30, d["processes"][0]["owned_allocations"])')
    fi
    # Where each process stood before the cycle (ctx_hold.py and the test program count steps).
    before=()
    for i in $(seq 1 "$n"); do before+=("$(jget "$RES/$name.$i.status.json" 'd["steps"]')"); done
    if ! "$GPUCTL" "${fast[@]}" --timeout-ms 10000 cycle "${pids[@]}" >"$RES/$name.cycle.json" 2>"$RES/$name.cycle.err"; then
      result "$name" FAIL "cycle: $(jget "$RES/$name.cycle.json" 'd.get("error")') $(tail -2 "$RES/$name.cycle.err")"
      kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null; continue
    fi
    ok=1
    for i in $(seq 1 "$n"); do
      st="$RES/$name.$i.status.json"
      # The test program passes over all its chunks (one here) within a few steps.
      wait_until 120 steps_past "$st" $(( ${before[i-1]} + 5 )) || ok=0
      [ "$(jget "$st" 'd.get("bad", 0) == 0 and d.get("verified", True)')" = True ] || ok=0
    done
    kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null
    cyc=$(jget "$RES/$name.cycle.json" '"lock %d, checkpoint %d, restore %d, unlock %d ms; GPU memory freed %.2f GiB" % (d["lock_ms"], d["checkpoint_ms"], d["restore_ms"], d["unlock_ms"], d["gpu_freed_bytes"] / 2**30) + ("; drain %d, refill %d ms" % (d["drain_ms"], d["refill_ms"]) if "drain_ms" in d else "")')
    local mem; mem=$(awk -F', *' -v list=" ${pids[*]} " 'index(list, " " $1 " ") { s = s (s ? "/" : "") $2 } END { print s }' "$RES/$name.apps.csv")
    if [ $ok = 1 ]; then
      result "$name" PASS "$n x $shape on GPU 0 (MiB each, nvidia-smi: ${mem:-?})$owned: $cyc; every process ran on with its data intact"
    else
      result "$name" FAIL "$n x $shape: a process did not run on or its data changed: $(for i in $(seq 1 "$n"); do cat "$RES/$name.$i.status.json"; done | tr '\n' ' '); $cyc"
    fi
  done
}

# fp_park: part "park" (above).
fp_park() {
  local gib=${CRYO_GPU_PARK_GIB:-9} name="park-${CRYO_GPU_PARK_GIB:-9}" summary
  if [ ! -x "$B/bin/cryo-gpu-park" ]; then result "$name" SKIP "bundle has no cryo-gpu-park"; return; fi
  "$B/bin/cryo-gpu-park" --gib "$gib" >"$RES/$name.json" 2>"$RES/$name.err"
  local rc=$?
  summary=$(python3 - "$RES/$name.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print("; ".join(
    "round %d: %.2f GB parked in %d ms (copy %d), back in %d ms (copy %d), device to host %d ms; "
    "driver checkpoint %d, restore %d ms; %s" % (
        r["round"], r["bytes"] / 1e9, r["park_ms"], r["park_copy_ms"], r["unpark_ms"],
        r["unpark_copy_ms"], r["d2h_ms"], r["checkpoint_ms"], r["restore_ms"],
        "every word back" if r["verified"] else "%d words differ" % r["bad_words"])
    for r in rows))
PY
)
  if [ $rc = 0 ] && [ -n "$summary" ]; then
    result "$name" PASS "$summary"
  else
    result "$name" FAIL "rc $rc: ${summary:-no rounds} $(tail -2 "$RES/$name.err")"
  fi
}

# fp_incremental GIB: part "incremental" (above).
fp_incremental() {
  local gib=$1 k=inc name="incremental-$1" msg r rpid
  fp_start_job "$k" --gib 0.5 --static-gib "$gib" || { result "$name" FAIL "job did not start"; return; }
  local pid=$LOAD_PID
  wait_until 180 steps_past "$LOAD_STATUS" 10
  # Every weights chunk (256 MiB) is checked once per that many steps.
  local wsteps; wsteps=$(python3 -c "print(int($gib * 4) + 4)")
  verified_all() {  # verified_all STATUS: the job ran on past every weights chunk, every word right
    local s0; s0=$(jget "$1" 'd["steps"]')
    wait_until 300 steps_past "$1" $(( s0 + wsteps )) || { echo "job did not run on ($(cat "$1"))"; return 1; }
    [ "$(jget "$1" 'd["verified"]')" = True ] || { echo "pattern mismatch: $(cat "$1")"; return 1; }
  }
  for r in 1 2; do
    if ! "${CRYO[@]}" -o json checkpoint "$pid" --id "$k-$r" --leave-running >"$RES/$k-$r.ckpt.json" 2>"$RES/$k-$r.ckpt.err"; then
      result "$name" FAIL "checkpoint $r: $(tail -2 "$RES/$k-$r.ckpt.err")"; end_job "$pid"; return
    fi
    if ! msg=$(verified_all "$LOAD_STATUS"); then
      result "$name" FAIL "after checkpoint $r: $msg"; end_job "$pid"; return
    fi
  done
  du -sk "$W/store/checkpoints/$k-1" "$W/store/checkpoints/$k-2" >"$RES/$k.du.txt" 2>&1
  end_job "$pid"
  if ! "${CRYO[@]}" -o json restore "$k-2" >"$RES/$k.restore.json" 2>"$RES/$k.restore.err"; then
    result "$name" FAIL "restore from the second: $(tail -2 "$RES/$k.restore.err")"; return
  fi
  rpid=$(jget "$RES/$k.restore.json" 'd["root_pid"]')
  if ! msg=$(verified_all "$LOAD_STATUS"); then
    result "$name" FAIL "after the restore: $msg"; end_job "$rpid"; return
  fi
  end_job "$rpid"
  python3 - "$RES/$k-1.ckpt.json" "$RES/$k-2.ckpt.json" "$RES/$k.restore.json" "$gib" >"$RES/$k.summary.json" <<'PY'
import json, sys
one, two, rest = (json.load(open(p)) for p in sys.argv[1:4])
def written(d):
    return int(d.get("size_bytes", 0)) - int(d.get("referenced_bytes", 0))
out = {"weights_gib": float(sys.argv[4]),
       "first": {"size": int(one.get("size_bytes", 0)), "written": written(one),
                 "gpu_write_ms": int(one["stage_ms"].get("gpu_write", 0))},
       "second": {"size": int(two.get("size_bytes", 0)), "written": written(two),
                  "referenced": int(two.get("referenced_bytes", 0)),
                  "gpu_write_ms": int(two["stage_ms"].get("gpu_write", 0))},
       "restore_ms": sum(int(v) for v in rest["stage_ms"].values()),
       "restore_refill_ms": int(rest["stage_ms"].get("gpu_refill", 0))}
out["written_ratio"] = round(out["second"]["written"] / max(1, out["first"]["written"]), 4)
print(json.dumps(out))
PY
  msg=$(jget "$RES/$k.summary.json" '"second checkpoint wrote %.1f%% of the first (%d of %d MB; %d MB referred to), background write %d ms vs %d ms; restored from it (refill %d ms, read through), every word verified" % (100 * d["written_ratio"], d["second"]["written"] >> 20, d["first"]["written"] >> 20, d["second"]["referenced"] >> 20, d["second"]["gpu_write_ms"], d["first"]["gpu_write_ms"], d["restore_refill_ms"])')
  if [ "$(jget "$RES/$k.summary.json" 'd["written_ratio"] <= 0.10')" = True ]; then
    result "$name" PASS "$msg"
  else
    result "$name" FAIL "$msg (goal: at most 10%)"
  fi
  "${CRYO[@]}" rm "$k-2" >/dev/null 2>&1; "${CRYO[@]}" rm "$k-1" >/dev/null 2>&1
}

fp_table() {
  python3 - "$RES" <<'PY' | tee "$RES/fp-bench-table.txt"
import glob, json, os, sys
res = sys.argv[1]
def load(p):
    return json.load(open(p)) if os.path.exists(p) else None
sizes = sorted({json.load(open(f))["gib"] for f in glob.glob(os.path.join(res, "fpfloor*.json"))
                if "gib" in json.load(open(f))})
print("%5s | %-22s | %9s %9s %9s | %9s %9s" % ("GiB", "who", "vacate", "ckpt", "restore",
                                             "ckpt/wf", "rest/rf"))
for g in sizes:
    gs = ("%g" % g)
    f = load(os.path.join(res, "fpfloor%s.json" % gs))
    print("%5s | %-22s | %9d %9d %9d | %9s %9s" % (gs, "floor (d2h / write / read)", f["d2h_ms"], f["write_ms"], f["read_ms"], "", ""))
    rows = [("fast path via cryod", "kf%s.summary.json" % gs)]
    rows += [("driver via cryod", os.path.basename(p)) for p in sorted(glob.glob(os.path.join(res, "kr%s-r*.summary.json" % gs)))]
    rows += [("hand-run baseline", os.path.basename(p)) for p in sorted(glob.glob(os.path.join(res, "bl%s-r*.summary.json" % gs)))]
    for who, name in rows:
        d = load(os.path.join(res, name))
        if not d:
            continue
        if "vacate_ms" in d:
            vac = d["vacate_ms"]
        elif "checkpoint_stages" in d:
            vac = d["checkpoint_stages"].get("gpu_lock", 0) + d["checkpoint_stages"].get("gpu_checkpoint", 0)
        else:
            vac = d.get("lock_ms", 0) + d.get("d2h_ms", 0)
        print("%5s | %-22s | %9d %9d %9d | %9.2f %9.2f" % (gs, who, vac, d["checkpoint_ms"], d["restore_ms"],
              d["checkpoint_ms"] / f["write_ms"], d["restore_ms"] / f["read_ms"]))
PY
}

run_fastpath_parts() {
  [ -f "$FPLIB" ] || { result fastpath SKIP "bundle has no $FPLIB"; return; }
  # Whether the drain is linear in size: in-place drains into host memory, one size after another.
  case " $PARTS " in *" drain-scale "*)
    for gib in ${CRYO_GPU_SCALE_GIB:-16 32 56}; do fp_inplace "$gib" host; done ;;
  esac
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
  case " $PARTS " in *" fastpath "*)
    [ -x "$B/bin/cryod" ] && [ -x "$B/bin/criu" ] || { result fastpath SKIP "bundle has no cryod or CRIU"; return; }
    [ -n "$CRYOD_PID" ] || start_cryod || { result fastpath FAIL "cryod did not start: $(tail -3 "$RES/cryod.log")"; return; }
    "${CRYO[@]}" -o json node >"$RES/fp.node.json" 2>&1
    for gib in ${CRYO_GPU_FP_BENCH_SIZES:-1 8 32}; do
      fp_floors "$gib"
      fp_cryod "$gib"
      if [ "${CRYO_GPU_FP_COMPARE:-1}" = 1 ]; then
        cryod_restore "$gib" 1
        baseline "$gib" 1
      fi
    done
    # CRYO_GPU_FP_TORCH: 1 the losses and the overhead, "overhead" only the overhead, 0 none.
    if [ "${CRYO_GPU_FP_TORCH:-1}" != 0 ] && fp_torch_ok; then
      if [ "${CRYO_GPU_FP_TORCH:-1}" = 1 ]; then
        fp_torch_cryod fp-torch-cryod-default ""
        fp_torch_cryod fp-torch-cryod-expandable "expandable_segments:True"
      fi
      fp_overhead
    fi
    fp_launch_overhead
    fp_table ;;
  esac
  case " $PARTS " in *" periodic-stall "*)
    [ -x "$B/bin/cryod" ] && [ -x "$B/bin/criu" ] || { result periodic-stall SKIP "bundle has no cryod or CRIU"; return; }
    [ -n "$CRYOD_PID" ] || start_cryod || { result periodic-stall FAIL "cryod did not start: $(tail -3 "$RES/cryod.log")"; return; }
    for gib in ${CRYO_GPU_STALL_GIB:-32}; do fp_periodic_stall "$gib"; done
    # The same with cryod's memory registered with the driver (the DMA straight into it, not
    # through the pinned ring): the two ways compared on one machine (CRYO_GPU_STALL_COMPARE=1).
    if [ "${CRYO_GPU_STALL_COMPARE:-0}" = 1 ]; then
      local saved=("${JOB_EXTRA_ENV[@]}")
      JOB_EXTRA_ENV=(CRYO_GPU_FASTPATH_HOST_REGISTER=1)
      for gib in ${CRYO_GPU_STALL_GIB:-32}; do STALL_TAG=-registered fp_periodic_stall "$gib"; done
      JOB_EXTRA_ENV=("${saved[@]}")
    fi
    # And parked on the GPU (gpu_park), cryod restarted with it on (CRYO_GPU_STALL_PARK=1).
    if [ "${CRYO_GPU_STALL_PARK:-0}" = 1 ]; then
      stop_cryod; CRYO_GPU_CRYOD_ARGS="${CRYO_GPU_CRYOD_ARGS:-} --gpu-park=true" start_cryod
      for gib in ${CRYO_GPU_STALL_GIB:-32}; do STALL_TAG=-park fp_periodic_stall "$gib"; done
      stop_cryod; start_cryod
    fi
    if ! fp_torch_ok; then
      result fp-torch-periodic SKIP "no PyTorch with CUDA here"
    else
      [ "${CRYO_GPU_STALL_SINGLE:-1}" = 1 ] && fp_torch_periodic
      # A multi-rank training job (CRYO_GPU_STALL_RANKS), and with CRYO_GPU_STALL_DUMP_COMPARE=1
      # the same again with CRIU dumping into the store (dump_in_memory off), in the same call.
      # CRYO_GPU_STALL_MODES: "memory" (dump_in_memory, the default) and/or "store" (cryod
      # restarted with it off), in the same call.
      local r mode
      # "criu": CRIU copies the job's private memory itself, with one thread (dump_copy_threads
      # 0), instead of cryod's threads at CRIU's post-dump.
      for mode in ${CRYO_GPU_STALL_MODES:-memory store}; do
        case $mode in
          store) stop_cryod; CRYO_GPU_CRYOD_ARGS="${CRYO_GPU_CRYOD_ARGS:-} --dump-in-memory=false" start_cryod ;;
          criu) stop_cryod; CRYO_GPU_CRYOD_ARGS="${CRYO_GPU_CRYOD_ARGS:-} --dump-copy-threads 0" start_cryod ;;
          nopre) stop_cryod; CRYO_GPU_CRYOD_ARGS="${CRYO_GPU_CRYOD_ARGS:-} --dump-pre-copy=false" start_cryod ;;
          verify) stop_cryod; CRYO_PRE_COPY_VERIFY=1 start_cryod ;;
          shared) stop_cryod; CRYO_GPU_CRYOD_ARGS="${CRYO_GPU_CRYOD_ARGS:-} --dump-pre-copy-shared=true" start_cryod ;;
          sharedverify) stop_cryod; CRYO_GPU_CRYOD_ARGS="${CRYO_GPU_CRYOD_ARGS:-} --dump-pre-copy-shared=true" CRYO_PRE_COPY_VERIFY=1 start_cryod ;;
          pool) stop_cryod; CRYO_GPU_CRYOD_ARGS="${CRYO_GPU_CRYOD_ARGS:-} --dump-pages-pool-mib ${CRYO_GPU_STALL_POOL_MIB:-32768}" start_cryod ;;
          park) stop_cryod; CRYO_GPU_CRYOD_ARGS="${CRYO_GPU_CRYOD_ARGS:-} --gpu-park=true" start_cryod ;;
          # Parked, and the shared (pinned) host memory copied beside the driver's checkpoint:
          # with the drain off the host's memory bus, that copy may no longer slow the rest.
          parkshared) stop_cryod; CRYO_GPU_CRYOD_ARGS="${CRYO_GPU_CRYOD_ARGS:-} --gpu-park=true --dump-pre-copy-shared=true" start_cryod ;;
          base)
            [ -x "$B/bin/cryod-base" ] || { result periodic-stall-base SKIP "no $B/bin/cryod-base in the bundle"; continue; }
            stop_cryod; CRYO_GPU_CRYOD_BIN="$B/bin/cryod-base" start_cryod ;;
        esac
        for r in ${CRYO_GPU_STALL_RANKS:-2 4}; do fp_ddp_periodic "$r" "$([ "$mode" = memory ] || echo "-$mode")"; done
        if [ "$mode" != memory ]; then stop_cryod; start_cryod; fi
      done
    fi ;;
  esac
  case " $PARTS " in *" driver-floor "*)
    if fp_torch_ok; then fp_driver_floor; else result driver-floor SKIP "no PyTorch with CUDA here"; fi ;;
  esac
  case " $PARTS " in *" park "*) fp_park ;; esac
  case " $PARTS " in *" incremental "*)
    [ -x "$B/bin/cryod" ] && [ -x "$B/bin/criu" ] || { result incremental SKIP "bundle has no cryod or CRIU"; return; }
    [ -n "$CRYOD_PID" ] || start_cryod || { result incremental FAIL "cryod did not start: $(tail -3 "$RES/cryod.log")"; return; }
    fp_incremental "${CRYO_GPU_INC_GIB:-16}" ;;
  esac
  case " $PARTS " in *" fast-store "*)
    [ -x "$B/bin/cryod" ] && [ -x "$B/bin/criu" ] || { result fast-store SKIP "bundle has no cryod or CRIU"; return; }
    fp_fast_store "${CRYO_GPU_FAST_STORE_GIB:-32}" ;;
  esac
  case " $PARTS " in *" node-preempt "*)
    [ -x "$B/bin/cryod" ] && [ -x "$B/bin/criu" ] || { result node-preempt SKIP "bundle has no cryod or CRIU"; return; }
    [ -n "$CRYOD_PID" ] || start_cryod || { result node-preempt FAIL "cryod did not start: $(tail -3 "$RES/cryod.log")"; return; }
    fp_node_preempt "${CRYO_GPU_NODE_GIB:-32}" ;;
  esac
  case " $PARTS " in *" fastpath-multi "*)
    # Part "multi" (cryod.sh) again, every job with the library: two GPUs drained and
    # checkpointed at once against one alone, a restore onto the other GPU, the NCCL DDP job;
    # on one GPU, the one-GPU forms.
    [ -x "$B/bin/cryod" ] && [ -x "$B/bin/criu" ] || { result fastpath-multi SKIP "bundle has no cryod or CRIU"; return; }
    [ -n "$CRYOD_PID" ] || start_cryod || { result fastpath-multi FAIL "cryod did not start: $(tail -3 "$RES/cryod.log")"; return; }
    MULTI_ENV=("LD_PRELOAD=$FPLIB") MULTI_PREFIX="fp-"
    multi_parts
    MULTI_ENV=() MULTI_PREFIX="" ;;
  esac
}
