#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""gloo_allreduce.py -- the Gloo peer of bench/compare.sh: torch.distributed's all_reduce
(backend gloo, float32, SUM, in place) swept over sizes, timed as mpi_allreduce.c is.

Runs with Debian's /usr/bin/python3 and its python3-torch (1.13); no torchrun.

  gloo_allreduce.py --launch N [options]     N local workers, loopback rendezvous
  RANK=r WORLD_SIZE=n MASTER_ADDR=a MASTER_PORT=p [GLOO_SOCKET_IFNAME=dev] \\
      gloo_allreduce.py [options]            one worker (e.g. inside a network namespace)

  options: -b SIZE (8) -e SIZE (256M) -f FACTOR (4) -r REPS (7) -w WARMUP (2) -T MS (20)
           -l LABEL --timeout SECONDS (900) --device cpu|cuda (cpu)

--device cuda: the tensors are on the worker's GPU (cuda:LOCAL_RANK modulo the GPUs
seen), which Gloo stages through host memory; each timing ends with
torch.cuda.synchronize(), since Gloo's wait on a CUDA tensor only orders streams.

Sizes: b, b x f, ... while below e, then e (bytes rounded down to whole floats, at least
one). Per size: -w warm-up calls; the batch K: probe batches of 1, 4, 16, ... calls
until one lasts T/8 ms (the slowest rank decides), K = T ms / the probe's time per call in
1..20000; -r repetitions of [barrier, K calls], each a time per call, the max over ranks;
reported: the median and the minimum. algbw = bytes / time, busbw = algbw x 2(n-1)/n
(GB/s = 1e9 B/s). The timed calls run on a zeroed tensor (an in-place sum of data would
grow without bound); then the check: rank r fills (r + 1) x (i % 13 + 1), one all_reduce,
and every element must equal (i % 13 + 1) x n(n+1)/2 exactly, on every rank.
Output on rank 0, the columns bench/compare_table.py reads:
  # gloo_allreduce label=L  nranks=N ...
    size count reps iters time_us min_us algbw busbw check
then "# Out of bounds values" and "# Avg bus bandwidth" lines. Exit 1 when a check
failed, 2 without torch or on bad options.
"""
import argparse
import datetime
import os
import socket
import statistics
import subprocess
import sys
import time


def size_arg(s):
    units = {'k': 1 << 10, 'm': 1 << 20, 'g': 1 << 30}
    mult = units.get(s[-1:].lower(), 1)
    value = int(float(s[:-1] if mult > 1 else s) * mult)
    if value < 1:
        raise argparse.ArgumentTypeError('%r: a size of at least 1 byte' % s)
    return value


def sweep(minb, maxb, factor):
    """b, b x f, ... while below e, then e."""
    sizes, s = [], minb
    while s < maxb:
        sizes.append(s)
        s *= factor
    return sizes + [maxb]


def launch(n, argv):
    """Starts n workers of this script on this host and returns their combined status."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    env = dict(os.environ, WORLD_SIZE=str(n), OMP_NUM_THREADS=os.environ.get('OMP_NUM_THREADS', '1'))
    env.setdefault('MASTER_ADDR', '127.0.0.1')
    env.setdefault('MASTER_PORT', str(port))
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__)] + argv,
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)))
             for r in range(n)]
    return max(p.wait() for p in procs)


def batch_size(dist, torch, x, target_ms, sync):
    tmax = torch.zeros(1, dtype=torch.float64)
    k = 1
    while True:
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(k):
            dist.all_reduce(x)
        sync()
        tmax[0] = time.perf_counter() - t0
        dist.all_reduce(tmax, op=dist.ReduceOp.MAX)
        if tmax[0] >= target_ms * 1e-3 / 8 or k >= 20000:
            break
        k *= 4
    per_call = max(float(tmax[0]) / k, 1e-9)
    return int(min(20000, max(1, target_ms * 1e-3 / per_call)))


def run_size(dist, torch, a, n, rank, x_all, pattern, size, sync):
    count = max(1, size // 4)
    x = x_all[:count]
    x.zero_()
    for _ in range(a.w):
        dist.all_reduce(x)
    sync()
    k = batch_size(dist, torch, x, a.T, sync)
    times = torch.zeros(a.r, dtype=torch.float64)
    for rep in range(a.r):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(k):
            dist.all_reduce(x)
        sync()
        times[rep] = (time.perf_counter() - t0) / k
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    torch.mul(pattern[:count], float(rank + 1), out=x)
    dist.all_reduce(x)
    sync()
    wrong = torch.tensor([int((x != pattern[:count] * float(n * (n + 1) // 2)).sum())])
    dist.all_reduce(wrong)
    ts = sorted(times.tolist())
    med = statistics.median(ts)
    alg = count * 4 / med / 1e9
    bus = alg * 2.0 * (n - 1) / n
    if rank == 0:
        print('  %12d %12d %6d %6d %12.2f %12.2f %9.3f %9.3f %6s' % (
            count * 4, count, a.r, k, med * 1e6, ts[0] * 1e6, alg, bus,
            'FAIL' if int(wrong[0]) else 'ok'), flush=True)
    return int(wrong[0]), bus


def worker(a):
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        print('gloo_allreduce.py: %s (Debian: apt-get install python3-torch)' % e, file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method='env://',
                            timeout=datetime.timedelta(seconds=a.timeout))
    rank, n = dist.get_rank(), dist.get_world_size()
    count = max(1, a.e // 4)
    dev, sync = torch.device('cpu'), (lambda: None)
    if a.device == 'cuda':
        if not torch.cuda.is_available():
            print('gloo_allreduce.py: --device cuda: torch sees no GPU', file=sys.stderr)
            return 2
        dev = torch.device('cuda', int(os.environ.get('LOCAL_RANK', '0')) % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        sync = torch.cuda.synchronize
    x_all = torch.zeros(count, dtype=torch.float32, device=dev)
    pattern = (torch.arange(count, dtype=torch.int64, device=dev) % 13 + 1).to(torch.float32)
    if rank == 0:
        print('# gloo_allreduce label=%s  nranks=%d  host=%s  torch=%s  GLOO_SOCKET_IFNAME=%s  '
              'MASTER_ADDR=%s' % (a.l, n, socket.gethostname(), torch.__version__,
                                  os.environ.get('GLOO_SOCKET_IFNAME', ''),
                                  os.environ.get('MASTER_ADDR')))
        print('# op=SUM type=float32 in-place  reps=%d warmup=%d target_ms=%g  device=%s  '
              'time=median over reps of max over ranks' % (a.r, a.w, a.T, dev))
        print('# %12s %12s %6s %6s %12s %12s %9s %9s %6s' % (
            'size(B)', 'count', 'reps', 'iters', 'time_us', 'min_us', 'algbw', 'busbw', 'check'),
            flush=True)
    wrong, busbw = 0, []
    for size in sweep(a.b, a.e, a.f):
        w, bus = run_size(dist, torch, a, n, rank, x_all, pattern, size, sync)
        wrong += w
        busbw.append(bus)
    if rank == 0:
        print('# Out of bounds values : %d %s' % (wrong, 'FAILED' if wrong else 'OK'))
        print('# Avg bus bandwidth    : %.3f GB/s   Peak bus bandwidth : %.3f GB/s' % (
            sum(busbw) / len(busbw), max(busbw)), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 1 if wrong else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--launch', type=int, default=0, metavar='N')
    ap.add_argument('-b', type=size_arg, default=8)
    ap.add_argument('-e', type=size_arg, default=256 << 20)
    ap.add_argument('-f', type=int, default=4)
    ap.add_argument('-r', type=int, default=7)
    ap.add_argument('-w', type=int, default=2)
    ap.add_argument('-T', type=float, default=20.0)
    ap.add_argument('-l', default='')
    ap.add_argument('--timeout', type=int, default=900)
    ap.add_argument('--device', choices=('cpu', 'cuda'), default='cpu')
    a = ap.parse_args()
    if a.f < 2 or a.r < 1 or a.w < 0 or a.T <= 0 or a.e < a.b:
        ap.error('need -f >= 2, -r >= 1, -w >= 0, -T > 0 and -e >= -b')
    if a.launch:
        argv, skip = [], False
        for arg in sys.argv[1:]:  # the workers get the same options, without --launch N
            if skip or arg == '--launch' or arg.startswith('--launch='):
                skip = arg == '--launch'
                continue
            argv.append(arg)
        return launch(a.launch, argv)
    return worker(a)


if __name__ == '__main__':
    sys.exit(main())
