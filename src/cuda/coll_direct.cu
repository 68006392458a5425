/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/coll_direct.cu -- the direct algorithm's reduction on the device (see coll.h):
 * rank me's share of an in-place all-reduce (or reduce-scatter) over n copies of a
 * buffer that this rank's device reaches (its own, and its peers' opened through CUDA
 * IPC or, for ranks in this process, their own pointers), written into every copy
 * (copy_out) or its own only.
 *
 * Each element is combined exactly as the host's direct reduction does it
 * (src/collectives/direct.c, hoop__direct_reduce): starting from this rank's copy and
 * going round in ring order, f32 / f64 / integer elements in their own type (integer
 * sums and products wrapping in the unsigned type of the width), an average divided once
 * after the last combination; f16 / bf16 widened to an f64 accumulator and rounded once
 * (f64 -> f32 -> 16 bits: the same bits as the host's). So the result is bitwise the
 * host direct algorithm's, the same on every rank (each element is computed once, by
 * the rank whose share holds it, and copied). Accumulate contract: the copies are
 * overwritten (=) with the result.
 *
 * Memory traffic: per element, n loads and (copy_out) n stores, nothing else; each
 * thread moves 16-byte packs (one vector load per copy) where the share is 16-byte
 * aligned, and single elements at its unaligned ends. Every copy has the same offset
 * from a page-aligned allocation, so one alignment holds for all of them.
 *
 * Thread-safety: as any launch on a stream.
 */
#include "cuda/kern_rt.h"

#include "collectives/reduce_elem.h"
#include "cuda/coll.h"

#define DIRECT_BLOCK 256
#define DIRECT_MAX_GRID 4096

/* The n copies, passed by value (kernel parameters live in constant memory). */
struct direct_bufs {
    char *p[HOOP__CUDA_DIRECT_MAX_RANKS];
};

/* How one element type is loaded into its accumulator, combined and stored back. */
template <class T> struct direct_rule {
    typedef T elem;
    typedef T acc;
    static __device__ T load(T x)
    {
        return x;
    }
    static __device__ T combine(int op, T x, T y)
    {
        return (T)HOOP__COMBINE(op, x, y);
    }
    static __device__ T store(T a, int divisor)
    {
        return divisor > 0 ? (T)(a / (T)divisor) : a;
    }
};

/* Signed integers: sums and products in the unsigned type of the width (they wrap). */
template <class T, class U> struct direct_wrap {
    typedef T elem;
    typedef T acc;
    static __device__ T load(T x)
    {
        return x;
    }
    static __device__ T combine(int op, T x, T y)
    {
        if (op == HOOP_OP_PROD) return (T)((U)x * (U)y);
        if (op == HOOP_OP_MIN || op == HOOP_OP_MAX) return HOOP__COMBINE(op, x, y);
        return (T)((U)x + (U)y);
    }
    static __device__ T store(T a, int divisor)
    {
        (void)divisor; /* no integer average */
        return a;
    }
};
template <> struct direct_rule<int32_t> : direct_wrap<int32_t, uint32_t> {
};
template <> struct direct_rule<int64_t> : direct_wrap<int64_t, uint64_t> {
};

/* f16 (BF = 0) and bf16 (BF = 1) stored as uint16_t, accumulated in f64. */
template <int BF> struct direct_half {
    typedef uint16_t elem;
    typedef double acc;
    static __device__ double load(uint16_t h)
    {
        return BF ? (double)hoop__bf16_to_f32_inl(h) : (double)hoop__f16_to_f32_inl(h);
    }
    static __device__ double combine(int op, double x, double y)
    {
        return HOOP__COMBINE(op, x, y);
    }
    static __device__ uint16_t store(double a, int divisor)
    {
        float r = (float)(divisor > 0 ? a / divisor : a);
        return BF ? hoop__f32_to_bf16_inl(r) : hoop__f32_to_f16_inl(r);
    }
};

/* 16 bytes of elements, moved by one vector load or store. */
template <class T> struct alignas(16) direct_pack {
    T v[16 / sizeof(T)];
};

/* Element e (an index into every copy) reduced over the copies and written back. */
template <class T, class R>
__device__ void direct_one(int op, const direct_bufs &b, int n, int me, size_t e, int divisor,
                           int copy_out)
{
    typename R::acc a = R::load(((const T *)b.p[me])[e]);
    for (int k = 1; k < n; k++) a = R::combine(op, a, R::load(((const T *)b.p[(me + k) % n])[e]));
    T r = R::store(a, divisor);
    ((T *)b.p[me])[e] = r;
    for (int k = 1; copy_out && k < n; k++) ((T *)b.p[(me + k) % n])[e] = r;
}

/* The 16 / sizeof(T) elements from e (16-byte aligned in every copy), as direct_one. */
template <class T, class R>
__device__ void direct_vec(int op, const direct_bufs &b, int n, int me, size_t e, int divisor,
                           int copy_out)
{
    const int V = 16 / sizeof(T);
    typedef direct_pack<T> P;
    typename R::acc a[V];
    P x = *(const P *)((const T *)b.p[me] + e);
    for (int j = 0; j < V; j++) a[j] = R::load(x.v[j]);
    for (int k = 1; k < n; k++) {
        P y = *(const P *)((const T *)b.p[(me + k) % n] + e);
        for (int j = 0; j < V; j++) a[j] = R::combine(op, a[j], R::load(y.v[j]));
    }
    for (int j = 0; j < V; j++) x.v[j] = R::store(a[j], divisor);
    *(P *)((T *)b.p[me] + e) = x;
    for (int k = 1; copy_out && k < n; k++) *(P *)((T *)b.p[(me + k) % n] + e) = x;
}

/* Elements [lo, lo + head) and the tail after the packs one by one, the packs between
 * them 16 bytes at a time; unit u of the grid-stride loop is a pack (u < packs) or one
 * of the head + tail elements. */
template <class R>
__global__ void direct_kernel(int op, direct_bufs b, int n, int me, size_t lo, size_t head,
                              size_t packs, size_t tail, int divisor, int copy_out)
{
    typedef typename R::elem T;
    const size_t V = 16 / sizeof(T), units = packs + head + tail;
    for (size_t u = blockIdx.x * (size_t)blockDim.x + threadIdx.x; u < units;
         u += (size_t)gridDim.x * blockDim.x) {
        if (u < packs) {
            direct_vec<T, R>(op, b, n, me, lo + head + u * V, divisor, copy_out);
            continue;
        }
        size_t k = u - packs, e = k < head ? lo + k : lo + head + packs * V + (k - head);
        direct_one<T, R>(op, b, n, me, e, divisor, copy_out);
    }
}

template <class R>
static hoop_status direct_launch(int op, const direct_bufs &b, int n, int me, size_t lo,
                                 size_t count, int divisor, int copy_out, cudaStream_t s)
{
    typedef typename R::elem T;
    const size_t V = 16 / sizeof(T);
    uintptr_t at = (uintptr_t)((const T *)b.p[me] + lo);
    size_t head = (16 - at % 16) % 16 / sizeof(T);
    if (at % sizeof(T) != 0 || head > count) head = count; /* no aligned pack at all */
    size_t packs = (count - head) / V, tail = count - head - packs * V;
    size_t units = packs + head + tail, blocks = (units + DIRECT_BLOCK - 1) / DIRECT_BLOCK;
    unsigned grid = (unsigned)(blocks < DIRECT_MAX_GRID ? blocks : DIRECT_MAX_GRID);
    HOOP_KLAUNCH(direct_kernel<R>, grid, DIRECT_BLOCK, 0, s, op, b, n, me, lo, head, packs, tail,
                 divisor, copy_out);
    return HOOP_KCHECK("coll_direct_kernel");
}

extern "C" hoop_status hoop__cuda_coll_direct(hoop_dtype dtype, hoop_op op, char *const *bufs,
                                              int n, int me, size_t off, size_t bytes, int copy_out,
                                              hoop__cuda_stream_t s)
{
    size_t elem = dtype == HOOP_DTYPE_F32 || dtype == HOOP_DTYPE_I32    ? 4
                  : dtype == HOOP_DTYPE_F64 || dtype == HOOP_DTYPE_I64  ? 8
                  : dtype == HOOP_DTYPE_F16 || dtype == HOOP_DTYPE_BF16 ? 2
                  : dtype == HOOP_DTYPE_U8                              ? 1
                                                                        : 0;
    if (elem == 0 || (unsigned)op >= (unsigned)HOOP_OP_COUNT_ || n < 1 ||
        n > HOOP__CUDA_DIRECT_MAX_RANKS || me < 0 || me >= n || off % elem || bytes % elem)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "hoop__cuda_coll_direct: dtype %d, op %d, rank %d of %d, bytes %zu at "
                          "%zu",
                          (int)dtype, (int)op, me, n, bytes, off);
    if (bytes == 0) return HOOP_OK;
    direct_bufs b;
    for (int q = 0; q < n; q++) {
        if (!bufs[q])
            return HOOP_ERROR(HOOP_ERR_INVALID, "hoop__cuda_coll_direct: rank %d's copy is NULL",
                              q);
        b.p[q] = bufs[q];
    }
    int divisor = op == HOOP_OP_AVG ? n : 0, o = (int)op;
    size_t lo = off / elem, count = bytes / elem;
    switch (dtype) {
    case HOOP_DTYPE_F32:
        return direct_launch<direct_rule<float>>(o, b, n, me, lo, count, divisor, copy_out, s);
    case HOOP_DTYPE_F64:
        return direct_launch<direct_rule<double>>(o, b, n, me, lo, count, divisor, copy_out, s);
    case HOOP_DTYPE_I32:
        return direct_launch<direct_rule<int32_t>>(o, b, n, me, lo, count, 0, copy_out, s);
    case HOOP_DTYPE_I64:
        return direct_launch<direct_rule<int64_t>>(o, b, n, me, lo, count, 0, copy_out, s);
    case HOOP_DTYPE_U8:
        return direct_launch<direct_rule<uint8_t>>(o, b, n, me, lo, count, 0, copy_out, s);
    case HOOP_DTYPE_F16:
        return direct_launch<direct_half<0>>(o, b, n, me, lo, count, divisor, copy_out, s);
    default: /* BF16 */
        return direct_launch<direct_half<1>>(o, b, n, me, lo, count, divisor, copy_out, s);
    }
}
