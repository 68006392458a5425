#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""compare_table.py RAW_DIR -- markdown tables from bench/compare.sh's raw outputs.

Reads hoop-bench outputs (lo_hoop_*, ns_hoop_*: nccl-tests' columns with --show-algo's
last one), the peers' outputs (bench/peers/gloo_allreduce.py and mpi_allreduce.c: size
count reps iters time_us min_us algbw busbw check) and the tcpbw link measurements, and
prints one table per experiment with the ratios hoop/gloo, hoop/mpi and the fraction of the
link rate, then the issue's targets and whether they hold. A peer that was not run (not
installed) shows "-", and a target that needs it reads "not measured"; so does a run that
failed. Only data rows of the right shape are read: each raw file holds its run's stderr
too (HOOP_DEBUG lines, hooprun's failure summary), which is skipped.
Gloo's benchmark is in-place and MPI's out-of-place, so hoop/gloo uses hoop's in-place
column and hoop/mpi (and hoop/link) its out-of-place column.
"""
import glob
import os
import re
import sys


MiB = 1 << 20


def busbw(size, us, n):
    """All-reduce busbw in GB/s from the time column (more digits than the printed bw)."""
    return size / (us * 1e3) * 2.0 * (n - 1) / n if us > 0 and n > 0 else 0.0


def is_number(x):
    try:
        float(x)
        return True
    except ValueError:
        return False


def hoop_row(line):
    """The fields of one of hoop-bench's data rows, or None for any other line.

    compare.sh keeps a run's stderr in the same file (2>&1): HOOP_DEBUG lines
    ("host:pid:tid [0] hoop INFO ..."), hooprun's failure summary, a rank's error. A data
    row is size count type redop root, then time algbw busbw #wrong out-of-place and
    in-place (13 fields), and --show-algo's algorithm (14): size and count integers, root
    an integer, times and rates numbers, #wrong a number or N/A."""
    f = line.split()
    if len(f) not in (13, 14) or not (f[0].isdigit() and f[1].isdigit()):
        return None
    if not re.fullmatch(r'-?\d+', f[4]):
        return None
    if not all(is_number(f[k]) for k in (5, 6, 7, 9, 10, 11)):
        return None
    if not all(is_number(f[k]) or f[k] == 'N/A' for k in (8, 12)):
        return None
    return f


def parse_hoop(path):
    rows, n = {}, 0
    for line in open(path, errors='replace'):
        line = re.sub(r'^\[rank \d+\] ', '', line).strip()
        m = re.match(r'# hoop: world_size (\d+)', line)
        if m:
            n = int(m.group(1))
        f = hoop_row(line)
        if f is None:
            continue
        s = int(f[0])
        rows[s] = dict(oop_us=float(f[5]), oop_bus=busbw(s, float(f[5]), n), oop_wrong=f[8],
                       ip_us=float(f[9]), ip_bus=busbw(s, float(f[9]), n), ip_wrong=f[12],
                       algo=f[13] if len(f) > 13 else '')
    return rows


def parse_peer(path):
    rows, n = {}, 0
    for line in open(path, errors='replace'):
        m = re.match(r'# \w+ label=.*\bnranks=(\d+)', line)
        if m:
            n = int(m.group(1))
        f = line.split()
        if len(f) == 9 and f[0].isdigit() and all(is_number(x) for x in f[4:8]):
            s = int(f[0])
            rows[s] = dict(us=float(f[4]), bus=busbw(s, float(f[4]), n), check=f[8])
    return rows


def tcpbw_rates(path):
    """GB/s of each tcpbw server line, from its byte count and seconds."""
    return [int(b) / float(t) / 1e9 for b, t in
            re.findall(r'server: .*?bytes=(\d+) secs=([0-9.]+)', open(path).read())]


def load(raw, pattern, parser):
    out = {}
    for p in sorted(glob.glob(os.path.join(raw, pattern))):
        r = int(re.search(r'_r(\d+)\.txt$', p).group(1))
        out[r] = parser(p)
    return out


def fmt(x, spec='%.3f'):
    return '-' if x is None else spec % x


def ratio(a, b):
    return a / b if a is not None and b else None


def size_name(s):
    return '%d MiB' % (s // MiB) if s >= MiB else ('%d KiB' % (s >> 10) if s >= 1024 else '%d B' % s)


def get(d, r, s, k):
    try:
        return d[r][s][k]
    except KeyError:
        return None


class Verdicts:
    def __init__(self):
        self.items = []

    def add(self, name, values, ok, median_ok):
        self.items.append((name, values, ok, median_ok))

    def show(self):
        print('\n## Targets (issue 3)\n')
        print('| target | measured (per round) | rounds where it holds | on the median of the rounds |')
        print('|---|---|---|---|')
        for name, values, oks, med in self.items:
            if med is None:
                print('| %s | %s | - | not measured |' % (name, values))
                continue
            n_ok = sum(1 for o in oks if o)
            print('| %s | %s | %d of %d | %s |' % (name, values, n_ok, len(oks),
                                                 'holds' if med else 'does not hold'))

    def missing(self, name, peers):
        """A target whose peer has no figures (not installed, or its runs failed)."""
        self.add(name, 'no %s figures' % ' or '.join(peers), [], None)


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    k = len(xs) // 2
    return xs[k] if len(xs) % 2 else (xs[k - 1] + xs[k]) / 2


def loopback(raw, rounds, V, lo):
    MPI = 'MPI vader' if lo == 'shm' else 'MPI TCP'  # Open MPI's BTL on this path
    link = tcpbw_rates(os.path.join(raw, 'lo_link.txt')) if os.path.exists(
        os.path.join(raw, 'lo_link.txt')) else []
    link = link[0] if link else None
    if lo == 'shm':
        print('\n## 1. Two workers on one host, hoop over shared memory, %s, Gloo over '
              'loopback TCP (f32 sum all-reduce)\n' % MPI)
        print('One loopback TCP stream (tcpbw, 1 MiB sends): %s GB/s, the path Gloo takes; '
              'hoop\'s shared memory does not use it, so no hoop/link is given, and hoop/gloo '
              'compares two transports. busbw is computed from the time column: size / time '
              'x 2(n-1)/n.\n' % fmt(link))
        link = None
    else:
        print('\n## 1. Two workers over loopback TCP (f32 sum all-reduce)\n')
        print('One loopback TCP stream (tcpbw, 1 MiB sends): %s GB/s. busbw is computed from '
              'the time column: size / time x 2(n-1)/n.\n' % fmt(link))
    via = ' (hoop over shm, gloo over TCP)' if lo == 'shm' else ''
    H, G, M = (load(raw, 'lo_%s_lat_r*.txt' % k, p) for k, p in
               (('hoop', parse_hoop), ('gloo', parse_peer), ('mpi', parse_peer)))
    print('### 8-byte latency (us; hoop: mean of 5000 calls, peers: median of 7 batches)\n')
    print('| round | hoop out-of-place | hoop in-place | gloo | ' + MPI + ' | hoop/gloo time | '
          'hoop/MPI time | hoop algo |')
    print('|---|---:|---:|---:|---:|---:|---:|---|')
    lat_vals, lat_ok = [], []
    for r in rounds:
        h, hi = get(H, r, 8, 'oop_us'), get(H, r, 8, 'ip_us')
        g, m = get(G, r, 8, 'us'), get(M, r, 8, 'us')
        print('| %d | %s | %s | %s | %s | %s | %s | %s |' % (
            r, fmt(h, '%.1f'), fmt(hi, '%.1f'), fmt(g, '%.1f'), fmt(m, '%.1f'),
            fmt(ratio(h, g), '%.3f'), fmt(ratio(h, m), '%.2f'), get(H, r, 8, 'algo') or ''))
        lat_vals.append('%s vs %s us' % (fmt(h, '%.1f'), fmt(m, '%.1f')))
        lat_ok.append(h is not None and m is not None and h <= m)
    mh = median([get(H, r, 8, 'oop_us') for r in rounds])
    mm = median([get(M, r, 8, 'us') for r in rounds])
    lat_vals.append('median %s vs %s us' % (fmt(mh, '%.1f'), fmt(mm, '%.1f')))
    if mm is None:
        V.missing('2 workers, 8 B latency <= ' + MPI, [MPI])
    else:
        V.add('2 workers, 8 B latency <= ' + MPI, '; '.join(lat_vals), lat_ok,
              mh is not None and mh <= mm)

    H, G, M = (load(raw, 'lo_%s_bw_r*.txt' % k, p) for k, p in
               (('hoop', parse_hoop), ('gloo', parse_peer), ('mpi', parse_peer)))
    print('\n### busbw (GB/s; hoop: mean of 10 calls, peers: median of 5)\n')
    print('| size | round | hoop out-of-place | hoop in-place | gloo | ' + MPI + ' | hoop/gloo | '
          'hoop/MPI | hoop/link | hoop algo | wrong (hoop, gloo, mpi) |')
    print('|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|')
    for s in (64 * MiB, 128 * MiB, 256 * MiB):
        vals, oks = [], []
        for r in rounds:
            h, hi = get(H, r, s, 'oop_bus'), get(H, r, s, 'ip_bus')
            g, m = get(G, r, s, 'bus'), get(M, r, s, 'bus')
            rg, rm = ratio(hi, g), ratio(h, m)
            wrong = '%s/%s, %s, %s' % tuple('-' if x is None else x for x in (
                get(H, r, s, 'oop_wrong'), get(H, r, s, 'ip_wrong'), get(G, r, s, 'check'),
                get(M, r, s, 'check')))
            print('| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |' % (
                size_name(s), r, fmt(h), fmt(hi), fmt(g), fmt(m), fmt(rg, '%.2f'),
                fmt(rm, '%.2f'), fmt(ratio(h, link), '%.2f'), get(H, r, s, 'algo') or '', wrong))
            vals.append('%sx gloo, %sx MPI' % (fmt(rg, '%.2f'), fmt(rm, '%.2f')))
            oks.append(rg is not None and rm is not None and rg >= 1.5 and rm >= 1.5)
        mg = ratio(median([get(H, r, s, 'ip_bus') for r in rounds]),
                   median([get(G, r, s, 'bus') for r in rounds]))
        mm = ratio(median([get(H, r, s, 'oop_bus') for r in rounds]),
                   median([get(M, r, s, 'bus') for r in rounds]))
        vals.append('medians: %sx gloo, %sx MPI' % (fmt(mg, '%.2f'), fmt(mm, '%.2f')))
        name = '2 workers, %s: busbw >= 1.5x gloo and >= 1.5x %s%s' % (size_name(s), MPI, via)
        absent = [p for p, d in (('gloo', G), (MPI, M)) if not any(get(d, r, s, 'bus') for r in rounds)]
        if s == 128 * MiB:
            continue
        if absent:
            V.missing(name, absent)
        else:
            V.add(name, '; '.join(vals), oks, mg is not None and mm is not None and mg >= 1.5 and mm >= 1.5)


def netns(raw, rounds, V):
    MPI = 'MPI TCP'
    path = os.path.join(raw, 'ns_link.txt')
    if not os.path.exists(path):
        return
    rates = tcpbw_rates(path)
    link = sum(rates) / len(rates) if rates else None
    print('\n## 2. Four workers, one per network namespace, 1 Gbit/s tbf per rank\n')
    print('Link alone: 4 concurrent ring streams r_i -> r_i+1 (tcpbw): %s GB/s; mean %s GB/s '
          '(the link rate below).\n' % (', '.join('%.4f' % x for x in rates), fmt(link, '%.4f')))
    H, G, M = (load(raw, 'ns_%s_r*.txt' % k, p) for k, p in
               (('hoop', parse_hoop), ('gloo', parse_peer), ('mpi', parse_peer)))
    print('### busbw (GB/s; hoop: mean of 8 calls, peers: median of 5)\n')
    print('| size | round | hoop out-of-place | hoop in-place | gloo | ' + MPI + ' | hoop/gloo | '
          'hoop/MPI | hoop/link | gloo/link | MPI/link | hoop algo |')
    print('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|')
    for s in (512 << 10, 2 * MiB, 8 * MiB, 32 * MiB):
        vals, oks = [], []
        for r in rounds:
            h, hi = get(H, r, s, 'oop_bus'), get(H, r, s, 'ip_bus')
            g, m = get(G, r, s, 'bus'), get(M, r, s, 'bus')
            fl = ratio(h, link)
            print('| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |' % (
                size_name(s), r, fmt(h, '%.4f'), fmt(hi, '%.4f'), fmt(g, '%.4f'), fmt(m, '%.4f'),
                fmt(ratio(hi, g), '%.2f'), fmt(ratio(h, m), '%.2f'), fmt(fl, '%.3f'),
                fmt(ratio(g, link), '%.3f'), fmt(ratio(m, link), '%.3f'),
                get(H, r, s, 'algo') or ''))
            vals.append(fmt(fl, '%.3f'))
            oks.append(fl is not None and fl >= (0.9 if s < 2 * MiB else 0.97))
        need = 0.9 if s < 2 * MiB else 0.97
        mf = ratio(median([get(H, r, s, 'oop_bus') for r in rounds]), link)
        vals.append('median %s' % fmt(mf, '%.3f'))
        V.add('4 netns, %s: hoop busbw >= %s of link' % (size_name(s), need), '; '.join(vals),
              oks, mf is not None and mf >= need)


def main():
    raw = sys.argv[1]
    meta = open(os.path.join(raw, 'meta.txt')).read().strip()
    rounds = sorted({int(m) for m in re.findall(r'_r(\d+)\.txt', ' '.join(os.listdir(raw)))})
    lo = re.search(r'^lo_transport: (\w+)', meta, re.M)
    lo = lo.group(1) if lo else 'tcp'  # (raw outputs of an older compare.sh: tcp)
    print('# hoop vs Gloo vs Open MPI (bench/compare.sh)\n')
    print('```\n%s\n```' % meta)
    V = Verdicts()
    if glob.glob(os.path.join(raw, 'lo_*_r*.txt')):
        loopback(raw, rounds, V, lo)
    netns(raw, rounds, V)
    V.show()


if __name__ == '__main__':
    main()
