# shellcheck shell=bash
# GPU pods (issue 36), sourced by run.sh for CRYO_GPU_PARTS=pods: the containerd e2e's world on
# this machine's GPUs. Two "nodes" (two containerd 1.6 instances with their own state, runc root
# and pods, each with cryod and cryo-cri-shim as the DaemonSet runs them: host namespaces, root)
# share one store; node A's pods get the first GPU, node B's the second (the same one on a
# one-GPU machine). Pods get GPUs as the NVIDIA device plugin and container toolkit give them:
# the edits of a CDI spec of this machine (cdi.sh: the GPU's device file, the control devices,
# the driver's libraries read-only) and NVIDIA_VISIBLE_DEVICES. The e2e's CRI client makes kubelet's calls in kubelet's order
# (GpuPodE2e in e2e/containerd/container_e2e_test.cc: which scenarios, and what each checks).
#
# Env: CRYO_GPU_POD_GIB   device memory of the fast-path pod (default 4)
#      CRYO_GPU_POD_TORCH_STEPS, CRYO_GPU_POD_DDP_STEPS  steps of the training pods (300, 200)
#      CRYO_GPU_POD_TESTS gtest filter (default GpuPodE2e.*)

run_pods_part() {
  local P=$B/pods
  [ -f "$P/paths" ] || { result pods SKIP "bundle has no pods/ (bundle.sh with CRYO_BUNDLE_PODS=1 and a build with the containerd e2e)"; return; }
  # The test binary runs programs and scripts by their paths in the build: link them back there.
  local abs rel
  while read -r abs rel; do
    [ -e "$abs" ] && continue
    mkdir -p "$(dirname "$abs")" && ln -s "$B/$rel" "$abs"
  done <"$P/paths"
  grep -q overlay /proc/filesystems || modprobe overlay 2>/dev/null || true
  log "pods: overlayfs $(grep -c overlay /proc/filesystems), cgroup $(stat -fc %T /sys/fs/cgroup)"
  local out=$RES/pods.log rc
  (
    export PATH="$P/bin:$PATH"
    export LD_LIBRARY_PATH="$B/criu/lib:$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export CONTAINERD=$P/bin/containerd CTR=$P/bin/ctr RUNC=$P/bin/runc BUSYBOX=$P/bin/busybox
    # The nodes' pod network (bridge CNI), for the tests that ask for it (the job across nodes).
    [ -x "$P/cni/bridge" ] && export CNI_PLUGINS=$P/cni
    # CRIU itself, not bin/criu's wrapper: in container mode cryo-nsexec runs it through the
    # ELF loader inside the pod's namespaces, finding its libraries by LD_LIBRARY_PATH.
    export CRYO_E2E_CRYOD_ARGS="--criu $B/criu/sbin/criu --gpu-plugin-dir $B/lib/cryo/gpu"
    export CRYO_E2E_TMP=/var/tmp
    # The GPUs reach pods through a CDI spec of this machine, as the toolkit would write it.
    bash "$B/cdi.sh" "$RES/cdi-nvidia.json" && export CRYO_GPU_POD_CDI_SPEC=$RES/cdi-nvidia.json
    # The training pod: the machine's python and PyTorch come in read-only (hostPath volumes),
    # its losses are compared with a run on this machine without cryo.
    if python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
      local py ref=$RES/pod-torch.ref.txt
      py=$(command -v python3)
      setsid -w python3 "$B/train_losses.py" --steps "${CRYO_GPU_POD_TORCH_STEPS:-300}" --step-ms 20 \
        --out "$ref" </dev/null >"$RES/pod-torch.ref.log" 2>&1
      export CRYO_GPU_POD_PYTHON=$py CRYO_GPU_POD_TORCH_SCRIPT=$B/train_losses.py CRYO_GPU_POD_TORCH_REF=$ref
      # the interpreter's prefix (a venv's too), the bundle (the script), the system's Python
      CRYO_GPU_POD_MOUNTS="$(dirname "$(dirname "$py")"):$(dirname "$(dirname "$(readlink -f "$py")")"):$B:/usr:/opt"
      export CRYO_GPU_POD_MOUNTS
      # The DDP pod (two GPUs): its reference, launched as the pod launches it, NCCL as the
      # pods have it (GiveGpus' environment).
      if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')" -ge 2 ]; then
        local dref=$RES/pod-ddp.ref.txt
        NCCL_NVLS_ENABLE=0 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo setsid -w python3 \
          -m torch.distributed.run --standalone --nproc-per-node=2 "$B/ddp_losses.py" \
          --steps "${CRYO_GPU_POD_DDP_STEPS:-200}" --step-ms 20 --out "$dref" \
          </dev/null >"$RES/pod-ddp.ref.log" 2>&1
        grep -qx "done" "$dref" && export CRYO_GPU_POD_DDP_SCRIPT=$B/ddp_losses.py CRYO_GPU_POD_DDP_REF=$dref
      fi
      # The DDP job across two nodes (two pods, one rank each, on this machine's first GPU or
      # one GPU each): its reference, two torchrun agents as two nodes here, told apart as
      # hosts by NCCL_HOSTID so that NCCL talks over its socket transport, as between the pods.
      local jref=$RES/pod-ddp2n.ref.txt r
      for r in 0 1; do
        NCCL_HOSTID=cryo-ref-node-$r NCCL_NVLS_ENABLE=0 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo \
          setsid python3 -m torch.distributed.run --nnodes=2 --node-rank=$r --nproc-per-node=1 \
          --master-addr=127.0.0.1 --master-port=29561 "$B/ddp_losses.py" --same-gpu \
          --steps "${CRYO_GPU_POD_DDP_STEPS:-200}" --step-ms 20 --out "$jref" \
          </dev/null >"$RES/pod-ddp2n.ref.$r.log" 2>&1 &
      done
      wait
      grep -qx "done" "$jref" && export CRYO_GPU_POD_JOB_SCRIPT=$B/ddp_losses.py CRYO_GPU_POD_JOB_REF=$jref
      # Its baseline: one member's work as a job of one node (one rank, the same model).
      local j1ref=$RES/pod-ddp1.ref.txt
      NCCL_NVLS_ENABLE=0 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo setsid -w python3 \
        -m torch.distributed.run --standalone --nproc-per-node=1 "$B/ddp_losses.py" \
        --steps "${CRYO_GPU_POD_DDP_STEPS:-200}" --step-ms 20 --out "$j1ref" \
        </dev/null >"$RES/pod-ddp1.ref.log" 2>&1
      grep -qx "done" "$j1ref" && export CRYO_GPU_POD_JOB1_REF=$j1ref
    fi
    "$B/bin/cri_e2e_test" --gtest_filter="${CRYO_GPU_POD_TESTS:-GpuPodE2e.*}" --gtest_color=no
  ) >"$out" 2>&1
  rc=$?
  local t name
  while read -r t name; do
    case "$t" in
      OK) result "pod:${name#GpuPodE2e.}" PASS "" ;;
      FAILED) result "pod:${name#GpuPodE2e.}" FAIL "see pods.log" ;;
      SKIPPED) result "pod:${name#GpuPodE2e.}" SKIP "$(grep -m1 'no NVIDIA GPU here' "$out")" ;;
    esac
  done < <(sed -n 's/^\[ *\(OK\|FAILED\|SKIPPED\) *\] \([A-Za-z0-9_.]*\) (.*/\1 \2/p' "$out")
  grep '^\[gpu-pods\]' "$out" | tee "$RES/pods-numbers.txt" >&2
  [ "$rc" = 0 ] || { log "pods: cri_e2e_test exit $rc; tail:"; tail -40 "$out" >&2; }
  # Leftovers of a crashed run: nodes whose test process is gone.
  bash "$P/scripts/node.sh" sweep /var/tmp >/dev/null 2>&1 || true
}
