#!/usr/bin/env bash
# Makes a self-contained bundle of the GPU e2e suite for a GPU machine without a package
# registry: our binaries, the shared libraries they need (except glibc's own), the GPU plugins,
# the test programs and the scripts. Copy the directory over and run ./run.sh there.
#
#   e2e/gpu/bundle.sh [BUILD_DIR] [OUT_DIR]     (defaults: build-gpu, BUILD_DIR/gpu-bundle)
#
# Layout:
#   run.sh                the suite (skips when there is no NVIDIA GPU)
#   bin/NAME              wrappers that set LD_LIBRARY_PATH and exec libexec/NAME
#   libexec/              cryo-gpuctl, cryo-gpu-testload, cryod, cryo
#   run.sh, cryod.sh, lease-run.sh, gpu_check.sh, *.py   the suite
#   lib/                  non-glibc shared libraries of everything in libexec/ and lib/cryo/gpu/
#   lib/cryo/gpu/         GPU plugins (libcryo_gpu_cuda.so, libcryo_gpu_rocm.so)
#   lib/cryo/             the fast-path library (libcryo_gpu_fastpath.so), loaded into jobs
#   criu/                 place for CRIU (sbin/criu, lib/criu/*.so plugins), added when present
#   pods/                 part "pods" (pods.sh): containerd, runc, ctr, busybox in pods/bin, the
#                         containerd e2e's scripts, and `paths` (build path -> bundle path);
#                         CRYO_BUNDLE_PODS=0 leaves it out
#   bin/cryod-base        with CRYO_BUNDLE_CRYOD_BASE=PATH: another cryod (a baseline build of the
#                         same tree, e.g. the commit before a change) for the suite to compare
#                         with in the same call (periodic-stall's mode "base")
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build-gpu}
OUT=${2:-$BUILD/gpu-bundle}

die() { echo "bundle: $*" >&2; exit 1; }
[ -d "$BUILD" ] || die "no build dir $BUILD (cmake -S . -B $BUILD && cmake --build $BUILD)"

rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/libexec" "$OUT/lib/cryo/gpu" "$OUT/criu"

# glibc and the loader come from the target machine; everything else travels.
is_system_lib() {
  case "$(basename "$1")" in
    linux-vdso.so*|ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libutil.so*|\
    libresolv.so*|libcuda.so*|libnvidia-ml.so*) return 0 ;;
  esac
  return 1
}

copy_deps() {
  { ldd "$1" 2>/dev/null || true; } | awk '/=> \// {print $3}' | while read -r lib; do
    is_system_lib "$lib" && continue
    [ -e "$OUT/lib/$(basename "$lib")" ] || cp -L "$lib" "$OUT/lib/"
  done
}

add_bin() {  # add_bin PATH [NAME]
  local src=$1 name=${2:-$(basename "$1")}
  [ -x "$src" ] || { echo "bundle: skip $name (not built: $src)" >&2; return 0; }
  cp -L "$src" "$OUT/libexec/$name"
  copy_deps "$src"
  cat >"$OUT/bin/$name" <<WRAP
#!/bin/sh
B=\$(cd "\$(dirname "\$0")/.." && pwd)
export LD_LIBRARY_PATH="\$B/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export CRYO_GPU_PLUGIN_DIR="\${CRYO_GPU_PLUGIN_DIR:-\$B/lib/cryo/gpu}"
exec "\$B/libexec/$name" "\$@"
WRAP
  chmod +x "$OUT/bin/$name"
}

add_bin "$BUILD/daemon/cryo-gpuctl"
add_bin "$BUILD/e2e/gpu/cryo-gpu-testload"
add_bin "$BUILD/e2e/gpu/cryo-gpu-floors"
add_bin "$BUILD/e2e/gpu/cryo-gpu-launchbench"
add_bin "$BUILD/e2e/gpu/cryo-gpu-park"
# Later parts of the suite: picked up when built.
add_bin "$BUILD/daemon/cryod" || true
# Beside cryod: CRIU's post-restore and post-dump gate in process mode (criu/action_gate.h).
add_bin "$BUILD/daemon/cryo-nsexec" || true
add_bin "$BUILD/daemon/cryo-gate" || true
# Beside cryod too: its parking process (gpu_park).
add_bin "$BUILD/daemon/cryo-gpu-parker" || true
add_bin "$BUILD/clients/cryo" || true
if [ -n "${CRYO_BUNDLE_CRYOD_BASE:-}" ]; then add_bin "$CRYO_BUNDLE_CRYOD_BASE" cryod-base; fi

for so in "$BUILD"/lib/cryo/gpu/libcryo_gpu_*.so; do
  [ -e "$so" ] || die "no GPU plugins in $BUILD/lib/cryo/gpu (build cryo_gpu_cuda)"
  cp -L "$so" "$OUT/lib/cryo/gpu/"
  copy_deps "$so"
done

# The fast-path library, loaded into jobs (it needs only glibc and libgcc_s of the job's image).
if [ -f "$BUILD/lib/cryo/libcryo_gpu_fastpath.so" ]; then
  cp -L "$BUILD/lib/cryo/libcryo_gpu_fastpath.so" "$OUT/lib/cryo/"
fi

# CRIU (and its amdgpu plugin) as built by scripts/setup.sh, when this machine has it.
CRIU=${CRIU:-/usr/local/sbin/criu}
if [ -x "$CRIU" ]; then
  mkdir -p "$OUT/criu/sbin" "$OUT/criu/lib"
  cp -L "$CRIU" "$OUT/criu/sbin/criu"
  ldd "$CRIU" | awk '/=> \// {print $3}' | while read -r lib; do
    is_system_lib "$lib" || cp -L "$lib" "$OUT/criu/lib/"
  done
  if [ -d /usr/local/lib/criu ]; then
    mkdir -p "$OUT/criu/lib/criu" && cp -L /usr/local/lib/criu/*.so "$OUT/criu/lib/criu/" 2>/dev/null || true
  fi
  # cryod runs "criu" (its --criu); the wrapper gives it its own libraries. Hand-run CRIU gets
  # the mode cryod uses by default (no hardware breakpoints: criu_hw_breakpoints in
  # docs/operations.md), so the baseline does the same work.
  cat >"$OUT/bin/criu" <<'WRAP'
#!/bin/sh
B=$(cd "$(dirname "$0")/.." && pwd)
export LD_LIBRARY_PATH="$B/criu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CRIU_FAULT="${CRIU_FAULT:-130}"
exec "$B/criu/sbin/criu" "$@"
WRAP
  chmod +x "$OUT/bin/criu"
fi

# GPU pods (part "pods", pods.sh): the containerd e2e's two nodes on this machine's GPUs.
# containerd, runc and ctr are Debian's, carried as they are (Go programs; runc needs
# libseccomp, copied like any library). The e2e test binary names what it runs by its path in
# the build (cryod, the shim, cryo-init, the library, node.sh, ...): those travel once, in
# libexec/ or pods/scripts/, and pods/paths says where pods.sh links them back.
if [ "${CRYO_BUNDLE_PODS:-1}" = 1 ] && [ -x "$BUILD/e2e/containerd/cri_e2e_test" ]; then
  mkdir -p "$OUT/pods/bin" "$OUT/pods/scripts"
  : >"$OUT/pods/paths"
  for b in containerd containerd-shim-runc-v2 ctr runc; do
    src=$(command -v "$b" || true)
    [ -n "$src" ] || die "pods: $b not found (Debian packages containerd, runc)"
    cp -L "$src" "$OUT/pods/bin/$b"
    copy_deps "$src"
  done
  cp -L "${BUSYBOX:-/bin/busybox}" "$OUT/pods/bin/busybox"
  # The pod network (node.sh's bridge CNI) and what the job's restore holds connections with:
  # the CNI plugins (static Go programs), iproute2's ip and nft, with their libraries.
  for b in ip nft; do
    src=$(command -v "$b" || true)
    [ -n "$src" ] || { echo "bundle: pods: no $b here (iproute2, nftables): pods get the host network" >&2; continue; }
    cp -L "$src" "$OUT/pods/bin/$b"
    copy_deps "$src"
  done
  if [ -x /usr/lib/cni/bridge ]; then
    mkdir -p "$OUT/pods/cni"
    for p in bridge host-local loopback; do cp -L "/usr/lib/cni/$p" "$OUT/pods/cni/"; done
  fi
  for f in e2e/containerd/cri_e2e_test cri-shim/cryo-cri-shim cri-shim/init/cryo-init \
           daemon/cryo-nsexec daemon/cryo-gate e2e/workloads/cryo-testload-static; do
    [ -x "$BUILD/$f" ] || { echo "bundle: pods: skip $f (not built)" >&2; continue; }
    add_bin "$BUILD/$f"
    echo "$(readlink -f "$BUILD/$f") libexec/$(basename "$f")" >>"$OUT/pods/paths"
  done
  for f in daemon/cryod clients/cryo e2e/gpu/cryo-gpu-testload; do
    if [ -x "$BUILD/$f" ]; then
      echo "$(readlink -f "$BUILD/$f") libexec/$(basename "$f")" >>"$OUT/pods/paths"
    fi
  done
  so=$BUILD/lib/cryo/libcryo_gpu_fastpath.so
  if [ -f "$so" ]; then
    echo "$(readlink -f "$so") lib/cryo/libcryo_gpu_fastpath.so" >>"$OUT/pods/paths"
  fi
  local_scripts="node.sh build-image.sh checkpoint-image.sh oci_archive.py"
  for s in $local_scripts; do cp "$ROOT/e2e/containerd/$s" "$OUT/pods/scripts/"; done
  for s in $local_scripts; do
    echo "$ROOT/e2e/containerd/$s pods/scripts/$s" >>"$OUT/pods/paths"
  done
fi

# Debug info is most of the size; CRYO_BUNDLE_STRIP=0 keeps it.
if [ "${CRYO_BUNDLE_STRIP:-1}" = 1 ] && command -v strip >/dev/null; then
  find "$OUT/libexec" "$OUT/lib" "$OUT/criu" -type f \( -perm -u+x -o -name '*.so*' \) \
    -exec strip --strip-debug {} + 2>/dev/null || true
fi

cp "$ROOT/e2e/gpu/run.sh" "$ROOT/e2e/gpu/cryod.sh" "$ROOT/e2e/gpu/fastpath.sh" "$ROOT/e2e/gpu/train_losses.py" "$ROOT/e2e/gpu/probe_model.py" \
  "$ROOT/e2e/gpu/compress_probe.py" "$ROOT/e2e/gpu/ipc_share.py" "$ROOT/e2e/gpu/ctx_hold.py" \
  "$ROOT/e2e/gpu/ddp_losses.py" "$ROOT/e2e/gpu/pairs_probe.sh" "$ROOT/e2e/gpu/lease-run.sh" \
  "$ROOT/e2e/gpu/gpu_check.sh" "$ROOT/e2e/gpu/pods.sh" "$ROOT/e2e/gpu/cdi.sh" "$OUT/"
chmod +x "$OUT/run.sh"
git -C "$ROOT" rev-parse --short HEAD >"$OUT/VERSION" 2>/dev/null || echo unknown >"$OUT/VERSION"
du -sh "$OUT" | awk '{print "bundle: " $2 " (" $1 ")"}'
# A compressed copy for machines reached through a size-limited transfer (the libraries, ICU's
# data above all, compress about 4:1): tar -xJf gpu-bundle.tar.xz there.
if [ "${CRYO_BUNDLE_ARCHIVE:-0}" = 1 ]; then
  tar -C "$(dirname "$OUT")" -cJf "$OUT.tar.xz" "$(basename "$OUT")"
  du -sh "$OUT.tar.xz" | awk '{print "bundle archive: " $2 " (" $1 ")"}'
fi
