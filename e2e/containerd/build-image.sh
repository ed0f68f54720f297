#!/usr/bin/env bash
# Builds a single-layer OCI image archive from the host's static busybox (no registry needed).
#
#   build-image.sh OUT.tar NAME [CMD...]
#
# NAME is the image reference ctr import registers (e.g. docker.io/cryo/busybox:e2e); CMD is
# the image's default command (default: sh). The archive is reproducible: same busybox, same
# bytes.
set -euo pipefail

out=${1:?usage: build-image.sh OUT.tar NAME [CMD...]}
name=${2:?usage: build-image.sh OUT.tar NAME [CMD...]}
shift 2
cmd=("$@")
[ ${#cmd[@]} -gt 0 ] || cmd=(sh)
busybox=${BUSYBOX:-/bin/busybox}

[ -x "$busybox" ] || { echo "build-image: $busybox not found (Debian package busybox-static)" >&2; exit 1; }
# A dynamically linked busybox would need the host's libc inside the image.
if file -L "$busybox" 2>/dev/null | grep -q 'dynamically linked'; then
  echo "build-image: $busybox is not static (install busybox-static)" >&2; exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs
mkdir -p "$rootfs"/{bin,etc,proc,sys,dev,tmp,var/run,root}
chmod 1777 "$rootfs/tmp"
install -m 0755 "$busybox" "$rootfs/bin/busybox"
for applet in $("$busybox" --list); do
  [ "$applet" = busybox ] || ln -s busybox "$rootfs/bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$rootfs/etc/group"

blobs=$work/layout/blobs/sha256
mkdir -p "$blobs"
layer=$work/layer.tar
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$rootfs" -cf "$layer" .
layer_digest=$(sha256sum "$layer" | cut -d' ' -f1)
layer_size=$(stat -c %s "$layer")
mv "$layer" "$blobs/$layer_digest"

json_array() {
  local first=1 s='['
  for a in "$@"; do
    a=${a//\\/\\\\}
    a=${a//\"/\\\"}
    if [ $first = 1 ]; then s+="\"$a\""; first=0; else s+=",\"$a\""; fi
  done
  printf '%s]' "$s"
}

config=$work/config.json
printf '{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"Cmd":%s,"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created_by":"cryo e2e build-image.sh"}]}' \
  "$(json_array "${cmd[@]}")" "$layer_digest" >"$config"
config_digest=$(sha256sum "$config" | cut -d' ' -f1)
config_size=$(stat -c %s "$config")
mv "$config" "$blobs/$config_digest"

manifest=$work/manifest.json
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
  "$config_digest" "$config_size" "$layer_digest" "$layer_size" >"$manifest"
manifest_digest=$(sha256sum "$manifest" | cut -d' ' -f1)
manifest_size=$(stat -c %s "$manifest")
mv "$manifest" "$blobs/$manifest_digest"

printf '{"imageLayoutVersion":"1.0.0"}' >"$work/layout/oci-layout"
printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
  "$manifest_digest" "$manifest_size" "$name" "${name##*:}" >"$work/layout/index.json"

tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/layout" -cf "$out" .
