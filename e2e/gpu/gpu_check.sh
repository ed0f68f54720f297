# Sourced by run.sh and ctest.sh. no_gpu_reason prints why this machine cannot run the GPU suite,
# or nothing when it can.
no_gpu_reason() {
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "no NVIDIA GPU on this machine (nvidia-smi not found); the GPU e2e suite needs one"
  elif ! nvidia-smi -L >/dev/null 2>&1; then
    echo "nvidia-smi finds no usable GPU: $(nvidia-smi -L 2>&1 | head -1)"
  fi
}
