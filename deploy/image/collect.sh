#!/usr/bin/env bash
# Stages the runtime tree of the node image from an installed build (run in deploy/Dockerfile's
# build stage, or by hand to see what the image would hold):
#
#   deploy/image/collect.sh OUT [PREFIX]        (PREFIX: where cmake --install put cryo, /usr/local)
#
# OUT/usr/local/bin/       cryod, cryo, cryo-nsexec, cryo-gate, cryo-cri-shim, cryo-init,
#                          cryo-uninstall (the chart's pre-delete hook), kubectl-cryo (and
#                          kubectl-checkpoint, the kubectl plugin's second name: a link to it)
# OUT/usr/local/sbin/criu, OUT/usr/local/lib/criu/   CRIU 4.1.1 and its amdgpu plugin
# OUT/usr/local/lib/cryo/gpu/                        GPU plugins
# OUT/usr/local/lib/cryo/libcryo_gpu_fastpath.so     the GPU fast-path library (for the host)
# OUT/usr/local/lib/cryo-deps/ + ld.so.conf.d entry  their non-glibc libraries: the system
#     loader finds them without LD_LIBRARY_PATH, which matters because cryo-nsexec starts CRIU
#     through the loader (`ld.so --list` to find its libraries) inside a container's namespaces
# OUT/opt/cryo/shim-bundle/   the shim for the host: bin/cryo-cri-shim runs libexec/cryo-cri-shim
#     through the bundled glibc loader with only lib/ on its library path, so it does not depend
#     on the host's distribution or glibc version; VERSION is a hash of the content
# OUT/opt/cryo/host/          install.sh, kubelet-endpoint.sh and the systemd unit (deploy/host)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:?usage: collect.sh OUT [PREFIX]}
PREFIX=${2:-/usr/local}
die() { echo "collect: $*" >&2; exit 1; }

mkdir -p "$OUT/usr/local/bin" "$OUT/usr/local/sbin" "$OUT/usr/local/lib/cryo/gpu" \
  "$OUT/usr/local/lib/cryo-deps" "$OUT/etc/ld.so.conf.d" "$OUT/opt/cryo/host"

# glibc's own libraries come from the image's Debian 12 base (same release as the build).
is_glibc() {
  case "$(basename "$1")" in
    linux-vdso.so*|ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libutil.so*|\
    libresolv.so*|libanl.so*|libnss_*) return 0 ;;
  esac
  return 1
}
deps() {  # deps ELF: absolute paths of the shared libraries it loads
  ldd "$1" 2>/dev/null | awk '/=> \// {print $3} /^\t\/.* \(0x/ {print $1}'
}
copy_deps() {  # copy_deps ELF DIR [all]: its libraries into DIR (glibc too when "all")
  local lib
  for lib in $(deps "$1"); do
    if [ "${3:-}" != all ] && is_glibc "$lib"; then continue; fi
    [ -e "$2/$(basename "$lib")" ] || cp -L "$lib" "$2/"
  done
}

required=(cryod cryo cryo-nsexec cryo-gate cryo-cri-shim cryo-init cryo-uninstall)
for b in "${required[@]}" kubectl-cryo; do
  src=$PREFIX/bin/$b
  if [ ! -x "$src" ]; then
    [ "$b" = kubectl-cryo ] && { echo "collect: $b not built, skipped" >&2; continue; }
    die "missing $src (cmake --install the build first)"
  fi
  cp -L "$src" "$OUT/usr/local/bin/"
  copy_deps "$src" "$OUT/usr/local/lib/cryo-deps"
done
# The plugin's second name, as cmake --install makes it: a link, not a second copy.
if [ -e "$OUT/usr/local/bin/kubectl-cryo" ]; then
  ln -sfn kubectl-cryo "$OUT/usr/local/bin/kubectl-checkpoint"
fi
# cryo-init is bind-mounted into arbitrary containers: it must not need any library.
if deps "$PREFIX/bin/cryo-init" | grep -q .; then die "cryo-init is not static"; fi

[ -x "$PREFIX/sbin/criu" ] || die "no CRIU at $PREFIX/sbin/criu (scripts/setup.sh builds it)"
"$PREFIX/sbin/criu" --version | grep -q 'Version: 4\.' || die "CRIU at $PREFIX/sbin/criu is not 4.x"
cp -L "$PREFIX/sbin/criu" "$OUT/usr/local/sbin/"
copy_deps "$PREFIX/sbin/criu" "$OUT/usr/local/lib/cryo-deps"
if ls "$PREFIX"/lib/criu/*.so >/dev/null 2>&1; then
  mkdir -p "$OUT/usr/local/lib/criu"
  for so in "$PREFIX"/lib/criu/*.so; do
    cp -L "$so" "$OUT/usr/local/lib/criu/"
    copy_deps "$so" "$OUT/usr/local/lib/cryo-deps"
  done
fi
for so in "$PREFIX"/lib/cryo/gpu/libcryo_gpu_*.so; do
  [ -e "$so" ] || die "no GPU plugins in $PREFIX/lib/cryo/gpu"
  cp -L "$so" "$OUT/usr/local/lib/cryo/gpu/"
  copy_deps "$so" "$OUT/usr/local/lib/cryo-deps"
done
# The fast-path library goes into jobs' images: nothing but glibc and libgcc_s may it need.
fp=$PREFIX/lib/cryo/libcryo_gpu_fastpath.so
if [ -f "$fp" ]; then
  extra=$(deps "$fp" | while read -r l; do
    is_glibc "$l" || case "$(basename "$l")" in libgcc_s.so*) ;; *) echo "$l" ;; esac
  done)
  [ -z "$extra" ] || die "libcryo_gpu_fastpath.so needs more than glibc and libgcc_s: $extra"
  cp -L "$fp" "$OUT/usr/local/lib/cryo/"
else
  echo "collect: no fast-path library (built without cuda.h), skipped" >&2
fi
echo /usr/local/lib/cryo-deps >"$OUT/etc/ld.so.conf.d/cryo.conf"

# The host shim bundle, glibc and loader included.
B=$OUT/opt/cryo/shim-bundle
mkdir -p "$B/bin" "$B/libexec" "$B/lib"
cp -L "$PREFIX/bin/cryo-cri-shim" "$B/libexec/"
copy_deps "$PREFIX/bin/cryo-cri-shim" "$B/lib" all
interp=$(readelf -l "$PREFIX/bin/cryo-cri-shim" | sed -n 's/.*Requesting program interpreter: \(.*\)\]/\1/p')
[ -n "$interp" ] || die "cannot read the program interpreter of cryo-cri-shim"
cp -L "$interp" "$B/lib/"
loader=$(basename "$interp")
cat >"$B/bin/cryo-cri-shim" <<WRAP
#!/bin/sh
# Runs the shim with the glibc and libraries of its bundle, whatever the host has.
B=\$(cd "\$(dirname "\$0")/.." && pwd -P)
exec "\$B/lib/$loader" --library-path "\$B/lib" "\$B/libexec/cryo-cri-shim" "\$@"
WRAP
chmod 0755 "$B/bin/cryo-cri-shim"
if [ "${CRYO_STRIP:-1}" = 1 ] && command -v strip >/dev/null; then
  find "$OUT/usr/local" "$B" -type f \( -perm -u+x -o -name '*.so*' \) ! -name 'ld-linux*' \
    -exec strip --strip-debug {} + 2>/dev/null || true
fi
(cd "$B" && find . -type f ! -name VERSION -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16) >"$B/VERSION"

install -m 0755 "$ROOT/deploy/host/install.sh" "$OUT/opt/cryo/host/install.sh"
install -m 0755 "$ROOT/deploy/host/kubelet-endpoint.sh" "$OUT/opt/cryo/host/kubelet-endpoint.sh"
install -m 0644 "$ROOT/deploy/host/cryo-cri-shim.service" "$ROOT/deploy/host/kubelet-cryo.conf" \
  "$OUT/opt/cryo/host/"
echo "collect: $(du -sh "$OUT" | cut -f1) in $OUT (shim bundle $(cat "$B/VERSION"))"
