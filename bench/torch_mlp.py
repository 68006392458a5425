#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""bench/torch_mlp.py -- PyTorch's training throughput on the MLP hoop-train benchmarks.

The same model (784-512-256-10, ReLU, nn.Linear default init), loss (mean cross-entropy),
optimizer (SGD with momentum) and data (Fashion-MNIST train set, pixels / 255, shuffled
mini-batches) as `hoop-train --model mlp --bench-steps N`. It times N training steps
(batch gather, forward, backward, optimizer step) after a warm-up and prints one JSON
line: {"bench": "torch_mlp", "samples_per_s": ..., ...}. Intra-op threads default to 1
(torch.set_num_threads), as the single-core comparison asks. A benchmark, not a test.
"""
import argparse
import gzip
import json
import os
import sys
import time

import torch


def read_idx(path, ndim):
    """Returns the IDX file's dims and data bytes (gzip or plain), checking the magic."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if raw[0:2] != b"\0\0" or raw[2] != 8 or raw[3] != ndim:
        sys.exit(f"torch_mlp: {path}: not an unsigned-byte IDX file of {ndim} dimensions")
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return dims, raw[4 + 4 * ndim:]


def find(data, base):
    for name in (base + ".gz", base):
        if os.path.exists(os.path.join(data, name)):
            return os.path.join(data, name)
    sys.exit(f"torch_mlp: neither {base}.gz nor {base} in {data}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--loader", choices=["tensor", "dataloader"], default="tensor",
                    help="tensor: index_select batches from one in-memory tensor (the "
                    "tight loop, like hoop-train's); dataloader: torch.utils.data.DataLoader "
                    "over a TensorDataset (per-sample fetch + collate, the textbook loop)")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    dims, px = read_idx(find(a.data, "train-images-idx3-ubyte"), 3)
    _, lb = read_idx(find(a.data, "train-labels-idx1-ubyte"), 1)
    n = dims[0]
    x_all = torch.frombuffer(bytearray(px), dtype=torch.uint8).view(n, dims[1] * dims[2])
    x_all = x_all.float().div_(255.0)
    y_all = torch.frombuffer(bytearray(lb), dtype=torch.uint8).long()

    model = torch.nn.Sequential(
        torch.nn.Linear(784, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    lossf = torch.nn.CrossEntropyLoss()

    def batches():
        if a.loader == "dataloader":
            ds = torch.utils.data.TensorDataset(x_all, y_all)
            while True:
                yield from torch.utils.data.DataLoader(ds, batch_size=a.batch_size,
                                                       shuffle=True, num_workers=0)
        while True:
            perm = torch.randperm(n)
            for i in range(0, n, a.batch_size):
                idx = perm[i:i + a.batch_size]
                yield x_all.index_select(0, idx), y_all.index_select(0, idx)

    it = batches()
    t0 = None
    loss = None
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            t0 = time.perf_counter()
        x, y = next(it)
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
    secs = time.perf_counter() - t0
    print(json.dumps({
        "bench": "torch_mlp", "loader": a.loader, "torch": torch.__version__, "threads": torch.get_num_threads(),
        "batch_size": a.batch_size, "steps": a.steps, "seconds": round(secs, 4),
        "samples_per_s": round(a.steps * a.batch_size / secs, 1),
        "last_loss": round(float(loss), 4)}))


if __name__ == "__main__":
    main()
