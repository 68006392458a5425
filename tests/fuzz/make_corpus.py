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
              HELLO then each request, a wrong token, another world_size, an HTTP
              request, a version 1 to 4 client
  tcp         hellos as tcp.c's connector sends them (struct tcp_hello, the magic and
              version read from tcp.c): each stream of a 4-stream link, a control link,
              a wrong token, an old version (1, before frame words), a short read
  shm         hellos as shm.c's connector sends them (struct shm_hello), behind the byte
              that says what came with them (fds, truncation, user; see fuzz_shm.c); an old
              version (1, before frame words)
  ib          behind fuzz_ib.c's mode byte: hellos and replies as ib.c sends them (struct
              ib_hello, ib_reply, ib_qpinfo) from a RoCE and an InfiniBand port, a wrong
              slot layout, a refusal; HOOP_IB_HCA and HOOP_IB_ADDR_RANGE values in the
              forms the README gives
  header      vote records as vote.c sends them (the call agreed, another count, a
              record already marked bad), and ABORT records with the calls behind them

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


preface = b'HOOP-STORE/5\r\n\r\n'
hello = frame(1, struct.pack('>IHii', 0x484F4F50, 5, 0, 0) + sstr('fuzz'))
put('store', 'set_get', preface + hello + frame(2, sstr('k') + sstr('v1')) +
    frame(4, struct.pack('>Bq', 1, 100) + struct.pack('>I', 1) + sstr('k')))
put('store', 'add', preface + hello + frame(3, sstr('n') + struct.pack('>q', 5)) +
    frame(3, sstr('n') + struct.pack('>q', -2)) + frame(6))
put('store', 'wait_timeout', preface + hello +
    frame(4, struct.pack('>Bq', 0, 10) + struct.pack('>I', 2) + sstr('x') + sstr('y')))
put('store', 'delete', preface + hello + frame(2, sstr('a') + sstr('')) +
    frame(5, struct.pack('>I', 2) + sstr('a') + sstr('b')))
put('store', 'bad_token', preface + frame(1, struct.pack('>IHii', 0x484F4F50, 5, 3, 0) + sstr('nope')))
put('store', 'world_size', preface + frame(1, struct.pack('>IHii', 0x484F4F50, 5, 1, 7) + sstr('fuzz')))
put('store', 'compare_set', preface + hello +
    frame(8, struct.pack('>B', 1) + sstr('w') + sstr('') + sstr('first')) +
    frame(8, struct.pack('>B', 0) + sstr('w') + sstr('first') + sstr('')) +
    frame(8, struct.pack('>B', 0) + sstr('w') + sstr('x') + sstr('y')))
put('store', 'wait_lost_close', preface + hello +
    frame(4, struct.pack('>Bq', 3, 0) + struct.pack('>I', 1) + sstr('x')) + frame(7))
put('store', 'abort', preface + hello + frame(9, struct.pack('>B', 3) + sstr('HOOP_ALGO=x')) +
    frame(2, sstr('k') + sstr('after')))
put('store', 'abort_no_code', preface + hello + frame(9, struct.pack('>B', 0) + sstr('')))
put('store', 'v4', b'HOOP-STORE/4\r\n\r\n' + frame(1, struct.pack('>IHii', 0x484F4F50, 4, 0, 0) + sstr('fuzz')))
put('store', 'v3', b'HOOP-STORE/3\r\n\r\n' + frame(1, struct.pack('>IHii', 0x484F4F50, 3, 0, 0) + sstr('fuzz')))
put('store', 'v2', b'HOOP-STORE/2\r\n\r\n' + frame(1, struct.pack('>IHi', 0x484F4F50, 2, 0) + sstr('fuzz')))
put('store', 'http', b'GET / HTTP/1.1\r\nHost: x\r\n\r\n')
put('store', 'v1', struct.pack('>IB', 9, 1) + struct.pack('>I', 0x484F4F50) + b'\0\1\0\0')

# tcp: struct tcp_hello is u32 magic, u16 version, u16 nsocks, i32 rank, channel, idx,
# u32 nonce, char token[64], in the host's order (both ends run the same build)


def define(path, name):
    text = open(os.path.join(src, *path.split('/'))).read()
    return int(re.search(r'#define %s (0x[0-9a-f]+|[0-9]+)' % name, text).group(1), 0)


def token(t):
    return t.encode().ljust(64, b'\0')


TCP_MAGIC, TCP_VERSION = define('src/transport/tcp.c', 'TCP_MAGIC'), define('src/transport/tcp.c', 'TCP_VERSION')


def tcp_hello(nsocks, rank, channel, idx, tok='fuzz-token', version=TCP_VERSION, magic=TCP_MAGIC):
    return struct.pack('<IHHiiiI', magic, version, nsocks, rank, channel, idx, 0x5eed1234) + token(tok)


for i in range(4):
    put('tcp', 'stream%d' % i, tcp_hello(4, 3, 0, i))
put('tcp', 'control', tcp_hello(1, 7, 1, 0))
put('tcp', 'wrong_token', tcp_hello(2, 1, 0, 1, tok='other'))
put('tcp', 'version1', tcp_hello(2, 1, 0, 0, version=1))  # a rank of a build before frame words
put('tcp', 'short', tcp_hello(4, 3, 0, 0)[:40])

# shm: struct shm_hello is u32 magic, u16 version, u16 pad, i32 rank, channel,
# u64 ring_bytes, char token[64]; the first byte is fuzz_shm.c's (3 fds, same user)
SHM_MAGIC, SHM_VERSION = define('src/transport/shm.c', 'SHM_MAGIC'), define('src/transport/shm.c', 'SHM_VERSION')


def shm_hello(ring, rank=1, channel=0, tok='fuzz-token', version=SHM_VERSION):
    return struct.pack('<IHHiiQ', SHM_MAGIC, version, 0, rank, channel, ring) + token(tok)


put('shm', 'ring1m', b'\3' + shm_hello(1 << 20))
put('shm', 'ring4k_control', b'\3' + shm_hello(4096, rank=5, channel=1))
put('shm', 'no_fds', b'\0' + shm_hello(1 << 20))
put('shm', 'other_user', b'\x0b' + shm_hello(1 << 20))
put('shm', 'bad_ring', b'\3' + shm_hello(3 << 20))
put('shm', 'wrong_token', b'\3' + shm_hello(1 << 20, tok='nope'))
put('shm', 'version1', b'\3' + shm_hello(1 << 20, version=1))  # a rank of a build before frame words

# ib: byte 0 even, then a connection blob (bit 1 set: an InfiniBand port); struct
# ib_qpinfo is u32 qpn, psn, u8 gid[16], u16 lid, u8 mtu, link_eth, u32 max_msg,
# u64 ring_addr, u32 ring_rkey, slot_bytes, nslots, pad; struct ib_hello is u32 magic,
# u16 version, pad, i32 rank, channel, char token[64], then the qpinfo; struct ib_reply
# u32 magic, i32 verdict, then the qpinfo
IB_MAGIC, IB_VERSION = define('src/transport/ib.c', 'IB_MAGIC'), define('src/transport/ib.c', 'IB_VERSION')
ROCE_GID = bytes(10) + b'\xff\xff' + bytes([10, 1, 2, 3])
IB_GID = bytes([0xfe, 0x80]) + bytes(6) + bytes.fromhex('0002c90300a1b2c3')


def qpinfo(link_eth, gid, lid, slot_bytes=65536, nslots=16, mtu=None, max_msg=1 << 30):
    mtu = (3 if link_eth else 5) if mtu is None else mtu
    return struct.pack('<II16sHBBIQIIII', 0x1a2b, 0x3c4d5e, gid, lid, mtu, link_eth,
                       max_msg, 0x7f3a12340000, 0x1234, slot_bytes, nslots, 0)


def ib_hello(qp, tok='fuzz-token', version=IB_VERSION):
    return struct.pack('<IHHii', IB_MAGIC, version, 0, 2, 0) + token(tok) + qp


put('ib', 'hello_roce', b'\0' + ib_hello(qpinfo(1, ROCE_GID, 0)))
put('ib', 'hello_ib', b'\2' + ib_hello(qpinfo(0, IB_GID, 7)))
put('ib', 'hello_slots', b'\0' + ib_hello(qpinfo(1, ROCE_GID, 0, slot_bytes=32768, nslots=32)))
put('ib', 'hello_mtu', b'\0' + ib_hello(qpinfo(1, ROCE_GID, 0, mtu=9)))
put('ib', 'hello_max_msg', b'\0' + ib_hello(qpinfo(1, ROCE_GID, 0, max_msg=0)))
put('ib', 'hello_token', b'\0' + ib_hello(qpinfo(1, ROCE_GID, 0), tok='nope'))
put('ib', 'reply_roce', b'\0' + struct.pack('<Ii', IB_MAGIC, 1) + qpinfo(1, ROCE_GID, 0))
put('ib', 'reply_refused', b'\2' + struct.pack('<Ii', IB_MAGIC, 0) + bytes(56))
# ib: byte 0 odd, then HOOP_IB_HCA on the first line, HOOP_IB_ADDR_RANGE on the second
for name, text in (('list', 'mlx5_0:1,mlx5_1\n10.0.0.0/8'), ('exclude_exact', '^=rxe0\nfd00::/8'),
                   ('exact_port', '=mlx5_0:1\n10.1.2.0/24'), ('prefix', 'mlx5\n'),
                   ('blanks', ' mlx5_0 : 2 , rxe0 \n::/0'), ('empty', '\n')):
    put('ib', name, '\1' + text)

# header: hoop__hdr is u64 seq, u64 count, u8 kind, coll, dtype, op, algo, 3 pad,
# i32 root, aux; hoop__vote is u32 magic, i32 from, bad, a_rank, b_rank, 12 pad, then the
# call's header and the pair (a, b). fuzz_header.c's rank 0 calls
# allreduce(count=1024, f32, sum, ring) #7; these come from its peer, rank 1.
VOTE_MAGIC = define('src/collectives/vote.c', 'VOTE_MAGIC')


def hdr(seq=7, count=1024, kind=1, coll=1, dtype=0, op=0, algo=1, root=0, aux=0):
    return struct.pack('<QQBBBBB3xii', seq, count, kind, coll, dtype, op, algo, root, aux)


def vote(h, frm=1, bad=0, a_rank=0, b_rank=0, a=bytes(32), b=bytes(32)):
    return struct.pack('<Iiiii12x', VOTE_MAGIC, frm, bad, a_rank, b_rank) + h + a + b


put('header', 'agree', vote(hdr()))
put('header', 'other_count', vote(hdr(count=1000)))
put('header', 'broadcast', vote(hdr(coll=2, root=3, algo=0)))
put('header', 'bad_pair', vote(hdr(), bad=1, a_rank=2, b_rank=3, a=hdr(), b=hdr(coll=3, root=1)))
put('header', 'abort_mismatch', vote(hdr()) + hdr(kind=2, seq=3, root=2, aux=9) + hdr() +
    hdr(coll=5, op=3, dtype=2))
put('header', 'abort_timeout', vote(hdr(seq=8)) + hdr(kind=2, seq=1, root=0, aux=8) +
    hdr(algo=4, root=1, aux=4096) + hdr(kind=3))
