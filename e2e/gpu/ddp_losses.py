"""A deterministic PyTorch DDP training loop for the GPU e2e suite (2 ranks, or --world N, one
per GPU).

Rank 0 appends every step's loss (float.hex) to --out; the last line is "done". The launcher
process and both ranks form one process tree, which cryod checkpoints and restores as one job.
NCCL must not share memory between the processes for the driver to restore them: the suite
runs it with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_CUMEM_ENABLE=0 NCCL_CUMEM_HOST_ENABLE=0
(then NCCL talks over sockets on loopback). On a machine with one GPU, `--backend gloo
--same-gpu` puts both ranks on GPU 0 and reduces through gloo over TCP (NCCL refuses two ranks on
one GPU): the same 2-process CUDA job, without NCCL.

    python3 ddp_losses.py --steps 200 --out losses.txt --port 29555 [--backend gloo --same-gpu]
        [--fsdp] [--world 4] [--groups 2]
    torchrun --standalone --nproc-per-node=2 ddp_losses.py --steps 200 --out losses.txt

With --groups 2 the loss is reduced in a second process group over the same ranks: NCCL then
runs two communicators, each with its own shared buffers, their collectives interleaved.

Under torchrun each rank is its own process, started by torchrun's agent (their parent, which
also holds the store the ranks meet at); --world and --port are then torchrun's to say.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world, args):
    if not launched_by_torchrun():
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(args.port)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    gpu = 0 if args.same_gpu else rank
    torch.cuda.set_device(gpu)
    dist.init_process_group(args.backend, rank=rank, world_size=world)
    loss_group = dist.new_group(list(range(world))) if args.groups > 1 else None
    torch.manual_seed(1234)
    dev = torch.device("cuda", gpu)
    # --width/--depth grow the model (and --adamw its optimizer state) to a real job's size for
    # the periodic-stall part; the defaults are the suite's small model.
    w = args.width
    hidden = []
    for _ in range(args.depth):
        hidden += [torch.nn.Linear(w, w), torch.nn.GELU()]
    model = torch.nn.Sequential(
        torch.nn.Linear(512, w), torch.nn.GELU(), *hidden, torch.nn.Linear(w, 10)).to(dev)
    if args.fsdp:
        # Parameters, gradients and optimizer state sharded over the ranks (all-gather and
        # reduce-scatter instead of DDP's all-reduce).
        from torch.distributed.fsdp import FullyShardedDataParallel
        ddp = FullyShardedDataParallel(model, device_id=gpu, use_orig_params=True)
    else:
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[gpu])
    if args.adamw:
        opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
    else:
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator(device=dev)
    gen.manual_seed(100 + rank)
    out = open(args.out, "a", buffering=1) if rank == 0 else None
    # The wall-clock time each step ended at (rank 0): the job's own view of a checkpoint's stall.
    times = open(args.times_out, "a", buffering=1) if rank == 0 and args.times_out else None
    for step in range(args.steps):
        t0 = time.monotonic()
        x = torch.randn(256, 512, device=dev, generator=gen)
        y = torch.randint(0, 10, (256,), device=dev, generator=gen)
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        # The loss of the whole job, the same on both ranks.
        total = loss.detach().clone()
        dist.all_reduce(total, group=loss_group)
        if out:
            out.write(f"{step} {total.item().hex()}\n")
        if times:
            times.write(f"{step} {time.time():.6f}\n")
        left = args.step_ms / 1000.0 - (time.monotonic() - t0)
        if left > 0:
            time.sleep(left)
    dist.barrier()
    if out:
        out.write("done\n")
        out.close()
    dist.destroy_process_group()


def launched_by_torchrun():
    # torchrun (torch.distributed.run) starts one process per rank and tells each its place, and
    # where its agent's store listens, in the environment.
    return "TORCHELASTIC_RUN_ID" in os.environ and "RANK" in os.environ


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--out", required=True)
    p.add_argument("--port", type=int, default=29555)
    p.add_argument("--step-ms", type=float, default=40.0)
    p.add_argument("--backend", choices=["nccl", "gloo"], default="nccl")
    p.add_argument("--same-gpu", action="store_true", help="both ranks on GPU 0")
    p.add_argument("--fsdp", action="store_true", help="FullyShardedDataParallel instead of DDP")
    p.add_argument("--world", type=int, default=2, help="ranks, one per GPU")
    p.add_argument("--groups", type=int, choices=[1, 2], default=1,
                   help="2: the loss is reduced in a second process group")
    p.add_argument("--width", type=int, default=2048, help="hidden layers' width")
    p.add_argument("--depth", type=int, default=1, help="hidden layers of width x width")
    p.add_argument("--adamw", action="store_true", help="AdamW (two state tensors per parameter)")
    p.add_argument("--times-out", help="rank 0 appends 'STEP UNIX_TIME' after every step here")
    args = p.parse_args()
    if args.fsdp:
        try:
            from torch.distributed.fsdp import FullyShardedDataParallel  # noqa: F401
        except ImportError:
            print("FSDP unavailable in this PyTorch")
            raise SystemExit(77)
    if launched_by_torchrun():
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
    else:
        mp.spawn(worker, args=(args.world, args), nprocs=args.world, join=True)
