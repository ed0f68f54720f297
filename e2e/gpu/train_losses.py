"""A deterministic PyTorch training loop for the GPU e2e suite.

Trains a small transformer on synthetic data drawn from a seeded generator and appends every
step's loss, as an exact float (float.hex), to --out. Two runs of the same steps give the same
file byte for byte; a run that was checkpointed, killed and restored by cryod in the middle must
too. The last line is "done".

    python3 train_losses.py --steps 300 --out losses.txt [--step-ms 30] [--rate-out rate.txt]

--rate-out: steps per second from step 50 on (after warm-up), for the steady-state overhead.
"""
import argparse
import time

import torch

import probe_model

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=300)
p.add_argument("--out", required=True)
p.add_argument("--step-ms", type=float, default=30.0, help="minimum time per step")
p.add_argument("--rate-out", help="write steps/s after warm-up here")
args = p.parse_args()

model, opt, gen = probe_model.build()

warm = min(50, max(0, args.steps - 1))
with open(args.out, "a", buffering=1) as out:
    for step in range(args.steps):
        if step == warm:
            torch.cuda.synchronize()
            t_warm = time.monotonic()
        t0 = time.monotonic()
        loss = probe_model.step(model, opt, gen)
        out.write(f"{step} {loss.item().hex()}\n")
        left = args.step_ms / 1000.0 - (time.monotonic() - t0)
        if left > 0:
            time.sleep(left)
    out.write("done\n")
if args.rate_out:
    torch.cuda.synchronize()
    with open(args.rate_out, "w") as f:
        f.write("%.3f\n" % ((args.steps - warm) / (time.monotonic() - t_warm)))
