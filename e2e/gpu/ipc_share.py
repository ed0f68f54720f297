"""A CUDA tensor shared between two processes the way PyTorch shares them, for the GPU e2e suite:
sent through a torch.multiprocessing queue, which passes a legacy CUDA IPC handle
(cudaIpcGetMemHandle; the receiver opens it with cudaIpcOpenMemHandle, and waits on an IPC event
the sender recorded).

The parent allocates 8 MiB of zeros on GPU 0 and sends the tensor to a child. Each step it tells
the child (over a pipe) to add 1 to every element in place on the GPU; the child does, syncs,
and answers; the parent then reads the tensor and checks that every element equals the step.
It appends "STEP ok" to --out per step (or "STEP bad VALUE" and exits 1), and "done" at the end.
So the counts go on from where they were after a checkpoint and restore only if both processes
still map the same memory.

    python3 ipc_share.py --steps 300 --out counts.txt
"""
import argparse
import sys
import time

import torch
import torch.multiprocessing as mp


def child(q, conn):
    t = q.get()
    while True:
        msg = conn.recv()
        if msg is None:
            return
        t.add_(1)
        torch.cuda.synchronize()
        conn.send(msg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--out", required=True)
    ap.add_argument("--interval", type=float, default=0.02)
    args = ap.parse_args()
    mp.set_start_method("spawn")
    torch.cuda.set_device(0)
    t = torch.zeros(1 << 20, dtype=torch.float64, device="cuda")
    q = mp.Queue()
    mine, theirs = mp.Pipe()
    p = mp.Process(target=child, args=(q, theirs))
    p.start()
    q.put(t)
    out = open(args.out, "a", buffering=1)
    for step in range(1, args.steps + 1):
        mine.send(step)
        if mine.recv() != step:
            out.write("%d bad answer\n" % step)
            return 1
        lo, hi = t.min().item(), t.max().item()
        if lo != step or hi != step:
            out.write("%d bad %r %r\n" % (step, lo, hi))
            return 1
        out.write("%d ok\n" % step)
        time.sleep(args.interval)
    mine.send(None)
    p.join()
    out.write("done\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
