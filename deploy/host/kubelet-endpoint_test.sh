#!/usr/bin/env bash
# Tests deploy/host/kubelet-endpoint.sh against a fake host root: a stock node (config naming
# containerd, and one naming no endpoint) converted and restored, reruns that change nothing,
# kubelet restarted once per change (recorded by a fake nsenter), and the nodes it must leave
# alone with the reason: endpoint set by a flag, unknown runtime, no shim socket, a read-only
# config. Prints "N passed, 0 failed" and exits non-zero on the first failure. Needs root (a
# read-only bind mount); without it that case is skipped, saying so.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
cleanup() { umount "$T/host/var/lib/kubelet" 2>/dev/null || true; rm -rf "$T"; }
trap cleanup EXIT
passed=0
ok() { passed=$((passed + 1)); echo "ok   $*"; }
no() { echo "FAIL $*" >&2; echo "$passed passed, 1 failed"; exit 1; }

cat >"$T/fake-nsenter" <<FAKE
#!/bin/sh
echo "\$*" >>"$T/calls"
FAKE
chmod +x "$T/fake-nsenter"

# A fresh host: kubelet's config as kubeadm writes it, a listening shim socket.
host() {  # host [ENDPOINT-LINE]
  umount "$T/host/var/lib/kubelet" 2>/dev/null || true
  rm -rf "$T/host"
  mkdir -p "$T/host/var/lib/kubelet" "$T/host/run/cryo"
  : >"$T/calls"
  {
    echo "apiVersion: kubelet.config.k8s.io/v1beta1"
    echo "kind: KubeletConfiguration"
    [ -z "${1:-}" ] || echo "$1"
    echo "cgroupDriver: systemd"
  } >"$T/host/var/lib/kubelet/config.yaml"
  python3 -c "import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])" "$T/host/run/cryo/cri-shim.sock"
}
run() {
  HOST_ROOT="$T/host" NSENTER="$T/fake-nsenter" PROC_ROOT="$T/proc" bash "$HERE/kubelet-endpoint.sh" "$@"
}
endpoint() { grep '^containerRuntimeEndpoint:' "$T/host/var/lib/kubelet/config.yaml" || true; }
restarts() { grep -c 'systemctl restart kubelet' "$T/calls" || true; }

# 1. A stock containerd node: converted, the old value kept, kubelet restarted once. Around it a
# process that mentions kubelet and the flag without being kubelet (a shell script, a grep) and a
# commented-out flag in a flag file: neither counts.
host "containerRuntimeEndpoint: unix:///run/containerd/containerd.sock"
cp "$T/host/var/lib/kubelet/config.yaml" "$T/original.yaml"
mkdir -p "$T/proc/4243" "$T/host/etc/default"
printf 'bash\0-c\0echo /usr/bin/kubelet --container-runtime-endpoint=x\0' >"$T/proc/4243/cmdline"
echo '# KUBELET_EXTRA_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock"' \
  >"$T/host/etc/default/kubelet"
run convert >"$T/out" 2>&1 || no "convert failed: $(cat "$T/out")"
rm -r "$T/proc/4243"
[ "$(endpoint)" = "containerRuntimeEndpoint: unix:///run/cryo/cri-shim.sock" ] || no "endpoint after convert: $(endpoint)"
grep -q '^cgroupDriver: systemd' "$T/host/var/lib/kubelet/config.yaml" || no "other settings lost"
[ "$(cat "$T/host/opt/cryo/state/kubelet-endpoint")" = "unix:///run/containerd/containerd.sock" ] || no "old value not kept"
[ "$(restarts)" = 1 ] || no "kubelet restarted $(restarts) times"
ok "a stock node is converted, its endpoint kept, kubelet restarted once (a script mentioning kubelet's flag and a commented-out flag do not count)"
run convert >"$T/out" 2>&1 || no "second convert failed"
[ "$(restarts)" = 1 ] || no "a rerun restarted kubelet again"
grep -q "already uses the shim" "$T/out" || no "rerun said: $(cat "$T/out")"
ok "converting again changes nothing"
run restore >"$T/out" 2>&1 || no "restore failed: $(cat "$T/out")"
[ "$(endpoint)" = "containerRuntimeEndpoint: unix:///run/containerd/containerd.sock" ] || no "endpoint after restore: $(endpoint)"
cmp -s "$T/original.yaml" "$T/host/var/lib/kubelet/config.yaml" || no "restore did not give back the same file"
[ ! -e "$T/host/opt/cryo/state/kubelet-endpoint" ] || no "record left after restore"
[ "$(restarts)" = 2 ] || no "restore restarted kubelet $(restarts) times in all"
run restore >"$T/out" 2>&1 || no "second restore failed"
[ "$(restarts)" = 2 ] || no "a second restore restarted kubelet"
ok "restore puts the node back, byte for byte, once"

# 2. A config naming no endpoint (kubelet's default): restored to naming none.
host ""
run convert >/dev/null 2>&1 || no "convert of a default node failed"
[ "$(cat "$T/host/opt/cryo/state/kubelet-endpoint")" = absent ] || no "default not recorded as absent"
run restore >/dev/null 2>&1 || no "restore of a default node failed"
[ -z "$(endpoint)" ] || no "a default node got an endpoint back: $(endpoint)"
ok "a node on kubelet's default endpoint goes back to naming none"

# 2b. On the node itself (HOST_ROOT empty): paths as they are.
host "containerRuntimeEndpoint: unix:///run/containerd/containerd.sock"
HOST_ROOT="" KUBELET_CONFIG="$T/host/var/lib/kubelet/config.yaml" SHIM_SOCKET="$T/host/run/cryo/cri-shim.sock" \
  STATE_FILE="$T/state/kubelet-endpoint" NSENTER="$T/fake-nsenter" PROC_ROOT="$T/proc" \
  KUBELET_FLAG_FILES="$T/none" bash "$HERE/kubelet-endpoint.sh" convert >"$T/out" 2>&1 ||
  no "convert with HOST_ROOT empty: $(cat "$T/out")"
[ "$(endpoint)" = "containerRuntimeEndpoint: unix://$T/host/run/cryo/cri-shim.sock" ] || no "HOST_ROOT empty: $(endpoint)"
ok "run on the node itself (HOST_ROOT empty), paths as given"

# 3. Changed by someone else after the conversion: restore leaves it.
host "containerRuntimeEndpoint: unix:///run/containerd/containerd.sock"
run convert >/dev/null 2>&1
sed -i 's|^containerRuntimeEndpoint:.*|containerRuntimeEndpoint: unix:///run/other.sock|' "$T/host/var/lib/kubelet/config.yaml"
run restore >"$T/out" 2>&1 || no "restore failed"
[ "$(endpoint)" = "containerRuntimeEndpoint: unix:///run/other.sock" ] || no "restore overwrote another's change"
ok "restore leaves an endpoint changed since alone"

# 3b. kubelet's restart fails after the edit (systemctl exits 1): the run fails, and the rerun
# (the init container's retry) restarts kubelet onto the edited file instead of calling the node
# done; a restore keeps its record until kubelet has restarted.
cat >"$T/failing-nsenter" <<FAKE
#!/bin/sh
echo "\$*" >>"$T/calls"
exit 1
FAKE
chmod +x "$T/failing-nsenter"
run_failing() {
  HOST_ROOT="$T/host" NSENTER="$T/failing-nsenter" PROC_ROOT="$T/proc" bash "$HERE/kubelet-endpoint.sh" "$@"
}
host "containerRuntimeEndpoint: unix:///run/containerd/containerd.sock"
cp "$T/host/var/lib/kubelet/config.yaml" "$T/original.yaml"
! run_failing convert >"$T/out" 2>&1 || no "convert with a failed restart succeeded"
run convert >"$T/out" 2>&1 || no "the rerun of convert failed: $(cat "$T/out")"
grep -q "not restarted onto it: restarting it now" "$T/out" || no "the rerun of convert said: $(cat "$T/out")"
[ "$(restarts)" = 2 ] || no "convert's rerun: $(restarts) restart calls in all"
run convert >"$T/out" 2>&1 || no "a third convert failed"
[ "$(restarts)" = 2 ] || no "a third convert restarted kubelet again"
! run_failing restore >"$T/out" 2>&1 || no "restore with a failed restart succeeded"
[ -e "$T/host/opt/cryo/state/kubelet-endpoint" ] || no "a restore whose restart failed dropped its record"
run restore >"$T/out" 2>&1 || no "the rerun of restore failed: $(cat "$T/out")"
grep -q "put back, but kubelet was not restarted onto it: restarting it now" "$T/out" || no "the rerun of restore said: $(cat "$T/out")"
[ "$(restarts)" = 4 ] || no "restore's rerun: $(restarts) restart calls in all"
cmp -s "$T/original.yaml" "$T/host/var/lib/kubelet/config.yaml" || no "the restored file differs"
[ ! -e "$T/host/opt/cryo/state/kubelet-endpoint" ] && [ ! -e "$T/host/opt/cryo/state/kubelet-endpoint.restart-pending" ] ||
  no "records left after the rerun of restore"
run restore >"$T/out" 2>&1 || no "a third restore failed"
[ "$(restarts)" = 4 ] || no "a third restore restarted kubelet again"
ok "a failed kubelet restart is retried by the rerun, in both directions, and only then is the node done"

# 4. Nodes it must not touch: exit 3, the reason, the file as it was, no restart.
refuse() {  # refuse WHAT EXPECTED-REASON
  local before; before=$(md5sum "$T/host/var/lib/kubelet/config.yaml")
  set +e; run convert >"$T/out" 2>&1; local rc=$?; set -e
  [ "$rc" = 3 ] || no "$1: exit $rc: $(cat "$T/out")"
  grep -q "$2" "$T/out" || no "$1: said $(cat "$T/out")"
  [ "$(md5sum "$T/host/var/lib/kubelet/config.yaml")" = "$before" ] || no "$1: config changed"
  [ "$(restarts)" = 0 ] || no "$1: kubelet restarted"
  [ ! -e "$T/host/opt/cryo/state/kubelet-endpoint" ] || no "$1: a record was made"
  ok "$1: left unchanged ($2)"
}
host "containerRuntimeEndpoint: unix:///run/containerd/containerd.sock"
echo 'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock"' \
  >"$T/host/var/lib/kubelet/kubeadm-flags.env"
refuse "endpoint set by a flag" "set by --container-runtime-endpoint in /var/lib/kubelet/kubeadm-flags.env"
rm "$T/host/var/lib/kubelet/kubeadm-flags.env"
mkdir -p "$T/proc/4242"
printf '/usr/bin/kubelet\0--config=/var/lib/kubelet/config.yaml\0--container-runtime-endpoint=unix:///run/containerd/containerd.sock\0' \
  >"$T/proc/4242/cmdline"
refuse "endpoint on the running kubelet's command line" "the running kubelet's command line"
rm -r "$T/proc/4242"
host "containerRuntimeEndpoint: unix:///var/run/dockershim.sock"
refuse "unknown runtime" "is not containerd's or CRI-O's socket"
host "containerRuntimeEndpoint: unix:///var/run/crio/crio.sock"
rm "$T/host/run/cryo/cri-shim.sock"
refuse "no shim yet" "no shim listening"
host "containerRuntimeEndpoint: unix:///run/containerd/containerd.sock"
if [ "$(id -u)" = 0 ] && mount --bind "$T/host/var/lib/kubelet" "$T/host/var/lib/kubelet" 2>/dev/null &&
   mount -o remount,bind,ro "$T/host/var/lib/kubelet" 2>/dev/null; then
  refuse "read-only config" "not writable"
  umount "$T/host/var/lib/kubelet"
else
  echo "skip read-only config: needs root and bind mounts"
fi
echo "$passed passed, 0 failed"
