/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/optim.c -- SGD (momentum, Nesterov, weight decay) and AdamW with PyTorch
 * 1.13's update rules (see hoop/optim.h), the warm-up + cosine learning-rate schedule, and
 * gradient clipping by global norm.
 *
 * The update loops, the norm and the scaling are the kernel table's (kern.h) for the
 * parameters' device; all parameters of an optimizer (or of one clipping call) must be on
 * one device.
 *
 * Owns: the parameter array copy and the per-parameter state (one momentum buffer for
 * SGD, the first and second moments for AdamW), each the size of its parameter.
 * Thread-safety: an optimizer belongs to one thread at a time.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "autograd/graph.h"
#include "autograd/kern.h"
#include "autograd/optim_impl.h"
#include "core/check.h"

/* The table of the count parameters' device (the CPU's when count is 0): HOOP_ERR_INVALID
 * naming two parameters on different devices, HOOP_ERR_UNSUPPORTED for a device without
 * kernels. fn names the caller. */
static hoop_status params_kern(const char *fn, hoop_tensor *const *params, size_t count,
                               const struct hoop__kern **k)
{
    const hoop_device d = count ? params[0]->device : HOOP_DEVICE_CPU;
    for (size_t i = 1; i < count; i++)
        if (params[i]->device != d)
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "%s: params[0] is on %s but params[%zu] is on %s; all parameters "
                              "must be on one device",
                              fn, hoop__device_name(d), i, hoop__device_name(params[i]->device));
    return hoop__kern_get(d, fn, k);
}

// ----- construction -------------------------------------------------------------------------

/* The rule for lr, weight_decay, momentum and eps: finite and >= 0. */
static hoop_status check_rate(const char *who, const char *field, float v)
{
    if (v >= 0.0f && isfinite(v)) return HOOP_OK;
    return HOOP_ERROR(HOOP_ERR_INVALID, "%s: %s=%g must be finite and >= 0", who, field, (double)v);
}

hoop_status hoop__optim_config_check(const char *who, const hoop_optim_config *c)
{
    if (c->kind != HOOP_OPTIM_SGD && c->kind != HOOP_OPTIM_ADAMW)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s: unknown kind %d", who, (int)c->kind);
    HOOP_CHECK(check_rate(who, "lr", c->lr));
    HOOP_CHECK(check_rate(who, "weight_decay", c->weight_decay));
    if (c->kind == HOOP_OPTIM_SGD) {
        HOOP_CHECK(check_rate(who, "momentum", c->momentum));
        if (!isfinite(c->dampening))
            return HOOP_ERROR(HOOP_ERR_INVALID, "%s: dampening=%g must be finite", who,
                              (double)c->dampening);
        if (c->nesterov && (c->momentum <= 0.0f || c->dampening != 0.0f))
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "%s: Nesterov momentum requires momentum > 0 and dampening 0 "
                              "(momentum=%g, dampening=%g)",
                              who, (double)c->momentum, (double)c->dampening);
        return HOOP_OK;
    }
    /* Nesterov is a form of SGD's momentum; AdamW has none, so the flag would be ignored. */
    if (c->nesterov)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s: nesterov=%d applies only to SGD momentum; AdamW has none", who,
                          c->nesterov);
    if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f) || !(c->beta2 >= 0.0f && c->beta2 < 1.0f))
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s: betas (beta1=%g, beta2=%g) must be in [0, 1)", who,
                          (double)c->beta1, (double)c->beta2);
    HOOP_CHECK(check_rate(who, "eps", c->eps));
    return HOOP_OK;
}

static hoop_status alloc_state(hoop_optim *o)
{
    HOOP_CHECK(o->kern->host_alloc((void **)&o->scal_host, sizeof(*o->scal_host)));
    memset(o->scal_host, 0, sizeof(*o->scal_host));
    HOOP_CHECK(o->kern->mem_alloc((void **)&o->scal_dev, sizeof(*o->scal_dev)));
    const int nstate = o->cfg.kind == HOOP_OPTIM_ADAMW ? 2 : (o->cfg.momentum != 0.0f ? 1 : 0);
    o->nstate = nstate;
    if (nstate == 0) return HOOP_OK;
    HOOP_CHECK(hoop__calloc(&o->state, o->count * (size_t)nstate));
    /* In the parameters' device's memory, zeroed (torch's buffers start at 0). */
    for (size_t i = 0; i < o->count; i++)
        for (int j = 0; j < nstate; j++) {
            const size_t n = o->params[i]->count;
            void *p;
            HOOP_CHECK(o->kern->mem_alloc(&p, n * sizeof(float)));
            o->state[i * nstate + j] = p;
            HOOP_CHECK(o->kern->fill(p, n, 0.0f));
        }
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
    HOOP_CHECK(hoop__optim_config_check("hoop_optim_new", cfg));
    for (size_t i = 0; i < count; i++)
        if (params[i] == NULL || !params[i]->requires_grad || !params[i]->long_lived)
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "hoop_optim_new: params[%zu] is not a parameter "
                              "(NULL or without requires_grad)",
                              i);
    const struct hoop__kern *k;
    HOOP_CHECK(params_kern("hoop_optim_new", params, count, &k));
    hoop_optim *o;
    HOOP_CHECK(hoop__calloc(&o, 1));
    o->cfg = *cfg;
    o->kern = k;
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
        for (size_t i = 0; i < o->count * (size_t)o->nstate; i++) o->kern->mem_free(o->state[i]);
    free(o->state);
    if (o->kern) {
        o->kern->host_free(o->scal_host);
        o->kern->mem_free(o->scal_dev);
    }
    free(o->params);
    free(o);
}

// ----- updates ------------------------------------------------------------------------------

/* The scalars of step o->steps (>= 1) from the configuration, as PyTorch 1.13 computes
 * them: SGD's first step takes d as the buffer; AdamW's bias corrections are Python
 * doubles, used as f32 scalars. */
static void step_scalars(const hoop_optim *o, struct hoop__step_scalars *s)
{
    const hoop_optim_config *c = &o->cfg;
    memset(s, 0, sizeof(*s));
    s->lr = c->lr;
    if (c->kind == HOOP_OPTIM_ADAMW) {
        const double bc1 = 1.0 - pow(c->beta1, (double)o->steps);
        const double bc2 = 1.0 - pow(c->beta2, (double)o->steps);
        s->step_size = (float)(c->lr / bc1);
        s->bc2_sqrt = (float)sqrt(bc2);
        s->decay = (float)(1.0 - (double)c->lr * c->weight_decay);
        return;
    }
    const int first = o->steps == 1;
    s->keep = first ? 0.0f : c->momentum;
    s->take = first ? 1.0f : 1.0f - c->dampening;
}

/* One parameter's update through the table; SGD's rule and AdamW's are kern.h's. */
static hoop_status update_one(hoop_optim *o, size_t i)
{
    const hoop_optim_config *c = &o->cfg;
    hoop_tensor *p = o->params[i];
    if (c->kind == HOOP_OPTIM_ADAMW) {
        const struct hoop__adamw_args a = {.beta1 = c->beta1, .beta2 = c->beta2, .eps = c->eps};
        return o->kern->adamw(&a, o->scal_dev, p->data, p->grad, o->state[2 * i],
                              o->state[2 * i + 1], p->count);
    }
    const struct hoop__sgd_args a = {
        .weight_decay = c->weight_decay,
        .momentum = c->momentum,
        .nesterov = c->nesterov,
    };
    return o->kern->sgd(&a, o->scal_dev, p->data, p->grad, o->nstate ? o->state[i] : NULL,
                        p->count);
}

/* A graph replay's host side of a captured hoop_optim_step (graph.c): the next step's
 * count and scalars, which the captured upload carries to the device. */
static void replay_step(void *user)
{
    hoop_optim *o = user;
    o->steps++;
    step_scalars(o, o->scal_host);
}

/* A failed capture's undo of the step count hoop_optim_step advanced. */
static void undo_step(void *user)
{
    ((hoop_optim *)user)->steps--;
}

/* HOOP_ERR_USAGE naming the first parameter that is no longer on the device the optimizer
 * was made for (hoop_tensor_to_device after hoop_optim_new): its state and its kernels are
 * that device's, and they would be handed the other device's pointers. */
static hoop_status check_devices(const hoop_optim *o, const char *fn)
{
    for (size_t i = 0; i < o->count; i++)
        if (o->params[i]->device != o->kern->device)
            return HOOP_ERROR(HOOP_ERR_USAGE,
                              "%s: params[%zu] (%s) is on %s, but the optimizer was made for "
                              "%s; move the model first, then make the optimizer",
                              fn, i, o->params[i]->name[0] ? o->params[i]->name : "unnamed",
                              hoop__device_name(o->params[i]->device),
                              hoop__device_name(o->kern->device));
    return HOOP_OK;
}

hoop_status hoop_optim_step(hoop_optim *o)
{
    if (o == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_optim_step: opt is NULL");
    HOOP_CHECK(check_devices(o, "hoop_optim_step"));
    o->steps++;
    step_scalars(o, o->scal_host);
    HOOP_CHECK(o->kern->upload(o->scal_dev, o->scal_host, sizeof(*o->scal_host)));
    for (size_t i = 0; i < o->count; i++) HOOP_CHECK(update_one(o, i));
    return hoop__graph_on_replay(o->kern->device, replay_step, undo_step, o);
}

hoop_status hoop_optim_zero_grad(hoop_optim *o)
{
    if (o) HOOP_CHECK(check_devices(o, "hoop_optim_zero_grad"));
    for (size_t i = 0; o && i < o->count; i++)
        if (o->params[i]->grad != NULL)
            HOOP_CHECK(o->kern->fill(o->params[i]->grad, o->params[i]->count, 0.0f));
    return HOOP_OK;
}

hoop_status hoop_optim_set_lr(hoop_optim *o, float lr)
{
    if (o == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_optim_set_lr: opt is NULL");
    HOOP_CHECK(check_rate("hoop_optim_set_lr", "lr", lr)); /* hoop_optim_new's rule */
    o->cfg.lr = lr;
    return HOOP_OK;
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

/* The calling thread's clipping accumulator on k's device, made on first use and kept
 * for the thread's life (a graph captured with it refers to it). */
static hoop_status clip_scratch(const struct hoop__kern *k, double **sq)
{
    static _Thread_local double *per_device[2];
    if ((unsigned)k->device >= 2)
        return HOOP_INTERNAL_ERROR("clip: device %d has no scratch slot", (int)k->device);
    if (per_device[k->device] == NULL)
        HOOP_CHECK(k->mem_alloc((void **)&per_device[k->device], sizeof(double)));
    *sq = per_device[k->device];
    return HOOP_OK;
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
    const struct hoop__kern *k;
    HOOP_CHECK(params_kern("hoop_clip_grad_norm", params, count, &k));
    /* The sum of squares accumulates in the device's memory (one double; on a device the
     * thread's own, kept: a captured graph writes it at every replay) over every
     * parameter; the scaling reads it there, so nothing comes back to the host unless the
     * caller asks for the norm. */
    double local = 0.0, *sq = &local;
    if (k->device != HOOP_DEVICE_CPU) {
        HOOP_CHECK(clip_scratch(k, &sq));
        HOOP_CHECK(k->fill((float *)sq, sizeof(double) / sizeof(float), 0.0f));
    }
    for (size_t i = 0; i < count; i++)
        if (params[i]->grad != NULL) HOOP_CHECK(k->sqnorm(sq, params[i]->grad, params[i]->count));
    if (total_norm) {
        double host = 0.0;
        HOOP_CHECK(k->copy(&host, sq, sizeof(double), 0));
        *total_norm = (float)sqrt(host);
    }
    for (size_t i = 0; i < count; i++)
        if (params[i]->grad != NULL)
            HOOP_CHECK(k->clip_scale(params[i]->grad, params[i]->count, sq, max_norm));
    return HOOP_OK;
}
