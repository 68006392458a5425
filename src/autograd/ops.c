/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/ops.c -- dense ops with their backward: matmul, linear, add, bias-add,
 * mean, sum, reshape/flatten, dropout.
 *
 * Each op: checks its arguments (a shape mismatch names both shapes), makes its output in
 * the tape's arena, computes it, and records a node whose backward follows the accumulate
 * contract of autograd_impl.h (first contribution to an activation gradient is written,
 * later ones and all parameter gradients are added). GEMMs are OpenBLAS cblas_sgemm,
 * row-major, with the transposes chosen so no operand is ever copied.
 *
 * Thread-safety: as the tape (one thread per tape).
 */
#include <cblas.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "autograd/ops.h"
#include "core/check.h"
#include "hoop/nn.h"

/* The element-wise loops must vectorise: GCC does so with an unknown trip count only from
 * -O3 (its -O2 cost model is "very cheap"); clang vectorises at -O2 already. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__)
#pragma GCC optimize("O3")
#endif

hoop_status hoop__shape_error(const char *op, const char *an, const hoop_tensor *a, const char *bn,
                              const hoop_tensor *b, const char *why)
{
    char sa[96], sb[96];
    return HOOP_ERROR(HOOP_ERR_INVALID, "%s: %s %s and %s %s do not fit: %s", op, an,
                      hoop_tensor_shape_str(a, sa, sizeof(sa)), bn,
                      hoop_tensor_shape_str(b, sb, sizeof(sb)), why);
}

hoop_status hoop__ndim_error(const char *op, const char *an, const hoop_tensor *a, const char *want)
{
    char sa[96];
    return HOOP_ERROR(HOOP_ERR_INVALID, "%s: %s has shape %s, expected %s", op, an,
                      hoop_tensor_shape_str(a, sa, sizeof(sa)), want);
}

void hoop__axpy_or_copy(float *dst, const float *src, size_t n, int acc)
{
    if (acc)
        for (size_t i = 0; i < n; i++) dst[i] += src[i];
    else
        memcpy(dst, src, n * sizeof(float));
}

float hoop__sum_f32(const float *p, size_t n)
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

// ----- matmul -------------------------------------------------------------------------------

static void matmul_backward(hoop_tape *tape, struct hoop_node *n)
{
    hoop_tensor *a = n->in[0], *b = n->in[1];
    const int M = (int)a->shape[0], K = (int)a->shape[1], N = (int)b->shape[1];
    const float *dy = n->out->grad;
    int acc;
    float *da = hoop__grad_for(tape, a, &acc);
    if (da)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, K, N, 1.0f, dy, N, b->data, N,
                    acc ? 1.0f : 0.0f, da, K);
    float *db = hoop__grad_for(tape, b, &acc);
    if (db)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, N, M, 1.0f, a->data, K, dy, N,
                    acc ? 1.0f : 0.0f, db, N);
}

hoop_status hoop_matmul(hoop_tape *tape, hoop_tensor *a, hoop_tensor *b, hoop_tensor **out)
{
    HOOP_CHECK(hoop__check_call(tape, out, "hoop_matmul"));
    HOOP_CHECK(hoop__check_arg(a, "hoop_matmul", "a"));
    HOOP_CHECK(hoop__check_arg(b, "hoop_matmul", "b"));
    if (a->ndim != 2) return hoop__ndim_error("hoop_matmul", "a", a, "2 dimensions (M, K)");
    if (b->ndim != 2) return hoop__ndim_error("hoop_matmul", "b", b, "2 dimensions (K, N)");
    if (a->shape[1] != b->shape[0])
        return hoop__shape_error("hoop_matmul", "a", a, "b", b, "a's dim 1 must equal b's dim 0");
    const int64_t shape[2] = {a->shape[0], b->shape[1]};
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_arena(tape, 2, shape, &y));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)shape[0], (int)shape[1],
                (int)a->shape[1], 1.0f, a->data, (int)a->shape[1], b->data, (int)shape[1], 0.0f,
                y->data, (int)shape[1]);
    hoop_tensor *in[2] = {a, b};
    HOOP_CHECK(hoop__tape_record(tape, "matmul", matmul_backward, in, 2, y, NULL));
    *out = y;
    return HOOP_OK;
}

// ----- linear -------------------------------------------------------------------------------

/* db(C) (+)= column sums of dy(rows, C). */
void hoop__bias_grad_rows(float *db, const float *dy, size_t rows, size_t C, int acc)
{
    if (!acc) memset(db, 0, C * sizeof(float));
    for (size_t r = 0; r < rows; r++) {
        const float *row = dy + r * C;
        for (size_t c = 0; c < C; c++) db[c] += row[c];
    }
}

static void linear_backward(hoop_tape *tape, struct hoop_node *n)
{
    hoop_tensor *x = n->in[0], *w = n->in[1], *b = n->in[2];
    const int N = (int)x->shape[0], In = (int)x->shape[1], O = (int)w->shape[0];
    const float *dy = n->out->grad;
    int acc;
    float *dx = hoop__grad_for(tape, x, &acc);
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, In, O, 1.0f, dy, O, w->data, In,
                    acc ? 1.0f : 0.0f, dx, In);
    float *dw = hoop__grad_for(tape, w, &acc);
    if (dw)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, O, In, N, 1.0f, dy, O, x->data, In,
                    acc ? 1.0f : 0.0f, dw, In);
    float *db = hoop__grad_for(tape, b, &acc);
    if (db) hoop__bias_grad_rows(db, dy, (size_t)N, (size_t)O, acc);
}

static hoop_status linear_check(hoop_tensor *x, hoop_tensor *w, hoop_tensor *b)
{
    HOOP_CHECK(hoop__check_arg(x, "hoop_linear", "x"));
    HOOP_CHECK(hoop__check_arg(w, "hoop_linear", "w"));
    if (x->ndim != 2) return hoop__ndim_error("hoop_linear", "x", x, "2 dimensions (N, in)");
    if (w->ndim != 2) return hoop__ndim_error("hoop_linear", "w", w, "2 dimensions (out, in)");
    if (x->shape[1] != w->shape[1])
        return hoop__shape_error("hoop_linear", "x", x, "w", w, "x's dim 1 must equal w's dim 1");
    if (b == NULL) return HOOP_OK;
    HOOP_CHECK(hoop__check_arg(b, "hoop_linear", "bias"));
    if (b->ndim != 1 || b->shape[0] != w->shape[0])
        return hoop__shape_error("hoop_linear", "w", w, "bias", b, "bias must be (w's dim 0)");
    return HOOP_OK;
}

hoop_status hoop_linear(hoop_tape *tape, hoop_tensor *x, hoop_tensor *w, hoop_tensor *bias,
                        hoop_tensor **out)
{
    HOOP_CHECK(hoop__check_call(tape, out, "hoop_linear"));
    HOOP_CHECK(linear_check(x, w, bias));
    const int N = (int)x->shape[0], In = (int)x->shape[1], O = (int)w->shape[0];
    const int64_t shape[2] = {N, O};
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_arena(tape, 2, shape, &y));
    /* Start from the broadcast bias and let sgemm add x W^T (beta = 1): one pass less. */
    if (bias != NULL)
        for (int r = 0; r < N; r++) memcpy(y->data + (size_t)r * O, bias->data, O * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, O, In, 1.0f, x->data, In, w->data, In,
                bias ? 1.0f : 0.0f, y->data, O);
    hoop_tensor *in[3] = {x, w, bias};
    HOOP_CHECK(hoop__tape_record(tape, "linear", linear_backward, in, 3, y, NULL));
    *out = y;
    return HOOP_OK;
}

// ----- add, bias-add --------------------------------------------------------------------------

static void add_backward(hoop_tape *tape, struct hoop_node *n)
{
    for (int i = 0; i < 2; i++) {
        int acc;
        float *d = hoop__grad_for(tape, n->in[i], &acc);
        if (d) hoop__axpy_or_copy(d, n->out->grad, n->out->count, acc);
    }
}

hoop_status hoop_add(hoop_tape *tape, hoop_tensor *a, hoop_tensor *b, hoop_tensor **out)
{
    HOOP_CHECK(hoop__check_call(tape, out, "hoop_add"));
    HOOP_CHECK(hoop__check_arg(a, "hoop_add", "a"));
    HOOP_CHECK(hoop__check_arg(b, "hoop_add", "b"));
    if (!hoop__same_shape(a, b))
        return hoop__shape_error("hoop_add", "a", a, "b", b, "shapes must be equal");
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_arena(tape, a->ndim, a->shape, &y));
    const float *pa = a->data, *pb = b->data;
    float *py = y->data;
    for (size_t i = 0; i < y->count; i++) py[i] = pa[i] + pb[i];
    hoop_tensor *in[2] = {a, b};
    HOOP_CHECK(hoop__tape_record(tape, "add", add_backward, in, 2, y, NULL));
    *out = y;
    return HOOP_OK;
}

/* x viewed as (N, C, inner): inner = H*W for 4-D, 1 for 2-D. */
static size_t bias_inner(const hoop_tensor *x)
{
    return x->ndim == 4 ? (size_t)(x->shape[2] * x->shape[3]) : 1;
}

static void bias_add_backward(hoop_tape *tape, struct hoop_node *n)
{
    hoop_tensor *x = n->in[0], *b = n->in[1];
    const float *dy = n->out->grad;
    int acc;
    float *dx = hoop__grad_for(tape, x, &acc);
    if (dx) hoop__axpy_or_copy(dx, dy, x->count, acc);
    float *db = hoop__grad_for(tape, b, &acc);
    if (db == NULL) return;
    const size_t N = (size_t)x->shape[0], C = (size_t)x->shape[1], inner = bias_inner(x);
    if (inner == 1) {
        hoop__bias_grad_rows(db, dy, N, C, acc);
        return;
    }
    if (!acc) memset(db, 0, C * sizeof(float));
    for (size_t i = 0; i < N; i++)
        for (size_t c = 0; c < C; c++) {
            db[c] += hoop__sum_f32(dy + (i * C + c) * inner, inner);
        }
}

hoop_status hoop_bias_add(hoop_tape *tape, hoop_tensor *x, hoop_tensor *bias, hoop_tensor **out)
{
    HOOP_CHECK(hoop__check_call(tape, out, "hoop_bias_add"));
    HOOP_CHECK(hoop__check_arg(x, "hoop_bias_add", "x"));
    HOOP_CHECK(hoop__check_arg(bias, "hoop_bias_add", "bias"));
    if (x->ndim != 2 && x->ndim != 4)
        return hoop__ndim_error("hoop_bias_add", "x", x, "(N, C) or (N, C, H, W)");
    if (bias->ndim != 1 || bias->shape[0] != x->shape[1])
        return hoop__shape_error("hoop_bias_add", "x", x, "bias", bias, "bias must be (x's dim 1)");
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_arena(tape, x->ndim, x->shape, &y));
    const size_t N = (size_t)x->shape[0], C = (size_t)x->shape[1], inner = bias_inner(x);
    for (size_t i = 0; i < N; i++)
        for (size_t c = 0; c < C; c++) {
            const float *px = x->data + (i * C + c) * inner;
            float *py = y->data + (i * C + c) * inner, bc = bias->data[c];
            for (size_t k = 0; k < inner; k++) py[k] = px[k] + bc;
        }
    hoop_tensor *in[2] = {x, bias};
    HOOP_CHECK(hoop__tape_record(tape, "bias_add", bias_add_backward, in, 2, y, NULL));
    *out = y;
    return HOOP_OK;
}

// ----- reductions -----------------------------------------------------------------------------

static void reduce_backward(hoop_tape *tape, struct hoop_node *n)
{
    hoop_tensor *x = n->in[0];
    int acc;
    float *dx = hoop__grad_for(tape, x, &acc);
    if (dx == NULL) return;
    float g = n->out->grad[0] * n->args.smoothing; /* args.smoothing holds the scale */
    if (acc)
        for (size_t i = 0; i < x->count; i++) dx[i] += g;
    else
        for (size_t i = 0; i < x->count; i++) dx[i] = g;
}

static hoop_status reduce(hoop_tape *tape, hoop_tensor *x, int mean, hoop_tensor **out)
{
    const char *op = mean ? "hoop_mean" : "hoop_sum";
    HOOP_CHECK(hoop__check_call(tape, out, op));
    HOOP_CHECK(hoop__check_arg(x, op, "x"));
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_arena(tape, 0, NULL, &y));
    double s = 0.0; /* double accumulation: the sum of many f32 values stays accurate */
    for (size_t i = 0; i < x->count; i++) s += x->data[i];
    y->data[0] = (float)(mean ? s / (double)x->count : s);
    struct hoop_node *n;
    HOOP_CHECK(hoop__tape_record(tape, mean ? "mean" : "sum", reduce_backward, &x, 1, y, &n));
    if (n) n->args.smoothing = mean ? 1.0f / (float)x->count : 1.0f;
    *out = y;
    return HOOP_OK;
}

hoop_status hoop_mean(hoop_tape *tape, hoop_tensor *x, hoop_tensor **out)
{
    return reduce(tape, x, 1, out);
}

hoop_status hoop_sum(hoop_tape *tape, hoop_tensor *x, hoop_tensor **out)
{
    return reduce(tape, x, 0, out);
}

// ----- views: reshape, flatten ----------------------------------------------------------------

/* The output's gradient is final when this node runs, so an activation input that has no
 * gradient yet can simply share the buffer instead of copying it. */
static void view_backward(hoop_tape *tape, struct hoop_node *n)
{
    hoop_tensor *x = n->in[0];
    if (!x->long_lived && !x->grad_set && x->requires_grad) {
        x->grad = n->out->grad;
        x->grad_set = 1;
        return;
    }
    int acc;
    float *dx = hoop__grad_for(tape, x, &acc);
    if (dx) hoop__axpy_or_copy(dx, n->out->grad, x->count, acc);
}

hoop_status hoop__view_op(hoop_tape *tape, hoop_tensor *x, int ndim, const int64_t *shape,
                          const char *op, hoop_tensor **out)
{
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_view(tape, ndim, shape, x->data, &y));
    HOOP_CHECK(hoop__tape_record(tape, op, view_backward, &x, 1, y, NULL));
    *out = y;
    return HOOP_OK;
}

static hoop_status infer_shape(const hoop_tensor *x, int ndim, const int64_t *shape,
                               int64_t *resolved)
{
    int infer = -1, over = 0;
    int64_t known = 1;
    for (int i = 0; i < ndim; i++) {
        resolved[i] = shape[i];
        if (shape[i] == -1 && infer < 0) {
            infer = i;
            continue;
        }
        if (shape[i] < 1)
            return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_reshape: dimension %d is %lld", i,
                              (long long)shape[i]);
        if (!over) over = __builtin_mul_overflow(known, shape[i], &known);
    }
    if (over)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "hoop_reshape: x has %zu elements, the %d-D shape given more than "
                          "2^63",
                          x->count, ndim);
    if (infer >= 0 && known > 0 && (int64_t)x->count % known == 0)
        resolved[infer] = (int64_t)x->count / known;
    if (infer >= 0) known *= resolved[infer];
    if (infer >= 0 && resolved[infer] < 1) known = -1;
    if (known != (int64_t)x->count) {
        char s[96];
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "hoop_reshape: x %s (%zu elements) cannot be viewed with the %d-D "
                          "shape given (%lld elements)",
                          hoop_tensor_shape_str(x, s, sizeof(s)), x->count, ndim, (long long)known);
    }
    return HOOP_OK;
}

hoop_status hoop_reshape(hoop_tape *tape, hoop_tensor *x, int ndim, const int64_t *shape,
                         hoop_tensor **out)
{
    HOOP_CHECK(hoop__check_call(tape, out, "hoop_reshape"));
    HOOP_CHECK(hoop__check_arg(x, "hoop_reshape", "x"));
    if (shape == NULL && ndim > 0)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_reshape: shape is NULL for ndim=%d", ndim);
    if (ndim < 0 || ndim > HOOP_TENSOR_MAX_DIMS)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_reshape: ndim=%d is outside 0..%d", ndim,
                          HOOP_TENSOR_MAX_DIMS);
    int64_t resolved[HOOP_TENSOR_MAX_DIMS];
    HOOP_CHECK(infer_shape(x, ndim, shape, resolved));
    return hoop__view_op(tape, x, ndim, resolved, "reshape", out);
}

hoop_status hoop_flatten(hoop_tape *tape, hoop_tensor *x, hoop_tensor **out)
{
    HOOP_CHECK(hoop__check_call(tape, out, "hoop_flatten"));
    HOOP_CHECK(hoop__check_arg(x, "hoop_flatten", "x"));
    if (x->ndim < 1) return hoop__ndim_error("hoop_flatten", "x", x, "at least 1 dimension");
    const int64_t shape[2] = {x->shape[0], (int64_t)x->count / x->shape[0]};
    return hoop__view_op(tape, x, 2, shape, "flatten", out);
}

// ----- dropout --------------------------------------------------------------------------------

static void dropout_backward(hoop_tape *tape, struct hoop_node *n)
{
    int acc;
    float *dx = hoop__grad_for(tape, n->in[0], &acc);
    if (dx == NULL) return;
    const float *mask = n->saved, *dy = n->out->grad;
    if (acc)
        for (size_t i = 0; i < n->out->count; i++) dx[i] += dy[i] * mask[i];
    else
        for (size_t i = 0; i < n->out->count; i++) dx[i] = dy[i] * mask[i];
}

hoop_status hoop_dropout(hoop_tape *tape, hoop_tensor *x, float p, hoop_tensor **out)
{
    HOOP_CHECK(hoop__check_call(tape, out, "hoop_dropout"));
    HOOP_CHECK(hoop__check_arg(x, "hoop_dropout", "x"));
    if (!(p >= 0.0f && p < 1.0f))
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_dropout: p=%g is outside [0, 1)", (double)p);
    if (!hoop_tape_train(tape) || p == 0.0f)
        return hoop__view_op(tape, x, x->ndim, x->shape, "dropout", out);
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_arena(tape, x->ndim, x->shape, &y));
    float *mask = hoop__arena_alloc(tape, x->count * sizeof(float));
    if (mask == NULL) return HOOP_ERR_NOMEM;
    hoop_rng *rng = hoop__tape_rng(tape);
    const float scale = 1.0f / (1.0f - p);
    for (size_t i = 0; i < x->count; i++) {
        mask[i] = hoop_rng_uniform(rng) < p ? 0.0f : scale;
        y->data[i] = x->data[i] * mask[i];
    }
    struct hoop_node *n;
    HOOP_CHECK(hoop__tape_record(tape, "dropout", dropout_backward, &x, 1, y, &n));
    if (n) n->saved = mask;
    *out = y;
    return HOOP_OK;
}
