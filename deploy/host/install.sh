#!/usr/bin/env bash
# Installs cryo's host parts from the node image onto the host. Run by the cryo DaemonSet's init
# container (charts/cryo), with the host's directories mounted under $HOST_ROOT; runs again at
# every pod start and only replaces what changed.
#
#   $HOST_ROOT$SHIM_PREFIX/releases/<hash>/   the shim: bin/cryo-cri-shim (wrapper), libexec/,
#                                             lib/ (every library it needs, glibc and loader too)
#   $HOST_ROOT$SHIM_PREFIX/current            symlink to the release in use (switched atomically)
#   $HOST_ROOT$INIT_PATH                      cryo-init (static), bind-mounted into containers
#   $HOST_ROOT$(dirname $INIT_PATH)/libcryo_gpu_fastpath.so   the GPU fast-path library, mounted
#                                             into the jobs of pods that ask for it
#   $HOST_ROOT$SYSTEMD_DIR/cryo-cri-shim.service
#   $HOST_ROOT/etc/cryo/cri-shim.env          the shim's flags (from the chart's ConfigMap)
#
# With MANAGE_SERVICE=true it also reloads systemd and enables and (re)starts the unit on the
# host, through nsenter into PID 1's namespaces (needs hostPID and a privileged container).
# Pointing kubelet at the shim is never done here: see docs/install.md.
set -euo pipefail

HOST_ROOT=${HOST_ROOT-/host}  # "" (set, empty): on the node itself
SHIM_PREFIX=${SHIM_PREFIX:-/opt/cryo}
INIT_PATH=${INIT_PATH:-/usr/local/lib/cryo/cryo-init}
SYSTEMD_DIR=${SYSTEMD_DIR:-/etc/systemd/system}
STATE_DIR=${STATE_DIR:-/var/lib/cryo}
SHIM_ENV_FILE=${SHIM_ENV_FILE:-/config/cri-shim.env}
MANAGE_SERVICE=${MANAGE_SERVICE:-false}
# Sources in the image (overridable for tests).
BUNDLE=${BUNDLE:-/opt/cryo/shim-bundle}
CRYO_INIT_SRC=${CRYO_INIT_SRC:-/usr/local/bin/cryo-init}
FASTPATH_SRC=${FASTPATH_SRC:-/usr/local/lib/cryo/libcryo_gpu_fastpath.so}
UNIT_SRC=${UNIT_SRC:-/opt/cryo/host/cryo-cri-shim.service}
KEEP_RELEASES=${KEEP_RELEASES:-3}  # current one included
NSENTER=${NSENTER:-nsenter -t 1 -m -u -i -n -p --}

log() { printf 'cryo-install: %s\n' "$*"; }
die() { printf 'cryo-install: error: %s\n' "$*" >&2; exit 1; }

[ -d "$BUNDLE/bin" ] && [ -f "$BUNDLE/VERSION" ] || die "no shim bundle at $BUNDLE"
[ -x "$CRYO_INIT_SRC" ] || die "no cryo-init at $CRYO_INIT_SRC"
[ -f "$SHIM_ENV_FILE" ] || die "no shim settings at $SHIM_ENV_FILE"
case $SHIM_PREFIX in /*) ;; *) die "SHIM_PREFIX must be absolute: $SHIM_PREFIX" ;; esac

changed=0

# install_file SRC DST MODE: replaces DST by rename, only when its content differs. A running
# program or a container's bind mount keeps the old inode; new users get the new file.
install_file() {
  local src=$1 dst=$2 mode=$3
  if [ -f "$dst" ] && cmp -s "$src" "$dst"; then
    chmod "$mode" "$dst"
    return 0
  fi
  mkdir -p "$(dirname "$dst")"
  cp "$src" "$dst.cryo-new"
  chmod "$mode" "$dst.cryo-new"
  mv -f "$dst.cryo-new" "$dst"
  changed=1
  log "installed $dst"
}

# cryod's state holds checkpoint logs and the store may be under it: root only.
if [ -d "$HOST_ROOT$STATE_DIR" ]; then
  chmod 0700 "$HOST_ROOT$STATE_DIR"
fi

# 1. The shim, as a new release directory, then an atomic switch of "current".
version=$(cat "$BUNDLE/VERSION")
case $version in *[!A-Za-z0-9._-]*|"") die "bad bundle VERSION '$version'" ;; esac
prefix=$HOST_ROOT$SHIM_PREFIX
release=$prefix/releases/$version
if [ ! -f "$release/.complete" ]; then
  rm -rf "$release.tmp"
  mkdir -p "$prefix/releases"
  cp -a "$BUNDLE" "$release.tmp"
  touch "$release.tmp/.complete"
  rm -rf "$release"
  mv "$release.tmp" "$release"
  log "installed shim release $version"
fi
if [ "$(readlink "$prefix/current" 2>/dev/null || true)" != "releases/$version" ]; then
  ln -sfn "releases/$version" "$prefix/current.cryo-new"
  mv -Tf "$prefix/current.cryo-new" "$prefix/current"
  changed=1
  log "shim release $version is now current"
fi
# Keep the newest few releases (rollback targets), by the order they became current.
history=$prefix/.history
[ "$(tail -n 1 "$history" 2>/dev/null || true)" = "$version" ] || echo "$version" >>"$history"
tac "$history" | awk '!seen[$0]++' | tail -n +"$((KEEP_RELEASES + 1))" | while read -r old; do
  [ "$old" != "$version" ] || continue
  if [ -d "$prefix/releases/$old" ]; then
    rm -rf "${prefix:?}/releases/$old" && log "removed old shim release $old"
  fi
done

# 2. cryo-init, and beside it the GPU fast-path library (images built without CUDA headers have
# none: the fast path is then off for pods, and their GPU memory goes the driver's way).
install_file "$CRYO_INIT_SRC" "$HOST_ROOT$INIT_PATH" 0755
if [ -f "$FASTPATH_SRC" ]; then
  install_file "$FASTPATH_SRC" "$HOST_ROOT$(dirname "$INIT_PATH")/libcryo_gpu_fastpath.so" 0644
fi

# 3. The unit (with this install's prefix) and the shim's flags.
# The init container's own root is read-only: the temporary file lives beside the releases.
unit_tmp=$prefix/.cryo-cri-shim.service.tmp
sed "s|/opt/cryo/current/|$SHIM_PREFIX/current/|g" "$UNIT_SRC" >"$unit_tmp"
install_file "$unit_tmp" "$HOST_ROOT$SYSTEMD_DIR/cryo-cri-shim.service" 0644
rm -f "$unit_tmp"
install_file "$SHIM_ENV_FILE" "$HOST_ROOT/etc/cryo/cri-shim.env" 0644

# 4. Optionally, the service itself.
case $MANAGE_SERVICE in
  true)
    $NSENTER systemctl daemon-reload
    $NSENTER systemctl enable cryo-cri-shim.service >/dev/null 2>&1 ||
      die "systemctl enable cryo-cri-shim.service failed on the host"
    if $NSENTER systemctl is-active --quiet cryo-cri-shim.service; then
      if [ "$changed" = 1 ]; then
        # kubelet's CRI connection drops for about a second; running containers are not touched.
        log "restarting cryo-cri-shim.service (new release or settings)"
        $NSENTER systemctl restart cryo-cri-shim.service
      fi
    else
      log "starting cryo-cri-shim.service"
      $NSENTER systemctl start cryo-cri-shim.service
    fi
    $NSENTER systemctl is-active --quiet cryo-cri-shim.service ||
      die "cryo-cri-shim.service is not active on the host (journalctl -u cryo-cri-shim)"
    ;;
  false) ;;
  *) die "MANAGE_SERVICE must be true or false, not '$MANAGE_SERVICE'" ;;
esac

log "done (shim $version; service managed: $MANAGE_SERVICE)"
