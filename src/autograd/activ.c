/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/activ.c -- element-wise activations (relu, gelu, tanh, sigmoid), softmax
 * and softmax cross-entropy, with their backward.
 *
 * Each activation is a small table entry (its kind in the kernel table, kern.h), run by
 * one generic op. Backward uses the saved output where the derivative is a function of it
 * (relu, tanh, sigmoid) and the input otherwise (gelu). The loops themselves are the
 * kernel table's (kern_cpu.c on the CPU).
 *
 * Thread-safety: as the tape (one thread per tape).
 */
#include <string.h>

#include "autograd/autograd_impl.h"
#include "autograd/kern.h"
#include "autograd/ops.h"
#include "core/check.h"

struct unary_op {
    const char *name; /* for the tape */
    const char *fn;   /* for messages */
    enum hoop__unary kind;
};

static const struct unary_op op_relu = {"relu", "hoop_relu", HOOP__UNARY_RELU};
static const struct unary_op op_gelu = {"gelu", "hoop_gelu", HOOP__UNARY_GELU};
static const struct unary_op op_tanh = {"tanh", "hoop_tanh", HOOP__UNARY_TANH};
static const struct unary_op op_sigmoid = {"sigmoid", "hoop_sigmoid", HOOP__UNARY_SIGMOID};

/* The device check of a one-input op. */
static hoop_status kern_of(const char *op, hoop_tensor *x, const char *what,
                           const struct hoop__kern **k)
{
    const char *const names[1] = {what};
    return hoop__op_kern(op, &x, names, 1, k);
}

// ----- the generic unary op -------------------------------------------------------------------

static hoop_status unary_backward(hoop_tape *tape, struct hoop_node *n)
{
    const struct unary_op *op = n->saved;
    hoop_tensor *x = n->in[0];
    int acc;
    float *dx;
    HOOP_CHECK(hoop__grad_for(tape, x, &dx, &acc));
    if (dx == NULL) return HOOP_OK;
    return n->kern->unary_bwd(op->kind, dx, n->out->grad, x->data, n->out->data, x->count, acc);
}

static hoop_status unary(hoop_tape *tape, const struct unary_op *op, hoop_tensor *x,
                         hoop_tensor **out)
{
    HOOP_CHECK(hoop__check_call(tape, out, op->fn));
    HOOP_CHECK(hoop__check_arg(x, op->fn, "x"));
    const struct hoop__kern *k;
    HOOP_CHECK(kern_of(op->fn, x, "x", &k));
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_arena(tape, k->device, x->ndim, x->shape, &y));
    HOOP_CHECK(k->unary_fwd(op->kind, y->data, x->data, x->count));
    struct hoop_node *n;
    HOOP_CHECK(hoop__tape_record(tape, op->name, unary_backward, k, &x, 1, y, &n));
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

static hoop_status softmax_backward(hoop_tape *tape, struct hoop_node *n)
{
    hoop_tensor *x = n->in[0], *y = n->out;
    int acc;
    float *dx;
    HOOP_CHECK(hoop__grad_for(tape, x, &dx, &acc));
    if (dx == NULL) return HOOP_OK;
    const size_t C = (size_t)x->shape[x->ndim - 1], rows = x->count / C;
    return n->kern->softmax_bwd(dx, y->data, y->grad, rows, C, acc);
}

hoop_status hoop_softmax(hoop_tape *tape, hoop_tensor *x, hoop_tensor **out)
{
    HOOP_CHECK(hoop__check_call(tape, out, "hoop_softmax"));
    HOOP_CHECK(hoop__check_arg(x, "hoop_softmax", "x"));
    const struct hoop__kern *k;
    HOOP_CHECK(kern_of("hoop_softmax", x, "x", &k));
    if (x->ndim < 1) return hoop__ndim_error("hoop_softmax", "x", x, "at least 1 dimension");
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_arena(tape, k->device, x->ndim, x->shape, &y));
    const size_t C = (size_t)x->shape[x->ndim - 1], rows = x->count / C;
    HOOP_CHECK(k->softmax_fwd(y->data, x->data, rows, C));
    HOOP_CHECK(hoop__tape_record(tape, "softmax", softmax_backward, k, &x, 1, y, NULL));
    *out = y;
    return HOOP_OK;
}

// ----- cross-entropy ------------------------------------------------------------------------

struct ce_saved {
    float *probs;    /* (N, C) softmax of the logits */
    int32_t *labels; /* N, copied */
};

static hoop_status ce_backward(hoop_tape *tape, struct hoop_node *n)
{
    hoop_tensor *x = n->in[0];
    int acc;
    float *dx;
    HOOP_CHECK(hoop__grad_for(tape, x, &dx, &acc));
    if (dx == NULL) return HOOP_OK;
    const struct ce_saved *s = n->saved;
    const size_t N = (size_t)x->shape[0], C = (size_t)x->shape[1];
    return n->kern->ce_bwd(dx, s->probs, s->labels, n->out->grad, N, C, n->args.smoothing, acc);
}

static hoop_status ce_check(hoop_tensor *x, const int32_t *labels, float smoothing,
                            const struct hoop__kern **k)
{
    HOOP_CHECK(hoop__check_arg(x, "hoop_cross_entropy", "logits"));
    HOOP_CHECK(kern_of("hoop_cross_entropy", x, "logits", k));
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

hoop_status hoop_cross_entropy(hoop_tape *tape, hoop_tensor *logits, const int32_t *labels,
                               float label_smoothing, hoop_tensor **out)
{
    HOOP_CHECK(hoop__check_call(tape, out, "hoop_cross_entropy"));
    const struct hoop__kern *k;
    HOOP_CHECK(ce_check(logits, labels, label_smoothing, &k));
    const size_t N = (size_t)logits->shape[0], C = (size_t)logits->shape[1];
    struct ce_saved *s = hoop__arena_alloc(tape, sizeof(*s));
    if (s == NULL) return HOOP_ERR_NOMEM;
    s->probs = hoop__arena_data(tape, k->device, logits->count * sizeof(float));
    s->labels = hoop__arena_data(tape, k->device, N * sizeof(int32_t));
    if (s->probs == NULL || s->labels == NULL) return HOOP_ERR_NOMEM;
    /* host labels, checked above, to the logits' device (without waiting; a captured
     * graph reads them again from the same host memory at every replay) */
    HOOP_CHECK(k->upload(s->labels, labels, N * sizeof(int32_t)));
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_arena(tape, k->device, 0, NULL, &y));
    HOOP_CHECK(k->ce_fwd(y->data, s->probs, logits->data, s->labels, N, C, label_smoothing));
    struct hoop_node *n;
    HOOP_CHECK(hoop__tape_record(tape, "cross_entropy", ce_backward, k, &logits, 1, y, &n));
    if (n) {
        n->saved = s;
        n->args.smoothing = label_smoothing;
    }
    *out = y;
    return HOOP_OK;
}
