#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""bench/torch_ddp.py -- PyTorch DDP (Gloo backend) training throughput, the peer of
`hooprun --nproc-per-node P hoop-train --bench-steps N`.

Starts P worker processes on this machine (torch.multiprocessing), each with one
intra-op thread, wrapping the MLP 784-512-256-10 (ReLU, nn.Linear init) in
DistributedDataParallel over the Gloo backend on loopback. Every worker trains on its
own shard of Fashion-MNIST with batch B (global batch P x B), SGD momentum. After a
warm-up it times N steps (batch gather, forward, backward with bucketed all-reduce,
optimizer step); rank 0 prints one JSON line with the global samples/s. A benchmark,
not a test.
"""
import argparse
import gzip
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def read_idx(path, ndim):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if raw[0:2] != b"\0\0" or raw[2] != 8 or raw[3] != ndim:
        sys.exit(f"torch_ddp: {path}: not an unsigned-byte IDX file of {ndim} dimensions")
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return dims, raw[4 + 4 * ndim:]


def worker(rank, a, port):
    if a.bind:  # as hooprun --bind core: rank r alone on CPU r (the same hardware for both)
        os.sched_setaffinity(0, {rank % os.cpu_count()})
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=a.nproc)
    torch.manual_seed(a.seed)
    dims, px = read_idx(os.path.join(a.data, "train-images-idx3-ubyte.gz"), 3)
    _, lb = read_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz"), 1)
    n = dims[0]
    x_all = torch.frombuffer(bytearray(px), dtype=torch.uint8).view(n, 784).float() / 255.0
    y_all = torch.frombuffer(bytearray(lb), dtype=torch.uint8).long()
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                          nn.Linear(256, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(a.seed)
    perm = torch.randperm(n, generator=g)[rank::a.nproc]

    def step(i):
        idx = perm[(i * a.batch_size) % (len(perm) - a.batch_size):][:a.batch_size]
        x, y = x_all.index_select(0, idx), y_all.index_select(0, idx)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        return loss

    for i in range(a.warmup):
        step(i)
    dist.barrier()
    t0 = time.perf_counter()
    for i in range(a.steps):
        step(a.warmup + i)
    dist.barrier()
    dt = time.perf_counter() - t0
    if rank == 0:
        sps = a.steps * a.batch_size * a.nproc / dt
        print(json.dumps({"bench": "torch_ddp_gloo", "nproc": a.nproc,
                          "batch_per_worker": a.batch_size, "steps": a.steps,
                          "seconds": round(dt, 4), "samples_per_s": round(sps, 1),
                          "torch": torch.__version__}), flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--port", type=int, default=29611)
    ap.add_argument("--bind", action="store_true", help="bind rank r to CPU r")
    a = ap.parse_args()
    mp.spawn(worker, args=(a, a.port), nprocs=a.nproc, join=True)


if __name__ == "__main__":
    main()
