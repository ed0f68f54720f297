#!/usr/bin/env bash
# Builds cryo's release artifacts from this checkout and its build, offline:
#
#   scripts/release.sh OUTDIR
#
# OUTDIR/cryo-node-<version>.oci.tar   the node image (OCI archive), built with buildah and named
#                                      docker.io/cryo/cryo-node:<version>: the chart's default
#                                      image (image.repository cryo/cryo-node, tag appVersion) as
#                                      containerd and kubelet spell it
# OUTDIR/cryo-<chart version>.tgz      the Helm chart, packaged as `helm package` does
# OUTDIR/index.yaml                    a Helm repository index for that package
# OUTDIR/kubectl-cryo-<version>-linux-amd64.tar.gz   the kubectl plugin
# OUTDIR/cryo.yaml                     its krew manifest
# OUTDIR/SHA256SUMS                    sha256sum of each artifact above
#
# <version> is project(cryo VERSION) in CMakeLists.txt, which must equal the chart's appVersion.
# Run as root after the project build (scripts/setup.sh, or cmake --build build); nothing is
# compiled here. Needs buildah, dpkg and Debian's python3 with python3-yaml (setup.sh installs
# them). Running it again rebuilds every artifact; with the same checkout and build the chart,
# index, plugin archive and manifests come out byte for byte the same (timestamps are the last
# commit's, or SOURCE_DATE_EPOCH).
#
# The image is not built from deploy/Dockerfile (its FROM debian:12 needs a registry): its tree
# is deploy/image/collect.sh's output from this build plus the files of the host's Debian
# packages the Dockerfile's base and apt-get line give (the Essential set, mawk, ca-certificates,
# iproute2, iptables, nftables, procps and what they depend on), with the Dockerfile's
# ENTRYPOINT. The host must be Debian 12, the release the Dockerfile builds on.
#
# Environment:
#   BUILD_DIR         the CMake build to release (default: build); `cmake --install` copies from
#                     it into a temporary prefix (and writes its install_manifest.txt there)
#   CRIU_PREFIX       where scripts/setup.sh installed CRIU 4.1 (default: /usr/local)
#   RELEASE_BASE_URL  where OUTDIR's files will be served: the prefix of the chart's URL in
#                     index.yaml and of the plugin archive's in cryo.yaml (default: a placeholder
#                     under https://cryo.invalid/, like the chart's home; index.yaml then lists
#                     the package by its bare file name, which Helm resolves against the index)
#   IMAGE_REPOSITORY  the image's name without tag (default: the chart's image.repository, with
#                     the registry docker.io added as container runtimes add it)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:?usage: scripts/release.sh OUTDIR}
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
CRIU_PREFIX=${CRIU_PREFIX:-/usr/local}
PY=/usr/bin/python3   # Debian's, which has python3-yaml
CHART=$ROOT/charts/cryo

say() { printf '[release] %s\n' "$*" >&2; }
die() { printf '[release] error: %s\n' "$*" >&2; exit 1; }

for tool in buildah dpkg-query tar gzip sha256sum "$PY" cmake; do
  command -v "$tool" >/dev/null || die "$tool not found (run scripts/setup.sh)"
done
"$PY" -c 'import yaml' 2>/dev/null || die "python3-yaml missing (run scripts/setup.sh)"
[ "$(id -u)" = 0 ] || die "run as root (buildah's storage, the host's package files)"
[ -f "$BUILD_DIR/cmake_install.cmake" ] || die "no build in $BUILD_DIR (scripts/setup.sh builds it)"

VERSION=$(sed -n 's/^project(cryo VERSION \([0-9][0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")
[ -n "$VERSION" ] || die "cannot read the project version from CMakeLists.txt"
chart_field() { "$PY" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))[sys.argv[2]])' "$CHART/Chart.yaml" "$1"; }
CHART_VERSION=$(chart_field version)
APP_VERSION=$(chart_field appVersion)
[ "$APP_VERSION" = "$VERSION" ] ||
  die "charts/cryo/Chart.yaml appVersion $APP_VERSION differs from the project version $VERSION"
if [ -z "${IMAGE_REPOSITORY:-}" ]; then
  IMAGE_REPOSITORY=$("$PY" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["image"]["repository"])' \
    "$CHART/values.yaml")
  # A name without a registry host is Docker Hub's, as containerd's CRI and kubelet resolve it.
  case "${IMAGE_REPOSITORY%%/*}" in
    *.*|*:*|localhost) ;;
    *) [[ $IMAGE_REPOSITORY == */* ]] || IMAGE_REPOSITORY=library/$IMAGE_REPOSITORY
       IMAGE_REPOSITORY=docker.io/$IMAGE_REPOSITORY ;;
  esac
fi
IMAGE=$IMAGE_REPOSITORY:$VERSION
EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || echo 0)}
BASE_URL=${RELEASE_BASE_URL:-}
PLUGIN_URL_BASE=${BASE_URL:-https://cryo.invalid/releases/v$VERSION}

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cryo-release.XXXXXX")
BUILDAH=(buildah --root "$WORK/storage" --runroot "$WORK/runroot" --storage-driver vfs)
cleanup() {
  # buildah's vfs storage holds no mounts once its containers are gone.
  "${BUILDAH[@]}" rm --all >/dev/null 2>&1 || true
  "${BUILDAH[@]}" rmi --all --force >/dev/null 2>&1 || true
  rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT

# Deterministic tar.gz of FILES relative to DIR: sorted, root-owned, mtime EPOCH, no gzip name.
targz() {
  local dir=$1 out=$2
  shift 2
  tar -C "$dir" --sort=name --mtime="@$EPOCH" --owner=0 --group=0 --numeric-owner \
    --mode=go-w --no-recursion -cf - "$@" | gzip -n -9 >"$out"
}
sha() { sha256sum "$1" | cut -d' ' -f1; }

# --- the project's build, installed and collected as the image holds it ----------------------
stage_build() {
  local prefix=$WORK/prefix
  say "installing $BUILD_DIR into a staging prefix"
  cmake --install "$BUILD_DIR" --prefix "$prefix" >"$WORK/install.log" ||
    { cat "$WORK/install.log" >&2; die "cmake --install $BUILD_DIR failed"; }
  # CRIU is not part of the CMake build: scripts/setup.sh installs it (with its patches).
  [ -x "$CRIU_PREFIX/sbin/criu" ] || die "no CRIU at $CRIU_PREFIX/sbin/criu (scripts/setup.sh builds it)"
  mkdir -p "$prefix/sbin" "$prefix/lib/criu"
  cp -L "$CRIU_PREFIX/sbin/criu" "$prefix/sbin/"
  if compgen -G "$CRIU_PREFIX/lib/criu/*.so" >/dev/null; then
    cp -L "$CRIU_PREFIX"/lib/criu/*.so "$prefix/lib/criu/"
  fi
  bash "$ROOT/deploy/image/collect.sh" "$WORK/collect" "$prefix" 2>&1 | sed 's/^/  /' >&2
}

# --- the image's Debian base, from the host's installed packages -----------------------------
# The packages a debian:12-slim base plus the Dockerfile's apt-get line hold, without apt.
base_packages() {
  dpkg-query -W -f='${Package}\t${Essential}\t${db:Status-Status}\n' |
    awk -F'\t' '$2 == "yes" && $3 == "installed" {print $1}'
  printf '%s\n' mawk ca-certificates iproute2 iptables nftables procps
}

# Prints the closure of the packages on stdin under Pre-Depends and Depends, among those
# installed (the first installed alternative, virtual packages through their providers).
package_closure() {
  local -A installed=() provider=() seen=()
  local pkg arch status provides p
  while IFS=$'\t' read -r pkg arch status provides; do
    [ "$status" = installed ] || continue
    case "$arch" in amd64|all) ;; *) continue ;; esac
    installed[$pkg]=1
    local -a prov=()
    IFS=',' read -ra prov <<<"$provides"
    for p in "${prov[@]}"; do
      p=${p%%(*}; p=${p// /}
      [ -n "$p" ] && [ -z "${provider[$p]:-}" ] && provider[$p]=$pkg
    done
  done < <(dpkg-query -W -f='${Package}\t${Architecture}\t${db:Status-Status}\t${Provides}\n')

  local -a queue=()
  mapfile -t queue
  while [ ${#queue[@]} -gt 0 ]; do
    pkg=${queue[0]}
    queue=("${queue[@]:1}")
    if [ -z "$pkg" ] || [ -n "${seen[$pkg]:-}" ]; then continue; fi
    [ -n "${installed[$pkg]:-}" ] || die "package $pkg is not installed (apt-get install $pkg)"
    seen[$pkg]=1
    echo "$pkg"
    local deps
    deps=$(dpkg-query -W -f='${Pre-Depends}, ${Depends}' "$pkg")
    local -a items=()
    IFS=',' read -ra items <<<"$deps"
    local item alt name chosen
    for item in "${items[@]}"; do
      chosen=
      local -a alts=()
      IFS='|' read -ra alts <<<"$item"
      for alt in "${alts[@]}"; do
        name=${alt%%(*}; name=${name%%:*}; name=${name// /}
        [ -n "$name" ] || continue
        if [ -n "${installed[$name]:-}" ]; then chosen=$name; break; fi
        if [ -n "${provider[$name]:-}" ]; then chosen=${provider[$name]}; break; fi
      done
      if [ -n "$chosen" ]; then
        queue+=("$chosen")
      elif [ -n "${item// /}" ]; then
        die "no installed package satisfies '${item# }' (needed by $pkg)"
      fi
    done
  done
}

base_rootfs() {
  local root=$1 d
  mkdir -p "$root"
  # Debian 12's merged /usr, as on the host.
  for d in bin sbin lib lib32 lib64 libx32; do
    if [ -L "/$d" ]; then
      mkdir -p "$root/usr/$d"
      ln -sfn "usr/$d" "$root/$d"
    fi
  done
  local pkgs
  pkgs=$(base_packages | package_closure | LC_ALL=C sort)
  say "image base: $(echo "$pkgs" | wc -l) Debian packages from the host"
  # Their files, as slim images have them: no manuals, info pages or translations, and of the
  # documentation only the copyright files.
  local list=$WORK/files
  # shellcheck disable=SC2086  # one package name per word
  dpkg-query -L $pkgs | LC_ALL=C sort -u | while IFS= read -r f; do
    case "$f" in
      /usr/share/man/*|/usr/share/info/*|/usr/share/locale/*|/usr/share/lintian/*) continue ;;
      /usr/share/doc/*/copyright) ;;
      /usr/share/doc/*) continue ;;
      /.|/) continue ;;
    esac
    if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\n' "${f#/}"; fi
  done >"$list"
  tar -C / --no-recursion -cf - -T "$list" | tar -C "$root" --keep-directory-symlink -xpf -
  # What maintainer scripts would have made: alternatives (e.g. iptables -> iptables-nft) whose
  # chosen file is in the image, the account databases, dpkg's record of the packages.
  local alt name link value
  for alt in /var/lib/dpkg/alternatives/*; do
    # The first stanza of --query: the master link, then each slave's name and link.
    while read -r name link; do
      value=$(readlink "/etc/alternatives/$name" 2>/dev/null) || continue
      [ -e "$root$value" ] || continue
      mkdir -p "$root/etc/alternatives" "$root$(dirname "$link")"
      ln -sfn "$value" "$root/etc/alternatives/$name"
      ln -sfn "/etc/alternatives/$name" "$root$link"
    done < <(update-alternatives --query "$(basename "$alt")" 2>/dev/null | awk '
      NF == 0 { exit }
      $1 == "Name:" { name = $2 }
      $1 == "Link:" { print name, $2 }
      /^ / { print $1, $2 }')
  done
  install -m 0644 /usr/share/base-passwd/passwd.master "$root/etc/passwd"
  install -m 0644 /usr/share/base-passwd/group.master "$root/etc/group"
  printf 'passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
  mkdir -p "$root/var/lib/dpkg" "$root/tmp" "$root/root" "$root/proc" "$root/sys" "$root/dev" "$root/run"
  chmod 1777 "$root/tmp"
  # shellcheck disable=SC2086
  dpkg-query -s $pkgs >"$root/var/lib/dpkg/status"
}

build_image() {
  local archive=$OUT/cryo-node-$VERSION.oci.tar
  stage_build
  local ctr mnt
  ctr=$("${BUILDAH[@]}" from --quiet scratch)
  mnt=$("${BUILDAH[@]}" mount "$ctr")
  base_rootfs "$mnt"
  # The project's tree over the base (deploy/Dockerfile's COPY --from=build /out/ /).
  tar -C "$WORK/collect" -cf - . | tar -C "$mnt" --keep-directory-symlink -xpf -
  ldconfig -r "$mnt"
  "${BUILDAH[@]}" umount "$ctr" >/dev/null
  "${BUILDAH[@]}" config --entrypoint '["/usr/local/bin/cryod"]' \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --os linux --arch amd64 \
    --label org.opencontainers.image.title=cryo-node \
    --label org.opencontainers.image.version="$VERSION" \
    --label org.opencontainers.image.revision="$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)" \
    --label org.opencontainers.image.source=https://cryo.invalid/cryo.git \
    "$ctr"
  "${BUILDAH[@]}" commit --quiet --format oci --timestamp "$EPOCH" --rm "$ctr" "$IMAGE" >/dev/null
  # The Dockerfile's checks, in a container of the image (not in the image's own container:
  # buildah run leaves the files it mounts over, /etc/hosts and the like, behind in it).
  ctr=$("${BUILDAH[@]}" from --quiet "$IMAGE")
  local run=("${BUILDAH[@]}" run --isolation chroot "$ctr" --)
  "${run[@]}" criu --version >/dev/null || die "criu does not run in the image"
  "${run[@]}" cryod --help >/dev/null || die "cryod does not run in the image"
  "${run[@]}" cryo-uninstall --help >/dev/null || die "cryo-uninstall does not run in the image"
  "${run[@]}" /opt/cryo/shim-bundle/bin/cryo-cri-shim --help >/dev/null ||
    die "the shim bundle does not run in the image"
  "${run[@]}" iptables --version >/dev/null || die "iptables does not run in the image"
  "${BUILDAH[@]}" rm "$ctr" >/dev/null
  rm -f "$archive.tmp"
  "${BUILDAH[@]}" push --quiet --format oci "$IMAGE" "oci-archive:$archive.tmp:$IMAGE"
  mv "$archive.tmp" "$archive"
  say "image $IMAGE: $(basename "$archive") ($(du -h "$archive" | cut -f1))"
}

# --- the chart, as helm package and helm repo index make them --------------------------------
package_chart() {
  local tgz=$OUT/cryo-$CHART_VERSION.tgz
  # The chart's files less what its .helmignore (and Helm's own default, templates/.*) names.
  "$PY" - "$CHART" >"$WORK/chart-files" <<'PY'
import fnmatch, os, sys
chart = sys.argv[1]
rules = ["templates/.?*"]
try:
    with open(os.path.join(chart, ".helmignore")) as f:
        rules += [l.strip() for l in f if l.strip() and not l.lstrip().startswith("#")]
except FileNotFoundError:
    pass

def match(rule, path, is_dir):
    # Helm's rules: a trailing / matches directories only; a rule without / matches a base name;
    # a leading ! negates; * and ? do not cross /.
    if rule.endswith("/"):
        if not is_dir:
            return False
        rule = rule.rstrip("/")
    rule = rule.lstrip("/")
    def fm(name, pat):
        return fnmatch.fnmatchcase(name, pat) and name.count("/") == pat.count("/")
    if "/" not in rule:
        return fm(os.path.basename(path), rule)
    return fm(path, rule)

def ignored(path, is_dir):
    out = False
    for rule in rules:
        neg = rule.startswith("!")
        if match(rule[1:] if neg else rule, path, is_dir):
            out = not neg
    return out

for top, dirs, files in os.walk(chart):
    rel = os.path.relpath(top, chart)
    rel = "" if rel == "." else rel + "/"
    dirs[:] = sorted(d for d in dirs if not ignored(rel + d, True))
    for f in sorted(files):
        if not ignored(rel + f, False):
            print("cryo/" + rel + f)
PY
  local files=()
  mapfile -t files <"$WORK/chart-files"
  grep -qx 'cryo/Chart.yaml' "$WORK/chart-files" || die "the chart's .helmignore drops Chart.yaml"
  targz "$(dirname "$CHART")" "$tgz.tmp" "${files[@]}"
  mv "$tgz.tmp" "$tgz"
  local url
  url=$(basename "$tgz")
  [ -z "$BASE_URL" ] || url=${BASE_URL%/}/$url
  "$PY" - "$CHART/Chart.yaml" "$(sha "$tgz")" "$url" "$EPOCH" >"$OUT/index.yaml.tmp" <<'PY'
import datetime, sys, yaml
chart_yaml, digest, url, epoch = sys.argv[1:]
meta = yaml.safe_load(open(chart_yaml))
when = datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
entry = dict(meta, created=when, digest=digest, urls=[url])
index = {"apiVersion": "v1", "entries": {meta["name"]: [entry]}, "generated": when}
yaml.safe_dump(index, sys.stdout, sort_keys=True, default_flow_style=False, width=100)
PY
  mv "$OUT/index.yaml.tmp" "$OUT/index.yaml"
  say "chart $(basename "$tgz") (${#files[@]} files) and index.yaml"
}

# --- the kubectl plugin and its krew manifest -------------------------------------------------
package_plugin() {
  local name=kubectl-cryo-$VERSION-linux-amd64.tar.gz
  local dir=$WORK/plugin bin=$WORK/collect/usr/local/bin/kubectl-cryo
  [ -x "$bin" ] || die "no kubectl-cryo in the build (it is built with the project)"
  mkdir -p "$dir"
  install -m 0755 "$bin" "$dir/kubectl-cryo"
  install -m 0644 "$ROOT/docs/kubectl.md" "$dir/README.md"
  local extra=()
  if [ -f "$ROOT/LICENSE" ]; then install -m 0644 "$ROOT/LICENSE" "$dir/LICENSE"; extra=(LICENSE); fi
  targz "$dir" "$OUT/$name.tmp" kubectl-cryo README.md "${extra[@]}"
  mv "$OUT/$name.tmp" "$OUT/$name"
  local krew_files="      - from: kubectl-cryo
        to: .
      - from: README.md
        to: ."
  [ ${#extra[@]} -eq 0 ] || krew_files+="
      - from: LICENSE
        to: ."
  cat >"$OUT/cryo.yaml" <<YAML
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: cryo
spec:
  version: v$VERSION
  homepage: https://cryo.invalid/
  shortDescription: Checkpoint and restore pods' running jobs with cryo
  description: |
    Checkpoints the containers of a running pod (CPU and GPU state) through the cryo daemon
    on its node, lists and inspects the checkpoints in the cluster's store, and restores one
    on the same node or another. Needs cryo installed in the cluster (the cryo Helm chart).
  caveats: |
    The cluster must run cryo (helm install cryo ...); see README.md in this archive.
  platforms:
    - selector:
        matchLabels:
          os: linux
          arch: amd64
      uri: ${PLUGIN_URL_BASE%/}/$name
      sha256: $(sha "$OUT/$name")
      bin: kubectl-cryo
      files:
$krew_files
YAML
  say "plugin $name and its krew manifest cryo.yaml"
}

build_image
package_chart
package_plugin
artifacts=("cryo-node-$VERSION.oci.tar" "cryo-$CHART_VERSION.tgz" index.yaml
  "kubectl-cryo-$VERSION-linux-amd64.tar.gz" cryo.yaml)
(cd "$OUT" && sha256sum "${artifacts[@]}" >SHA256SUMS.tmp && mv SHA256SUMS.tmp SHA256SUMS)
say "done: $OUT"
sed 's/^/  /' "$OUT/SHA256SUMS" >&2
