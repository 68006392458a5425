/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/conv.c -- 2-D convolution (im2col + sgemm) and 2-D max pooling, NCHW, with
 * their backward.
 *
 * conv2d, per sample n (Chellapilla, Puri & Simard 2006, "High performance convolutional
 * neural networks for document processing"):
 *   col (C*KH*KW, OH*OW) = im2col(x[n]);  y[n] (O, OH*OW) = W (O, C*KH*KW) @ col + bias
 * backward:
 *   dW += dy[n] @ col^T;   dcol = W^T @ dy[n];   dx[n] (+)= col2im(dcol);   db += sum dy[n]
 * The column buffer is recomputed in backward rather than saved (N times smaller arena).
 *
 * max_pool2d saves, for each output, the offset of the first maximum of its window
 * inside its (H, W) plane; backward scatters dy there.
 *
 * Thread-safety: as the tape (one thread per tape).
 */
#include <cblas.h>
#include <limits.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "autograd/ops.h"
#include "core/check.h"

/* The element-wise loops must vectorise: GCC does so with an unknown trip count only from
 * -O3 (its -O2 cost model is "very cheap"); clang vectorises at -O2 already. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__)
#pragma GCC optimize("O3")
#endif

struct conv_geom {
    int64_t N, C, H, W, O, KH, KW, OH, OW;
    int stride, padding;
};

static struct conv_geom conv_geom_of(const hoop_tensor *x, const hoop_tensor *w, int stride,
                                     int padding)
{
    struct conv_geom g = {
        .N = x->shape[0],
        .C = x->shape[1],
        .H = x->shape[2],
        .W = x->shape[3],
        .O = w->shape[0],
        .KH = w->shape[2],
        .KW = w->shape[3],
        .stride = stride,
        .padding = padding,
    };
    g.OH = (g.H + 2 * (int64_t)padding - g.KH) / stride + 1;
    g.OW = (g.W + 2 * (int64_t)padding - g.KW) / stride + 1;
    return g;
}

/* The range [*lo, *hi) of output columns ow whose input column ow*s - p + kw is inside
 * 0..W-1, so the copy loops need no per-element bounds test. */
static void valid_cols(const struct conv_geom *g, int64_t kw, int64_t *lo, int64_t *hi)
{
    const int64_t s = g->stride, first = g->padding - kw, last = g->W - 1 + g->padding - kw;
    int64_t l = first <= 0 ? 0 : (first + s - 1) / s;
    int64_t h = last < 0 ? 0 : last / s + 1;
    *lo = l;
    *hi = h < g->OW ? h : g->OW;
    if (*hi < *lo) *hi = *lo;
}

/* col[(c*KH + kh)*KW + kw][oh*OW + ow] = x[c][oh*s - p + kh][ow*s - p + kw], 0 outside. */
static void im2col(float *restrict col, const float *restrict x, const struct conv_geom *g)
{
    const int64_t S = g->OH * g->OW, st = g->stride;
    for (int64_t c = 0; c < g->C; c++)
        for (int64_t kh = 0; kh < g->KH; kh++)
            for (int64_t kw = 0; kw < g->KW; kw++) {
                float *row = col + ((c * g->KH + kh) * g->KW + kw) * S;
                int64_t lo, hi;
                valid_cols(g, kw, &lo, &hi);
                for (int64_t oh = 0; oh < g->OH; oh++) {
                    const int64_t ih = oh * st - g->padding + kh;
                    float *dst = row + oh * g->OW;
                    if (ih < 0 || ih >= g->H) {
                        memset(dst, 0, (size_t)g->OW * sizeof(float));
                        continue;
                    }
                    /* x index of output column ow: base + ow * st (>= 0 inside lo..hi) */
                    const int64_t base = (c * g->H + ih) * g->W - g->padding + kw;
                    for (int64_t ow = 0; ow < lo; ow++) dst[ow] = 0.0f;
                    if (st == 1 && hi > lo)
                        memcpy(dst + lo, x + base + lo, (size_t)(hi - lo) * sizeof(float));
                    else
                        for (int64_t ow = lo; ow < hi; ow++) dst[ow] = x[base + ow * st];
                    for (int64_t ow = hi; ow < g->OW; ow++) dst[ow] = 0.0f;
                }
            }
}

/* The adjoint of im2col: dx[c][ih][iw] += every col entry that was read from there. */
static void col2im(float *restrict dx, const float *restrict col, const struct conv_geom *g)
{
    const int64_t S = g->OH * g->OW, st = g->stride;
    for (int64_t c = 0; c < g->C; c++)
        for (int64_t kh = 0; kh < g->KH; kh++)
            for (int64_t kw = 0; kw < g->KW; kw++) {
                const float *row = col + ((c * g->KH + kh) * g->KW + kw) * S;
                int64_t lo, hi;
                valid_cols(g, kw, &lo, &hi);
                for (int64_t oh = 0; oh < g->OH; oh++) {
                    const int64_t ih = oh * st - g->padding + kh;
                    if (ih < 0 || ih >= g->H) continue;
                    const int64_t base = (c * g->H + ih) * g->W - g->padding + kw;
                    const float *src = row + oh * g->OW;
                    for (int64_t ow = lo; ow < hi; ow++) dx[base + ow * st] += src[ow];
                }
            }
}

static void conv_backward_bias(hoop_tape *tape, struct hoop_node *n, const struct conv_geom *g)
{
    int acc;
    float *db = hoop__grad_for(tape, n->in[2], &acc);
    if (db == NULL) return;
    const int64_t S = g->OH * g->OW;
    if (!acc) memset(db, 0, (size_t)g->O * sizeof(float));
    for (int64_t i = 0; i < g->N; i++)
        for (int64_t o = 0; o < g->O; o++) {
            db[o] += hoop__sum_f32(n->out->grad + (i * g->O + o) * S, (size_t)S);
        }
}

static void conv_backward(hoop_tape *tape, struct hoop_node *n)
{
    hoop_tensor *x = n->in[0], *w = n->in[1];
    const struct conv_geom g = conv_geom_of(x, w, n->args.conv.stride, n->args.conv.padding);
    const int K = (int)(g.C * g.KH * g.KW), S = (int)(g.OH * g.OW), O = (int)g.O;
    int acc_x, acc_w;
    float *dx = hoop__grad_for(tape, x, &acc_x);
    float *dw = hoop__grad_for(tape, w, &acc_w);
    float *col = hoop__arena_alloc(tape, (size_t)K * S * sizeof(float));
    if (col == NULL) return; /* NOMEM: backward reports it */
    if (dx && !acc_x) memset(dx, 0, x->count * sizeof(float));
    for (int64_t i = 0; i < g.N; i++) {
        const float *dy = n->out->grad + i * O * S;
        if (dw) {
            im2col(col, x->data + i * g.C * g.H * g.W, &g);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, O, K, S, 1.0f, dy, S, col, S,
                        (i == 0 && !acc_w) ? 0.0f : 1.0f, dw, K);
        }
        if (dx) {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, S, O, 1.0f, w->data, K, dy, S,
                        0.0f, col, S);
            col2im(dx + i * g.C * g.H * g.W, col, &g);
        }
    }
    conv_backward_bias(tape, n, &g);
}

static hoop_status conv_check(hoop_tensor *x, hoop_tensor *w, hoop_tensor *b, int stride,
                              int padding)
{
    const char *op = "hoop_conv2d";
    HOOP_CHECK(hoop__check_arg(x, op, "x"));
    HOOP_CHECK(hoop__check_arg(w, op, "w"));
    if (x->ndim != 4) return hoop__ndim_error(op, "x", x, "4 dimensions (N, C, H, W)");
    if (w->ndim != 4) return hoop__ndim_error(op, "w", w, "4 dimensions (O, C, KH, KW)");
    if (stride < 1 || padding < 0)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s: stride=%d must be >= 1 and padding=%d >= 0", op,
                          stride, padding);
    if (x->shape[1] != w->shape[1])
        return hoop__shape_error(op, "x", x, "w", w, "x's dim 1 (channels) must equal w's dim 1");
    const int64_t pad2 = 2 * (int64_t)padding; /* in int64: 2 * INT_MAX overflows int */
    if (x->shape[2] + pad2 < w->shape[2] || x->shape[3] + pad2 < w->shape[3])
        return hoop__shape_error(op, "x", x, "w", w, "the padded input is smaller than the kernel");
    /* The output and the column buffer (C*KH*KW, OH*OW) are indexed with int by BLAS. */
    const int64_t OH = (x->shape[2] + pad2 - w->shape[2]) / stride + 1;
    const int64_t OW = (x->shape[3] + pad2 - w->shape[3]) / stride + 1;
    const int64_t K = w->shape[1] * w->shape[2] * w->shape[3]; /* <= INT_MAX: w's count */
    if (OH > INT_MAX || OW > INT_MAX || OH * OW > INT_MAX / K ||
        OH * OW > INT_MAX / (x->shape[0] * w->shape[0]))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s: stride=%d and padding=%d give an output of %lld x %lld per "
                          "channel, more than the %d elements an op takes",
                          op, stride, padding, (long long)OH, (long long)OW, INT_MAX);
    if (b != NULL) {
        HOOP_CHECK(hoop__check_arg(b, op, "bias"));
        if (b->ndim != 1 || b->shape[0] != w->shape[0])
            return hoop__shape_error(op, "w", w, "bias", b, "bias must be (w's dim 0)");
    }
    return HOOP_OK;
}

hoop_status hoop_conv2d(hoop_tape *tape, hoop_tensor *x, hoop_tensor *w, hoop_tensor *bias,
                        int stride, int padding, hoop_tensor **out)
{
    HOOP_CHECK(hoop__check_call(tape, out, "hoop_conv2d"));
    HOOP_CHECK(conv_check(x, w, bias, stride, padding));
    const struct conv_geom g = conv_geom_of(x, w, stride, padding);
    const int K = (int)(g.C * g.KH * g.KW), S = (int)(g.OH * g.OW), O = (int)g.O;
    const int64_t shape[4] = {g.N, g.O, g.OH, g.OW};
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_arena(tape, 4, shape, &y));
    float *col = hoop__arena_alloc(tape, (size_t)K * S * sizeof(float));
    if (col == NULL) return HOOP_ERR_NOMEM;
    for (int64_t i = 0; i < g.N; i++) {
        float *yi = y->data + i * O * S;
        for (int o = 0; o < O; o++) {
            const float bo = bias ? bias->data[o] : 0.0f;
            for (int k = 0; k < S; k++) yi[(size_t)o * S + k] = bo;
        }
        im2col(col, x->data + i * g.C * g.H * g.W, &g);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, O, S, K, 1.0f, w->data, K, col, S,
                    1.0f, yi, S);
    }
    hoop_tensor *in[3] = {x, w, bias};
    struct hoop_node *n;
    HOOP_CHECK(hoop__tape_record(tape, "conv2d", conv_backward, in, 3, y, &n));
    if (n) {
        n->args.conv.stride = stride;
        n->args.conv.padding = padding;
    }
    *out = y;
    return HOOP_OK;
}

// ----- max pooling --------------------------------------------------------------------------

static void pool_backward(hoop_tape *tape, struct hoop_node *n)
{
    hoop_tensor *x = n->in[0], *y = n->out;
    int acc;
    float *dx = hoop__grad_for(tape, x, &acc);
    if (dx == NULL) return;
    if (!acc) memset(dx, 0, x->count * sizeof(float));
    const int32_t *arg = n->saved;
    const size_t planes = (size_t)(x->shape[0] * x->shape[1]);
    const size_t in_plane = (size_t)(x->shape[2] * x->shape[3]);
    const size_t out_plane = (size_t)(y->shape[2] * y->shape[3]);
    for (size_t p = 0; p < planes; p++)
        for (size_t k = 0; k < out_plane; k++)
            dx[p * in_plane + (size_t)arg[p * out_plane + k]] += y->grad[p * out_plane + k];
}

/* The common 2x2 window with stride 2, branch-free; same first-maximum rule (strict >). */
static void pool_plane_2x2(float *restrict y, int32_t *restrict arg, const float *restrict x,
                           int64_t W, int64_t OH, int64_t OW)
{
    for (int64_t oh = 0; oh < OH; oh++) {
        const float *r0 = x + 2 * oh * W, *r1 = r0 + W;
        for (int64_t ow = 0; ow < OW; ow++) {
            const float a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
            const int64_t at = 2 * oh * W + 2 * ow;
            const float m01 = b > a ? b : a, m23 = d > c ? d : c;
            const int64_t i01 = b > a ? at + 1 : at, i23 = d > c ? at + W + 1 : at + W;
            y[oh * OW + ow] = m23 > m01 ? m23 : m01;
            arg[oh * OW + ow] = (int32_t)(m23 > m01 ? i23 : i01);
        }
    }
}

static void pool_plane(float *y, int32_t *arg, const float *x, int64_t H, int64_t W, int64_t OH,
                       int64_t OW, int kernel, int stride)
{
    if (kernel == 2 && stride == 2) {
        pool_plane_2x2(y, arg, x, W, OH, OW);
        return;
    }
    for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
            int64_t best = oh * stride * W + ow * stride;
            for (int kh = 0; kh < kernel; kh++)
                for (int kw = 0; kw < kernel; kw++) {
                    const int64_t at = (oh * stride + kh) * W + ow * stride + kw;
                    if (x[at] > x[best]) best = at;
                }
            y[oh * OW + ow] = x[best];
            arg[oh * OW + ow] = (int32_t)best;
        }
    (void)H;
}

hoop_status hoop_max_pool2d(hoop_tape *tape, hoop_tensor *x, int kernel, int stride,
                            hoop_tensor **out)
{
    const char *op = "hoop_max_pool2d";
    HOOP_CHECK(hoop__check_call(tape, out, op));
    HOOP_CHECK(hoop__check_arg(x, op, "x"));
    if (x->ndim != 4) return hoop__ndim_error(op, "x", x, "4 dimensions (N, C, H, W)");
    if (kernel < 1 || stride < 1 || x->shape[2] < kernel || x->shape[3] < kernel)
        return hoop__ndim_error(op, "x", x, "H, W >= kernel, with kernel and stride >= 1");
    const int64_t H = x->shape[2], W = x->shape[3];
    const int64_t OH = (H - kernel) / stride + 1, OW = (W - kernel) / stride + 1;
    const int64_t shape[4] = {x->shape[0], x->shape[1], OH, OW};
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_arena(tape, 4, shape, &y));
    int32_t *arg = hoop__arena_alloc(tape, y->count * sizeof(int32_t));
    if (arg == NULL) return HOOP_ERR_NOMEM;
    const int64_t planes = x->shape[0] * x->shape[1];
    for (int64_t p = 0; p < planes; p++)
        pool_plane(y->data + p * OH * OW, arg + p * OH * OW, x->data + p * H * W, H, W, OH, OW,
                   kernel, stride);
    struct hoop_node *n;
    HOOP_CHECK(hoop__tape_record(tape, "max_pool2d", pool_backward, &x, 1, y, &n));
    if (n) n->saved = arg;
    *out = y;
    return HOOP_OK;
}
