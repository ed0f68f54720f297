"""Holds a CUDA context of a given shape for the GPU suite's part "driver-floor".

The part asks what the driver's own checkpoint and restore of a context cost, by what the
context holds: a PyTorch context with one tensor ("torch"), or one that trained a model like
the periodic-stall job's, its weights and AdamW state resident ("train"). Once ready it writes
--status (JSON: ready, the caching allocator's reserved bytes, the output's checksum) and then,
every 0.2 s, runs the model forward again, counting these steps and those whose output differed
from the one taken at ready ("bad"): after a checkpoint and restore the steps must go on and none
differ ("steps" as the suite's test program counts them, so that the suite waits on both alike).

    python3 ctx_hold.py --shape train --status s.json [--width 8192 --depth 6 --steps 10]
"""
import argparse
import json
import os
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--shape", choices=["torch", "train"], required=True)
p.add_argument("--status", required=True)
p.add_argument("--width", type=int, default=8192)
p.add_argument("--depth", type=int, default=6)
p.add_argument("--steps", type=int, default=10, help="AdamW steps before holding (train)")
args = p.parse_args()

torch.manual_seed(0)
dev = torch.device("cuda", 0)
if args.shape == "torch":
    model = None
    x = torch.arange(1024, dtype=torch.float32, device=dev)

    def out():
        return (x * 2).sum()
else:
    layers = []
    for _ in range(args.depth):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(64, args.width, device=dev)
    for _ in range(args.steps):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)

    def out():
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            return model(x).float().sum()

want = out().item()
torch.cuda.synchronize()
steps = bad = 0


def status(ready=True):
    tmp = args.status + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"pid": os.getpid(), "ready": ready, "reserved": torch.cuda.memory_reserved(),
                   "want": want, "steps": steps, "bad": bad}, f)
    os.replace(tmp, args.status)


status()
while True:
    time.sleep(0.2)
    got = out().item()
    steps += 1
    if got != want:
        bad += 1
    status()
