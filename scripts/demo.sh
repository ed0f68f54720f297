#!/usr/bin/env bash
# The main job on embedded defaults: starts cryod (local store under /var/lib/cryo), runs a
# sample job, checkpoints it (which stops it, as a preemption would), restores it, and shows
# it carrying on from where it was.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
export BUILD_DIR
# Only what the demo runs (a whole build takes a quarter of an hour on two cores).
BUILD_TARGETS="cryod cryo cryo-nsexec cryo-testload" bash "$ROOT/scripts/setup.sh"

CRYOD=$BUILD_DIR/daemon/cryod
CRYO=$BUILD_DIR/clients/cryo
LOAD=$BUILD_DIR/e2e/workloads/cryo-testload
SOCK=${CRYO_SOCKET:-/run/cryo/cryod.sock}
export CRYO_SOCKET=$SOCK
WORK=$(mktemp -d /tmp/cryo-demo-XXXXXX)
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
counters() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("nonce %s  main %d  child %d  threads %s" % (j["nonce"], j["main"], j["child"], j["threads"]))' "$1"; }

started_cryod=
cleanup() {
  [ -n "${JOB:-}" ] && kill -9 "$JOB" 2>/dev/null || true
  if [ -n "$started_cryod" ]; then kill "$started_cryod" 2>/dev/null; wait "$started_cryod" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

if "$CRYO" node >/dev/null 2>&1; then
  say "using the cryod already serving $SOCK"
else
  say "starting cryod (defaults: socket $SOCK, store under /var/lib/cryo, journal on /run/cryo)"
  "$CRYOD" --metrics-address 127.0.0.1:9464 >"$WORK/cryod.log" 2>&1 &
  started_cryod=$!
  for _ in $(seq 100); do "$CRYO" node >/dev/null 2>&1 && break; sleep 0.1; done
fi
"$CRYO" node

say "starting a sample job: 256 MiB of patterned memory, 4 threads, a child process"
setsid "$LOAD" --status "$WORK/status" --mem-mib 256 --threads 4 </dev/null >"$WORK/job.log" 2>&1 &
JOB=$!
sleep 2
echo "job pid $JOB: $(counters "$WORK/status")"

ID=demo-$(date +%s)
say "cryo checkpoint $JOB --id $ID   (stops the job once the checkpoint is safe)"
"$CRYO" checkpoint "$JOB" --id "$ID" --workload demo
{ wait "$JOB"; } 2>/dev/null || true
echo "job is gone: $(kill -0 "$JOB" 2>/dev/null && echo no || echo yes); last state it wrote: $(counters "$WORK/status")"

say "cryo list"
"$CRYO" list --workload demo

say "cryo restore $ID"
"$CRYO" restore "$ID"
sleep 2
echo "job pid $JOB runs on: $(counters "$WORK/status")"
kill -USR1 "$JOB"
sleep 1
# The demo fails (exit 1) when the restored job's memory is not what it was.
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); ok = j["verify_ok"] == 1; print("memory pattern after restore:", "intact" if ok else "DAMAGED"); sys.exit(0 if ok else 1)' "$WORK/status"

say "cryo inspect $ID"
"$CRYO" inspect "$ID" | head -12
"$CRYO" rm "$ID" >/dev/null
say "done"
