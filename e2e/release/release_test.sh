#!/usr/bin/env bash
# e2e for scripts/release.sh: builds the release artifacts from the current build into a temp
# dir, checks them against each other and against the repository, then imports the node image
# into a private containerd (e2e/containerd/node.sh) and runs containers from it.
#
#   e2e/release/release_test.sh        (ctest e2e.release; BUILD_DIR names the build, default build)
#
# Exit 0: passed; 77: skipped (not root, or buildah, containerd or CRIU missing), with the
# reason on stderr; anything else: failed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$here/../.." && pwd)
NODE=$ROOT/e2e/containerd/node.sh
PY=/usr/bin/python3
CTR=${CTR:-ctr}
export BUILD_DIR=${BUILD_DIR:-$ROOT/build}

say() { printf '[release-e2e] %s\n' "$*" >&2; }
skip() { printf '[release-e2e] SKIPPED: %s\n' "$*" >&2; exit 77; }
fail() { printf '[release-e2e] FAILED: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || skip "needs root (buildah, containerd)"
for tool in buildah containerd "$CTR" runc; do
  command -v "$tool" >/dev/null || skip "$tool not installed (scripts/setup.sh installs it)"
done
[ -x "${CRIU_PREFIX:-/usr/local}/sbin/criu" ] || skip "no CRIU under ${CRIU_PREFIX:-/usr/local} (scripts/setup.sh builds it)"

OUT=$(mktemp -d /tmp/cryo-release-e2e.XXXXXX)
# node.sh's sweep (ctest e2e.containerd.sweep) finds a node left by a crashed run by this name.
WORK=$(mktemp -d /tmp/cryo-e2e-containerd.release.XXXXXX)
export CRYO_E2E_OWNER_PID=$$
cleanup() {
  bash "$NODE" clean "$WORK" >/dev/null 2>&1 || say "could not clean $WORK"
  rm -rf "$OUT" "$OUT.log"
}
trap cleanup EXIT

field() {  # field FILE PYTHON-EXPRESSION-OF-d: prints it, d being the YAML or JSON document
  "$PY" -c 'import sys, yaml; d = yaml.safe_load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}
VERSION=$(sed -n 's/^project(cryo VERSION \([0-9][0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")
CHART_VERSION=$(field "$ROOT/charts/cryo/Chart.yaml" 'd["version"]')

# --- build, twice: the second run must succeed over the first and agree with it ----------------
start=$SECONDS
bash "$ROOT/scripts/release.sh" "$OUT" 2>"$OUT.log" || { cat "$OUT.log" >&2; rm -f "$OUT.log"; fail "release.sh"; }
say "release.sh took $((SECONDS - start)) s"
cp "$OUT/SHA256SUMS" "$WORK/sums.first"
bash "$ROOT/scripts/release.sh" "$OUT" 2>"$OUT.log" || { cat "$OUT.log" >&2; rm -f "$OUT.log"; fail "release.sh, run again"; }
rm -f "$OUT.log"
# The image archive carries buildah's own timestamps; everything else is byte for byte the same.
diff <(grep -v '\.oci\.tar$' "$WORK/sums.first") <(grep -v '\.oci\.tar$' "$OUT/SHA256SUMS") >&2 ||
  fail "a second run made different chart or plugin artifacts"

cd "$OUT"
image_archive=cryo-node-$VERSION.oci.tar
chart_tgz=cryo-$CHART_VERSION.tgz
plugin_tgz=kubectl-cryo-$VERSION-linux-amd64.tar.gz
expected=$(printf '%s\n' "$image_archive" "$chart_tgz" index.yaml "$plugin_tgz" cryo.yaml | sort)
[ "$(cut -d' ' -f3 SHA256SUMS | sort)" = "$expected" ] ||
  fail "SHA256SUMS lists $(cut -d' ' -f3 SHA256SUMS | tr '\n' ' '), not $(echo "$expected" | tr '\n' ' ')"
sha256sum --quiet -c SHA256SUMS || fail "SHA256SUMS does not match the artifacts"
[ "$(find . -mindepth 1 -printf '%P\n' | sort)" = "$(printf '%s\n' "$expected" SHA256SUMS | sort)" ] ||
  fail "unexpected files in the output: $(find . -mindepth 1 -printf '%P ')"
say "SHA256SUMS covers the five artifacts and matches them"

# --- the chart package and its index ------------------------------------------------------------
sha() { sha256sum "$1" | cut -d' ' -f1; }
"$PY" - index.yaml "$chart_tgz" "$(sha "$chart_tgz")" "$ROOT/charts/cryo/Chart.yaml" <<'PY' || fail "index.yaml"
import re, sys, yaml
index, tgz, digest, chart_yaml = sys.argv[1:]
d = yaml.safe_load(open(index))
chart = yaml.safe_load(open(chart_yaml))
assert d["apiVersion"] == "v1", d["apiVersion"]
[e] = d["entries"]["cryo"]
assert e["digest"] == digest, f"digest {e['digest']} is not the sha256 of {tgz}, {digest}"
for k in ("name", "version", "appVersion", "description", "apiVersion", "kubeVersion", "type"):
    assert e[k] == chart[k], f"{k}: {e[k]!r}, Chart.yaml says {chart[k]!r}"
assert e["urls"] == [tgz], e["urls"]
for when in (e["created"], d["generated"]):
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", when), when
PY
mkdir "$WORK/chart"
tar -xzf "$chart_tgz" -C "$WORK/chart"
[ "$(ls -A "$WORK/chart")" = cryo ] || fail "$chart_tgz's top directory is not cryo/"
# The package holds the chart's files that git does not ignore, unchanged (its .helmignore
# names none of them).
if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
  diff <(git -C "$ROOT/charts" ls-files --cached --others --exclude-standard cryo | sort) <(cd "$WORK/chart" && find cryo -type f | sort) >&2 ||
    fail "$chart_tgz does not hold exactly the chart's files"
fi
diff -r "$WORK/chart/cryo" "$ROOT/charts/cryo" -x '*~' >&2 || fail "$chart_tgz differs from charts/cryo"
say "$chart_tgz holds charts/cryo under cryo/; index.yaml names it with its digest"

# --- the kubectl plugin and its krew manifest -------------------------------------------------
"$PY" - cryo.yaml "$plugin_tgz" "$(sha "$plugin_tgz")" "$VERSION" >"$WORK/krew-files" <<'PY' || fail "cryo.yaml"
import sys, yaml
manifest, tgz, digest, version = sys.argv[1:]
d = yaml.safe_load(open(manifest))
assert d["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2", d["apiVersion"]
assert (d["kind"], d["metadata"]["name"]) == ("Plugin", "cryo"), d
s = d["spec"]
assert s["version"] == "v" + version, s["version"]
assert s["homepage"] and s["shortDescription"] and s["description"], s
[p] = s["platforms"]
assert p["selector"] == {"matchLabels": {"os": "linux", "arch": "amd64"}}, p["selector"]
assert p["sha256"] == digest, f"sha256 {p['sha256']} is not that of {tgz}, {digest}"
assert p["uri"].endswith("/" + tgz), p["uri"]
assert p["bin"] == "kubectl-cryo", p["bin"]
for f in p["files"]:
    print(f["from"])
PY
mkdir "$WORK/plugin"
tar -xzf "$plugin_tgz" -C "$WORK/plugin"
while read -r f; do
  [ -e "$WORK/plugin/$f" ] || fail "cryo.yaml names $f, which $plugin_tgz lacks"
done <"$WORK/krew-files"
[ -x "$WORK/plugin/kubectl-cryo" ] || fail "$plugin_tgz has no executable kubectl-cryo"
file -L "$WORK/plugin/kubectl-cryo" | grep -q 'statically linked' || fail "kubectl-cryo is not static"
"$WORK/plugin/kubectl-cryo" version 2>&1 | grep -qx "kubectl cryo $VERSION" || fail "kubectl-cryo version"
say "$plugin_tgz holds a static kubectl-cryo $VERSION; cryo.yaml names it with its sha256"

# --- the node image: its name and configuration, then containers from it in containerd --------
image=$("$PY" - "$image_archive" "$ROOT/charts/cryo/values.yaml" "$VERSION" <<'PY'
import json, sys, tarfile, yaml
archive, values, version = sys.argv[1:]
with tarfile.open(archive) as t:
    blob = lambda digest: json.load(t.extractfile("blobs/sha256/" + digest.split(":")[1]))
    index = json.load(t.extractfile("index.json"))
    [desc] = index["manifests"]
    config = blob(blob(desc["digest"])["config"]["digest"])
name = desc["annotations"]["org.opencontainers.image.ref.name"]
repo = yaml.safe_load(open(values))["image"]["repository"]
# The chart's default, image.repository at the chart's appVersion, as kubelet resolves it.
want = "docker.io/" + repo + ":" + version
assert name == want, f"the archive names {name}, the chart pulls {want}"
assert config["config"]["Entrypoint"] == ["/usr/local/bin/cryod"], config["config"]
assert (config["os"], config["architecture"]) == ("linux", "amd64"), config
assert config["config"]["Labels"]["org.opencontainers.image.version"] == version
print(name)
PY
) || fail "the image archive"
say "the archive's image is $image, the chart's default, with cryod as its entrypoint"

bash "$NODE" start "$WORK" release 2>"$WORK/node.log" || { cat "$WORK/node.log" >&2; fail "starting containerd"; }
ctr_() { "$CTR" --address "$WORK/release/containerd.sock" -n k8s.io "$@"; }
# k8s.io: the namespace of containerd's CRI, where kubelet would find the image.
ctr_ images import "$image_archive" >/dev/null || fail "ctr images import $image_archive"
# The list read whole before it is searched: grep -q leaving early would end ctr with SIGPIPE.
listed=$(ctr_ images ls -q) || fail "ctr images ls"
grep -qx "$image" <<<"$listed" || fail "containerd does not list $image after the import (it lists: ${listed:-nothing})"
n=0
run_in_image() {  # run_in_image ARGS...: runs ARGS in a fresh container of the image, prints its output
  n=$((n + 1))
  ctr_ run --rm --cgroup "/cryo-e2e/$(basename "$WORK")/release/c$n" "$image" "release-e2e-$n" "$@" 2>&1
}
out=$(run_in_image cryo version) || fail "cryo version in the image: $out"
[ "$out" = "cryo $VERSION" ] || fail "cryo version in the image said: $out"
out=$(run_in_image criu --version) || fail "criu --version in the image: $out"
grep -q '^Version: 4\.' <<<"$out" || fail "criu --version in the image said: $out"
# Every program and library of the project finds its libraries; the tools CRIU and the
# installer run are there; the shim bundle runs with its own glibc.
# shellcheck disable=SC2016  # run by the image's sh
out=$(run_in_image sh -ec '
  for f in /usr/local/bin/* /usr/local/sbin/criu /usr/local/lib/cryo/gpu/*.so /usr/local/lib/criu/*.so; do
    if ldd "$f" 2>&1 | grep "not found"; then echo "MISSING in $f"; fi
  done
  cryod --help | head -1
  cryo-uninstall --help | head -1
  /opt/cryo/shim-bundle/bin/cryo-cri-shim --help | head -1
  iptables --version; nft --version; ip -V; ps --version | head -1; nsenter --version
  test -x /opt/cryo/host/install.sh && echo installer') || fail "checks in the image: $out"
printf '%s\n' "$out" | sed 's/^/  /' >&2
! grep -q MISSING <<<"$out" || fail "libraries missing in the image"
for want in '^usage: cryod' '^usage: cryo-uninstall' '^usage: cryo-cri-shim' '^iptables v' '^nftables v' '^ip utility' \
  '^ps from procps' '^nsenter from util-linux' '^installer$'; do
  grep -q "$want" <<<"$out" || fail "nothing matching '$want' from the image"
done
say "PASSED: containers from $image run cryo $VERSION, CRIU 4, the shim bundle and the node tools"
