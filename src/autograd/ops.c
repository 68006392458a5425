/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/ops.c -- dense ops with their backward: matmul, linear, add, bias-add,
 * mean, sum, reshape/flatten, dropout.
 *
 * Each op: checks its arguments (a shape mismatch names both shapes) and that its inputs
 * are on one device with a kernel table (hoop__op_kern), makes its output in the tape's
 * arena, computes it through the table (kern.h), and records a node, keeping the table,
 * whose backward follows the accumulate contract of autograd_impl.h (first contribution
 * to an activation gradient is written, later ones and all parameter gradients are
 * added). GEMMs are row-major, with the transposes chosen so no operand is ever copied.
 *
 * Thread-safety: as the tape (one thread per tape).
 */
#include <limits.h>
#include <stdio.h>

#include "autograd/autograd_impl.h"
#include "autograd/kern.h"
#include "autograd/ops.h"
#include "core/check.h"
#include "hoop/nn.h"

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

/* The device check of a one-input op. */
static hoop_status kern_of(const char *op, hoop_tensor *x, const struct hoop__kern **k)
{
    const char *const names[1] = {"x"};
    return hoop__op_kern(op, &x, names, 1, k);
}

/* An (M, N) product over INT_MAX elements, which every later op refuses (BLAS indexes
 * with int), is refused before it is made, naming both operands (M, N <= INT_MAX: the
 * operands passed hoop__check_arg). */
static hoop_status check_product(const char *op, const char *an, const hoop_tensor *a,
                                 const char *bn, const hoop_tensor *b, int64_t M, int64_t N)
{
    if (M <= INT_MAX / N) return HOOP_OK;
    char why[160];
    snprintf(why, sizeof(why),
             "the output (%lld, %lld) would have %lld elements, more than the %d an op takes",
             (long long)M, (long long)N, (long long)(M * N), INT_MAX);
    return hoop__shape_error(op, an, a, bn, b, why);
}

// ----- matmul -------------------------------------------------------------------------------

static hoop_status matmul_backward(hoop_tape *tape, struct hoop_node *n)
{
    hoop_tensor *a = n->in[0], *b = n->in[1];
    const int M = (int)a->shape[0], K = (int)a->shape[1], N = (int)b->shape[1];
    const float *dy = n->out->grad;
    int acc;
    float *da, *db;
    HOOP_CHECK(hoop__grad_for(tape, a, &da, &acc));
    if (da)
        HOOP_CHECK(n->kern->gemm(0, 1, M, K, N, 1.0f, dy, N, b->data, N, acc ? 1.0f : 0.0f, da, K));
    HOOP_CHECK(hoop__grad_for(tape, b, &db, &acc));
    if (db)
        HOOP_CHECK(n->kern->gemm(1, 0, K, N, M, 1.0f, a->data, K, dy, N, acc ? 1.0f : 0.0f, db, N));
    return HOOP_OK;
}

hoop_status hoop_matmul(hoop_tape *tape, hoop_tensor *a, hoop_tensor *b, hoop_tensor **out)
{
    HOOP_CHECK(hoop__check_call(tape, out, "hoop_matmul"));
    HOOP_CHECK(hoop__check_arg(a, "hoop_matmul", "a"));
    HOOP_CHECK(hoop__check_arg(b, "hoop_matmul", "b"));
    hoop_tensor *in[2] = {a, b};
    const char *const names[2] = {"a", "b"};
    const struct hoop__kern *k;
    HOOP_CHECK(hoop__op_kern("hoop_matmul", in, names, 2, &k));
    if (a->ndim != 2) return hoop__ndim_error("hoop_matmul", "a", a, "2 dimensions (M, K)");
    if (b->ndim != 2) return hoop__ndim_error("hoop_matmul", "b", b, "2 dimensions (K, N)");
    if (a->shape[1] != b->shape[0])
        return hoop__shape_error("hoop_matmul", "a", a, "b", b, "a's dim 1 must equal b's dim 0");
    HOOP_CHECK(check_product("hoop_matmul", "a", a, "b", b, a->shape[0], b->shape[1]));
    const int64_t shape[2] = {a->shape[0], b->shape[1]};
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_arena(tape, k->device, 2, shape, &y));
    HOOP_CHECK(k->gemm(0, 0, (int)shape[0], (int)shape[1], (int)a->shape[1], 1.0f, a->data,
                       (int)a->shape[1], b->data, (int)shape[1], 0.0f, y->data, (int)shape[1]));
    HOOP_CHECK(hoop__tape_record(tape, "matmul", matmul_backward, k, in, 2, y, NULL));
    *out = y;
    return HOOP_OK;
}

// ----- linear -------------------------------------------------------------------------------

static hoop_status linear_backward(hoop_tape *tape, struct hoop_node *n)
{
    hoop_tensor *x = n->in[0], *w = n->in[1], *b = n->in[2];
    const int N = (int)x->shape[0], In = (int)x->shape[1], O = (int)w->shape[0];
    const float *dy = n->out->grad;
    int acc;
    float *dx, *dw, *db;
    HOOP_CHECK(hoop__grad_for(tape, x, &dx, &acc));
    if (dx)
        HOOP_CHECK(
            n->kern->gemm(0, 0, N, In, O, 1.0f, dy, O, w->data, In, acc ? 1.0f : 0.0f, dx, In));
    HOOP_CHECK(hoop__grad_for(tape, w, &dw, &acc));
    if (dw)
        HOOP_CHECK(
            n->kern->gemm(1, 0, O, In, N, 1.0f, dy, O, x->data, In, acc ? 1.0f : 0.0f, dw, In));
    HOOP_CHECK(hoop__grad_for(tape, b, &db, &acc));
    if (db) HOOP_CHECK(n->kern->bias_grad(db, dy, (size_t)N, (size_t)O, 1, acc));
    return HOOP_OK;
}

static hoop_status linear_check(hoop_tensor *const *in, const struct hoop__kern **k)
{
    hoop_tensor *x = in[0], *w = in[1], *b = in[2];
    HOOP_CHECK(hoop__check_arg(x, "hoop_linear", "x"));
    HOOP_CHECK(hoop__check_arg(w, "hoop_linear", "w"));
    if (b != NULL) HOOP_CHECK(hoop__check_arg(b, "hoop_linear", "bias"));
    const char *const names[3] = {"x", "w", "bias"};
    HOOP_CHECK(hoop__op_kern("hoop_linear", in, names, 3, k));
    if (x->ndim != 2) return hoop__ndim_error("hoop_linear", "x", x, "2 dimensions (N, in)");
    if (w->ndim != 2) return hoop__ndim_error("hoop_linear", "w", w, "2 dimensions (out, in)");
    if (x->shape[1] != w->shape[1])
        return hoop__shape_error("hoop_linear", "x", x, "w", w, "x's dim 1 must equal w's dim 1");
    if (b != NULL && (b->ndim != 1 || b->shape[0] != w->shape[0]))
        return hoop__shape_error("hoop_linear", "w", w, "bias", b, "bias must be (w's dim 0)");
    return check_product("hoop_linear", "x", x, "w", w, x->shape[0], w->shape[0]);
}

hoop_status hoop_linear(hoop_tape *tape, hoop_tensor *x, hoop_tensor *w, hoop_tensor *bias,
                        hoop_tensor **out)
{
    HOOP_CHECK(hoop__check_call(tape, out, "hoop_linear"));
    hoop_tensor *in[3] = {x, w, bias};
    const struct hoop__kern *k;
    HOOP_CHECK(linear_check(in, &k));
    const int N = (int)x->shape[0], In = (int)x->shape[1], O = (int)w->shape[0];
    const int64_t shape[2] = {N, O};
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_arena(tape, k->device, 2, shape, &y));
    /* Start from the broadcast bias and let the GEMM add x W^T (beta = 1): one pass less. */
    if (bias != NULL) HOOP_CHECK(k->bias_fill(y->data, bias->data, (size_t)N, (size_t)O, 1));
    HOOP_CHECK(
        k->gemm(0, 1, N, O, In, 1.0f, x->data, In, w->data, In, bias ? 1.0f : 0.0f, y->data, O));
    HOOP_CHECK(hoop__tape_record(tape, "linear", linear_backward, k, in, 3, y, NULL));
    *out = y;
    return HOOP_OK;
}

// ----- add, bias-add --------------------------------------------------------------------------

static hoop_status add_backward(hoop_tape *tape, struct hoop_node *n)
{
    for (int i = 0; i < 2; i++) {
        int acc;
        float *d;
        HOOP_CHECK(hoop__grad_for(tape, n->in[i], &d, &acc));
        if (d) HOOP_CHECK(n->kern->axpy_or_copy(d, n->out->grad, n->out->count, acc));
    }
    return HOOP_OK;
}

hoop_status hoop_add(hoop_tape *tape, hoop_tensor *a, hoop_tensor *b, hoop_tensor **out)
{
    HOOP_CHECK(hoop__check_call(tape, out, "hoop_add"));
    HOOP_CHECK(hoop__check_arg(a, "hoop_add", "a"));
    HOOP_CHECK(hoop__check_arg(b, "hoop_add", "b"));
    hoop_tensor *in[2] = {a, b};
    const char *const names[2] = {"a", "b"};
    const struct hoop__kern *k;
    HOOP_CHECK(hoop__op_kern("hoop_add", in, names, 2, &k));
    if (!hoop__same_shape(a, b))
        return hoop__shape_error("hoop_add", "a", a, "b", b, "shapes must be equal");
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_arena(tape, k->device, a->ndim, a->shape, &y));
    HOOP_CHECK(k->add(y->data, a->data, b->data, y->count));
    HOOP_CHECK(hoop__tape_record(tape, "add", add_backward, k, in, 2, y, NULL));
    *out = y;
    return HOOP_OK;
}

/* x viewed as (N, C, inner): inner = H*W for 4-D, 1 for 2-D. */
static size_t bias_inner(const hoop_tensor *x)
{
    return x->ndim == 4 ? (size_t)(x->shape[2] * x->shape[3]) : 1;
}

static hoop_status bias_add_backward(hoop_tape *tape, struct hoop_node *n)
{
    hoop_tensor *x = n->in[0], *b = n->in[1];
    const float *dy = n->out->grad;
    int acc;
    float *dx, *db;
    HOOP_CHECK(hoop__grad_for(tape, x, &dx, &acc));
    if (dx) HOOP_CHECK(n->kern->axpy_or_copy(dx, dy, x->count, acc));
    HOOP_CHECK(hoop__grad_for(tape, b, &db, &acc));
    if (db == NULL) return HOOP_OK;
    const size_t N = (size_t)x->shape[0], C = (size_t)x->shape[1];
    return n->kern->bias_grad(db, dy, N, C, bias_inner(x), acc);
}

hoop_status hoop_bias_add(hoop_tape *tape, hoop_tensor *x, hoop_tensor *bias, hoop_tensor **out)
{
    HOOP_CHECK(hoop__check_call(tape, out, "hoop_bias_add"));
    HOOP_CHECK(hoop__check_arg(x, "hoop_bias_add", "x"));
    HOOP_CHECK(hoop__check_arg(bias, "hoop_bias_add", "bias"));
    hoop_tensor *in[2] = {x, bias};
    const char *const names[2] = {"x", "bias"};
    const struct hoop__kern *k;
    HOOP_CHECK(hoop__op_kern("hoop_bias_add", in, names, 2, &k));
    if (x->ndim != 2 && x->ndim != 4)
        return hoop__ndim_error("hoop_bias_add", "x", x, "(N, C) or (N, C, H, W)");
    if (bias->ndim != 1 || bias->shape[0] != x->shape[1])
        return hoop__shape_error("hoop_bias_add", "x", x, "bias", bias, "bias must be (x's dim 1)");
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_arena(tape, k->device, x->ndim, x->shape, &y));
    const size_t N = (size_t)x->shape[0], C = (size_t)x->shape[1];
    HOOP_CHECK(k->bias_add(y->data, x->data, bias->data, N, C, bias_inner(x)));
    HOOP_CHECK(hoop__tape_record(tape, "bias_add", bias_add_backward, k, in, 2, y, NULL));
    *out = y;
    return HOOP_OK;
}

// ----- reductions -----------------------------------------------------------------------------

static hoop_status reduce_backward(hoop_tape *tape, struct hoop_node *n)
{
    hoop_tensor *x = n->in[0];
    int acc;
    float *dx;
    HOOP_CHECK(hoop__grad_for(tape, x, &dx, &acc));
    if (dx == NULL) return HOOP_OK;
    /* args.smoothing holds the scale */
    return n->kern->reduce_bwd(dx, n->out->grad, n->args.smoothing, x->count, acc);
}

static hoop_status reduce(hoop_tape *tape, hoop_tensor *x, int mean, hoop_tensor **out)
{
    const char *op = mean ? "hoop_mean" : "hoop_sum";
    HOOP_CHECK(hoop__check_call(tape, out, op));
    HOOP_CHECK(hoop__check_arg(x, op, "x"));
    const struct hoop__kern *k;
    HOOP_CHECK(kern_of(op, x, &k));
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_arena(tape, k->device, 0, NULL, &y));
    HOOP_CHECK(k->reduce_fwd(y->data, x->data, x->count, mean));
    struct hoop_node *n;
    HOOP_CHECK(hoop__tape_record(tape, mean ? "mean" : "sum", reduce_backward, k, &x, 1, y, &n));
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

/* The output's gradient is final when this node runs, so an activation input that this
 * view alone reads can simply share the buffer instead of copying it. One that other nodes
 * read too gets its own: their contributions, added later, would change the view's
 * gradient, which hoop_tensor_grad returns. */
static hoop_status view_backward(hoop_tape *tape, struct hoop_node *n)
{
    hoop_tensor *x = n->in[0];
    if (!x->long_lived && !x->grad_set && x->requires_grad && x->uses == 1) {
        x->grad = n->out->grad;
        x->grad_set = 1;
        return HOOP_OK;
    }
    int acc;
    float *dx;
    HOOP_CHECK(hoop__grad_for(tape, x, &dx, &acc));
    if (dx) HOOP_CHECK(n->kern->axpy_or_copy(dx, n->out->grad, x->count, acc));
    return HOOP_OK;
}

hoop_status hoop__view_op(hoop_tape *tape, const struct hoop__kern *k, hoop_tensor *x, int ndim,
                          const int64_t *shape, const char *op, hoop_tensor **out)
{
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_view(tape, ndim, shape, x->data, &y));
    y->device = x->device;
    HOOP_CHECK(hoop__tape_record(tape, op, view_backward, k, &x, 1, y, NULL));
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
        if (shape[i] == -1)
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "hoop_reshape: dimensions %d and %d are both -1; only one may be "
                              "inferred",
                              infer, i);
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
    if (infer >= 0 && (known <= 0 || (int64_t)x->count % known != 0)) {
        char s[96];
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "hoop_reshape: x %s (%zu elements) cannot be viewed with the %d-D "
                          "shape given: its other dimensions make %lld elements, which do not "
                          "divide %zu",
                          hoop_tensor_shape_str(x, s, sizeof(s)), x->count, ndim, (long long)known,
                          x->count);
    }
    if (infer >= 0) {
        resolved[infer] = (int64_t)x->count / known;
        known *= resolved[infer];
    }
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
    const struct hoop__kern *k;
    HOOP_CHECK(kern_of("hoop_reshape", x, &k));
    if (shape == NULL && ndim > 0)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_reshape: shape is NULL for ndim=%d", ndim);
    if (ndim < 0 || ndim > HOOP_TENSOR_MAX_DIMS)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_reshape: ndim=%d is outside 0..%d", ndim,
                          HOOP_TENSOR_MAX_DIMS);
    int64_t resolved[HOOP_TENSOR_MAX_DIMS];
    HOOP_CHECK(infer_shape(x, ndim, shape, resolved));
    return hoop__view_op(tape, k, x, ndim, resolved, "reshape", out);
}

hoop_status hoop_flatten(hoop_tape *tape, hoop_tensor *x, hoop_tensor **out)
{
    HOOP_CHECK(hoop__check_call(tape, out, "hoop_flatten"));
    HOOP_CHECK(hoop__check_arg(x, "hoop_flatten", "x"));
    const struct hoop__kern *k;
    HOOP_CHECK(kern_of("hoop_flatten", x, &k));
    if (x->ndim < 1) return hoop__ndim_error("hoop_flatten", "x", x, "at least 1 dimension");
    const int64_t shape[2] = {x->shape[0], (int64_t)x->count / x->shape[0]};
    return hoop__view_op(tape, k, x, 2, shape, "flatten", out);
}

// ----- dropout --------------------------------------------------------------------------------

static hoop_status dropout_backward(hoop_tape *tape, struct hoop_node *n)
{
    int acc;
    float *dx;
    HOOP_CHECK(hoop__grad_for(tape, n->in[0], &dx, &acc));
    if (dx == NULL) return HOOP_OK;
    return n->kern->dropout_bwd(dx, n->out->grad, n->saved, n->out->count, acc);
}

hoop_status hoop_dropout(hoop_tape *tape, hoop_tensor *x, float p, hoop_tensor **out)
{
    HOOP_CHECK(hoop__check_call(tape, out, "hoop_dropout"));
    HOOP_CHECK(hoop__check_arg(x, "hoop_dropout", "x"));
    const struct hoop__kern *k;
    HOOP_CHECK(kern_of("hoop_dropout", x, &k));
    if (!(p >= 0.0f && p < 1.0f))
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_dropout: p=%g is outside [0, 1)", (double)p);
    if (!hoop_tape_train(tape) || p == 0.0f)
        return hoop__view_op(tape, k, x, x->ndim, x->shape, "dropout", out);
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_arena(tape, k->device, x->ndim, x->shape, &y));
    float *mask = hoop__arena_data(tape, k->device, x->count * sizeof(float));
    if (mask == NULL) return HOOP_ERR_NOMEM;
    const uint64_t *seed;
    uint64_t offset;
    HOOP_CHECK(hoop__tape_draw(tape, k, x->count, &seed, &offset));
    HOOP_CHECK(k->dropout_fwd(y->data, mask, x->data, x->count, p, seed, offset));
    struct hoop_node *n;
    HOOP_CHECK(hoop__tape_record(tape, "dropout", dropout_backward, k, &x, 1, y, &n));
    if (n) n->saved = mask;
    *out = y;
    return HOOP_OK;
}
