#!/usr/bin/env bash
# Tests deploy/host/install.sh against a fake host root in a temp dir: first install, a rerun that
# changes nothing, an upgrade (new release, atomic switch, restart), settings-only changes, old
# releases pruned, and the systemctl calls it makes with MANAGE_SERVICE=true (recorded by a fake
# nsenter). Prints "N passed, 0 failed" and exits non-zero on the first failure.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
passed=0
ok() { passed=$((passed + 1)); echo "ok   $*"; }
no() { echo "FAIL $*" >&2; echo "$passed passed, 1 failed"; exit 1; }

mkbundle() {  # mkbundle VERSION
  rm -rf "$T/bundle"
  mkdir -p "$T/bundle/bin" "$T/bundle/libexec" "$T/bundle/lib"
  printf '#!/bin/sh\necho shim %s\n' "$1" >"$T/bundle/bin/cryo-cri-shim"
  chmod +x "$T/bundle/bin/cryo-cri-shim"
  echo "$1" >"$T/bundle/VERSION"
}
mkbundle v1
printf '#!/bin/sh\nexit 0\n' >"$T/cryo-init"; chmod +x "$T/cryo-init"
printf 'not really an ELF' >"$T/libcryo_gpu_fastpath.so"
echo 'CRYO_SHIM_ARGS=--listen=/run/cryo/cri-shim.sock' >"$T/shim.env"
mkdir -p "$T/host/var/lib/cryo"
chmod 0755 "$T/host/var/lib/cryo"
# Fake nsenter: records the command; "is-active" answers from a state file.
cat >"$T/fake-nsenter" <<FAKE
#!/bin/sh
echo "\$*" >>"$T/calls"
case "\$*" in
  *is-active*) [ -f "$T/active" ] ;;
  *start*|*restart*) touch "$T/active" ;;
esac
FAKE
chmod +x "$T/fake-nsenter"

run() {
  env HOST_ROOT="$T/host" SHIM_PREFIX=/opt/cryo INIT_PATH=/usr/local/lib/cryo/cryo-init \
    SYSTEMD_DIR=/etc/systemd/system STATE_DIR=/var/lib/cryo SHIM_ENV_FILE="$T/shim.env" \
    BUNDLE="$T/bundle" CRYO_INIT_SRC="$T/cryo-init" UNIT_SRC="$HERE/cryo-cri-shim.service" \
    FASTPATH_SRC="$T/libcryo_gpu_fastpath.so" \
    NSENTER="$T/fake-nsenter" KEEP_RELEASES=2 "$@" bash "$HERE/install.sh" >"$T/out" 2>&1 ||
    { cat "$T/out" >&2; return 1; }
}

run MANAGE_SERVICE=false || no "first install failed"
[ "$(readlink "$T/host/opt/cryo/current")" = releases/v1 ] || no "current does not point to v1"
[ "$("$T/host/opt/cryo/current/bin/cryo-cri-shim")" = "shim v1" ] || no "installed shim does not run"
[ -x "$T/host/usr/local/lib/cryo/cryo-init" ] || no "cryo-init not installed executable"
cmp -s "$T/libcryo_gpu_fastpath.so" "$T/host/usr/local/lib/cryo/libcryo_gpu_fastpath.so" &&
  [ "$(stat -c %a "$T/host/usr/local/lib/cryo/libcryo_gpu_fastpath.so")" = 644 ] ||
  no "the fast-path library is not installed beside cryo-init (0644)"
grep -q '^ExecStart=/opt/cryo/current/bin/cryo-cri-shim \$CRYO_SHIM_ARGS$' \
  "$T/host/etc/systemd/system/cryo-cri-shim.service" || no "unit ExecStart wrong"
cmp -s "$T/shim.env" "$T/host/etc/cryo/cri-shim.env" || no "env file not installed"
[ "$(stat -c %a "$T/host/var/lib/cryo")" = 700 ] || no "state dir not 0700"
[ ! -e "$T/calls" ] || no "MANAGE_SERVICE=false ran systemctl"
ok "first install: release, current link, cryo-init, fast-path library, unit, env file, state dir 0700, no systemctl"

run MANAGE_SERVICE=true || no "managed install failed"
grep -q 'systemctl daemon-reload' "$T/calls" && grep -q 'systemctl enable cryo-cri-shim.service' "$T/calls" &&
  grep -q 'systemctl start cryo-cri-shim.service' "$T/calls" || no "managed install: calls were $(cat "$T/calls")"
! grep -q restart "$T/calls" || no "a fresh start was a restart"
ok "managed: daemon-reload, enable, start"

: >"$T/calls"
run MANAGE_SERVICE=true || no "rerun failed"
! grep -q -e restart -e 'systemctl start' "$T/calls" || no "rerun without changes restarted the shim"
grep -q 'installed' "$T/out" && no "rerun reinstalled something: $(cat "$T/out")"
ok "rerun with nothing changed: no file replaced, no restart"

: >"$T/calls"
echo 'CRYO_SHIM_ARGS=--listen=/run/cryo/cri-shim.sock --log-level=debug' >"$T/shim.env"
run MANAGE_SERVICE=true || no "settings change failed"
grep -q 'systemctl restart cryo-cri-shim.service' "$T/calls" || no "new settings did not restart the shim"
ok "new settings: env file replaced, shim restarted"

for v in v2 v3 v4; do
  mkbundle $v
  : >"$T/calls"
  run MANAGE_SERVICE=true || no "upgrade to $v failed"
  grep -q 'systemctl restart' "$T/calls" || no "upgrade to $v did not restart"
done
[ "$(readlink "$T/host/opt/cryo/current")" = releases/v4 ] || no "current does not point to v4"
ls "$T/host/opt/cryo/releases" >"$T/rels"
grep -qx v4 "$T/rels" && grep -qx v3 "$T/rels" && ! grep -qx v1 "$T/rels" || no "pruning kept: $(tr '\n' ' ' <"$T/rels")"
ok "upgrades: current switched to v4, restarted each time, oldest releases pruned"

echo 'bad version!' >"$T/bundle/VERSION"
if run MANAGE_SERVICE=false 2>/dev/null; then no "a bad bundle VERSION was accepted"; fi
grep -q "bad bundle VERSION" "$T/out" || no "wrong error for a bad VERSION: $(cat "$T/out")"
ok "refuses a bundle VERSION that is not a safe path component"

echo "$passed passed, 0 failed"
