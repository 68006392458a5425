/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/optim.c -- SGD (momentum, Nesterov, weight decay) and AdamW with PyTorch
 * 1.13's update rules (see hoop/optim.h), the warm-up + cosine learning-rate schedule, and
 * gradient clipping by global norm.
 *
 * Owns: the parameter array copy and the per-parameter state (one momentum buffer for
 * SGD, the first and second moments for AdamW), each the size of its parameter.
 * Thread-safety: an optimizer belongs to one thread at a time.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "autograd/optim_impl.h"
#include "core/check.h"

/* The element-wise loops must vectorise: GCC does so with an unknown trip count only from
 * -O3 (its -O2 cost model is "very cheap"); clang vectorises at -O2 already. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__)
#pragma GCC optimize("O3")
#endif

// ----- construction -------------------------------------------------------------------------

static hoop_status config_check(const hoop_optim_config *c)
{
    if (c->kind != HOOP_OPTIM_SGD && c->kind != HOOP_OPTIM_ADAMW)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_optim_new: unknown kind %d", (int)c->kind);
    if (!(c->lr >= 0.0f) || !(c->weight_decay >= 0.0f))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "hoop_optim_new: lr=%g and weight_decay=%g must be "
                          ">= 0",
                          (double)c->lr, (double)c->weight_decay);
    if (c->kind == HOOP_OPTIM_SGD) {
        if (!(c->momentum >= 0.0f))
            return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_optim_new: momentum=%g must be >= 0",
                              (double)c->momentum);
        if (c->nesterov && (c->momentum <= 0.0f || c->dampening != 0.0f))
            return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_optim_new: Nesterov momentum requires "
                                                "momentum > 0 and dampening 0");
        return HOOP_OK;
    }
    if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f) || !(c->beta2 >= 0.0f && c->beta2 < 1.0f) ||
        !(c->eps >= 0.0f))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "hoop_optim_new: betas (%g, %g) must be in [0, 1) "
                          "and eps=%g >= 0",
                          (double)c->beta1, (double)c->beta2, (double)c->eps);
    return HOOP_OK;
}

static hoop_status alloc_state(hoop_optim *o)
{
    const int nstate = o->cfg.kind == HOOP_OPTIM_ADAMW ? 2 : (o->cfg.momentum != 0.0f ? 1 : 0);
    o->nstate = nstate;
    if (nstate == 0) return HOOP_OK;
    HOOP_CHECK(hoop__calloc(&o->state, o->count * (size_t)nstate));
    for (size_t i = 0; i < o->count; i++)
        for (int k = 0; k < nstate; k++)
            HOOP_CHECK(hoop__calloc(&o->state[i * nstate + k], o->params[i]->count));
    return HOOP_OK;
}

hoop_status hoop_optim_new(hoop_optim **out, const hoop_optim_config *cfg,
                           hoop_tensor *const *params, size_t count)
{
    if (out == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_optim_new: out is NULL");
    *out = NULL;
    if (cfg == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_optim_new: cfg is NULL");
    if (params == NULL && count > 0)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_optim_new: params is NULL for count=%zu", count);
    HOOP_CHECK(config_check(cfg));
    for (size_t i = 0; i < count; i++)
        if (params[i] == NULL || !params[i]->requires_grad || !params[i]->long_lived)
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "hoop_optim_new: params[%zu] is not a parameter "
                              "(NULL or without requires_grad)",
                              i);
    hoop_optim *o;
    HOOP_CHECK(hoop__calloc(&o, 1));
    o->cfg = *cfg;
    o->count = count;
    hoop_status st = HOOP_OK;
    HOOP_CHECK_GOTO(hoop__calloc(&o->params, count ? count : 1), st, fail);
    if (count) memcpy(o->params, params, count * sizeof(*params));
    HOOP_CHECK_GOTO(alloc_state(o), st, fail);
    *out = o;
    return HOOP_OK;
fail:
    hoop_optim_free(o);
    return st;
}

void hoop_optim_free(hoop_optim *o)
{
    if (o == NULL) return;
    if (o->state)
        for (size_t i = 0; i < o->count * (size_t)o->nstate; i++) free(o->state[i]);
    free(o->state);
    free(o->params);
    free(o);
}

// ----- updates ------------------------------------------------------------------------------

/* torch.optim.SGD, one parameter: d = g + wd p; buf = d (first step) or mu buf + (1 - damp) d;
 * p -= lr (nesterov ? d + mu buf : buf). The branches are hoisted so each loop vectorises;
 * with wd == 0, g + 0 p == g exactly, as torch's skipped addition. */
static void sgd_update(const hoop_optim_config *c, float *restrict p, const float *restrict g,
                       float *restrict buf, size_t n, int first, float lr)
{
    const float wd = c->weight_decay, mu = c->momentum;
    const float keep = first ? 0.0f : mu, take = first ? 1.0f : 1.0f - c->dampening;
    if (buf == NULL) {
        for (size_t i = 0; i < n; i++) p[i] -= lr * (g[i] + wd * p[i]);
    } else if (c->nesterov) {
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
}

/* torch.optim.AdamW (single-tensor path), one parameter, step t >= 1. */
static void adamw_update(const hoop_optim_config *c, float *restrict p, const float *restrict g,
                         float *restrict m, float *restrict v, size_t n, int64_t t, float lr)
{
    const float b1 = c->beta1, b2 = c->beta2;
    /* As torch: the bias corrections are Python doubles, used as f32 scalars. */
    const double bc1 = 1.0 - pow(b1, (double)t), bc2 = 1.0 - pow(b2, (double)t);
    const float step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2);
    const float decay = (float)(1.0 - (double)lr * c->weight_decay);
    for (size_t i = 0; i < n; i++) {
        p[i] *= decay;
        m[i] = m[i] * b1 + (1.0f - b1) * g[i];
        v[i] = v[i] * b2 + (1.0f - b2) * g[i] * g[i];
        const float denom = sqrtf(v[i]) / bc2_sqrt + c->eps;
        p[i] += -step_size * (m[i] / denom);
    }
}

hoop_status hoop_optim_step(hoop_optim *o)
{
    if (o == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_optim_step: opt is NULL");
    o->steps++;
    for (size_t i = 0; i < o->count; i++) {
        hoop_tensor *p = o->params[i];
        if (o->cfg.kind == HOOP_OPTIM_ADAMW)
            adamw_update(&o->cfg, p->data, p->grad, o->state[2 * i], o->state[2 * i + 1], p->count,
                         o->steps, o->cfg.lr);
        else
            sgd_update(&o->cfg, p->data, p->grad, o->nstate ? o->state[i] : NULL, p->count,
                       o->steps == 1, o->cfg.lr);
    }
    return HOOP_OK;
}

void hoop_optim_zero_grad(hoop_optim *o)
{
    for (size_t i = 0; o && i < o->count; i++) hoop_tensor_zero_grad(o->params[i]);
}

void hoop_optim_set_lr(hoop_optim *o, float lr)
{
    if (o) o->cfg.lr = lr;
}

float hoop_optim_lr(const hoop_optim *o)
{
    return o ? o->cfg.lr : 0.0f;
}

int64_t hoop_optim_step_count(const hoop_optim *o)
{
    return o ? o->steps : 0;
}

// ----- schedule and clipping ----------------------------------------------------------------

float hoop_lr_at(const hoop_lr_schedule *s, int64_t step)
{
    if (s == NULL) return 0.0f;
    if (step < 0) step = 0; /* out of range: the first step's rate */
    if (step < s->warmup_steps) return s->base_lr * (float)(step + 1) / (float)s->warmup_steps;
    /* The differences in double (exact below 2^53): in int64 they overflow at its ends. */
    const double warm = s->warmup_steps > 0 ? (double)s->warmup_steps : 0.0;
    const double span = (double)s->total_steps - warm > 1.0 ? (double)s->total_steps - warm : 1.0;
    double q = ((double)step - warm) / span;
    if (q > 1.0) q = 1.0;
    return (float)(s->min_lr + (s->base_lr - s->min_lr) * (1.0 + cos(M_PI * q)) / 2.0);
}

hoop_status hoop_clip_grad_norm(hoop_tensor *const *params, size_t count, float max_norm,
                                float *total_norm)
{
    if (params == NULL && count > 0)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_clip_grad_norm: params is NULL for count=%zu",
                          count);
    for (size_t i = 0; i < count; i++)
        if (params[i] == NULL)
            return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_clip_grad_norm: params[%zu] is NULL", i);
    if (!(max_norm > 0.0f))
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_clip_grad_norm: max_norm=%g must be > 0",
                          (double)max_norm);
    double sq = 0.0;
    for (size_t i = 0; i < count; i++) {
        const float *g = params[i]->grad;
        if (g == NULL) continue;
        for (size_t k = 0; k < params[i]->count; k++) sq += (double)g[k] * g[k];
    }
    const float norm = (float)sqrt(sq);
    if (total_norm) *total_norm = norm;
    const float coef = max_norm / (norm + 1e-6f);
    if (coef >= 1.0f) return HOOP_OK;
    for (size_t i = 0; i < count; i++) {
        float *g = params[i]->grad;
        if (g == NULL) continue;
        for (size_t k = 0; k < params[i]->count; k++) g[k] *= coef;
    }
    return HOOP_OK;
}
