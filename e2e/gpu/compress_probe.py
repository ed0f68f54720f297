"""Would compressing the store's GPU files pay? (issue 23: "only if measured to pay on real model
data"). Trains the PyTorch probe of train_losses.py (probe_model.py: the same model and optimizer) for --steps,
then takes what a checkpoint of it holds on the GPU (its weights and AdamW's two moments, fp32,
as they lie in device memory) and compresses those bytes with the fast compressors at hand:
zlib level 1 (Python's own; lz4 and zstd at their fast levels compress fp32 about as much), the
same after a byte shuffle (each byte plane of the floats apart, as blosc does), and zstd or lz4
when their Python modules are installed. Prints one JSON object: per method the ratio (stored /
raw) and the single-core speed, against the store's write speed this compression would have to
beat.

    python3 compress_probe.py [--steps 500] [--out result.json]
"""
import argparse
import json
import time
import zlib

import torch

import probe_model

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=500)
p.add_argument("--out")
args = p.parse_args()

model, opt, gen = probe_model.build()
for _ in range(args.steps):
    probe_model.step(model, opt, gen)
torch.cuda.synchronize()

parts = {"weights": [t.detach() for t in model.parameters()],
         "adam_moments": [v for s in opt.state.values() for k, v in s.items()
                          if torch.is_tensor(v) and v.numel() > 1]}


def raw(tensors):
    return b"".join(t.contiguous().cpu().numpy().tobytes() for t in tensors)


def shuffled(tensors):
    # Byte planes of the fp32 words: sign and exponent bytes together, mantissas together.
    flat = torch.cat([t.contiguous().reshape(-1).cpu() for t in tensors]).view(torch.uint8)
    return flat.reshape(-1, 4).t().contiguous().numpy().tobytes()


methods = {"zlib-1": lambda b: zlib.compress(b, 1)}
try:
    import zstandard
    methods["zstd-1"] = lambda b: zstandard.ZstdCompressor(level=1).compress(b)
except ImportError:
    pass
try:
    import lz4.frame
    methods["lz4"] = lambda b: lz4.frame.compress(b)
except ImportError:
    pass

out = {"steps": args.steps, "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
       "parts": {}}
for name, tensors in parts.items():
    data = {"plain": raw(tensors), "byte-shuffled": shuffled(tensors)}
    res = {"bytes": len(data["plain"])}
    for layout, b in data.items():
        for m, f in methods.items():
            t0 = time.monotonic()
            c = f(b)
            dt = time.monotonic() - t0
            res[f"{m} {layout}"] = {"ratio": round(len(c) / len(b), 4),
                                    "mb_per_s_one_core": round(len(b) / dt / 1e6, 1)}
    out["parts"][name] = res
text = json.dumps(out, indent=1)
print(text)
if args.out:
    open(args.out, "w").write(text + "\n")
