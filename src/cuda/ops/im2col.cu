/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/ops/im2col.cu -- convolution (Chellapilla, Puri & Simard 2006): im2col, its
 * adjoint col2im, and conv2d forward and backward over the whole batch built on them and
 * cuBLAS; geometry in struct hoop__conv_geom.
 *
 * The batch's columns form one matrix col (K, N*S), K = C*KH*KW, S = OH*OW: column
 * n*S + oh*OW + ow of row (c*KH + kh)*KW + kw is x[n][c][oh*stride - padding + kh]
 * [ow*stride - padding + kw], 0 outside x. With N = 1 it is one sample's (K, S), the
 * table's im2col entry. One thread per col element; a copy, equal to the CPU's bit for bit.
 *
 * col2im: one thread per dx element (N, C, H, W) gathering every col entry that im2col read
 * from it: for each (kh, kw) in row-major order, the one (oh, ow) with oh*stride - padding
 * + kh = ih and ow*stride - padding + kw = iw, where that is a whole output position. No
 * atomics, so the result is deterministic; the CPU adds the same terms into dx in the same
 * (kh, kw) order, so the table's col2im entry equals the CPU's bit for bit.
 *
 * conv2d, where a GPU is launch-bound on one sample at a time (2 launches per sample
 * forward, 3 backward, for the CPU's loop): forward is im2col of the batch and one
 * strided-batched GEMM y[n] += W @ col[:, n*S:(n+1)*S]; backward transposes dy to
 * dyT (O, N*S), then dW (+)= dyT @ col^T and dcol = W^T @ dyT are one GEMM each, over
 * the batch at once, and col2im of the batch. Scratch: col and dyT, (K + O) * N * S floats.
 * dW sums over n and s in cuBLAS's order, not the CPU's sample by sample: equal within
 * f32 rounding, not bit for bit.
 *
 * Accumulate contract: im2col writes (=) col; the col2im entry always adds (+=) into dx
 * (the caller zeroes dx first for a written gradient); conv_bwd's acc flags as kern.h.
 */
#include "cuda/ops/ops.h"

#define IM2COL_BLOCK 256

/* The geometry the kernels need, by value (the table's struct is in host memory). */
struct im2col_geom {
    int64_t C, H, W, KH, KW, OH, OW, stride, padding;
};

/* col (K, N*S) from x (N, C, H, W); n = K*N*S elements. */
static __global__ void im2col_kernel(float *col, const float *x, struct im2col_geom g, int64_t N,
                                     size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int64_t r = (int64_t)i;
        const int64_t ow = r % g.OW;
        r /= g.OW;
        const int64_t oh = r % g.OH;
        r /= g.OH;
        const int64_t s = r % N; /* the sample */
        r /= N;
        const int64_t kw = r % g.KW;
        r /= g.KW;
        const int64_t kh = r % g.KH;
        const int64_t c = r / g.KH;
        const int64_t ih = oh * g.stride - g.padding + kh, iw = ow * g.stride - g.padding + kw;
        const bool in = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W;
        col[i] = in ? x[((s * g.C + c) * g.H + ih) * g.W + iw] : 0.0f;
    }
}

/* dx (N, C, H, W) (+)= col2im of col (K, N*S); n = N*C*H*W elements; acc 0 writes. */
static __global__ void col2im_kernel(float *dx, const float *col, struct im2col_geom g, int64_t N,
                                     int acc, size_t n)
{
    const int64_t S = g.OH * g.OW, NS = N * S;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int64_t r = (int64_t)i;
        const int64_t iw = r % g.W;
        r /= g.W;
        const int64_t ih = r % g.H;
        r /= g.H;
        const int64_t c = r % g.C;
        const int64_t s = r / g.C; /* the sample */
        float v = acc ? dx[i] : 0.0f;
        for (int64_t kh = 0; kh < g.KH; kh++) {
            const int64_t th = ih + g.padding - kh; /* = oh * stride */
            if (th < 0 || th % g.stride != 0 || th / g.stride >= g.OH) continue;
            const int64_t oh = th / g.stride;
            for (int64_t kw = 0; kw < g.KW; kw++) {
                const int64_t tw = iw + g.padding - kw; /* = ow * stride */
                if (tw < 0 || tw % g.stride != 0 || tw / g.stride >= g.OW) continue;
                v += col[((c * g.KH + kh) * g.KW + kw) * NS + s * S + oh * g.OW + tw / g.stride];
            }
        }
        dx[i] = v;
    }
}

/* The kernels' geometry from the table's; HOOP_ERR_INVALID naming the entry and the field. */
static hoop_status im2col_geom_of(const struct hoop__conv_geom *g, const char *entry,
                                  struct im2col_geom *k)
{
    if (g == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "cuda %s: no geometry", entry);
    if (g->C < 0 || g->H < 0 || g->W < 0 || g->KH < 1 || g->KW < 1 || g->OH < 0 || g->OW < 0)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "cuda %s: bad geometry C %lld H %lld W %lld KH %lld KW %lld OH %lld "
                          "OW %lld",
                          entry, (long long)g->C, (long long)g->H, (long long)g->W,
                          (long long)g->KH, (long long)g->KW, (long long)g->OH, (long long)g->OW);
    if (g->stride < 1 || g->padding < 0)
        return HOOP_ERROR(HOOP_ERR_INVALID, "cuda %s: stride %d (>= 1), padding %d (>= 0)", entry,
                          g->stride, g->padding);
    *k = (struct im2col_geom){g->C, g->H, g->W, g->KH, g->KW, g->OH, g->OW, g->stride, g->padding};
    return HOOP_OK;
}

extern "C" hoop_status hoop__cuda_im2col(float *col, const float *x,
                                         const struct hoop__conv_geom *g)
{
    struct im2col_geom k;
    HOOP_CHECK(im2col_geom_of(g, "im2col", &k));
    const size_t n = (size_t)(k.C * k.KH * k.KW) * (size_t)(k.OH * k.OW);
    if (n == 0) return HOOP_OK;
    HOOP_KLAUNCH(im2col_kernel, hoop__cuda_grid(n, IM2COL_BLOCK), IM2COL_BLOCK, 0,
                 hoop__cuda_stream(), col, x, k, (int64_t)1, n);
    return HOOP_KCHECK("im2col_kernel");
}

extern "C" hoop_status hoop__cuda_col2im(float *dx, const float *col,
                                         const struct hoop__conv_geom *g)
{
    struct im2col_geom k;
    HOOP_CHECK(im2col_geom_of(g, "col2im", &k));
    const size_t n = (size_t)(k.C * k.H * k.W);
    if (n == 0) return HOOP_OK;
    HOOP_KLAUNCH(col2im_kernel, hoop__cuda_grid(n, IM2COL_BLOCK), IM2COL_BLOCK, 0,
                 hoop__cuda_stream(), dx, col, k, (int64_t)1, 1, n);
    return HOOP_KCHECK("col2im_kernel");
}

// ----- conv2d over the batch

/* dyT (O, N*S) from dy (N, O, S); n = O*N*S elements. */
static __global__ void conv_transpose_kernel(float *dyT, const float *dy, int64_t N, int64_t O,
                                             int64_t S, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const int64_t s = (int64_t)(i % (size_t)S), r = (int64_t)(i / (size_t)S);
        const int64_t b = r % N, o = r / N;
        dyT[i] = dy[(b * O + o) * S + s];
    }
}

/* The batch's geometry and sizes, checked: K, S, N*S (GEMM dimensions, within int: the op
 * checked N*O*S and K*S), and col's element count. */
struct conv_dims {
    struct im2col_geom k;
    int64_t N, O;
    int K, S, NS;
    size_t col_n;
};

static hoop_status conv_dims_of(const struct hoop__conv_geom *g, const char *entry,
                                struct conv_dims *d)
{
    HOOP_CHECK(im2col_geom_of(g, entry, &d->k));
    if (g->N < 0 || g->O < 0)
        return HOOP_ERROR(HOOP_ERR_INVALID, "cuda %s: bad geometry N %lld O %lld", entry,
                          (long long)g->N, (long long)g->O);
    d->N = g->N;
    d->O = g->O;
    d->K = (int)(g->C * g->KH * g->KW);
    d->S = (int)(g->OH * g->OW);
    d->NS = (int)(g->N * d->S);
    d->col_n = (size_t)d->K * (size_t)d->NS;
    return HOOP_OK;
}

extern "C" hoop_status hoop__cuda_conv_scratch(const struct hoop__conv_geom *g, size_t *floats)
{
    struct conv_dims d;
    HOOP_CHECK(conv_dims_of(g, "conv_scratch", &d));
    *floats = d.col_n + (size_t)d.O * (size_t)d.NS;
    return HOOP_OK;
}

extern "C" hoop_status hoop__cuda_conv_fwd(float *y, const float *x, const float *w, float *scratch,
                                           const struct hoop__conv_geom *g)
{
    struct conv_dims d;
    HOOP_CHECK(conv_dims_of(g, "conv_fwd", &d));
    if (d.col_n == 0 || d.O == 0) return HOOP_OK;
    HOOP_KLAUNCH(im2col_kernel, hoop__cuda_grid(d.col_n, IM2COL_BLOCK), IM2COL_BLOCK, 0,
                 hoop__cuda_stream(), scratch, x, d.k, d.N, d.col_n);
    HOOP_CHECK(HOOP_KCHECK("im2col_kernel"));
    /* Column-major, per sample: y[n]^T (S, O) += col[:, n]^T (S, K) @ W^T (K, O). */
    cublasHandle_t h;
    HOOP_CHECK(hoop__cuda_blas(&h));
    const float one = 1.0f;
    HOOP_CUBLAS_CHECK(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, d.S, (int)d.O, d.K,
                                                &one, scratch, d.NS, d.S, w, d.K, 0, &one, y, d.S,
                                                (long long)d.O * d.S, (int)d.N));
    return HOOP_OK;
}

extern "C" hoop_status hoop__cuda_conv_bwd(float *dx, float *dw, const float *dy, const float *x,
                                           const float *w, float *scratch,
                                           const struct hoop__conv_geom *g, int acc_x, int acc_w)
{
    struct conv_dims d;
    HOOP_CHECK(conv_dims_of(g, "conv_bwd", &d));
    float *col = scratch, *dyT = scratch + d.col_n;
    const size_t dy_n = (size_t)d.O * (size_t)d.NS;
    if (dy_n > 0) {
        HOOP_KLAUNCH(conv_transpose_kernel, hoop__cuda_grid(dy_n, IM2COL_BLOCK), IM2COL_BLOCK, 0,
                     hoop__cuda_stream(), dyT, dy, d.N, d.O, (int64_t)d.S, dy_n);
        HOOP_CHECK(HOOP_KCHECK("conv_transpose_kernel"));
    }
    if (dw) {
        if (d.col_n > 0) {
            HOOP_KLAUNCH(im2col_kernel, hoop__cuda_grid(d.col_n, IM2COL_BLOCK), IM2COL_BLOCK, 0,
                         hoop__cuda_stream(), col, x, d.k, d.N, d.col_n);
            HOOP_CHECK(HOOP_KCHECK("im2col_kernel"));
        }
        HOOP_CHECK(hoop__cuda_gemm(0, 1, (int)d.O, d.K, d.NS, 1.0f, dyT, d.NS, col, d.NS,
                                   acc_w ? 1.0f : 0.0f, dw, d.K));
    }
    if (dx) {
        HOOP_CHECK(
            hoop__cuda_gemm(1, 0, d.K, d.NS, (int)d.O, 1.0f, w, d.K, dyT, d.NS, 0.0f, col, d.NS));
        const size_t n = (size_t)(d.N * d.k.C * d.k.H * d.k.W);
        if (n == 0) return HOOP_OK;
        HOOP_KLAUNCH(col2im_kernel, hoop__cuda_grid(n, IM2COL_BLOCK), IM2COL_BLOCK, 0,
                     hoop__cuda_stream(), dx, col, d.k, d.N, acc_x, n);
        return HOOP_KCHECK("col2im_kernel");
    }
    return HOOP_OK;
}
