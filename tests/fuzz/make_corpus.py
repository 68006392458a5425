#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""tests/fuzz/make_corpus.py -- writes the seed corpus of the fuzz targets into
tests/fuzz/corpus/ (the files are in git; rerun after a format changes):

  hostlist    node lists and tasks-per-node lists in the forms Slurm prints
  settings    NAME=VALUE lines: every HOOP_* setting of src/core/env.c at its default,
              and the env:// contract of a 2-rank job
  idx         the first records of Fashion-MNIST's test set (Debian's
              dataset-fashion-mnist), images and labels, gzip and plain
  checkpoint  checkpoints of the fuzz target's model in the documented layout
              (src/autograd/checkpoint.c), with and without optimizer state
  store       client connections in the wire format of src/bootstrap/store_proto.h:
              HELLO then each request, a wrong token, an HTTP request, a version 1 client

  tests/fuzz/make_corpus.py [SRCDIR]
"""
import gzip
import os
import re
import struct
import sys
import zlib

src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', '..')
out = os.path.join(src, 'tests', 'fuzz', 'corpus')


def put(target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# hostlist
for i, s in enumerate(['node[01-04]\n2(x3),1', 'a[1-2]b[3-4]c[5-6]\n1(x8)', 'gpu-[001-128],cpu7\n4(x129)',
                       'n[1,3-5,10]\n1,2(x2),3', 'solo\n8', 'r[0-1]n[00-15]\n2(x32)']):
    put('hostlist', 'seed%d' % i, s)

# settings: every HOOP_* setting at its default, then the env:// contract
env = open(os.path.join(src, 'src', 'core', 'env.c')).read()
params = re.findall(r'\{"(HOOP_[A-Z0-9_]+)", HOOP_ENV_([A-Z]+), ("[^"]*"|NULL)', env)
lines = ['%s=%s' % (n, d.strip('"')) for n, t, d in params if d != 'NULL']
for i in range(0, len(lines), 8):
    put('settings', 'defaults%d' % (i // 8), '\n'.join(lines[i:i + 8]))
put('settings', 'dist', 'MASTER_ADDR=127.0.0.1\nMASTER_PORT=29500\nRANK=1\nWORLD_SIZE=2\n'
    'LOCAL_RANK=1\nLOCAL_WORLD_SIZE=2\nHOOP_TOKEN=abc')
put('settings', 'units', 'HOOP_CHUNK_BYTES=512K\nHOOP_TIMEOUT=0.5\nHOOP_ALGO=rhd\nHOOP_TRANSPORT=tcp')

# idx: the first records of the Fashion-MNIST test set
fm = '/usr/share/datasets/fashion-mnist'
for name, keep in (('t10k-images-idx3-ubyte', 3), ('t10k-labels-idx1-ubyte', 40)):
    raw = gzip.open(os.path.join(fm, name + '.gz')).read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], 'big') for i in range(ndim)]
    per = 1
    for d in dims[1:]:
        per *= d
    head = raw[:4] + keep.to_bytes(4, 'big') + raw[8:4 + 4 * ndim]
    body = raw[4 + 4 * ndim:4 + 4 * ndim + keep * per]
    put('idx', name, head + body)
    put('idx', name + '.gz', gzip.compress(head + body, mtime=0))

# checkpoint: w [3, 4] and b [4]; SGD momentum state (one buffer per parameter)


def checkpoint(optim, extra):
    body = b''
    for name, shape in (('w', (3, 4)), ('b', (4,))):
        n = 1
        for d in shape:
            n *= d
        body += struct.pack('<I', len(name)) + name.encode() + struct.pack('<I', len(shape))
        body += b''.join(struct.pack('<q', d) for d in shape) + struct.pack('<%df' % n, *[0.25] * n)
    if optim:
        body += struct.pack('<III7fq', 0, 1, 0, 0.01, 0.9, 0.0, 0.0, 0.9, 0.999, 1e-8, 7)
        body += struct.pack('<12f', *[0.5] * 12) + struct.pack('<4f', *[-0.5] * 4)
    body += extra
    total = 8 + 4 + 4 + 8 + 8 + 8 + len(body) + 4
    head = b'HOOPCKPT' + struct.pack('<IIQQQ', 1, 1 if optim else 0, total, 2, len(extra))
    img = head + body
    return img + struct.pack('<I', zlib.crc32(img))


put('checkpoint', 'sgd', checkpoint(True, b'epoch'))
put('checkpoint', 'params', checkpoint(False, b''))

# store: frames are u32 length (big-endian), then op and payload


def frame(op, payload=b''):
    return struct.pack('>IB', 1 + len(payload), op) + payload


def sstr(b):
    b = b if isinstance(b, bytes) else b.encode()
    return struct.pack('>I', len(b)) + b


preface = b'HOOP-STORE/2\r\n\r\n'
hello = frame(1, struct.pack('>IHi', 0x484F4F50, 2, 0) + sstr('fuzz'))
put('store', 'set_get', preface + hello + frame(2, sstr('k') + sstr('v1')) +
    frame(4, struct.pack('>Bq', 1, 100) + struct.pack('>I', 1) + sstr('k')))
put('store', 'add', preface + hello + frame(3, sstr('n') + struct.pack('>q', 5)) +
    frame(3, sstr('n') + struct.pack('>q', -2)) + frame(6))
put('store', 'wait_timeout', preface + hello +
    frame(4, struct.pack('>Bq', 0, 10) + struct.pack('>I', 2) + sstr('x') + sstr('y')))
put('store', 'delete', preface + hello + frame(2, sstr('a') + sstr('')) +
    frame(5, struct.pack('>I', 2) + sstr('a') + sstr('b')))
put('store', 'bad_token', preface + frame(1, struct.pack('>IHi', 0x484F4F50, 2, 3) + sstr('nope')))
put('store', 'http', b'GET / HTTP/1.1\r\nHost: x\r\n\r\n')
put('store', 'v1', struct.pack('>IB', 9, 1) + struct.pack('>I', 0x484F4F50) + b'\0\1\0\0')
