#!/usr/bin/env bash
# Points the node's kubelet at the cryo CRI shim, and back (docs/proposals/node-setup.md). Run on
# the node or from a privileged container with the host's root mounted at $HOST_ROOT and hostPID.
#
#   kubelet-endpoint.sh convert   kubelet's containerRuntimeEndpoint becomes the shim's socket;
#                                 the value it replaced is kept in $STATE_FILE; kubelet restarts
#   kubelet-endpoint.sh restore   the kept value goes back (only if the endpoint is still the
#                                 shim's); kubelet restarts; the record is removed
#   kubelet-endpoint.sh status    what the endpoint is and whether it was converted
#
# Both are idempotent, and safe to run again after a failure: until kubelet has restarted onto
# the edited file, $STATE_FILE.restart-pending says which edit it still owes a restart, and a
# rerun restarts kubelet first of all. Where it cannot convert safely it changes nothing, says why on stderr (and
# in $TERMINATION_LOG) and exits 3 ($UNCHANGED_EXIT): kubelet's endpoint given by a flag (the flag wins over the file), a config file that is
# missing or read-only, an endpoint that is not containerd's or CRI-O's socket, or no shim
# listening yet (kubelet would lose its runtime).
set -euo pipefail

# "" (set but empty): run on the node itself, paths as they are.
HOST_ROOT=${HOST_ROOT-/host}
KUBELET_CONFIG=${KUBELET_CONFIG:-/var/lib/kubelet/config.yaml}
KUBELET_FLAG_FILES=${KUBELET_FLAG_FILES:-/var/lib/kubelet/kubeadm-flags.env /etc/default/kubelet /etc/sysconfig/kubelet}
# The host's processes (the container runs with hostPID): a running kubelet's own flags count too.
PROC_ROOT=${PROC_ROOT:-/proc}
SHIM_SOCKET=${SHIM_SOCKET:-/run/cryo/cri-shim.sock}
STATE_FILE=${STATE_FILE:-/opt/cryo/state/kubelet-endpoint}
# kubelet's own default since 1.27, when its config names no endpoint.
DEFAULT_ENDPOINT=${DEFAULT_ENDPOINT:-unix:///run/containerd/containerd.sock}
RESTART_KUBELET=${RESTART_KUBELET:-true}
# The exit code of "unchanged" (the chart's init container sets 0, so cryod starts anyway), and
# where its reason also goes (a container's termination message, shown by kubectl describe).
UNCHANGED_EXIT=${UNCHANGED_EXIT:-3}
TERMINATION_LOG=${TERMINATION_LOG:-/dev/termination-log}
NSENTER=${NSENTER:-nsenter -t 1 -m -u -i -n -p --}

log() { printf 'cryo-kubelet: %s\n' "$*"; }
unchanged() {
  printf 'cryo-kubelet: unchanged: %s\n' "$*" >&2
  if [ -w "$TERMINATION_LOG" ]; then printf 'kubelet not pointed at the shim: %s\n' "$*" >"$TERMINATION_LOG"; fi
  exit "$UNCHANGED_EXIT"
}
die() { printf 'cryo-kubelet: error: %s\n' "$*" >&2; exit 1; }

config=$HOST_ROOT$KUBELET_CONFIG
state=$HOST_ROOT$STATE_FILE
pending=$state.restart-pending
shim_endpoint=unix://$SHIM_SOCKET

# The top-level containerRuntimeEndpoint of the config, without quotes; "" when absent.
current_endpoint() {
  sed -n 's/^containerRuntimeEndpoint:[[:space:]]*["'\'']\{0,1\}\([^"'\'' #]*\).*/\1/p' "$config" | tail -n 1
}

# Replaces in place (or adds at the end, or with "" removes) the top-level containerRuntimeEndpoint,
# by rename: the other lines keep their order, so restore gives back the file as it was.
write_endpoint() {
  local value=$1 tmp=$config.cryo-new
  awk -v v="$value" '
    /^containerRuntimeEndpoint:/ { if (v != "" && !done) print "containerRuntimeEndpoint: " v; done = 1; next }
    { print }
    END { if (v != "" && !done) print "containerRuntimeEndpoint: " v }' "$config" >"$tmp"
  chmod --reference="$config" "$tmp"
  mv -f "$tmp" "$config"
}

restart_kubelet() {
  [ "$RESTART_KUBELET" = true ] || { log "kubelet not restarted (RESTART_KUBELET=$RESTART_KUBELET)"; return; }
  log "restarting kubelet (running containers are not touched)"
  $NSENTER systemctl restart kubelet || die "systemctl restart kubelet failed on the host"
}

flag_file() {
  local f c
  for f in $KUBELET_FLAG_FILES; do
    # A commented-out example does not count.
    if [ -f "$HOST_ROOT$f" ] && grep -qE -- '^[^#]*--container-runtime-endpoint' "$HOST_ROOT$f"; then
      echo "$f"
      return
    fi
  done
  # Only a process whose program is kubelet, and only a real argument: not any command line that
  # merely mentions both (a shell script, an editor, a grep).
  local argv a
  for c in "$PROC_ROOT"/[0-9]*/cmdline; do
    mapfile -d '' argv 2>/dev/null <"$c" || continue
    if [ "${#argv[@]}" -lt 2 ] || [ "${argv[0]##*/}" != kubelet ]; then continue; fi
    for a in "${argv[@]:1}"; do
      case $a in
        --container-runtime-endpoint | --container-runtime-endpoint=*)
          echo "the running kubelet's command line (${c%/cmdline})"
          return ;;
      esac
    done
  done
}

convert() {
  [ -f "$config" ] || unchanged "no kubelet config at $config (set KUBELET_CONFIG, HOST_ROOT)"
  local flags; flags=$(flag_file)
  [ -z "$flags" ] || unchanged "kubelet's endpoint is set by --container-runtime-endpoint in $flags, which wins over $KUBELET_CONFIG: edit it there (docs/install.md, step 4)"
  local now; now=$(current_endpoint)
  if [ "$now" = "$shim_endpoint" ]; then
    if [ "$(cat "$pending" 2>/dev/null)" = convert ]; then
      log "kubelet's config names the shim, but kubelet was not restarted onto it: restarting it now"
      restart_kubelet
      rm -f "$pending"
      return
    fi
    log "kubelet already uses the shim ($shim_endpoint)"
    return
  fi
  local runtime=${now:-$DEFAULT_ENDPOINT}
  case $runtime in
    unix://*containerd.sock|unix://*crio.sock) ;;
    *) unchanged "kubelet's endpoint $runtime is not containerd's or CRI-O's socket: the shim forwards to one of those" ;;
  esac
  if [ ! -w "$config" ] || [ ! -w "$(dirname "$config")" ]; then
    unchanged "$KUBELET_CONFIG is not writable here (a read-only file system)"
  fi
  [ -S "$HOST_ROOT$SHIM_SOCKET" ] || unchanged "no shim listening at $SHIM_SOCKET yet: kubelet would lose its runtime (start cryo-cri-shim.service first)"
  mkdir -p "$(dirname "$state")"
  # What was there: the value, or "absent" (kubelet's default).
  printf '%s\n' "${now:-absent}" >"$state.cryo-new" && mv -f "$state.cryo-new" "$state"
  echo convert >"$pending"
  write_endpoint "$shim_endpoint"
  log "kubelet's containerRuntimeEndpoint: $runtime -> $shim_endpoint (was $([ -n "$now" ] && echo "$now" || echo "unset, kubelet's default"); kept in $STATE_FILE)"
  restart_kubelet
  rm -f "$pending"
}

restore() {
  if [ ! -f "$state" ]; then
    log "nothing to restore: this node was not converted ($STATE_FILE absent)"
    return
  fi
  [ -f "$config" ] || unchanged "no kubelet config at $KUBELET_CONFIG"
  local was now
  was=$(cat "$state")
  now=$(current_endpoint)
  if [ "$now" != "$shim_endpoint" ]; then
    if [ "$(cat "$pending" 2>/dev/null)" = restore ]; then
      log "kubelet's config was put back, but kubelet was not restarted onto it: restarting it now"
      restart_kubelet
    else
      log "kubelet's endpoint is $now, changed since the conversion: left as it is"
    fi
    rm -f "$state" "$pending"
    return
  fi
  [ -w "$config" ] || unchanged "$KUBELET_CONFIG is not writable here"
  echo restore >"$pending"
  if [ "$was" = absent ]; then write_endpoint ""; else write_endpoint "$was"; fi
  local back=$was
  [ "$was" != absent ] || back="unset (kubelet's default)"
  log "kubelet's containerRuntimeEndpoint: $shim_endpoint -> $back"
  restart_kubelet
  # Only now is the node back: a failed restart leaves the record for a rerun.
  rm -f "$state" "$pending"
}

case ${1:-} in
  convert) convert ;;
  restore) restore ;;
  status)
    [ -f "$config" ] || unchanged "no kubelet config at $KUBELET_CONFIG"
    echo "endpoint: $(current_endpoint || true)"
    if [ -f "$state" ]; then echo "converted: yes (was $(cat "$state"))"; else echo "converted: no"; fi
    if [ -f "$pending" ]; then echo "kubelet restart owed after: $(cat "$pending")"; fi ;;
  *) die "usage: kubelet-endpoint.sh convert|restore|status" ;;
esac
