"""The PyTorch probe's model and training step, shared by train_losses.py (the losses a restore
must reproduce) and compress_probe.py (what its GPU data compresses to): a small transformer
trained with AdamW on synthetic data from a seeded generator, deterministic on one GPU."""
import os

import torch

D_MODEL, SEQ, BATCH, VOCAB = 256, 64, 32, 1000


def build():
    """Deterministic settings, then (model, optimizer, data generator) on the GPU."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(1234)
    dev = torch.device("cuda")
    model = torch.nn.Sequential(
        torch.nn.Embedding(VOCAB, D_MODEL),
        torch.nn.TransformerEncoder(
            torch.nn.TransformerEncoderLayer(D_MODEL, nhead=8, dim_feedforward=1024, dropout=0.1,
                                             batch_first=True),
            num_layers=4),
        torch.nn.Linear(D_MODEL, VOCAB),
    ).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    gen = torch.Generator(device=dev)
    gen.manual_seed(42)
    return model, opt, gen


def step(model, opt, gen):
    """One training step; returns the loss (a GPU tensor)."""
    x = torch.randint(0, VOCAB, (BATCH, SEQ), device=gen.device, generator=gen)
    y = torch.roll(x, shifts=1, dims=1)  # learnable: predict the previous token
    logits = model(x)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss
