/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/kern_cpu.c -- hoop__kern_cpu, the CPU kernel table (kern.h): host loops and
 * OpenBLAS cblas_sgemm. This is the reference engine every other device is checked
 * against: the loops are the ones the ops had before the table existed (same order of
 * summation, same BLAS calls), so results are bit for bit those of earlier versions.
 *
 * Element-wise loops are branch-free (selects) and restrict-qualified where the operands
 * cannot alias, so the compiler vectorises them.
 *
 * Thread-safety: the kernels keep no state (dropout's mask is a function of its seed and
 * offset).
 */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/kern.h"
#include "core/check.h"
#include "core/clock.h"
#include "core/philox.h"
#include "hoop/nn.h"

/* The element-wise loops must vectorise: GCC does so with an unknown trip count only from
 * -O3 (its -O2 cost model is "very cheap"); clang vectorises at -O2 already. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__)
#pragma GCC optimize("O3")
#endif

// ----- memory --------------------------------------------------------------------------------

static hoop_status cpu_describe(char *buf, size_t len)
{
    snprintf(buf, len, "cpu");
    return HOOP_OK;
}

static hoop_status cpu_mem_alloc(void **p, size_t bytes)
{
    /* aligned_alloc wants a multiple of the alignment; 0 bytes still gives a pointer. */
    if (bytes > SIZE_MAX - 64)
        return HOOP_ERROR(HOOP_ERR_NOMEM, "cpu: %zu bytes cannot be allocated", bytes);
    const size_t rounded = bytes ? (bytes + 63) / 64 * 64 : 64;
    *p = aligned_alloc(64, rounded);
    if (*p == NULL)
        return HOOP_ERROR(HOOP_ERR_NOMEM, "cpu: cannot allocate %zu bytes of host memory", bytes);
    return HOOP_OK;
}

static void cpu_mem_free(void *p)
{
    free(p);
}

static hoop_status cpu_sync(void)
{
    return HOOP_OK; /* the CPU's work is done when its call returns */
}

static hoop_status cpu_mem_stats(struct hoop__mem_stats *st)
{
    memset(st, 0, sizeof(*st));
    return HOOP_OK;
}

static hoop_status cpu_copy(void *dst, const void *src, size_t bytes, int to_device)
{
    (void)to_device; /* both sides are host memory */
    if (bytes) memcpy(dst, src, bytes);
    return HOOP_OK;
}

/* The CPU's asynchronous uploads are plain copies, done when the call returns, so its
 * events have nothing to mark: one static token serves as every event (and as every
 * stream). A timer is a heap cell for the host's clock at its last record (0: never). */
static char cpu_event_token;

static hoop_status cpu_event_new(void **ev)
{
    *ev = &cpu_event_token;
    return HOOP_OK;
}

static void cpu_event_free(void *ev)
{
    if (ev != &cpu_event_token) free(ev);
}

static hoop_status cpu_upload_async(void *dst, const void *src, size_t bytes, void *after,
                                    void *done)
{
    (void)after, (void)done;
    if (bytes) memcpy(dst, src, bytes);
    return HOOP_OK;
}

static hoop_status cpu_download_async(void *dst, const void *src, size_t bytes)
{
    if (bytes) memcpy(dst, src, bytes);
    return HOOP_OK;
}

static hoop_status cpu_event_op(void *ev)
{
    (void)ev; /* compute_wait, event_sync: the work is done already */
    return HOOP_OK;
}

static hoop_status cpu_stream_record(void *s, void *ev)
{
    (void)s; /* every stream's work is done when its call returns: a timer reads the clock */
    if (ev && ev != &cpu_event_token) *(int64_t *)ev = hoop__now_ns();
    return HOOP_OK;
}

static hoop_status cpu_compute_record(void *ev)
{
    return cpu_stream_record(NULL, ev);
}

static hoop_status cpu_stream_new(void **s)
{
    *s = &cpu_event_token;
    return HOOP_OK;
}

static void cpu_stream_free(void *s)
{
    (void)s;
}

static hoop_status cpu_stream_wait(void *s, void *ev)
{
    (void)s, (void)ev;
    return HOOP_OK;
}

static hoop_status cpu_timer_new(void **ev)
{
    return hoop__calloc((int64_t **)ev, 1);
}

static hoop_status cpu_event_query(void *ev, int *done)
{
    (void)ev;
    *done = 1;
    return HOOP_OK;
}

static hoop_status cpu_event_elapsed(void *a, void *b, double *ms)
{
    if (a == &cpu_event_token || b == &cpu_event_token)
        return HOOP_ERROR(HOOP_ERR_USAGE, "cpu: event_elapsed of an event that is no timer");
    const int64_t ta = *(const int64_t *)a, tb = *(const int64_t *)b;
    if (ta == 0 || tb == 0)
        return HOOP_ERROR(HOOP_ERR_USAGE, "cpu: event_elapsed of a timer never recorded");
    *ms = (double)(tb - ta) / 1e6;
    return HOOP_OK;
}

// ----- linear algebra and copies ------------------------------------------------------------

static hoop_status cpu_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha,
                            const float *A, int lda, const float *B, int ldb, float beta, float *C,
                            int ldc)
{
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return HOOP_OK;
}

static hoop_status cpu_fill(float *dst, size_t count, float value)
{
    if (value == 0.0f && !signbit(value)) {
        memset(dst, 0, count * sizeof(float));
        return HOOP_OK;
    }
    for (size_t i = 0; i < count; i++) dst[i] = value;
    return HOOP_OK;
}

static hoop_status cpu_axpy_or_copy(float *dst, const float *src, size_t count, int acc)
{
    if (acc)
        for (size_t i = 0; i < count; i++) dst[i] += src[i];
    else
        memcpy(dst, src, count * sizeof(float));
    return HOOP_OK;
}

static hoop_status cpu_add(float *y, const float *a, const float *b, size_t count)
{
    for (size_t i = 0; i < count; i++) y[i] = a[i] + b[i];
    return HOOP_OK;
}

// ----- bias ---------------------------------------------------------------------------------

/* Sum of n floats with 8 interleaved partial sums (a fixed order, so deterministic; the
 * compiler vectorises it, unlike one serial float accumulator). */
static float sum_f32(const float *p, size_t n)
{
    float acc[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += p[i + j];
    float s = 0.0f;
    for (; i < n; i++) s += p[i];
    for (int j = 0; j < 8; j++) s += acc[j];
    return s;
}

static hoop_status cpu_bias_fill(float *y, const float *bias, size_t N, size_t C, size_t inner)
{
    if (inner == 1 && bias != NULL) {
        for (size_t r = 0; r < N; r++) memcpy(y + r * C, bias, C * sizeof(float));
        return HOOP_OK;
    }
    for (size_t i = 0; i < N; i++)
        for (size_t c = 0; c < C; c++) {
            const float bc = bias ? bias[c] : 0.0f;
            float *py = y + (i * C + c) * inner;
            for (size_t k = 0; k < inner; k++) py[k] = bc;
        }
    return HOOP_OK;
}

static hoop_status cpu_bias_add(float *y, const float *x, const float *bias, size_t N, size_t C,
                                size_t inner)
{
    for (size_t i = 0; i < N; i++)
        for (size_t c = 0; c < C; c++) {
            const float *px = x + (i * C + c) * inner;
            float *py = y + (i * C + c) * inner, bc = bias[c];
            for (size_t k = 0; k < inner; k++) py[k] = px[k] + bc;
        }
    return HOOP_OK;
}

static hoop_status cpu_bias_grad(float *db, const float *dy, size_t N, size_t C, size_t inner,
                                 int acc)
{
    if (!acc) memset(db, 0, C * sizeof(float));
    if (inner == 1) {
        for (size_t r = 0; r < N; r++) {
            const float *row = dy + r * C;
            for (size_t c = 0; c < C; c++) db[c] += row[c];
        }
        return HOOP_OK;
    }
    for (size_t i = 0; i < N; i++)
        for (size_t c = 0; c < C; c++) db[c] += sum_f32(dy + (i * C + c) * inner, inner);
    return HOOP_OK;
}

// ----- activations --------------------------------------------------------------------------

typedef void (*unary_fwd_fn)(float *restrict y, const float *restrict x, size_t n);
/* g[i] = dy[i] * f'(x[i]); g may be dy (in place), so neither is restrict. */
typedef void (*unary_bwd_fn)(float *g, const float *dy, const float *restrict x,
                             const float *restrict y, size_t n);

static void relu_fwd(float *restrict y, const float *restrict x, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = x[i] <= 0.0f ? 0.0f : x[i]; /* NaN stays NaN */
}

static void relu_bwd(float *g, const float *dy, const float *restrict x, const float *restrict y,
                     size_t n)
{
    (void)x;
    for (size_t i = 0; i < n; i++) {
        const float d = dy[i];          /* loaded unconditionally, so the select vectorises */
        g[i] = y[i] <= 0.0f ? 0.0f : d; /* as PyTorch's threshold_backward: NaN passes d */
    }
}

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_C 0.044715f

static void gelu_fwd(float *restrict y, const float *restrict x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + tanhf(GELU_K * (v + GELU_C * v * v * v)));
    }
}

static void gelu_bwd(float *g, const float *dy, const float *restrict x, const float *restrict y,
                     size_t n)
{
    (void)y;
    for (size_t i = 0; i < n; i++) {
        float v = x[i], t = tanhf(GELU_K * (v + GELU_C * v * v * v));
        float du = GELU_K * (1.0f + 3.0f * GELU_C * v * v);
        g[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
    }
}

static void tanh_fwd(float *restrict y, const float *restrict x, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = tanhf(x[i]);
}

static void tanh_bwd(float *g, const float *dy, const float *restrict x, const float *restrict y,
                     size_t n)
{
    (void)x;
    for (size_t i = 0; i < n; i++) g[i] = dy[i] * (1.0f - y[i] * y[i]);
}

/* exp of a non-positive argument only, so neither branch overflows. */
static void sigmoid_fwd(float *restrict y, const float *restrict x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float e = expf(-fabsf(x[i]));
        y[i] = x[i] >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    }
}

static void sigmoid_bwd(float *g, const float *dy, const float *restrict x, const float *restrict y,
                        size_t n)
{
    (void)x;
    for (size_t i = 0; i < n; i++) g[i] = dy[i] * y[i] * (1.0f - y[i]);
}

static const struct {
    unary_fwd_fn fwd;
    unary_bwd_fn bwd;
} unary_fns[HOOP__UNARY_COUNT] = {
    [HOOP__UNARY_RELU] = {relu_fwd, relu_bwd},
    [HOOP__UNARY_GELU] = {gelu_fwd, gelu_bwd},
    [HOOP__UNARY_TANH] = {tanh_fwd, tanh_bwd},
    [HOOP__UNARY_SIGMOID] = {sigmoid_fwd, sigmoid_bwd},
};

static hoop_status unary_kind_check(enum hoop__unary kind)
{
    if ((unsigned)kind >= HOOP__UNARY_COUNT)
        return HOOP_ERROR(HOOP_ERR_INTERNAL, "cpu kernels: unary kind %d is unknown", (int)kind);
    return HOOP_OK;
}

static hoop_status cpu_unary_fwd(enum hoop__unary kind, float *y, const float *x, size_t count)
{
    HOOP_CHECK(unary_kind_check(kind));
    unary_fns[kind].fwd(y, x, count);
    return HOOP_OK;
}

static hoop_status cpu_unary_bwd(enum hoop__unary kind, float *dx, const float *dy, const float *x,
                                 const float *y, size_t count, int acc)
{
    HOOP_CHECK(unary_kind_check(kind));
    if (!acc) {
        unary_fns[kind].bwd(dx, dy, x, y, count);
        return HOOP_OK;
    }
    /* Accumulating: dy * f' a block at a time on the stack, then added; dy stays as it
     * was (it is the output's gradient, which hoop_tensor_grad returns). */
    float tmp[512];
    for (size_t i = 0; i < count; i += 512) {
        const size_t k = count - i < 512 ? count - i : 512;
        unary_fns[kind].bwd(tmp, dy + i, x ? x + i : NULL, y ? y + i : NULL, k);
        for (size_t j = 0; j < k; j++) dx[i + j] += tmp[j];
    }
    return HOOP_OK;
}

// ----- softmax and cross-entropy ------------------------------------------------------------

/* y = softmax(x) over rows of C; returns log-sum-exp of the row. */
static float softmax_row(float *restrict y, const float *restrict x, size_t C)
{
    float m = x[0];
    for (size_t c = 1; c < C; c++) m = x[c] > m ? x[c] : m;
    float s = 0.0f;
    for (size_t c = 0; c < C; c++) {
        y[c] = expf(x[c] - m);
        s += y[c];
    }
    const float inv = 1.0f / s;
    for (size_t c = 0; c < C; c++) y[c] *= inv;
    return m + logf(s);
}

static hoop_status cpu_softmax_fwd(float *y, const float *x, size_t rows, size_t C)
{
    for (size_t r = 0; r < rows; r++) softmax_row(y + r * C, x + r * C, C);
    return HOOP_OK;
}

static hoop_status cpu_softmax_bwd(float *dx, const float *y, const float *dy, size_t rows,
                                   size_t C, int acc)
{
    for (size_t r = 0; r < rows; r++) {
        const float *yr = y + r * C, *gr = dy + r * C;
        float *dr = dx + r * C;
        float dot = 0.0f;
        for (size_t c = 0; c < C; c++) dot += gr[c] * yr[c];
        if (acc)
            for (size_t c = 0; c < C; c++) dr[c] += yr[c] * (gr[c] - dot);
        else
            for (size_t c = 0; c < C; c++) dr[c] = yr[c] * (gr[c] - dot);
    }
    return HOOP_OK;
}

static hoop_status cpu_ce_fwd(float *loss, float *probs, const float *x, const int32_t *labels,
                              size_t N, size_t C, float eps)
{
    double total = 0.0;
    for (size_t r = 0; r < N; r++) {
        const float *xr = x + r * C;
        const float lse = softmax_row(probs + r * C, xr, C);
        double nll = (double)lse - xr[labels[r]];
        if (eps > 0.0f) {
            double mean_nll = 0.0; /* - mean over classes of log p_c */
            for (size_t c = 0; c < C; c++) mean_nll += (double)lse - xr[c];
            nll = (1.0 - eps) * nll + eps * mean_nll / (double)C;
        }
        total += nll;
    }
    *loss = (float)(total / (double)N);
    return HOOP_OK;
}

static hoop_status cpu_ce_bwd(float *dx, const float *probs, const int32_t *labels,
                              const float *dloss, size_t N, size_t C, float eps, int acc)
{
    const float scale = dloss[0] / (float)N;
    const float off = eps / (float)C, on = 1.0f - eps + off;
    for (size_t r = 0; r < N; r++) {
        const float *p = probs + r * C;
        float *d = dx + r * C;
        const size_t y = (size_t)labels[r];
        if (acc)
            for (size_t c = 0; c < C; c++) d[c] += scale * (p[c] - off);
        else
            for (size_t c = 0; c < C; c++) d[c] = scale * (p[c] - off);
        d[y] -= scale * (on - off);
    }
    return HOOP_OK;
}

// ----- reductions and dropout ---------------------------------------------------------------

static hoop_status cpu_reduce_fwd(float *y, const float *x, size_t count, int mean)
{
    double s = 0.0; /* double accumulation: the sum of many f32 values stays accurate */
    for (size_t i = 0; i < count; i++) s += x[i];
    y[0] = (float)(mean ? s / (double)count : s);
    return HOOP_OK;
}

static hoop_status cpu_reduce_bwd(float *dx, const float *dy, float scale, size_t count, int acc)
{
    const float g = dy[0] * scale;
    if (acc)
        for (size_t i = 0; i < count; i++) dx[i] += g;
    else
        for (size_t i = 0; i < count; i++) dx[i] = g;
    return HOOP_OK;
}

static hoop_status cpu_dropout_fwd(float *y, float *mask, const float *x, size_t count, float p,
                                   const uint64_t *seed_p, uint64_t offset)
{
    const uint64_t seed = *seed_p;
    const float scale = 1.0f / (1.0f - p);
    for (size_t i = 0; i < count; i++) {
        mask[i] = hoop__philox_uniform(seed, offset + i) < p ? 0.0f : scale;
        y[i] = x[i] * mask[i];
    }
    return HOOP_OK;
}

static hoop_status cpu_dropout_bwd(float *dx, const float *dy, const float *mask, size_t count,
                                   int acc)
{
    if (acc)
        for (size_t i = 0; i < count; i++) dx[i] += dy[i] * mask[i];
    else
        for (size_t i = 0; i < count; i++) dx[i] = dy[i] * mask[i];
    return HOOP_OK;
}

// ----- convolution: im2col, col2im ----------------------------------------------------------

/* The range [*lo, *hi) of output columns ow whose input column ow*s - p + kw is inside
 * 0..W-1, so the copy loops need no per-element bounds test. */
static void valid_cols(const struct hoop__conv_geom *g, int64_t kw, int64_t *lo, int64_t *hi)
{
    const int64_t s = g->stride, first = g->padding - kw, last = g->W - 1 + g->padding - kw;
    int64_t l = first <= 0 ? 0 : (first + s - 1) / s;
    int64_t h = last < 0 ? 0 : last / s + 1;
    *lo = l;
    *hi = h < g->OW ? h : g->OW;
    if (*hi < *lo) *hi = *lo;
}

/* One output row of im2col: dst (OW) from input row base (x index of column 0). */
static void im2col_row(float *restrict dst, const float *restrict x, int64_t base, int64_t lo,
                       int64_t hi, const struct hoop__conv_geom *g)
{
    const int64_t st = g->stride;
    for (int64_t ow = 0; ow < lo; ow++) dst[ow] = 0.0f;
    if (st == 1 && hi > lo)
        memcpy(dst + lo, x + base + lo, (size_t)(hi - lo) * sizeof(float));
    else
        for (int64_t ow = lo; ow < hi; ow++) dst[ow] = x[base + ow * st];
    for (int64_t ow = hi; ow < g->OW; ow++) dst[ow] = 0.0f;
}

static hoop_status cpu_im2col(float *col, const float *x, const struct hoop__conv_geom *g)
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
                    im2col_row(dst, x, (c * g->H + ih) * g->W - g->padding + kw, lo, hi, g);
                }
            }
    return HOOP_OK;
}

static hoop_status cpu_col2im(float *dx, const float *col, const struct hoop__conv_geom *g)
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
    return HOOP_OK;
}

/* conv2d one sample at a time (the loops conv.c had): col is one sample's columns. */
static hoop_status cpu_conv_scratch(const struct hoop__conv_geom *g, size_t *floats)
{
    *floats = (size_t)(g->C * g->KH * g->KW) * (size_t)(g->OH * g->OW);
    return HOOP_OK;
}

static hoop_status cpu_conv_fwd(float *y, const float *x, const float *w, float *col,
                                const struct hoop__conv_geom *g)
{
    const int K = (int)(g->C * g->KH * g->KW), S = (int)(g->OH * g->OW), O = (int)g->O;
    for (int64_t i = 0; i < g->N; i++) {
        cpu_im2col(col, x + i * g->C * g->H * g->W, g);
        cpu_gemm(0, 0, O, S, K, 1.0f, w, K, col, S, 1.0f, y + i * O * S, S);
    }
    return HOOP_OK;
}

static hoop_status cpu_conv_bwd(float *dx, float *dw, const float *dy, const float *x,
                                const float *w, float *col, const struct hoop__conv_geom *g,
                                int acc_x, int acc_w)
{
    const int K = (int)(g->C * g->KH * g->KW), S = (int)(g->OH * g->OW), O = (int)g->O;
    const size_t plane = (size_t)(g->C * g->H * g->W);
    if (dx && !acc_x) cpu_fill(dx, (size_t)g->N * plane, 0.0f);
    for (int64_t i = 0; i < g->N; i++) {
        const float *dyi = dy + i * O * S;
        if (dw) {
            cpu_im2col(col, x + (size_t)i * plane, g);
            cpu_gemm(0, 1, O, K, S, 1.0f, dyi, S, col, S, (i == 0 && !acc_w) ? 0.0f : 1.0f, dw, K);
        }
        if (dx) {
            cpu_gemm(1, 0, K, S, O, 1.0f, w, K, dyi, S, 0.0f, col, S);
            cpu_col2im(dx + (size_t)i * plane, col, g);
        }
    }
    return HOOP_OK;
}

// ----- max pooling --------------------------------------------------------------------------

/* The common 2x2 window with stride 2, branch-free; the same rule as the loop below, as a
 * tree: ((a, b), (c, d)) picks what a row-major walk of a, b, c, d picks. */
static void pool_plane_2x2(float *restrict y, int32_t *restrict arg, const float *restrict x,
                           int64_t W, int64_t OH, int64_t OW)
{
    for (int64_t oh = 0; oh < OH; oh++) {
        const float *r0 = x + 2 * oh * W, *r1 = r0 + W;
        for (int64_t ow = 0; ow < OW; ow++) {
            const float a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
            const int64_t at = 2 * oh * W + 2 * ow;
            const int tb = b > a || b != b, td = d > c || d != d; /* v != v: NaN */
            const float m01 = tb ? b : a, m23 = td ? d : c;
            const int64_t i01 = tb ? at + 1 : at, i23 = td ? at + W + 1 : at + W;
            const int t23 = m23 > m01 || m23 != m23;
            y[oh * OW + ow] = t23 ? m23 : m01;
            arg[oh * OW + ow] = (int32_t)(t23 ? i23 : i01);
        }
    }
}

/* Each window's maximum and its offset, walking the window in row-major order: a value
 * replaces the one kept when it is greater (so ties keep the first) or NaN (so a window
 * with a NaN gives NaN, its last one, as PyTorch's max_pool2d). */
static void pool_plane(float *y, int32_t *arg, const float *x, int64_t W, int64_t OH, int64_t OW,
                       int kernel, int stride)
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
                    if (x[at] > x[best] || x[at] != x[at]) best = at;
                }
            y[oh * OW + ow] = x[best];
            arg[oh * OW + ow] = (int32_t)best;
        }
}

static hoop_status cpu_pool_fwd(float *y, int32_t *arg, const float *x, size_t planes, int64_t H,
                                int64_t W, int64_t OH, int64_t OW, int kernel, int stride)
{
    for (size_t p = 0; p < planes; p++)
        pool_plane(y + p * OH * OW, arg + p * OH * OW, x + p * H * W, W, OH, OW, kernel, stride);
    return HOOP_OK;
}

static hoop_status cpu_pool_bwd(float *dx, const float *dy, const int32_t *arg, size_t planes,
                                int64_t H, int64_t W, int64_t OH, int64_t OW, int kernel,
                                int stride, int acc)
{
    (void)kernel, (void)stride; /* the scatter needs only the planes' sizes */
    const size_t in_plane = (size_t)(H * W), out_plane = (size_t)(OH * OW);
    if (!acc) memset(dx, 0, planes * in_plane * sizeof(float));
    for (size_t p = 0; p < planes; p++)
        for (size_t k = 0; k < out_plane; k++)
            dx[p * in_plane + (size_t)arg[p * out_plane + k]] += dy[p * out_plane + k];
    return HOOP_OK;
}

// ----- optimizers and clipping --------------------------------------------------------------

/* The branches are hoisted so each loop vectorises; with wd == 0, g + 0 p == g exactly, as
 * torch's skipped addition. */
static hoop_status cpu_sgd(const struct hoop__sgd_args *a, const struct hoop__step_scalars *s,
                           float *restrict p, const float *restrict g, float *restrict buf,
                           size_t n)
{
    const float wd = a->weight_decay, mu = a->momentum, lr = s->lr;
    const float keep = s->keep, take = s->take;
    if (buf == NULL) {
        for (size_t i = 0; i < n; i++) p[i] -= lr * (g[i] + wd * p[i]);
    } else if (a->nesterov) {
        for (size_t i = 0; i < n; i++) {
            const float d = g[i] + wd * p[i], b = keep * buf[i] + take * d;
            buf[i] = b;
            p[i] -= lr * (d + mu * b);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            const float b = keep * buf[i] + take * (g[i] + wd * p[i]);
            buf[i] = b;
            p[i] -= lr * b;
        }
    }
    return HOOP_OK;
}

static hoop_status cpu_adamw(const struct hoop__adamw_args *a, const struct hoop__step_scalars *s,
                             float *restrict p, const float *restrict g, float *restrict m,
                             float *restrict v, size_t n)
{
    const float b1 = a->beta1, b2 = a->beta2;
    const float step_size = s->step_size, bc2_sqrt = s->bc2_sqrt, decay = s->decay;
    for (size_t i = 0; i < n; i++) {
        p[i] *= decay;
        m[i] = m[i] * b1 + (1.0f - b1) * g[i];
        v[i] = v[i] * b2 + (1.0f - b2) * g[i] * g[i];
        const float denom = sqrtf(v[i]) / bc2_sqrt + a->eps;
        p[i] += -step_size * (m[i] / denom);
    }
    return HOOP_OK;
}

static hoop_status cpu_sqnorm(double *sq, const float *g, size_t count)
{
    double s = *sq;
    for (size_t k = 0; k < count; k++) s += (double)g[k] * g[k];
    *sq = s;
    return HOOP_OK;
}

static hoop_status cpu_scale(float *g, size_t count, float coef)
{
    for (size_t k = 0; k < count; k++) g[k] *= coef;
    return HOOP_OK;
}

// ----- the table ----------------------------------------------------------------------------

static hoop_status cpu_clip_scale(float *g, size_t count, const double *sq, float max_norm)
{
    const float norm = (float)sqrt(*sq);
    const float coef = max_norm / (norm + 1e-6f);
    if (!(coef >= 1.0f)) cpu_scale(g, count, coef); /* a NaN norm makes g NaN, as torch */
    return HOOP_OK;
}

// ----- staging and graphs --------------------------------------------------------------------

static hoop_status cpu_upload(void *dst, const void *src, size_t bytes)
{
    if (bytes) memcpy(dst, src, bytes);
    return HOOP_OK;
}

static hoop_status cpu_graph_begin(void)
{
    return HOOP_ERROR(HOOP_ERR_UNSUPPORTED, "cpu: graphs are a CUDA feature");
}

static hoop_status cpu_graph_end(void **graph)
{
    *graph = NULL;
    return HOOP_ERROR(HOOP_ERR_UNSUPPORTED, "cpu: graphs are a CUDA feature");
}

static hoop_status cpu_graph_launch(void *graph)
{
    (void)graph;
    return HOOP_ERROR(HOOP_ERR_UNSUPPORTED, "cpu: graphs are a CUDA feature");
}

static hoop_status cpu_graph_sync(void *graph)
{
    (void)graph;
    return HOOP_ERROR(HOOP_ERR_UNSUPPORTED, "cpu: graphs are a CUDA feature");
}

static void cpu_graph_free(void *graph)
{
    (void)graph;
}

const struct hoop__kern hoop__kern_cpu = {
    .size = sizeof(struct hoop__kern),
    .name = "cpu",
    .device = HOOP_DEVICE_CPU,
    .describe = cpu_describe,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .copy = cpu_copy,
    .sync = cpu_sync,
    .mem_stats = cpu_mem_stats,
    .event_new = cpu_event_new,
    .event_free = cpu_event_free,
    .upload_async = cpu_upload_async,
    .download_async = cpu_download_async,
    .compute_wait = cpu_event_op,
    .compute_record = cpu_compute_record,
    .event_sync = cpu_event_op,
    .gemm = cpu_gemm,
    .fill = cpu_fill,
    .axpy_or_copy = cpu_axpy_or_copy,
    .add = cpu_add,
    .bias_fill = cpu_bias_fill,
    .bias_add = cpu_bias_add,
    .bias_grad = cpu_bias_grad,
    .unary_fwd = cpu_unary_fwd,
    .unary_bwd = cpu_unary_bwd,
    .softmax_fwd = cpu_softmax_fwd,
    .softmax_bwd = cpu_softmax_bwd,
    .ce_fwd = cpu_ce_fwd,
    .ce_bwd = cpu_ce_bwd,
    .reduce_fwd = cpu_reduce_fwd,
    .reduce_bwd = cpu_reduce_bwd,
    .dropout_fwd = cpu_dropout_fwd,
    .dropout_bwd = cpu_dropout_bwd,
    .im2col = cpu_im2col,
    .col2im = cpu_col2im,
    .conv_scratch = cpu_conv_scratch,
    .conv_fwd = cpu_conv_fwd,
    .conv_bwd = cpu_conv_bwd,
    .pool_fwd = cpu_pool_fwd,
    .pool_bwd = cpu_pool_bwd,
    .sgd = cpu_sgd,
    .adamw = cpu_adamw,
    .sqnorm = cpu_sqnorm,
    .scale = cpu_scale,
    .clip_scale = cpu_clip_scale,
    .host_alloc = cpu_mem_alloc,
    .host_free = cpu_mem_free,
    .upload = cpu_upload,
    .graph_begin = cpu_graph_begin,
    .graph_end = cpu_graph_end,
    .graph_launch = cpu_graph_launch,
    .graph_sync = cpu_graph_sync,
    .graph_free = cpu_graph_free,
    .stream_new = cpu_stream_new,
    .stream_free = cpu_stream_free,
    .stream_record = cpu_stream_record,
    .stream_wait = cpu_stream_wait,
    .timer_new = cpu_timer_new,
    .event_query = cpu_event_query,
    .event_elapsed = cpu_event_elapsed,
};
