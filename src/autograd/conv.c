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
 * The lowering and its GEMMs are the kernel table's (kern.h: conv_fwd, conv_bwd; the CPU
 * goes sample by sample as above, a GPU lowers the whole batch into one scratch buffer);
 * this file checks shapes and devices and hands out the scratch from the tape's arena.
 *
 * Thread-safety: as the tape (one thread per tape).
 */
#include <limits.h>

#include "autograd/autograd_impl.h"
#include "autograd/kern.h"
#include "autograd/ops.h"
#include "core/check.h"

static struct hoop__conv_geom conv_geom_of(const hoop_tensor *x, const hoop_tensor *w, int stride,
                                           int padding)
{
    struct hoop__conv_geom g = {
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

static hoop_status conv_backward(hoop_tape *tape, struct hoop_node *n)
{
    hoop_tensor *x = n->in[0], *w = n->in[1];
    const struct hoop__kern *k = n->kern;
    const struct hoop__conv_geom g = conv_geom_of(x, w, n->args.conv.stride, n->args.conv.padding);
    const int S = (int)(g.OH * g.OW);
    int acc_x, acc_w, acc_b;
    float *dx, *dw, *db;
    HOOP_CHECK(hoop__grad_for(tape, x, &dx, &acc_x));
    HOOP_CHECK(hoop__grad_for(tape, w, &dw, &acc_w));
    if (dx || dw) {
        size_t floats;
        HOOP_CHECK(k->conv_scratch(&g, &floats));
        float *scratch = hoop__arena_data(tape, k->device, floats * sizeof(float));
        if (scratch == NULL) return HOOP_ERR_NOMEM; /* message set by the arena */
        HOOP_CHECK(k->conv_bwd(dx, dw, n->out->grad, x->data, w->data, scratch, &g, acc_x, acc_w));
    }
    HOOP_CHECK(hoop__grad_for(tape, n->in[2], &db, &acc_b));
    if (db == NULL) return HOOP_OK;
    return k->bias_grad(db, n->out->grad, (size_t)g.N, (size_t)g.O, (size_t)S, acc_b);
}

static hoop_status conv_check(hoop_tensor *const *in, int stride, int padding,
                              const struct hoop__kern **k)
{
    const char *op = "hoop_conv2d";
    hoop_tensor *x = in[0], *w = in[1], *b = in[2];
    HOOP_CHECK(hoop__check_arg(x, op, "x"));
    HOOP_CHECK(hoop__check_arg(w, op, "w"));
    if (b != NULL) HOOP_CHECK(hoop__check_arg(b, op, "bias"));
    const char *const names[3] = {"x", "w", "bias"};
    HOOP_CHECK(hoop__op_kern(op, in, names, 3, k));
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
    if (b != NULL && (b->ndim != 1 || b->shape[0] != w->shape[0]))
        return hoop__shape_error(op, "w", w, "bias", b, "bias must be (w's dim 0)");
    return HOOP_OK;
}

hoop_status hoop_conv2d(hoop_tape *tape, hoop_tensor *x, hoop_tensor *w, hoop_tensor *bias,
                        int stride, int padding, hoop_tensor **out)
{
    HOOP_CHECK(hoop__check_call(tape, out, "hoop_conv2d"));
    hoop_tensor *in[3] = {x, w, bias};
    const struct hoop__kern *k;
    HOOP_CHECK(conv_check(in, stride, padding, &k));
    const struct hoop__conv_geom g = conv_geom_of(x, w, stride, padding);
    const int S = (int)(g.OH * g.OW), O = (int)g.O;
    const int64_t shape[4] = {g.N, g.O, g.OH, g.OW};
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_arena(tape, k->device, 4, shape, &y));
    size_t floats;
    HOOP_CHECK(k->conv_scratch(&g, &floats));
    float *scratch = hoop__arena_data(tape, k->device, floats * sizeof(float));
    if (scratch == NULL) return HOOP_ERR_NOMEM;
    /* y starts as the broadcast bias (0 without one); the convolution adds W @ col. */
    HOOP_CHECK(k->bias_fill(y->data, bias ? bias->data : NULL, (size_t)g.N, (size_t)O, (size_t)S));
    HOOP_CHECK(k->conv_fwd(y->data, x->data, w->data, scratch, &g));
    struct hoop_node *n;
    HOOP_CHECK(hoop__tape_record(tape, "conv2d", conv_backward, k, in, 3, y, &n));
    if (n) {
        n->args.conv.stride = stride;
        n->args.conv.padding = padding;
    }
    *out = y;
    return HOOP_OK;
}

// ----- max pooling --------------------------------------------------------------------------

static hoop_status pool_backward(hoop_tape *tape, struct hoop_node *n)
{
    hoop_tensor *x = n->in[0], *y = n->out;
    int acc;
    float *dx;
    HOOP_CHECK(hoop__grad_for(tape, x, &dx, &acc));
    if (dx == NULL) return HOOP_OK;
    const size_t planes = (size_t)(x->shape[0] * x->shape[1]);
    return n->kern->pool_bwd(dx, y->grad, n->saved, planes, x->shape[2], x->shape[3], y->shape[2],
                             y->shape[3], n->args.pool.kernel, n->args.pool.stride, acc);
}

hoop_status hoop_max_pool2d(hoop_tape *tape, hoop_tensor *x, int kernel, int stride,
                            hoop_tensor **out)
{
    const char *op = "hoop_max_pool2d";
    HOOP_CHECK(hoop__check_call(tape, out, op));
    HOOP_CHECK(hoop__check_arg(x, op, "x"));
    const char *const names[1] = {"x"};
    const struct hoop__kern *k;
    HOOP_CHECK(hoop__op_kern(op, &x, names, 1, &k));
    if (x->ndim != 4) return hoop__ndim_error(op, "x", x, "4 dimensions (N, C, H, W)");
    if (kernel < 1 || stride < 1 || x->shape[2] < kernel || x->shape[3] < kernel)
        return hoop__ndim_error(op, "x", x, "H, W >= kernel, with kernel and stride >= 1");
    const int64_t H = x->shape[2], W = x->shape[3];
    const int64_t OH = (H - kernel) / stride + 1, OW = (W - kernel) / stride + 1;
    const int64_t shape[4] = {x->shape[0], x->shape[1], OH, OW};
    hoop_tensor *y;
    HOOP_CHECK(hoop__tensor_arena(tape, k->device, 4, shape, &y));
    int32_t *arg = hoop__arena_data(tape, k->device, y->count * sizeof(int32_t));
    if (arg == NULL) return HOOP_ERR_NOMEM;
    const size_t planes = (size_t)(x->shape[0] * x->shape[1]);
    HOOP_CHECK(k->pool_fwd(y->data, arg, x->data, planes, H, W, OH, OW, kernel, stride));
    struct hoop_node *n;
    HOOP_CHECK(hoop__tape_record(tape, "max_pool2d", pool_backward, k, &x, 1, y, &n));
    if (n) {
        n->saved = arg;
        n->args.pool.kernel = kernel;
        n->args.pool.stride = stride;
    }
    *out = y;
    return HOOP_OK;
}
