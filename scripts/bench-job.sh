#!/usr/bin/env bash
# Benchmark (not a test): a job checkpoint of two members (issue 37) against one member alone, in
# the same run. Members are cryo-testload processes of SIZE_MIB each. Rows, each the median of
# REPS leave-running checkpoints through cryod:
#   one member           `cryo checkpoint --leave-running` of one member (the baseline)
#   job, one node        `cryo checkpoint-job` of both members on one cryod
#   job, two nodes       the same with the second member on another cryod (the Peer service)
# and for each job row the cut's skew (how long the first member dumped was held for the last);
# then restores: one member's checkpoint alone (the baseline) against `cryo restore-job` of both
# members together (their connections held until the last is back).
# Usage: bench-job.sh [SIZE_MIB] (default 512)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
CRYOD=$BUILD_DIR/daemon/cryod
CRYO=$BUILD_DIR/clients/cryo
LOAD=$BUILD_DIR/e2e/workloads/cryo-testload
REPS=${REPS:-3}
MIB=${1:-512}
for b in "$CRYOD" "$CRYO" "$LOAD"; do [ -x "$b" ] || { echo "missing $b: run scripts/setup.sh" >&2; exit 1; }; done

W=$(mktemp -d /var/tmp/cryo-bench-job-XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for d in ${DA:-} ${DB:-}; do kill "$d" 2>/dev/null && wait "$d" 2>/dev/null || true; done
  rm -rf "$W"
}
trap cleanup EXIT
now() { date +%s.%N; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
head -c 32 /dev/urandom | base64 >"$W/token"
PA=$(free_port) PB=$(free_port)
head -c 32 /dev/urandom >"$W/signing.key" && chmod 600 "$W/signing.key"
start_cryod() {  # name self_port other other_port
  "$CRYOD" --socket "$W/$1.sock" --state-dir "$W/state-$1" --store "$W/store" --node-name "$1" \
    --metrics-address "" --store-fsync false --signing-key-file "$W/signing.key" \
    --peer-listen "127.0.0.1:$2" --peer-token-file "$W/token" --peers "$3=127.0.0.1:$4" \
    --peer-process-members=true >"$W/$1.log" 2>&1 &
}
start_cryod node-a "$PA" node-b "$PB"; DA=$!
start_cryod node-b "$PB" node-a "$PA"; DB=$!
for n in node-a node-b; do until "$CRYO" --socket "$W/$n.sock" node >/dev/null 2>&1; do sleep 0.05; done; done
start_member() {  # name; prints its pid
  setsid "$LOAD" --status "$W/status-$1" --mem-mib "$MIB" --threads 2 </dev/null >/dev/null 2>&1 &
  PIDS+=($!)
  until [ -s "$W/status-$1" ] && grep -q '"main": [1-9]' "$W/status-$1"; do sleep 0.05; done
}
start_member left; LEFT=${PIDS[-1]}
start_member right; RIGHT=${PIDS[-1]}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
skew() { grep -o '"cut_skew": *"*[0-9]*' | grep -o '[0-9]*$'; }
: >"$W/one" ; : >"$W/local"; : >"$W/remote"; : >"$W/skew-local"; : >"$W/skew-remote"
for rep in $(seq "$REPS"); do
  sync
  t0=$(now)
  "$CRYO" --socket "$W/node-a.sock" checkpoint --leave-running --id "one-$rep" "$LEFT" >/dev/null
  t1=$(now); echo "$t1 - $t0" | bc >>"$W/one"
  sync
  t0=$(now)
  "$CRYO" --socket "$W/node-a.sock" -o json checkpoint-job --job bench/pair --id "local-$rep" \
    --leave-running "left=$LEFT" "right=$RIGHT" >"$W/out"
  t1=$(now); echo "$t1 - $t0" | bc >>"$W/local"; skew <"$W/out" >>"$W/skew-local"
  sync
  t0=$(now)
  "$CRYO" --socket "$W/node-a.sock" -o json checkpoint-job --job bench/pair --id "remote-$rep" \
    --leave-running "left=$LEFT" "right=$RIGHT@node-b" >"$W/out"
  t1=$(now); echo "$t1 - $t0" | bc >>"$W/remote"; skew <"$W/out" >>"$W/skew-remote"
done
printf '%-20s %10s %8s %12s\n' ROW "seconds" "ratio" "cut skew ms"
base=$(median <"$W/one")
printf '%-20s %10.3f %8s %12s\n' "one member" "$base" "1.00" "-"
loc=$(median <"$W/local")
printf '%-20s %10.3f %8.2f %12s\n' "job, one node" "$loc" "$(echo "$loc / $base" | bc -l)" "$(median <"$W/skew-local")"
# Restores: both members gone each time (every pid free), then one alone, then the job.
kill_all() {  # the members' trees, wherever they are now
  local pids
  pids=$(for p in "$LEFT" "$RIGHT"; do echo "$p"; pgrep -P "$p" 2>/dev/null || true; done)
  kill -9 $pids 2>/dev/null || true
  for p in $pids; do while [ -e "/proc/$p" ]; do wait "$p" 2>/dev/null || sleep 0.01; done; done
}
: >"$W/r-one"; : >"$W/r-job"
for rep in $(seq "$REPS"); do
  kill_all; sync; echo 3 >/proc/sys/vm/drop_caches
  t0=$(now); "$CRYO" --socket "$W/node-a.sock" restore "one-$rep" >/dev/null; t1=$(now)
  echo "$t1 - $t0" | bc >>"$W/r-one"
  kill_all; sync; echo 3 >/proc/sys/vm/drop_caches
  t0=$(now); "$CRYO" --socket "$W/node-a.sock" restore-job --job bench/pair "local-$rep" >/dev/null
  t1=$(now); echo "$t1 - $t0" | bc >>"$W/r-job"
done
rem=$(median <"$W/remote")
printf '%-20s %10.3f %8.2f %12s\n' "job, two nodes" "$rem" "$(echo "$rem / $base" | bc -l)" "$(median <"$W/skew-remote")"
rb=$(median <"$W/r-one")
rj=$(median <"$W/r-job")
printf '%-20s %10.3f %8s %12s\n' "restore one member" "$rb" "1.00" "-"
printf '%-20s %10.3f %8.2f %12s\n' "restore-job" "$rj" "$(echo "$rj / $rb" | bc -l)" "-"
echo "(2 members of $MIB MiB each, $REPS runs, medians; $(nproc) cores; $(date -u +%F))"
