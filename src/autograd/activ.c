/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/activ.c -- element-wise activations (relu, gelu, tanh, sigmoid), softmax
 * and softmax cross-entropy, with their backward.
 *
 * Each activation is a pair of plain loops (forward, backward) in a small table entry, run
 * by one generic op; the loops are branch-free so the compiler vectorises them. Backward
 * uses the saved output where the derivative is a function of it (relu, tanh, sigmoid)
 * and the input otherwise (gelu).
 *
 * Thread-safety: as the tape (one thread per tape).
 */
#include <math.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "autograd/ops.h"
#include "core/check.h"

/* The element-wise loops must vectorise: GCC does so with an unknown trip count only from
 * -O3 (its -O2 cost model is "very cheap"); clang vectorises at -O2 already. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__)
#pragma GCC optimize("O3")
#endif

typedef void (*unary_fwd)(float *restrict y, const float *restrict x, size_t n);
/* g[i] = dy[i] * f'(x[i]); g may be dy (in place), so neither is restrict. */
typedef void (*unary_bwd)(float *g, const float *dy, const float *restrict x,
                          const float *restrict y, size_t n);

struct unary_op {
    const char *name; /* for the tape */
    const char *fn;   /* for messages */
    unary_fwd fwd;
    unary_bwd bwd;
};

// ----- the activations ------------------------------------------------------------------------

static void relu_fwd(float *restrict y, const float *restrict x, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

static void relu_bwd(float *g, const float *dy, const float *restrict x, const float *restrict y,
                     size_t n)
{
    (void)x;
    for (size_t i = 0; i < n; i++) {
        const float d = dy[i]; /* loaded unconditionally, so the select vectorises */
        g[i] = y[i] > 0.0f ? d : 0.0f;
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

static const struct unary_op op_relu = {"relu", "hoop_relu", relu_fwd, relu_bwd};
static const struct unary_op op_gelu = {"gelu", "hoop_gelu", gelu_fwd, gelu_bwd};
static const struct unary_op op_tanh = {"tanh", "hoop_tanh", tanh_fwd, tanh_bwd};
static const struct unary_op op_sigmoid = {"sigmoid", "hoop_sigmoid", sigmoid_fwd, sigmoid_bwd};

// ----- the generic unary op -------------------------------------------------------------------

static void unary_backward(hoop_tape *tape, struct hoop_node *n)
{
    const struct unary_op *op = n->saved;
    hoop_tensor *x = n->in[0];
    int acc;
    float *dx = hoop__grad_for(tape, x, &acc);
    if (dx == NULL) return;
    if (!acc) {
        op->bwd(dx, n->out->grad, x->data, n->out->data, x->count);
        return;
    }
    /* Accumulating: reuse the output's gradient buffer (final, no longer read) as scratch. */
    float *g = n->out->grad;
    op->bwd(g, n->out->grad, x->data, n->out->data, x->count);
    for (size_t i = 0; i < x->count; i++) dx[i] += g[i];
}

static hoop_status unary(hoop_tape *tape, const struct unary_op *op, hoop_tensor *x,
                         hoop_tensor **out)
{
    HOOP_CHECK(hoop__check_call(tape, out, op->fn));
    HOOP_CHECK(hoop__check_arg(x, op->fn, "x"));
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_arena(tape, x->ndim, x->shape, &y));
    op->fwd(y->data, x->data, x->count);
    struct hoop_node *n;
    HOOP_CHECK(hoop__tape_record(tape, op->name, unary_backward, &x, 1, y, &n));
    if (n) n->saved = (void *)op;
    *out = y;
    return HOOP_OK;
}

hoop_status hoop_relu(hoop_tape *tape, hoop_tensor *x, hoop_tensor **out)
{
    return unary(tape, &op_relu, x, out);
}

hoop_status hoop_gelu(hoop_tape *tape, hoop_tensor *x, hoop_tensor **out)
{
    return unary(tape, &op_gelu, x, out);
}

hoop_status hoop_tanh(hoop_tape *tape, hoop_tensor *x, hoop_tensor **out)
{
    return unary(tape, &op_tanh, x, out);
}

hoop_status hoop_sigmoid(hoop_tape *tape, hoop_tensor *x, hoop_tensor **out)
{
    return unary(tape, &op_sigmoid, x, out);
}

// ----- softmax ------------------------------------------------------------------------------

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

static void softmax_backward(hoop_tape *tape, struct hoop_node *n)
{
    hoop_tensor *x = n->in[0], *y = n->out;
    int acc;
    float *dx = hoop__grad_for(tape, x, &acc);
    if (dx == NULL) return;
    const size_t C = (size_t)x->shape[x->ndim - 1], rows = x->count / C;
    for (size_t r = 0; r < rows; r++) {
        const float *yr = y->data + r * C, *gr = y->grad + r * C;
        float *dr = dx + r * C;
        float dot = 0.0f;
        for (size_t c = 0; c < C; c++) dot += gr[c] * yr[c];
        if (acc)
            for (size_t c = 0; c < C; c++) dr[c] += yr[c] * (gr[c] - dot);
        else
            for (size_t c = 0; c < C; c++) dr[c] = yr[c] * (gr[c] - dot);
    }
}

hoop_status hoop_softmax(hoop_tape *tape, hoop_tensor *x, hoop_tensor **out)
{
    HOOP_CHECK(hoop__check_call(tape, out, "hoop_softmax"));
    HOOP_CHECK(hoop__check_arg(x, "hoop_softmax", "x"));
    if (x->ndim < 1) return hoop__ndim_error("hoop_softmax", "x", x, "at least 1 dimension");
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_arena(tape, x->ndim, x->shape, &y));
    const size_t C = (size_t)x->shape[x->ndim - 1], rows = x->count / C;
    for (size_t r = 0; r < rows; r++) softmax_row(y->data + r * C, x->data + r * C, C);
    HOOP_CHECK(hoop__tape_record(tape, "softmax", softmax_backward, &x, 1, y, NULL));
    *out = y;
    return HOOP_OK;
}

// ----- cross-entropy ------------------------------------------------------------------------

struct ce_saved {
    float *probs;    /* (N, C) softmax of the logits */
    int32_t *labels; /* N, copied */
};

static void ce_backward(hoop_tape *tape, struct hoop_node *n)
{
    hoop_tensor *x = n->in[0];
    int acc;
    float *dx = hoop__grad_for(tape, x, &acc);
    if (dx == NULL) return;
    const struct ce_saved *s = n->saved;
    const size_t N = (size_t)x->shape[0], C = (size_t)x->shape[1];
    const float eps = n->args.smoothing, scale = n->out->grad[0] / (float)N;
    const float off = eps / (float)C, on = 1.0f - eps + off;
    for (size_t r = 0; r < N; r++) {
        const float *p = s->probs + r * C;
        float *d = dx + r * C;
        const size_t y = (size_t)s->labels[r];
        if (acc)
            for (size_t c = 0; c < C; c++) d[c] += scale * (p[c] - off);
        else
            for (size_t c = 0; c < C; c++) d[c] = scale * (p[c] - off);
        d[y] -= scale * (on - off);
    }
}

static hoop_status ce_check(hoop_tensor *x, const int32_t *labels, float smoothing)
{
    HOOP_CHECK(hoop__check_arg(x, "hoop_cross_entropy", "logits"));
    if (x->ndim != 2)
        return hoop__ndim_error("hoop_cross_entropy", "logits", x, "2 dimensions (N, C)");
    if (labels == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_cross_entropy: labels is NULL");
    if (!(smoothing >= 0.0f && smoothing < 1.0f))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "hoop_cross_entropy: label_smoothing=%g is outside "
                          "[0, 1)",
                          (double)smoothing);
    for (int64_t r = 0; r < x->shape[0]; r++)
        if (labels[r] < 0 || labels[r] >= x->shape[1])
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "hoop_cross_entropy: label %d of row %lld is outside 0..%lld",
                              (int)labels[r], (long long)r, (long long)(x->shape[1] - 1));
    return HOOP_OK;
}

/* Forward: probabilities into s->probs and the mean smoothed negative log-likelihood. */
static float ce_forward(const hoop_tensor *x, const struct ce_saved *s, float eps)
{
    const size_t N = (size_t)x->shape[0], C = (size_t)x->shape[1];
    double total = 0.0;
    for (size_t r = 0; r < N; r++) {
        const float *xr = x->data + r * C;
        const float lse = softmax_row(s->probs + r * C, xr, C);
        double nll = (double)lse - xr[s->labels[r]];
        if (eps > 0.0f) {
            double mean_nll = 0.0; /* - mean over classes of log p_c */
            for (size_t c = 0; c < C; c++) mean_nll += (double)lse - xr[c];
            nll = (1.0 - eps) * nll + eps * mean_nll / (double)C;
        }
        total += nll;
    }
    return (float)(total / (double)N);
}

hoop_status hoop_cross_entropy(hoop_tape *tape, hoop_tensor *logits, const int32_t *labels,
                               float label_smoothing, hoop_tensor **out)
{
    HOOP_CHECK(hoop__check_call(tape, out, "hoop_cross_entropy"));
    HOOP_CHECK(ce_check(logits, labels, label_smoothing));
    const size_t N = (size_t)logits->shape[0];
    struct ce_saved *s = hoop__arena_alloc(tape, sizeof(*s));
    if (s == NULL) return HOOP_ERR_NOMEM;
    s->probs = hoop__arena_alloc(tape, logits->count * sizeof(float));
    s->labels = hoop__arena_alloc(tape, N * sizeof(int32_t));
    if (s->probs == NULL || s->labels == NULL) return HOOP_ERR_NOMEM;
    memcpy(s->labels, labels, N * sizeof(int32_t));
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_arena(tape, 0, NULL, &y));
    y->data[0] = ce_forward(logits, s, label_smoothing);
    struct hoop_node *n;
    HOOP_CHECK(hoop__tape_record(tape, "cross_entropy", ce_backward, &logits, 1, y, &n));
    if (n) {
        n->saved = s;
        n->args.smoothing = label_smoothing;
    }
    *out = y;
    return HOOP_OK;
}
