#!/usr/bin/env bash
# Writes a CDI spec (JSON, CDI 0.6.0, kind nvidia.com/gpu) for this machine's NVIDIA GPUs, as
# NVIDIA's container toolkit would generate one, from what the machine has: one device per GPU
# (named by its index and by its UUID, with its /dev/nvidiaN), and for every device the control
# nodes (/dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools), the driver's libraries of this
# driver version and nvidia-smi, mounted read-only at the same paths. The GPU pods (pods.sh,
# GpuPodE2e) get their GPUs by applying this spec's edits to the CRI container config, which is
# what containerd >= 1.7 does with CDI device names; containerd 1.6 (Debian 12's) has no CDI.
#
#   cdi.sh OUT.json
set -euo pipefail
out=${1:?usage: cdi.sh OUT.json}
command -v nvidia-smi >/dev/null || { echo "cdi: no nvidia-smi" >&2; exit 1; }
version=$(cat /sys/module/nvidia/version 2>/dev/null || nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
libdir=
for d in /usr/lib/x86_64-linux-gnu /usr/local/nvidia/lib64 /usr/lib64 /lib/x86_64-linux-gnu; do
  [ -e "$d/libcuda.so.1" ] && { libdir=$d; break; }
done
[ -n "$libdir" ] || { echo "cdi: no libcuda.so.1" >&2; exit 1; }
python3 - "$out" "$version" "$libdir" <<'PY'
import glob, json, os, subprocess, sys
out, version, libdir = sys.argv[1:4]
rows = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,pci.bus_id", "--format=csv,noheader"],
                      check=True, capture_output=True, text=True).stdout.splitlines()
minors = {}
for info in glob.glob("/proc/driver/nvidia/gpus/*/information"):
    fields = dict(l.split(":", 1) for l in open(info) if ":" in l)
    minors[fields["GPU UUID"].strip()] = fields["Device Minor"].strip()
devices = []
for row in rows:
    index, uuid, _ = [f.strip() for f in row.split(",")]
    edits = {"deviceNodes": [{"path": "/dev/nvidia" + minors[uuid]}]}
    devices += [{"name": index, "containerEdits": edits}, {"name": uuid, "containerEdits": edits}]
nodes = [{"path": p} for p in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
         if os.path.exists(p)]
libs = sorted(p for p in glob.glob(os.path.join(libdir, "*.so." + version))
              if os.path.basename(p).startswith(("libcuda", "libnvidia-", "libnvcuvid")))
mounts = [{"hostPath": p, "containerPath": p, "options": ["ro", "nosuid", "nodev", "bind"]}
          for p in libs + ["/usr/bin/nvidia-smi"] if os.path.exists(p)]
spec = {"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu", "devices": devices,
        "containerEdits": {"deviceNodes": nodes, "mounts": mounts}}
with open(out, "w") as f:
    json.dump(spec, f, indent=2)
print("cdi: %d GPU(s), %d driver files (%s) -> %s" % (len(rows), len(mounts), version, out))
PY
