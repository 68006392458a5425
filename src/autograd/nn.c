/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/nn.c -- models: parameter containers in registration order, weight
 * initialisation, and the built-in MLP and CNN forward passes.
 *
 * Owns: the model's parameters (freed with the model) and their names.
 * Thread-safety: a model belongs to one thread at a time.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "autograd/ops.h"
#include "core/check.h"
#include "hoop/nn.h"

enum model_kind { MODEL_CUSTOM, MODEL_MLP, MODEL_CNN };

struct hoop_model {
    enum model_kind kind;
    hoop_tensor **params;
    size_t nparams, cap;
    int64_t in_features; /* MLP: sizes[0] */
    hoop_cnn_config cnn;
};

// ----- initialisation -----------------------------------------------------------------------

hoop_status hoop_init_uniform(hoop_tensor *t, float lo, float hi, hoop_rng *rng)
{
    if (t == NULL || rng == NULL)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_init_uniform: %s is NULL",
                          t == NULL ? "t" : "rng");
    if (t->device == HOOP_DEVICE_CPU) {
        for (size_t i = 0; i < t->count; i++) t->data[i] = lo + (hi - lo) * hoop_rng_uniform(rng);
        return HOOP_OK;
    }
    /* A device tensor draws the same numbers on the host and uploads them, so a model
     * initialised on either device starts from the same weights. */
    float *host;
    HOOP_CHECK(hoop__calloc(&host, t->count));
    for (size_t i = 0; i < t->count; i++) host[i] = lo + (hi - lo) * hoop_rng_uniform(rng);
    const hoop_status st = hoop_tensor_copy_from(t, host, t->count);
    free(host);
    return st;
}

static hoop_status init_check(const hoop_tensor *t, const hoop_rng *rng, float gain, const char *fn)
{
    if (t == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "%s: t is NULL", fn);
    if (rng == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "%s: rng is NULL", fn);
    if (!isfinite(gain))
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s: gain=%g is not finite", fn, (double)gain);
    return HOOP_OK;
}

hoop_status hoop_init_kaiming_uniform(hoop_tensor *t, int64_t fan_in, float gain, hoop_rng *rng)
{
    HOOP_CHECK(init_check(t, rng, gain, "hoop_init_kaiming_uniform"));
    if (fan_in < 1)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_init_kaiming_uniform: fan_in=%lld must be >= 1",
                          (long long)fan_in);
    const float bound = gain * sqrtf(3.0f / (float)fan_in);
    return hoop_init_uniform(t, -bound, bound, rng);
}

hoop_status hoop_init_xavier_uniform(hoop_tensor *t, int64_t fan_in, int64_t fan_out, float gain,
                                     hoop_rng *rng)
{
    HOOP_CHECK(init_check(t, rng, gain, "hoop_init_xavier_uniform"));
    if (fan_in < 0 || fan_out < 0 || fan_in > INT64_MAX - fan_out || fan_in + fan_out < 1)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "hoop_init_xavier_uniform: fan_in=%lld and fan_out=%lld must be >= 0 "
                          "with a sum >= 1",
                          (long long)fan_in, (long long)fan_out);
    const float bound = gain * sqrtf(6.0f / (float)(fan_in + fan_out));
    return hoop_init_uniform(t, -bound, bound, rng);
}

// ----- the container ------------------------------------------------------------------------

hoop_status hoop_model_new(hoop_model **out)
{
    if (out == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_model_new: out is NULL");
    HOOP_CHECK(hoop__calloc(out, 1));
    return HOOP_OK;
}

void hoop_model_free(hoop_model *m)
{
    if (m == NULL) return;
    for (size_t i = 0; i < m->nparams; i++) hoop_tensor_free(m->params[i]);
    free(m->params);
    free(m);
}

hoop_status hoop_model_add_param(hoop_model *m, const char *name, int ndim, const int64_t *shape,
                                 hoop_tensor **out)
{
    if (out) *out = NULL;
    if (m == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_model_add_param: m is NULL");
    if (name == NULL || name[0] == '\0')
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_model_add_param: name is NULL or empty");
    if (strlen(name) >= HOOP_TENSOR_NAME_MAX) /* cut, two names could become one */
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "hoop_model_add_param: name '%.20s...' is longer than %d bytes", name,
                          HOOP_TENSOR_NAME_MAX - 1);
    for (size_t i = 0; i < m->nparams; i++)
        if (strcmp(m->params[i]->name, name) == 0)
            return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_model_add_param: duplicate name '%s'", name);
    if (m->nparams == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 8;
        HOOP_CHECK(hoop__realloc(&m->params, cap));
        m->cap = cap;
    }
    hoop_tensor *t;
    HOOP_CHECK(hoop_tensor_new(&t, ndim, shape, HOOP_DEVICE_CPU, 1));
    hoop_tensor_set_name(t, name);
    m->params[m->nparams++] = t;
    if (out) *out = t;
    return HOOP_OK;
}

size_t hoop_model_param_count(const hoop_model *m)
{
    return m ? m->nparams : 0;
}

hoop_tensor *hoop_model_param(const hoop_model *m, size_t i)
{
    return m && i < m->nparams ? m->params[i] : NULL;
}

hoop_tensor *const *hoop_model_params(const hoop_model *m)
{
    return m ? m->params : NULL;
}

size_t hoop_model_numel(const hoop_model *m)
{
    size_t n = 0;
    for (size_t i = 0; m && i < m->nparams; i++) n += m->params[i]->count;
    return n;
}

void hoop_model_set_grad_hook(hoop_model *m, hoop_grad_hook_fn fn, void *user)
{
    for (size_t i = 0; m && i < m->nparams; i++) hoop_tensor_set_grad_hook(m->params[i], fn, user);
}

hoop_status hoop_model_to_device(hoop_model *m, hoop_device device)
{
    if (m == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_model_to_device: m is NULL");
    /* Each parameter moves or stays whole; a failure part-way leaves the model on two
     * devices, which the next op reports (mixed devices), and a retry finishes the move. */
    for (size_t i = 0; i < m->nparams; i++) {
        const hoop_status st = hoop_tensor_to_device(m->params[i], device);
        if (st != HOOP_OK) {
            char why[512];
            snprintf(why, sizeof(why), "%s", hoop_last_error());
            return HOOP_ERROR(st, "hoop_model_to_device: %s: %s", m->params[i]->name, why);
        }
    }
    return HOOP_OK;
}

hoop_status hoop_model_zero_grad(hoop_model *m)
{
    for (size_t i = 0; m && i < m->nparams; i++) HOOP_CHECK(hoop_tensor_zero_grad(m->params[i]));
    return HOOP_OK;
}

// ----- layers -------------------------------------------------------------------------------

/* PyTorch's default: weight kaiming_uniform(a = sqrt(5)) = U(+-1/sqrt(fan_in)), bias the
 * same bound. weight has shape wshape (ndim dims), fan_in = count / wshape[0]. */
static hoop_status add_layer(hoop_model *m, const char *prefix, int ndim, const int64_t *wshape,
                             hoop_rng *rng)
{
    char name[HOOP_TENSOR_NAME_MAX];
    hoop_tensor *w, *b;
    snprintf(name, sizeof(name), "%s.weight", prefix);
    HOOP_CHECK(hoop_model_add_param(m, name, ndim, wshape, &w));
    snprintf(name, sizeof(name), "%s.bias", prefix);
    HOOP_CHECK(hoop_model_add_param(m, name, 1, wshape, &b));
    const int64_t fan_in = (int64_t)w->count / wshape[0];
    HOOP_CHECK(hoop_init_kaiming_uniform(w, fan_in, 1.0f / sqrtf(3.0f), rng));
    const float bound = 1.0f / sqrtf((float)fan_in);
    HOOP_CHECK(hoop_init_uniform(b, -bound, bound, rng));
    return HOOP_OK;
}

hoop_status hoop_model_new_mlp(hoop_model **out, const int64_t *sizes, size_t nsizes, uint64_t seed)
{
    if (out == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_model_new_mlp: out is NULL");
    *out = NULL;
    if (sizes == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_model_new_mlp: sizes is NULL");
    if (nsizes < 2)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_model_new_mlp: nsizes=%zu, need at least 2",
                          nsizes);
    for (size_t i = 0; i < nsizes; i++)
        if (sizes[i] < 1)
            return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_model_new_mlp: sizes[%zu]=%lld < 1", i,
                              (long long)sizes[i]);
    hoop_model *m;
    HOOP_CHECK(hoop_model_new(&m));
    m->kind = MODEL_MLP;
    m->in_features = sizes[0];
    hoop_rng rng;
    hoop_rng_seed(&rng, seed);
    hoop_status st = HOOP_OK;
    for (size_t i = 0; i + 1 < nsizes; i++) {
        char prefix[32];
        snprintf(prefix, sizeof(prefix), "fc%zu", i + 1);
        const int64_t wshape[2] = {sizes[i + 1], sizes[i]};
        HOOP_CHECK_GOTO(add_layer(m, prefix, 2, wshape, &rng), st, fail);
    }
    *out = m;
    return HOOP_OK;
fail:
    hoop_model_free(m);
    return st;
}

/* a * b * c when it fits the ops' limit (INT_MAX elements, as BLAS indexes with int). */
static int fits_int(int64_t a, int64_t b, int64_t c, int64_t *out)
{
    int64_t ab;
    return !__builtin_mul_overflow(a, b, &ab) && !__builtin_mul_overflow(ab, c, out) &&
           *out <= INT_MAX;
}

static hoop_status cnn_check(const hoop_cnn_config *c)
{
    const char *fn = "hoop_model_new_cnn";
    if (c == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "%s: cfg is NULL", fn);
    const struct {
        const char *name;
        int64_t v;
    } sizes[] = {{"in_channels", c->in_channels},
                 {"conv1_channels", c->conv1_channels},
                 {"conv2_channels", c->conv2_channels},
                 {"hidden", c->hidden},
                 {"classes", c->classes}};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        if (sizes[i].v < 1)
            return HOOP_ERROR(HOOP_ERR_INVALID, "%s: %s=%lld must be >= 1", fn, sizes[i].name,
                              (long long)sizes[i].v);
    if (c->height < 4 || c->width < 4 || c->height % 4 || c->width % 4)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s: height=%lld and width=%lld must be positive multiples of 4", fn,
                          (long long)c->height, (long long)c->width);
    int64_t feat, n;
    if (!fits_int(c->conv2_channels, c->height / 4, c->width / 4, &feat) ||
        !fits_int(c->in_channels > c->conv1_channels ? c->in_channels : c->conv1_channels,
                  c->height, c->width, &n))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s: height=%lld x width=%lld images with %lld/%lld/%lld channels "
                          "exceed %d elements per sample",
                          fn, (long long)c->height, (long long)c->width, (long long)c->in_channels,
                          (long long)c->conv1_channels, (long long)c->conv2_channels, INT_MAX);
    if (!fits_int(c->hidden, feat, 1, &n) || !fits_int(c->classes, c->hidden, 1, &n) ||
        !fits_int(c->conv2_channels, c->conv1_channels, 9, &n) ||
        !fits_int(c->conv1_channels, c->in_channels, 9, &n))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s: a weight of in_channels=%lld, conv1_channels=%lld, "
                          "conv2_channels=%lld, hidden=%lld, classes=%lld would exceed %d "
                          "elements",
                          fn, (long long)c->in_channels, (long long)c->conv1_channels,
                          (long long)c->conv2_channels, (long long)c->hidden, (long long)c->classes,
                          INT_MAX);
    if (!(c->dropout >= 0.0f && c->dropout < 1.0f))
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s: dropout=%g is outside [0, 1)", fn,
                          (double)c->dropout);
    return HOOP_OK;
}

hoop_status hoop_model_new_cnn(hoop_model **out, const hoop_cnn_config *cfg, uint64_t seed)
{
    if (out == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_model_new_cnn: out is NULL");
    *out = NULL;
    HOOP_CHECK(cnn_check(cfg));
    hoop_model *m;
    HOOP_CHECK(hoop_model_new(&m));
    m->kind = MODEL_CNN;
    m->cnn = *cfg;
    hoop_rng rng;
    hoop_rng_seed(&rng, seed);
    const hoop_cnn_config *c = cfg;
    const int64_t w1[4] = {c->conv1_channels, c->in_channels, 3, 3};
    const int64_t w2[4] = {c->conv2_channels, c->conv1_channels, 3, 3};
    const int64_t f1[2] = {c->hidden, c->conv2_channels * (c->height / 4) * (c->width / 4)};
    const int64_t f2[2] = {c->classes, c->hidden};
    hoop_status st = HOOP_OK;
    HOOP_CHECK_GOTO(add_layer(m, "conv1", 4, w1, &rng), st, fail);
    HOOP_CHECK_GOTO(add_layer(m, "conv2", 4, w2, &rng), st, fail);
    HOOP_CHECK_GOTO(add_layer(m, "fc1", 2, f1, &rng), st, fail);
    HOOP_CHECK_GOTO(add_layer(m, "fc2", 2, f2, &rng), st, fail);
    *out = m;
    return HOOP_OK;
fail:
    hoop_model_free(m);
    return st;
}

// ----- forward passes -----------------------------------------------------------------------

static hoop_status mlp_forward(hoop_model *m, hoop_tape *tape, hoop_tensor *x, hoop_tensor **y)
{
    hoop_tensor *h = x;
    if (x->ndim < 1 || (int64_t)x->count / x->shape[0] != m->in_features)
        return hoop__shape_error("hoop_model_forward (mlp)", "x", x, "fc1.weight", m->params[0],
                                 "x must be (N, ...) with fc1.weight's dim 1 features per row");
    if (x->ndim != 2) HOOP_CHECK(hoop_flatten(tape, x, &h));
    const size_t layers = m->nparams / 2;
    for (size_t i = 0; i < layers; i++) {
        HOOP_CHECK(hoop_linear(tape, h, m->params[2 * i], m->params[2 * i + 1], &h));
        if (i + 1 < layers) HOOP_CHECK(hoop_relu(tape, h, &h));
    }
    *y = h;
    return HOOP_OK;
}

static hoop_status conv_block(hoop_tape *tape, hoop_tensor *x, hoop_tensor *w, hoop_tensor *b,
                              hoop_tensor **y)
{
    HOOP_CHECK(hoop_conv2d(tape, x, w, b, 1, 1, y));
    HOOP_CHECK(hoop_relu(tape, *y, y));
    return hoop_max_pool2d(tape, *y, 2, 2, y);
}

static hoop_status cnn_forward(hoop_model *m, hoop_tape *tape, hoop_tensor *x, hoop_tensor **y)
{
    const hoop_cnn_config *c = &m->cnn;
    if (x->ndim != 4 || x->shape[1] != c->in_channels || x->shape[2] != c->height ||
        x->shape[3] != c->width)
        return hoop__shape_error("hoop_model_forward (cnn)", "x", x, "conv1.weight", m->params[0],
                                 "x must be (N, C, H, W) as in the CNN config");
    hoop_tensor *h, **p = m->params;
    HOOP_CHECK(conv_block(tape, x, p[0], p[1], &h));
    HOOP_CHECK(conv_block(tape, h, p[2], p[3], &h));
    HOOP_CHECK(hoop_flatten(tape, h, &h));
    HOOP_CHECK(hoop_linear(tape, h, p[4], p[5], &h));
    HOOP_CHECK(hoop_relu(tape, h, &h));
    if (c->dropout > 0.0f) HOOP_CHECK(hoop_dropout(tape, h, c->dropout, &h));
    return hoop_linear(tape, h, p[6], p[7], y);
}

hoop_status hoop_model_forward(hoop_model *m, hoop_tape *tape, hoop_tensor *x, hoop_tensor **logits)
{
    if (logits != NULL) *logits = NULL;
    if (m == NULL || tape == NULL || logits == NULL)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_model_forward: %s is NULL",
                          m == NULL      ? "m"
                          : tape == NULL ? "tape"
                                         : "logits");
    HOOP_CHECK(hoop__check_arg(x, "hoop_model_forward", "x"));
    switch (m->kind) {
    case MODEL_MLP: return mlp_forward(m, tape, x, logits);
    case MODEL_CNN: return cnn_forward(m, tape, x, logits);
    case MODEL_CUSTOM: break;
    }
    return HOOP_ERROR(HOOP_ERR_USAGE, "hoop_model_forward: this model has no built-in forward "
                                      "pass (made by hoop_model_new); run the ops yourself");
}
