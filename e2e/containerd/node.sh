#!/usr/bin/env bash
# Private containerd 1.6 instances ("nodes") for the e2e tests: each has its own root, state,
# sockets, runc root, config and pod log dir under WORKDIR/NAME, so several run side by side
# and none touches the host's containerd.
#
#   node.sh start WORKDIR NAME   start (or restart) node NAME; import the test images
#   node.sh stop  WORKDIR NAME   stop containerd, kill its containers, unmount, keep files
#   node.sh clean WORKDIR        stop every node under WORKDIR and remove WORKDIR
#   node.sh sweep ROOT           clean every WORKDIR under ROOT whose owner process is gone
#
# A node's socket is WORKDIR/NAME/containerd.sock; its pods should use cgroup parent
# /cryo-e2e/$(basename WORKDIR)/NAME and log directory WORKDIR/NAME/pods/<pod>, so that clean
# finds everything.
#
# Pods that do not ask for the host's network get the node's pod network: the bridge CNI plugin
# (Debian's containernetworking-plugins), bridge cryo-NAME, subnet 10.88.N.0/24 (N from NAME),
# the host routing between the nodes' bridges as a cluster's pod network would.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
CONTAINERD=${CONTAINERD:-containerd}
CTR=${CTR:-ctr}
RUNC=${RUNC:-runc}
IMAGE=docker.io/cryo/busybox:e2e
SANDBOX_IMAGE=docker.io/cryo/pause:e2e

log() { printf '[node] %s\n' "$*" >&2; }
die() { printf '[node] error: %s\n' "$*" >&2; exit 1; }

cgroup_parent() { printf '/cryo-e2e/%s/%s' "$(basename "$1")" "$2"; }

write_config() {
  local dir=$1
  cat >"$dir/config.toml" <<TOML
version = 2
root = "$dir/root"
state = "$dir/state"
plugin_dir = ""
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = "$dir/containerd.sock"

[ttrpc]
  address = "$dir/containerd.sock.ttrpc"

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$SANDBOX_IMAGE"
  # root on these machines lacks CAP_SYS_RESOURCE (see design.md)
  restrict_oom_score_adj = true
  enable_selinux = false
  # two nodes on one machine: each streaming server on its own ephemeral loopback port
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_cdi = false

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v "$RUNC")"
        Root = "$dir/runc"
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$dir/cni/bin"
    conf_dir = "$dir/cni/conf"
TOML
}

CNI_PLUGINS=${CNI_PLUGINS:-/usr/lib/cni}
bridge_of() { printf 'cryo-%.10s' "$1"; }
subnet_of() { printf '10.88.%d.0/24' $(($(printf %s "$1" | cksum | cut -d' ' -f1) % 200 + 20)); }

write_cni() {
  local dir=$1 name=$2 p
  [ -x "$CNI_PLUGINS/bridge" ] || { log "no CNI plugins in $CNI_PLUGINS: pods get the host network only"; return 0; }
  for p in bridge host-local loopback; do ln -sfn "$CNI_PLUGINS/$p" "$dir/cni/bin/$p"; done
  cat >"$dir/cni/conf/10-cryo-e2e.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "cryo-e2e-$name",
  "plugins": [{
    "type": "bridge", "bridge": "$(bridge_of "$name")", "isGateway": true, "ipMasq": false,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "$(subnet_of "$name")"}]],
             "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$dir/cni/ipam"}
  }]
}
JSON
  # Pods of one node reach another node's through the host, as over a cluster's pod network.
  echo 1 >/proc/sys/net/ipv4/ip_forward
}

# Running, not a zombie waiting for its reaper (the node's starter is gone, so whoever reaps
# orphans here may take its time).
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

socket_answers() {
  "$CTR" --address "$1" --timeout 2s version >/dev/null 2>&1
}

start_node() {
  local work=$1 name=$2
  local dir=$work/$name
  mkdir -p "$dir"/{root,state,runc,opt,cni/bin,cni/conf,pods}
  [ -f "$work/owner.pid" ] || echo "${CRYO_E2E_OWNER_PID:-$PPID}" >"$work/owner.pid"
  write_config "$dir"
  # A bridge left by an earlier run of this node (its subnet's route with it) goes first.
  ip link del "$(bridge_of "$name")" 2>/dev/null || true
  write_cni "$dir" "$name"
  if [ -f "$dir/containerd.pid" ] && alive "$(cat "$dir/containerd.pid")"; then
    die "node $name already running (pid $(cat "$dir/containerd.pid"))"
  fi
  rm -f "$dir/containerd.sock" "$dir/containerd.sock.ttrpc"
  # setsid: the node must not get the test's terminal signals; the test stops it explicitly.
  setsid "$CONTAINERD" --config "$dir/config.toml" >>"$dir/containerd.log" 2>&1 </dev/null &
  echo $! >"$dir/containerd.pid"
  local pid
  pid=$(cat "$dir/containerd.pid")
  local i
  for i in $(seq 1 300); do
    if socket_answers "$dir/containerd.sock"; then break; fi
    alive "$pid" || { tail -20 "$dir/containerd.log" >&2; die "containerd of $name exited"; }
    sleep 0.1
  done
  socket_answers "$dir/containerd.sock" || { tail -20 "$dir/containerd.log" >&2; die "containerd of $name did not answer in 30 s"; }

  # Images: built once per WORKDIR, imported into each node that lacks them.
  if [ ! -f "$work/busybox.tar" ]; then
    "$here/build-image.sh" "$work/busybox.tar.tmp" "$IMAGE" sh && mv "$work/busybox.tar.tmp" "$work/busybox.tar"
    "$here/build-image.sh" "$work/pause.tar.tmp" "$SANDBOX_IMAGE" sleep 2147483647 && mv "$work/pause.tar.tmp" "$work/pause.tar"
  fi
  local img
  for img in busybox pause; do
    local ref=$IMAGE
    [ $img = pause ] && ref=$SANDBOX_IMAGE
    if ! "$CTR" --address "$dir/containerd.sock" -n k8s.io images check "name==$ref" 2>/dev/null | grep -q "$ref"; then
      "$CTR" --address "$dir/containerd.sock" -n k8s.io images import "$work/$img.tar" >/dev/null
    fi
  done
  log "$name: containerd $pid on $dir/containerd.sock"
}

# Mount points under $1, deepest first.
mounts_under() {
  awk -v p="$1/" '{ m = $5; gsub(/\\040/, " ", m); if (index(m, p) == 1) print m }' /proc/self/mountinfo | sort -r
}

# containerd-shim processes of a node: their argv has "-address <the node's socket>".
shim_pids_of() {
  local sock=$1 p
  for p in /proc/[0-9]*; do
    local args=()
    mapfile -d '' args 2>/dev/null <"$p/cmdline" || continue
    local i
    for ((i = 0; i + 1 < ${#args[@]}; i++)); do
      if [ "${args[i]}" = -address ] && [ "${args[i + 1]}" = "$sock" ]; then
        echo "${p#/proc/}"
        break
      fi
    done
  done
}

stop_node() {
  local work=$1 name=$2
  local dir=$work/$name
  [ -d "$dir" ] || return 0
  if [ -f "$dir/containerd.pid" ]; then
    local pid
    pid=$(cat "$dir/containerd.pid")
    # KILL, not TERM: nothing here needs a graceful containerd shutdown (its store is
    # transactional), and TERM costs seconds per node.
    if kill -KILL "$pid" 2>/dev/null; then
      local i
      for i in $(seq 1 100); do alive "$pid" || break; sleep 0.05; done
    fi
    rm -f "$dir/containerd.pid"
  fi
  # Containers outlive containerd (their shims are reparented): runc removes them, cgroups too.
  local ns id
  if [ -d "$dir/runc" ]; then
    for ns in "$dir"/runc/*/; do
      [ -d "$ns" ] || continue
      for id in $("$RUNC" --root "$ns" list -q 2>/dev/null); do
        "$RUNC" --root "$ns" delete --force "$id" >/dev/null 2>&1 || true
        # the shim's socket in /run/containerd/s is named by a hash of (address, ns, id)
        rm -f "/run/containerd/s/$(printf '%s' "$dir/containerd.sock/$(basename "$ns")/$id" | sha256sum | cut -c1-64)"
      done
    done
  fi
  local p
  for p in $(shim_pids_of "$dir/containerd.sock"); do kill -KILL "$p" 2>/dev/null || true; done
  local m
  for m in $(mounts_under "$dir"); do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  ip link del "$(bridge_of "$name")" 2>/dev/null || true
  local cg
  for cg in /sys/fs/cgroup/*/"$(cgroup_parent "$work" "$name")" /sys/fs/cgroup/"$(cgroup_parent "$work" "$name")"; do
    [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
}

clean_work() {
  local work=$1 d
  [ -d "$work" ] || return 0
  for d in "$work"/*/; do
    [ -f "$d/config.toml" ] && stop_node "$work" "$(basename "$d")"
  done
  local cg
  for cg in /sys/fs/cgroup/*/cryo-e2e/"$(basename "$work")" /sys/fs/cgroup/cryo-e2e/"$(basename "$work")"; do
    [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  for cg in /sys/fs/cgroup/*/cryo-e2e /sys/fs/cgroup/cryo-e2e; do
    [ -d "$cg" ] && rmdir "$cg" 2>/dev/null || true
  done
  if [ -n "$(mounts_under "$work")" ]; then
    die "mounts left under $work, not removing it"
  fi
  rm -rf --one-file-system "$work"
}

sweep() {
  local root=$1 w
  for w in "$root"/cryo-e2e-containerd.*; do
    [ -d "$w" ] || continue
    if [ -f "$w/owner.pid" ] && alive "$(cat "$w/owner.pid")"; then continue; fi
    log "sweeping leftovers in $w"
    clean_work "$w"
  done
}

if [ "$(id -u)" != 0 ]; then
  # Nothing can have been left behind by tests that skipped for want of root.
  [ "${1:-}" = sweep ] && { log "not root: nothing to sweep"; exit 0; }
  die "needs root (containerd, runc, mounts)"
fi
case "${1:-}" in
  start) start_node "${2:?WORKDIR}" "${3:?NAME}" ;;
  stop) stop_node "${2:?WORKDIR}" "${3:?NAME}" ;;
  clean) clean_work "${2:?WORKDIR}" ;;
  sweep) sweep "${2:?ROOT}" ;;
  *) die "usage: node.sh start|stop WORKDIR NAME | clean WORKDIR | sweep ROOT" ;;
esac
