#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""bench/torch_gpu.py -- PyTorch's training throughput on the GPU for hoop-train's models.

The MLP (784-512-256-10, ReLU) or the CNN (conv 3x3 32, ReLU, max-pool 2, conv 3x3 64,
ReLU, max-pool 2, linear 128, ReLU, linear 10), mean cross-entropy, SGD with momentum
0.9: the same step as `hoop-train --device cuda --bench-steps N`, eager (no
torch.compile, no CUDA graph), with the batch already on the device (random pixels and
labels: the step's cost does not depend on the values). It times N steps after a warm-up
and prints one JSON line {"bench": "torch_gpu", "samples_per_s": ...}. The loss is read
back after the last step only, as hoop-train's benchmark does. A benchmark, not a test.
"""
import argparse
import json
import time

import torch
import torch.nn as nn


def model_of(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256),
                             nn.ReLU(), nn.Linear(256, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
                         nn.Linear(128, 10))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=50)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # f32, as hoop's default
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    m = model_of(a.model).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    x = torch.rand(a.batch_size, 1, 28, 28, device=dev)
    y = torch.randint(0, 10, (a.batch_size,), device=dev)
    lossf = nn.CrossEntropyLoss()
    for s in range(a.warmup + a.steps):
        if s == a.warmup:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = lossf(m(x), y)
        loss.backward()
        opt.step()
    last = loss.item()  # waits for the last step
    secs = time.perf_counter() - t0
    print(json.dumps({"bench": "torch_gpu", "model": a.model, "batch_size": a.batch_size,
                      "steps": a.steps, "seconds": round(secs, 4),
                      "samples_per_s": round(a.steps * a.batch_size / secs, 1),
                      "torch": torch.__version__, "device": torch.cuda.get_device_name(),
                      "last_loss": round(last, 4)}))


if __name__ == "__main__":
    main()
