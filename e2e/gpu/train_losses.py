"""A deterministic PyTorch training loop for the GPU e2e suite.

Trains a small transformer on synthetic data drawn from a seeded generator and appends every
step's loss, as an exact float (float.hex), to --out. Two runs of the same steps give the same
file byte for byte; a run that was checkpointed, killed and restored by cryod in the middle must
too. The last line is "done".

    python3 train_losses.py --steps 300 --out losses.txt [--step-ms 30] [--rate-out rate.txt]

--rate-out: steps per second from step 50 on (after warm-up), for the steady-state overhead.
"""
import argparse
import os
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=300)
p.add_argument("--out", required=True)
p.add_argument("--step-ms", type=float, default=30.0, help="minimum time per step")
p.add_argument("--rate-out", help="write steps/s after warm-up here")
args = p.parse_args()

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
torch.manual_seed(1234)
dev = torch.device("cuda")

d_model, seq, batch, vocab = 256, 64, 32, 1000
model = torch.nn.Sequential(
    torch.nn.Embedding(vocab, d_model),
    torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(d_model, nhead=8, dim_feedforward=1024, dropout=0.1,
                                         batch_first=True),
        num_layers=4),
    torch.nn.Linear(d_model, vocab),
).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
gen = torch.Generator(device=dev)
gen.manual_seed(42)

warm = min(50, max(0, args.steps - 1))
with open(args.out, "a", buffering=1) as out:
    for step in range(args.steps):
        if step == warm:
            torch.cuda.synchronize()
            t_warm = time.monotonic()
        t0 = time.monotonic()
        x = torch.randint(0, vocab, (batch, seq), device=dev, generator=gen)
        y = torch.roll(x, shifts=1, dims=1)  # learnable: predict the previous token
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        out.write(f"{step} {loss.item().hex()}\n")
        left = args.step_ms / 1000.0 - (time.monotonic() - t0)
        if left > 0:
            time.sleep(left)
    out.write("done\n")
if args.rate_out:
    torch.cuda.synchronize()
    with open(args.rate_out, "w") as f:
        f.write("%.3f\n" % ((args.steps - warm) / (time.monotonic() - t_warm)))
