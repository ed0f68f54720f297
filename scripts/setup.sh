#!/usr/bin/env bash
# Prepares a fresh Debian 12 machine for cryo: Debian packages, CRIU 4.1.1 built from Debian's
# source tarball (hash-checked), then the project build. Idempotent: every step checks first.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CRIU_VERSION=4.1.1
CRIU_SHA256=f80a66cb3726bb2116266d4759ce3bcbfab7abdb6b6d430bf20dd41911717afe
CRIU_PREFIX=${CRIU_PREFIX:-/usr/local}
CACHE=${CRYO_CACHE:-/var/cache/cryo-setup}
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
SKIP_BUILD=${SKIP_BUILD:-0}
# Empty: everything (the tests need it all); the demo names the few binaries it runs.
BUILD_TARGETS=${BUILD_TARGETS:-}

log() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (installs packages and CRIU)"

PKGS=(
  # build
  build-essential cmake ninja-build pkg-config git ca-certificates xz-utils clang-format ccache
  # project libraries
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  nlohmann-json3-dev prometheus-cpp-dev libzstd-dev libxxhash-dev libssl-dev
  libarchive-dev  # container mode: writable-layer diffs and kubelet checkpoint archives
  libcurl4-openssl-dev  # cloud termination notices (metadata endpoints)
  libcivetweb-dev  # the shim's metrics endpoint (prometheus-cpp's exposer)
  libgtest-dev libgmock-dev libbenchmark-dev
  # CRIU's build deps (what Debian's criu build-depends on, minus docs)
  libprotobuf-c-dev protobuf-c-compiler libnl-3-dev libnet1-dev libcap-dev libbsd-dev
  libgnutls28-dev libnftables-dev libaio-dev uuid-dev python3-protobuf python3 libdrm-dev
  # runtime for the container tests
  containerd runc iproute2 nftables busybox-static procps
  containernetworking-plugins  # the e2e nodes' pod network (bridge CNI)
  openssl  # the e2e nodes' peer certificates (mutual TLS between cryods)
  buildah  # checkpoint images from kubelet archives (e2e: restore from a checkpoint image)
  iptables  # in the node image scripts/release.sh builds from this machine's packages
  # Helm chart render and type check (scripts/check-chart.sh): Go + sprig, K8s API types
  golang-go golang-github-masterminds-sprig-dev golang-k8s-sigs-yaml-dev python3-kubernetes
  golang-github-xeipuuv-gojsonschema-dev python3-jsonschema prometheus  # schema check; promtool
)
# ... and a kubectl, Debian's unless one is installed already (two would clash on /usr/bin/kubectl).
command -v kubectl >/dev/null || PKGS+=(kubernetes-client)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${#missing[@]} Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# containerd's package starts a system instance; the tests run private ones, so leave it alone
# but make sure it does not hold anything of ours.

# The build id covers the tarball and our patches (scripts/criu-patches), so a CRIU built
# without a patch the project now carries is rebuilt.
BUILD_ID=$( { echo "$CRIU_SHA256"; cat "$ROOT"/scripts/criu-patches/*.patch 2>/dev/null; } | sha256sum | cut -c1-16)
STAMP=$CRIU_PREFIX/lib/cryo/criu.build-id
criu_ok() {
  [ -x "$CRIU_PREFIX/sbin/criu" ] &&
    "$CRIU_PREFIX/sbin/criu" --version 2>/dev/null | grep -q "Version: $CRIU_VERSION" &&
    [ "$(cat "$STAMP" 2>/dev/null)" = "$BUILD_ID" ]
}

if ! criu_ok; then
  mkdir -p "$CACHE"
  tarball="$CACHE/criu_${CRIU_VERSION}.orig.tar.xz"
  if ! echo "$CRIU_SHA256  $tarball" | sha256sum -c --status 2>/dev/null; then
    log "fetching CRIU $CRIU_VERSION source from Debian (trixie deb-src)"
    # deb-src only: a binary trixie entry would pull trixie packages into this system.
    src=/etc/apt/sources.list.d/cryo-trixie-src.sources
    if [ ! -f "$src" ]; then
      cat >"$src" <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
      apt-get update -qq
    fi
    # The mirror lacks the .dsc and debian.tar.xz, so apt fails after fetching the tarball:
    # the hash below is the real check.
    (cd "$CACHE" && apt-get source --download-only "criu=${CRIU_VERSION}-1" >/dev/null 2>&1) || true
    echo "$CRIU_SHA256  $tarball" | sha256sum -c --status ||
      die "CRIU tarball missing or its sha256 differs from $CRIU_SHA256"
  fi
  work="$CACHE/criu-$CRIU_VERSION"
  rm -rf "$work"
  tar -C "$CACHE" -xf "$tarball"
  for p in "$ROOT"/scripts/criu-patches/*.patch; do
    [ -e "$p" ] || continue
    log "applying $(basename "$p")"
    patch -d "$work" -p1 --quiet <"$p" || die "CRIU patch $(basename "$p") does not apply"
  done
  log "building CRIU $CRIU_VERSION (about a minute)"
  # amdgpu plugin is built for the ROCm path; CRIU's own cuda_plugin is deliberately not built
  # (cryo drives the CUDA driver API itself and the two must not run together).
  make -C "$work" -j"$(nproc)" criu >"$CACHE/criu-build.log" 2>&1 ||
    { tail -30 "$CACHE/criu-build.log"; die "CRIU build failed (log: $CACHE/criu-build.log)"; }
  make -C "$work" -j"$(nproc)" amdgpu_plugin >>"$CACHE/criu-build.log" 2>&1 ||
    log "warning: CRIU amdgpu plugin did not build (ROCm path unavailable); see $CACHE/criu-build.log"
  install -D -m 0755 "$work/criu/criu" "$CRIU_PREFIX/sbin/criu"
  if [ -f "$work/plugins/amdgpu/amdgpu_plugin.so" ]; then
    install -D -m 0644 "$work/plugins/amdgpu/amdgpu_plugin.so" \
      "$CRIU_PREFIX/lib/criu/amdgpu_plugin.so"
  fi
  install -D -m 0644 /dev/null "$STAMP" && echo "$BUILD_ID" >"$STAMP"
  criu_ok || die "installed CRIU does not report version $CRIU_VERSION"
fi
# runc looks up "criu" in PATH; Debian's /usr/sbin/criu (3.17, broken here) must not win.
if [ -x /usr/sbin/criu ] && ! /usr/sbin/criu --version | grep -q "$CRIU_VERSION"; then
  die "/usr/sbin/criu is an older CRIU; remove Debian's criu package (apt-get remove criu)"
fi
log "CRIU: $("$CRIU_PREFIX/sbin/criu" --version | head -1)"

if [ "$SKIP_BUILD" != 1 ]; then
  log "building cryo in $BUILD_DIR"
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-RelWithDebInfo} >/dev/null
  targets=()
  for t in $BUILD_TARGETS; do targets+=(--target "$t"); done
  cmake --build "$BUILD_DIR" -j"$(nproc)" "${targets[@]}"
fi
log "ready"
