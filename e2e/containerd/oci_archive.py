"""Writes a one-layer OCI image archive (what `ctr images import` takes) from a tar: the layer
is the tar as it is (its files at the image's root), the manifest carries the annotations.
checkpoint-image.sh uses it where buildah is not installed (the GPU test machine has python3
but no package registry); the image is the one buildah would make from scratch with that tar
added at /, but uncompressed.

    python3 oci_archive.py LAYER.tar NAME OUT.tar [KEY=VALUE ...]
"""
import hashlib
import io
import json
import sys
import tarfile


def digest_of(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    layer_path, name, out = sys.argv[1:4]
    annotations = dict(a.split("=", 1) for a in sys.argv[4:])
    with open(layer_path, "rb") as f:
        layer = f.read()
    layer_digest = digest_of(layer)
    config = json.dumps({
        "architecture": "amd64",
        "os": "linux",
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }).encode()
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": digest_of(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer_digest, "size": len(layer)}],
        "annotations": annotations,
    }).encode()
    index = json.dumps({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "digest": digest_of(manifest), "size": len(manifest),
                       "annotations": {"org.opencontainers.image.ref.name": name}}],
    }).encode()
    with tarfile.open(out, "w") as t:
        def add(path, data):
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add("index.json", index)
        for blob in (layer, config, manifest):
            add("blobs/sha256/" + digest_of(blob)[len("sha256:"):], blob)


if __name__ == "__main__":
    main()
