#!/usr/bin/env bash
# Builds a checkpoint image from a kubelet checkpoint archive as Kubernetes documents it (buildah:
# from scratch, add the archive at /, annotate, commit), with the annotations `checkpointctl
# build` also sets, and writes it as an OCI archive that `ctr images import` takes.
#
#   checkpoint-image.sh ARCHIVE NAME OUT.tar [TAMPER]
#
# TAMPER: a file of the archive (e.g. checkpoint/pages-1.img) whose first byte is flipped first,
# for tests of damaged images. buildah's storage is private to the run (vfs driver, temp dir).
set -euo pipefail

archive=${1:?usage: checkpoint-image.sh ARCHIVE NAME OUT.tar [TAMPER]}
name=${2:?usage: checkpoint-image.sh ARCHIVE NAME OUT.tar [TAMPER]}
out=${3:?usage: checkpoint-image.sh ARCHIVE NAME OUT.tar [TAMPER]}
tamper=${4:-}
# Without buildah (the GPU test machine), oci_archive.py beside this script writes the same
# image; CRYO_OCI_WRITER=python chooses it where buildah is installed too.
writer=${CRYO_OCI_WRITER:-buildah}
command -v buildah >/dev/null || writer=python
[ "$writer" = buildah ] || command -v python3 >/dev/null ||
  { echo "checkpoint-image: neither buildah (Debian package buildah) nor python3 found" >&2; exit 1; }

work=$(mktemp -d)
b=(buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs)
ctr=
cleanup() {
  [ -z "$ctr" ] || "${b[@]}" rm "$ctr" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

if [ -n "$tamper" ]; then
  mkdir "$work/a"
  tar -C "$work/a" -xf "$archive"
  f="$work/a/$tamper"
  [ -s "$f" ] || { echo "checkpoint-image: $tamper is not in $archive" >&2; exit 1; }
  byte=$(od -An -tu1 -N1 "$f" | tr -d ' ')
  printf "\\$(printf %03o $((byte ^ 255)))" | dd of="$f" bs=1 count=1 conv=notrunc status=none
  # The archive's own names (no "./" prefix), as kubelet's archive has them.
  (cd "$work/a" && tar -cf "$work/archive.tar" -- *)
  archive=$work/archive.tar
fi

config=$(tar -xOf "$archive" config.dump)
field() { printf '%s' "$config" | python3 -c "import json,sys; print(json.load(sys.stdin).get('$1',''))"; }
container=$(field name)
rootfs_image=$(field rootfsImageName)

if [ "$writer" = python ]; then
  rm -f "$out"
  python3 "$(dirname "$0")/oci_archive.py" "$archive" "$name" "$out" \
    "org.criu.checkpoint.container.name=$container" \
    "io.kubernetes.cri-o.annotations.checkpoint.name=$container" \
    "org.criu.checkpoint.rootfsImageName=$rootfs_image"
  exit 0
fi
ctr=$("${b[@]}" from scratch)
"${b[@]}" add "$ctr" "$archive" / >/dev/null
"${b[@]}" config \
  --annotation "org.criu.checkpoint.container.name=$container" \
  --annotation "io.kubernetes.cri-o.annotations.checkpoint.name=$container" \
  --annotation "org.criu.checkpoint.rootfsImageName=$rootfs_image" \
  "$ctr"
"${b[@]}" commit -q "$ctr" "$name" >/dev/null
rm -f "$out"
"${b[@]}" push -q "$name" "oci-archive:$out:$name"
