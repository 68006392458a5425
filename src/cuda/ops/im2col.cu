/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/ops/im2col.cu -- convolution's lowering for one sample (Chellapilla, Puri &
 * Simard 2006): im2col and its adjoint col2im, geometry in struct hoop__conv_geom.
 *
 * im2col: one thread per col element (C*KH*KW, OH*OW): col[(c*KH + kh)*KW + kw][oh*OW + ow]
 * = x[c][oh*stride - padding + kh][ow*stride - padding + kw], 0 outside x. A copy: equal to
 * the CPU's bit for bit.
 *
 * col2im: one thread per dx element (C, H, W) gathering every col entry that im2col read
 * from it: for each (kh, kw) in row-major order, the one (oh, ow) with oh*stride - padding
 * + kh = ih and ow*stride - padding + kw = iw, where that is a whole output position. No
 * atomics, so the result is deterministic; the CPU adds the same terms into dx in the same
 * (kh, kw) order, so the results are equal bit for bit.
 *
 * Accumulate contract: im2col writes (=) col; col2im always adds (+=) into dx (the caller
 * zeroes dx first for a written gradient).
 */
#include "cuda/ops/ops.h"

#define IM2COL_BLOCK 256

/* The geometry the kernels need, by value (the table's struct is in host memory). */
struct im2col_geom {
    int64_t C, H, W, KH, KW, OH, OW, stride, padding;
};

static __global__ void im2col_kernel(float *col, const float *x, struct im2col_geom g, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int64_t r = (int64_t)i;
        const int64_t ow = r % g.OW;
        r /= g.OW;
        const int64_t oh = r % g.OH;
        r /= g.OH;
        const int64_t kw = r % g.KW;
        r /= g.KW;
        const int64_t kh = r % g.KH;
        const int64_t c = r / g.KH;
        const int64_t ih = oh * g.stride - g.padding + kh, iw = ow * g.stride - g.padding + kw;
        const bool in = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W;
        col[i] = in ? x[(c * g.H + ih) * g.W + iw] : 0.0f;
    }
}

static __global__ void col2im_kernel(float *dx, const float *col, struct im2col_geom g, size_t n)
{
    const int64_t S = g.OH * g.OW;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int64_t r = (int64_t)i;
        const int64_t iw = r % g.W;
        r /= g.W;
        const int64_t ih = r % g.H;
        const int64_t c = r / g.H;
        float v = dx[i];
        for (int64_t kh = 0; kh < g.KH; kh++) {
            const int64_t th = ih + g.padding - kh; /* = oh * stride */
            if (th < 0 || th % g.stride != 0 || th / g.stride >= g.OH) continue;
            const int64_t oh = th / g.stride;
            for (int64_t kw = 0; kw < g.KW; kw++) {
                const int64_t tw = iw + g.padding - kw; /* = ow * stride */
                if (tw < 0 || tw % g.stride != 0 || tw / g.stride >= g.OW) continue;
                v += col[((c * g.KH + kh) * g.KW + kw) * S + oh * g.OW + tw / g.stride];
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
                 hoop__cuda_stream(), col, x, k, n);
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
                 hoop__cuda_stream(), dx, col, k, n);
    return HOOP_KCHECK("col2im_kernel");
}
