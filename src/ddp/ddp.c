/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/ddp/ddp.c -- the DDP reducer: buckets, grad-ready hooks, in-order launches.
 *
 * Owns the bucket buffers (parameters' gradients are views into them), the per-parameter
 * hook contexts and the step state. All of it is driven by the thread that calls
 * hoop_ddp_backward(); the all-reduces themselves run on the communicator's progress
 * thread. Bucketing and in-order launching follow PyTorch DDP's reducer (Li et al.,
 * "PyTorch Distributed: Experiences on Accelerating Data Parallel Training", VLDB 2020).
 * On cuda the buckets are device memory and each all-reduce is ordered on the device
 * (ddp_dev.c); this file decides what runs when, on either device.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autograd/autograd_impl.h"
#include "autograd/kern.h"
#include "core/check.h"
#include "core/clock.h"
#include "ddp/ddp_internal.h"
#include "collectives/comm.h"
#include "hoop/collectives.h"

#define DDP_ALIGN_FLOATS 16 /* 64 bytes: each gradient view starts on a cache line */
#define DDP_DEFAULT_CAP (25u << 20)
#define DDP_DEFAULT_FIRST (1u << 20)

HOOP_API int64_t hoop_ddp_now_us(void)
{
    return hoop__now_ns() / 1000;
}

// ----------------------------------------------------------------- construction

/* What every rank must agree on besides the shapes: the parameter count and each field
 * of the configuration that changes the buckets or the rounds (cfg after defaults). */
#define DDP_NAGREE 5
static const char *const agree_names[DDP_NAGREE] = {
    "parameters", "bucket_cap_bytes", "first_bucket_bytes", "divide_by_initial_world_size",
    "error_on_uneven"};

static hoop_status check_agreement(hoop_ddp *ddp, int ws, int64_t *all)
{
    const hoop_ddp_config *c = &ddp->cfg;
    int64_t mine[DDP_NAGREE] = {(int64_t)ddp->nparams, (int64_t)c->bucket_cap_bytes,
                                (int64_t)c->first_bucket_bytes, c->divide_by_initial_world_size,
                                c->error_on_uneven};
    HOOP_CHECK(hoop_allgather(ddp->comm, mine, all, DDP_NAGREE, HOOP_DTYPE_I64, NULL));
    for (int r = 1; r < ws; r++) {
        for (int f = 0; f < DDP_NAGREE; f++) {
            int64_t a = all[f], b = all[(size_t)r * DDP_NAGREE + (size_t)f];
            if (a == b) continue;
            if (f == 0)
                return HOOP_ERROR(HOOP_ERR_MISMATCH,
                                  "DDP: rank 0 has %lld parameter%s but rank %d has %lld",
                                  (long long)a, a == 1 ? "" : "s", r, (long long)b);
            return HOOP_ERROR(HOOP_ERR_MISMATCH, "DDP: rank 0 has %s=%lld but rank %d has %lld",
                              agree_names[f], (long long)a, r, (long long)b);
        }
    }
    return HOOP_OK;
}

/* Writes a shape signature (ndim, then HOOP_TENSOR_MAX_DIMS dimensions) as "(32, 16)", "()"
 * for a scalar, into buf; returns buf. */
/* A parameter as messages name it: 'fc1.weight' (quoted), or "unnamed" for a tensor
 * without a name (an empty '' read as a missing word). buf: HOOP_TENSOR_NAME_MAX + 2. */
#define PNAME_MAX (HOOP_TENSOR_NAME_MAX + 2)
static const char *pname(const hoop_tensor *t, char *buf)
{
    const char *n = t ? hoop_tensor_name(t) : NULL;
    if (!t) return "NULL";
    if (!n || !*n) return "unnamed";
    snprintf(buf, PNAME_MAX, "'%.*s'", HOOP_TENSOR_NAME_MAX - 1, n);
    return buf;
}

static const char *sig_str(const int64_t *sig, char *buf, size_t bytes)
{
    int nd = sig[0] < 0 ? 0 : sig[0] > HOOP_TENSOR_MAX_DIMS ? HOOP_TENSOR_MAX_DIMS : (int)sig[0];
    size_t len = (size_t)snprintf(buf, bytes, "(");
    for (int d = 0; d < nd && len < bytes; d++)
        len += (size_t)snprintf(buf + len, bytes - len, "%s%lld", d ? ", " : "",
                                (long long)sig[1 + d]);
    if (len < bytes) snprintf(buf + len, bytes - len, ")");
    return buf;
}

/* Every rank must hold the same number of parameters with the same shapes, and use the
 * same configuration. */
static hoop_status check_shapes(hoop_ddp *ddp)
{
    int ws = hoop_comm_world_size(ddp->comm);
    size_t n = ddp->nparams, per = 1 + HOOP_TENSOR_MAX_DIMS;
    int64_t *counts = NULL, *sig = NULL, *all = NULL;
    hoop_status st;
    HOOP_CHECK(hoop__calloc(&counts, (size_t)ws * DDP_NAGREE));
    HOOP_CHECK_GOTO(check_agreement(ddp, ws, counts), st, out);
    HOOP_CHECK_GOTO(hoop__calloc(&sig, n * per), st, out);
    HOOP_CHECK_GOTO(hoop__calloc(&all, n * per * (size_t)ws), st, out);
    for (size_t i = 0; i < n; i++) {
        sig[i * per] = hoop_tensor_ndim(ddp->params[i]);
        for (int d = 0; d < HOOP_TENSOR_MAX_DIMS; d++)
            sig[i * per + 1 + (size_t)d] = hoop_tensor_dim(ddp->params[i], d);
    }
    HOOP_CHECK_GOTO(hoop_allgather(ddp->comm, sig, all, n * per, HOOP_DTYPE_I64, NULL), st, out);
    for (int r = 1; r < ws; r++) {
        for (size_t i = 0; i < n; i++) {
            const int64_t *a = all + i * per, *b = all + ((size_t)r * n + i) * per;
            if (memcmp(a, b, per * sizeof(int64_t)) == 0) continue;
            char sa[128], sb[128], nm[PNAME_MAX];
            st = HOOP_ERROR(HOOP_ERR_MISMATCH,
                            "DDP: parameter %zu (%s on this rank) has shape %s on rank 0 but %s "
                            "on rank %d (a parameter missing, or listed in another order?)",
                            i, pname(ddp->params[i], nm), sig_str(a, sa, sizeof(sa)),
                            sig_str(b, sb, sizeof(sb)), r);
            goto out;
        }
    }
    st = HOOP_OK;
out:
    free(counts);
    free(sig);
    free(all);
    return st;
}

static hoop_status broadcast_params(hoop_ddp *ddp)
{
    /* cuda: what the compute stream wrote into the parameters is there before the
     * collective reads them (it runs on streams of its own) */
    HOOP_CHECK(ddp->k->sync());
    for (size_t i = 0; i < ddp->nparams; i++) {
        float *d = hoop_tensor_data(ddp->params[i]);
        size_t n = hoop_tensor_count(ddp->params[i]);
        HOOP_CHECK(hoop_broadcast(ddp->comm, d, d, n, HOOP_DTYPE_F32, 0, NULL));
    }
    return HOOP_OK;
}

static size_t padded(size_t count)
{
    return (count + DDP_ALIGN_FLOATS - 1) / DDP_ALIGN_FLOATS * DDP_ALIGN_FLOATS;
}

/* Groups parameters in reverse registration order: a bucket is closed once it reaches its
 * cap (the first bucket's cap is smaller, so the first all-reduce starts early). */
static hoop_status plan_buckets(hoop_ddp *ddp)
{
    size_t n = ddp->nparams, cap = ddp->cfg.first_bucket_bytes, fill = 0;
    HOOP_CHECK(hoop__calloc(&ddp->buckets, n));
    ddp->nbuckets = 0;
    for (size_t k = 0; k < n; k++) {
        int p = (int)(n - 1 - k);
        ddp->order[k] = p;
        if (fill == 0) ddp->buckets[ddp->nbuckets++].first = (int)k;
        ddp_bucket *b = &ddp->buckets[ddp->nbuckets - 1];
        ddp->bucket_of[p] = ddp->nbuckets - 1;
        ddp->offset[p] = b->count;
        b->count += padded(hoop_tensor_count(ddp->params[p]));
        b->nparams++;
        fill = b->count * sizeof(float);
        if (fill >= cap) {
            fill = 0;
            cap = ddp->cfg.bucket_cap_bytes;
        }
    }
    /* Two control floats after the last gradient: 1 on a rank that ran backward, 0 on a
     * joined one (reduced with the bucket, it counts the ranks that had data); and 1 on a
     * rank whose pass failed before the bucket went (it counts them: their peers fail
     * too, instead of returning gradients averaged with a failed rank's zeros). */
    ddp->buckets[ddp->nbuckets - 1].count += 2;
    return HOOP_OK;
}

/* The one place bucket memory comes from: bytes (> 0), zeroed, of the parameters' device,
 * mapped by the local ranks so that their all-reduces run direct, with no copies: on the
 * cpu hoop_comm_alloc_shared, on cuda hoop_comm_alloc_shared_cuda (CUDA IPC between the
 * node's processes; plain device memory, reduced staged, where the ranks cannot map it).
 * Collective, in bucket order on every rank. */
static hoop_status bucket_alloc(hoop_ddp *ddp, size_t bytes, float **p)
{
    if (ddp->device == HOOP_DEVICE_CPU) return hoop_comm_alloc_shared(ddp->comm, bytes, (void **)p);
    return hoop_comm_alloc_shared_cuda(ddp->comm, bytes, (void **)p);
}

/* Gives back what bucket_alloc gave (NULL is a no-op). On cuda, memory every rank maps is
 * released collectively (hoop_comm_free_shared_cuda): hoop_ddp_destroy runs on every rank. */
static hoop_status bucket_free(hoop_ddp *ddp, float *p)
{
    if (ddp->device == HOOP_DEVICE_CPU) return hoop_comm_free_shared(ddp->comm, p);
    return hoop_comm_free_shared_cuda(ddp->comm, p);
}

/* Allocates each bucket and moves the parameters' gradients into it (values kept). */
static hoop_status attach_buckets(hoop_ddp *ddp)
{
    for (int b = 0; b < ddp->nbuckets; b++) {
        ddp_bucket *bk = &ddp->buckets[b];
        size_t bytes = bk->count * sizeof(float);
        HOOP_CHECK(bucket_alloc(ddp, bytes ? bytes : 64, &bk->buf));
        for (int j = 0; j < bk->nparams; j++) {
            int p = ddp->order[bk->first + j];
            HOOP_CHECK(hoop_tensor_set_grad_buffer(ddp->params[p], bk->buf + ddp->offset[p]));
        }
    }
    ddp_bucket *last = &ddp->buckets[ddp->nbuckets - 1];
    ddp->control = last->buf + last->count - 2;
    ddp->fault = last->buf + last->count - 1;
    return HOOP_OK;
}

static void on_grad_ready(hoop_tensor *param, void *user);

static hoop_status attach_hooks(hoop_ddp *ddp)
{
    for (size_t i = 0; i < ddp->nparams; i++) {
        ddp->hooks[i] = (ddp_hook_ctx){.ddp = ddp, .param = (int)i};
        HOOP_CHECK(hoop_tensor_set_grad_hook(ddp->params[i], on_grad_ready, &ddp->hooks[i]));
    }
    return HOOP_OK;
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return (x > y) - (x < y);
}

/* A parameter listed twice would get two hooks and two places in the buckets. */
static hoop_status check_unique(hoop_tensor *const *params, size_t count)
{
    hoop_tensor **sorted;
    HOOP_CHECK(hoop__calloc(&sorted, count));
    memcpy(sorted, params, count * sizeof(*params));
    qsort(sorted, count, sizeof(*sorted), cmp_ptr);
    hoop_tensor *dup = NULL;
    for (size_t i = 1; i < count && !dup; i++)
        if (sorted[i] == sorted[i - 1]) dup = sorted[i];
    free(sorted);
    if (!dup) return HOOP_OK;
    size_t first = 0, second = 0;
    while (params[first] != dup) first++;
    for (second = first + 1; params[second] != dup; second++) continue;
    char nm[PNAME_MAX];
    return HOOP_ERROR(HOOP_ERR_INVALID,
                      "hoop_ddp_init: parameter %s is listed twice (at %zu and %zu)",
                      pname(dup, nm), first, second);
}

static hoop_status check_flag(const char *name, int v)
{
    if (v == 0 || v == 1) return HOOP_OK;
    return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_ddp_init: cfg->%s=%d must be 0 or 1", name, v);
}

static void on_grad_ready(hoop_tensor *param, void *user);

static hoop_status check_args(hoop_ddp **out, hoop_comm *comm, hoop_tensor *const *params,
                              size_t count, const hoop_ddp_config *cfg)
{
    if (!out) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_ddp_init: out is NULL");
    *out = NULL;
    if (!comm || !params)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_ddp_init: %s is NULL", comm ? "params" : "comm");
    if (count == 0) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_ddp_init: no parameters");
    if (count > INT_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_ddp_init: count=%zu is above INT_MAX", count);
    char n0[PNAME_MAX], ni[PNAME_MAX];
    for (size_t i = 0; i < count; i++) {
        if (!params[i] || !hoop_tensor_requires_grad(params[i]))
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "hoop_ddp_init: parameter %zu (%s) is not a tensor with "
                              "requires_grad",
                              i, pname(params[i], ni));
        if (hoop_tensor_device(params[i]) != hoop_tensor_device(params[0]))
            return HOOP_ERROR(
                HOOP_ERR_INVALID,
                "hoop_ddp_init: parameter %zu (%s) is on %s but parameter 0 "
                "(%s) is on %s; move the whole model to one device",
                i, pname(params[i], ni), hoop__device_name(hoop_tensor_device(params[i])),
                pname(params[0], n0), hoop__device_name(hoop_tensor_device(params[0])));
    }
    HOOP_CHECK(check_unique(params, count));
    /* A second hoop_ddp would take the hooks and move the gradients into its own buckets:
     * the first would then reduce buffers nobody writes, and say HOOP_OK. */
    for (size_t i = 0; i < count; i++)
        if (params[i]->hook == on_grad_ready)
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "hoop_ddp_init: parameter %zu (%s) is already wrapped by another "
                              "hoop_ddp (hoop_ddp_destroy that one first)",
                              i, pname(params[i], ni));
    if (!cfg) return HOOP_OK;
    HOOP_CHECK(check_flag("broadcast_params", cfg->broadcast_params));
    HOOP_CHECK(check_flag("error_on_unused", cfg->error_on_unused));
    HOOP_CHECK(check_flag("divide_by_initial_world_size", cfg->divide_by_initial_world_size));
    return check_flag("error_on_uneven", cfg->error_on_uneven);
}

static hoop_status ddp_alloc(hoop_ddp *ddp, hoop_tensor *const *params, size_t n)
{
    HOOP_CHECK(hoop__calloc(&ddp->params, n));
    memcpy(ddp->params, params, n * sizeof(*params));
    HOOP_CHECK(hoop__calloc(&ddp->order, n));
    HOOP_CHECK(hoop__calloc(&ddp->bucket_of, n));
    HOOP_CHECK(hoop__calloc(&ddp->offset, n));
    HOOP_CHECK(hoop__calloc(&ddp->ready, n));
    HOOP_CHECK(hoop__calloc(&ddp->hooks, n));
    return HOOP_OK;
}

HOOP_API hoop_status hoop_ddp_init(hoop_ddp **out, hoop_comm *comm, hoop_tensor *const *params,
                                   size_t count, const hoop_ddp_config *cfg)
{
    if (out) *out = NULL;
    HOOP_CHECK(check_args(out, comm, params, count, cfg));
    hoop_ddp *ddp;
    hoop_status st;
    HOOP_CHECK(hoop__calloc(&ddp, 1));
    hoop_ddp_config def = HOOP_DDP_CONFIG_INIT;
    ddp->cfg = cfg ? *cfg : def;
    if (ddp->cfg.bucket_cap_bytes == 0) ddp->cfg.bucket_cap_bytes = DDP_DEFAULT_CAP;
    if (ddp->cfg.first_bucket_bytes == 0) ddp->cfg.first_bucket_bytes = DDP_DEFAULT_FIRST;
    ddp->comm = comm;
    atomic_fetch_add(&comm->users, 1);
    ddp->holds_comm = 1;
    ddp->nparams = count;
    ddp->sync = 1;
    ddp->device = hoop_tensor_device(params[0]);
    HOOP_CHECK_GOTO(hoop__kern_get(ddp->device, "hoop_ddp_init", &ddp->k), st, fail);
    HOOP_CHECK_GOTO(ddp_alloc(ddp, params, count), st, fail);
    HOOP_CHECK_GOTO(check_shapes(ddp), st, fail);
    HOOP_CHECK_GOTO(plan_buckets(ddp), st, fail);
    if (ddp->device != HOOP_DEVICE_CPU) HOOP_CHECK_GOTO(hoop__ddp_dev_init(ddp), st, fail);
    if (ddp->cfg.broadcast_params) HOOP_CHECK_GOTO(broadcast_params(ddp), st, fail);
    HOOP_CHECK_GOTO(attach_buckets(ddp), st, fail);
    HOOP_CHECK_GOTO(attach_hooks(ddp), st, fail);
    for (int b = 0; b < ddp->nbuckets; b++) {
        ddp->buckets[b].pending = ddp->buckets[b].nparams;
        ddp->stats.bucket_bytes += ddp->buckets[b].count * sizeof(float);
    }
    ddp->stats.nbuckets = ddp->nbuckets;
    /* Rank 0's HOOP_TRACE_FILE decides for everyone, so every rank records events. */
    const char *trace = getenv("HOOP_TRACE_FILE");
    int32_t on = trace && *trace;
    HOOP_CHECK_GOTO(hoop_broadcast(comm, &on, &on, 1, HOOP_DTYPE_I32, 0, NULL), st, fail);
    if (on) HOOP_CHECK_GOTO(hoop_ddp_trace_enable(ddp, trace && *trace ? trace : ""), st, fail);
    HOOP_INFO(DDP, "DDP: %zu parameters in %d buckets (%zu bytes) on %s, world_size %d", count,
              ddp->nbuckets, ddp->stats.bucket_bytes, hoop__device_name(ddp->device),
              hoop_comm_world_size(comm));
    *out = ddp;
    return HOOP_OK;
fail:
    hoop_ddp_destroy(ddp);
    return st;
}

static hoop_status stray_status(hoop_ddp *ddp, const char *fn);

HOOP_API hoop_status hoop_ddp_destroy(hoop_ddp *ddp)
{
    if (!ddp) return HOOP_OK;
    if (ddp->in_call) /* from a hook or join's step: the call still uses the buckets */
        return HOOP_ERROR(HOOP_ERR_USAGE,
                          "hoop_ddp_destroy inside hoop_ddp_backward or hoop_ddp_join (from a "
                          "gradient hook or the step function?): destroy it after the call "
                          "returns");
    hoop_status st = HOOP_OK;
    HOOP_CHECK_KEEP(stray_status(ddp, "hoop_ddp_destroy"), st);
    for (int b = 0; ddp->buckets && b < ddp->nbuckets; b++)
        if (ddp->buckets[b].req) HOOP_CHECK_KEEP(hoop_wait(ddp->buckets[b].req, -1), st);
    /* cuda: the all-reduces still on the device end first (and the events go) */
    hoop__ddp_dev_destroy(ddp, &st);
    for (size_t i = 0; ddp->params && i < ddp->nparams; i++) {
        if (ddp->hooks && ddp->hooks[i].ddp) hoop_tensor_set_grad_hook(ddp->params[i], NULL, NULL);
        if (ddp->buckets && ddp->buckets[ddp->bucket_of[i]].buf)
            HOOP_CHECK_KEEP(hoop_tensor_set_grad_buffer(ddp->params[i], NULL), st);
    }
    for (int b = 0; ddp->buckets && b < ddp->nbuckets; b++)
        HOOP_CHECK_KEEP(bucket_free(ddp, ddp->buckets[b].buf), st);
    free(ddp->buckets);
    free(ddp->params);
    free(ddp->order);
    free(ddp->bucket_of);
    free(ddp->offset);
    free(ddp->ready);
    free(ddp->hooks);
    free(ddp->events);
    free(ddp->trace_path);
    if (ddp->holds_comm) atomic_fetch_sub(&ddp->comm->users, 1);
    free(ddp);
    return st;
}

// ----------------------------------------------------------------- the step

static void hook_fail(hoop_ddp *ddp, hoop_status st)
{
    if (ddp->hook_st != HOOP_OK) return;
    ddp->hook_st = st;
    snprintf(ddp->hook_msg, sizeof(ddp->hook_msg), "%s", hoop_last_error());
}

/* Launches every ready bucket from next_launch on, in index order. */
static void launch_ready(hoop_ddp *ddp)
{
    while (ddp->next_launch < ddp->nbuckets && ddp->buckets[ddp->next_launch].pending == 0) {
        ddp_bucket *bk = &ddp->buckets[ddp->next_launch++];
        bk->t_launch_us = hoop_ddp_now_us();
        bk->t_done_us = 0;
        if (ddp->dev) { /* ordered on the device; the hook does not wait */
            hoop_status st = hoop__ddp_dev_launch(ddp, (int)(bk - ddp->buckets));
            if (st != HOOP_OK) hook_fail(ddp, st);
            continue;
        }
        hoop_status st = hoop_allreduce(ddp->comm, bk->buf, bk->buf, bk->count, HOOP_DTYPE_F32,
                                        HOOP_OP_AVG, &bk->req);
        if (st != HOOP_OK) {
            bk->req = NULL;
            bk->t_done_us = bk->t_launch_us;
            hook_fail(ddp, st);
        }
    }
}

static void mark_ready(hoop_ddp *ddp, int p)
{
    if (ddp->ready[p]) return;
    ddp->ready[p] = 1;
    ddp->buckets[ddp->bucket_of[p]].pending--;
    launch_ready(ddp);
}

/* A pass of hoop_backward that is not hoop_ddp_backward's (torch's loss.backward()
 * habit): nothing is launched, since nobody would wait for it and the optimizer would
 * read the gradients while they are reduced; the gradients stay local, so the ranks'
 * parameters drift apart. Said once at once, and returned by the next call (stray_status). */
static void stray_hook(hoop_ddp *ddp, hoop_tensor *param)
{
    if (ddp->stray[0]) return;
    char nm[PNAME_MAX];
    snprintf(ddp->stray, sizeof(ddp->stray), "%s", pname(param, nm));
    HOOP_WARN("DDP: hoop_backward ran on parameters this hoop_ddp wraps (%s first): their "
              "gradients are not averaged over the ranks; call hoop_ddp_backward instead",
              ddp->stray);
}

/* HOOP_ERR_USAGE once after stray passes (see stray_hook), else HOOP_OK. */
static hoop_status stray_status(hoop_ddp *ddp, const char *fn)
{
    if (!ddp->stray[0]) return HOOP_OK;
    char name[sizeof(ddp->stray)];
    snprintf(name, sizeof(name), "%s", ddp->stray);
    ddp->stray[0] = '\0';
    return HOOP_ERROR(HOOP_ERR_USAGE,
                      "%s: hoop_backward ran on parameters this hoop_ddp wraps (%s first) "
                      "outside hoop_ddp_backward: their gradients were not averaged over the "
                      "ranks, so the ranks' parameters may differ; call hoop_ddp_backward(ddp, "
                      "tape, loss) instead of hoop_backward",
                      fn, name);
}

static void on_grad_ready(hoop_tensor *param, void *user)
{
    ddp_hook_ctx *h = user;
    if (!h->ddp->sync) return;
    if (!h->ddp->in_backward) {
        stray_hook(h->ddp, param);
        return;
    }
    /* No polling here: driving the all-reduce from the backward thread would count
     * communication as computation. The request records its own completion time. */
    h->ddp->t_last_hook_us = hoop_ddp_now_us();
    mark_ready(h->ddp, h->param);
}

/* This rank's pass failed (or took no gradient for a parameter under error_on_unused):
 * says so in the fault float, while the last bucket has not gone (it goes last, when
 * every parameter is ready), so that every rank's round fails (finish_round). On cuda
 * the float is not read back (the host does not wait for the round there): only the
 * failing rank fails. */
static void set_fault(hoop_ddp *ddp)
{
    if (!ddp->dev && ddp->next_launch < ddp->nbuckets) *ddp->fault = 1.0f;
}

/* Marks parameters that backward did not reach; with error_on_unused, names them. */
static hoop_status mark_unused(hoop_ddp *ddp, hoop_tape *tape)
{
    char names[400] = "";
    size_t unused = 0;
    for (size_t i = 0; i < ddp->nparams; i++) {
        if (ddp->ready[i] || hoop_tape_grad_was_ready(tape, ddp->params[i])) continue;
        if (unused++ < 8) {
            size_t len = strlen(names);
            char nm[PNAME_MAX];
            const char *tn = hoop_tensor_name(ddp->params[i]);
            if (tn && *tn)
                pname(ddp->params[i], nm);
            else /* "unnamed, unnamed" told nothing */
                snprintf(nm, sizeof(nm), "parameter %zu", i);
            snprintf(names + len, sizeof(names) - len, "%s%s", len ? ", " : "", nm);
        }
    }
    /* Found before any is marked: marking one may launch the last bucket. */
    if (unused && ddp->cfg.error_on_unused) set_fault(ddp);
    /* The unused, and any left (hooks off), become ready; the rest already are. */
    for (size_t i = 0; i < ddp->nparams; i++) mark_ready(ddp, (int)i);
    if (unused && ddp->cfg.error_on_unused)
        return HOOP_ERROR(HOOP_ERR_USAGE,
                          "DDP: %zu parameter(s) took no part in the loss: %s%s (their "
                          "gradients were reduced as zeros)",
                          unused, names, unused > 8 ? ", ..." : "");
    return HOOP_OK;
}

/* Length of the union of bucket intervals, and of its part inside [lo, hi]. */
static void overlap_us(const hoop_ddp *ddp, int64_t lo, int64_t hi, double *total, double *inside)
{
    int64_t cur_b = 0, cur_e = -1;
    *total = *inside = 0;
    /* Buckets launch in index order, so start times are sorted. */
    for (int b = 0; b <= ddp->nbuckets; b++) {
        const ddp_bucket *bk = b < ddp->nbuckets ? &ddp->buckets[b] : NULL;
        if (bk && bk->t_launch_us <= cur_e) {
            if (bk->t_done_us > cur_e) cur_e = bk->t_done_us;
            continue;
        }
        if (cur_e > cur_b) {
            *total += (double)(cur_e - cur_b);
            int64_t a = cur_b > lo ? cur_b : lo, z = cur_e < hi ? cur_e : hi;
            if (z > a) *inside += (double)(z - a);
        }
        if (bk) {
            cur_b = bk->t_launch_us;
            cur_e = bk->t_done_us;
        }
    }
}

static hoop_status wait_all(hoop_ddp *ddp)
{
    hoop_status st = HOOP_OK;
    for (int b = 0; b < ddp->nbuckets; b++) {
        ddp_bucket *bk = &ddp->buckets[b];
        if (!bk->req) continue;
        int64_t done_ns = 0;
        int collected = 0;
        hoop_status rc = hoop__wait_done_ns(bk->req, -1, &done_ns, &collected);
        int left = 0;
        /* A call that failed by a timeout was collected (and freed) like any other. */
        if (rc == HOOP_ERR_TIMEOUT && !collected && hoop_test(bk->req, &left) == HOOP_OK && !left) {
            /* The wait gave up before the progress thread failed the call: the request
             * still holds the bucket. Abort the comm (every call then fails at once) and
             * collect it, so no late write can land in the bucket and nothing leaks. */
            char why[512];
            snprintf(why, sizeof(why), "%s", hoop_last_error());
            hoop_comm_abort(ddp->comm);
            hoop_wait(bk->req, 2000);
            rc = HOOP_ERROR(HOOP_ERR_TIMEOUT, "%s", why);
        }
        HOOP_CHECK_KEEP(rc, st);
        bk->req = NULL;
        bk->t_done_us = done_ns / 1000;
    }
    return st;
}

/* Trace events of a round: what the compute lane did (name) and each bucket. */
static void trace_round(hoop_ddp *ddp, const char *name, int64_t b0, int64_t b1)
{
    if (!ddp->tracing) return;
    hoop__ddp_trace_add(ddp, name, b0, b1, 0);
    for (int b = 0; b < ddp->nbuckets; b++) {
        char ev[40];
        snprintf(ev, sizeof(ev), "allreduce bucket %d", b);
        hoop__ddp_trace_add(ddp, ev, ddp->buckets[b].t_launch_us, ddp->buckets[b].t_done_us, 1);
    }
}

static void record_step(hoop_ddp *ddp, int64_t bwd_b, int64_t bwd_e, int64_t wait_e)
{
    double total, inside;
    overlap_us(ddp, bwd_b, bwd_e, &total, &inside);
    ddp->stats.steps++;
    ddp->stats.backward_ms += (double)(bwd_e - bwd_b) / 1e3;
    ddp->stats.wait_ms += (double)(wait_e - bwd_e) / 1e3;
    ddp->stats.comm_ms += total / 1e3;
    ddp->stats.hidden_ms += inside / 1e3;
    trace_round(ddp, "backward", bwd_b, bwd_e);
}

/* Starts a round: nothing ready, nothing launched; the control float says whether this
 * rank has data (1) or has joined (0). It is set before any launch, so before the last
 * bucket's (on cuda by a kernel on the compute stream, which the last bucket's launch
 * follows). */
static hoop_status reset_step(hoop_ddp *ddp, float has_data, int join)
{
    memset(ddp->ready, 0, ddp->nparams);
    for (int b = 0; b < ddp->nbuckets; b++) ddp->buckets[b].pending = ddp->buckets[b].nparams;
    ddp->next_launch = 0;
    ddp->hook_st = HOOP_OK;
    if (!ddp->dev) {
        *ddp->control = has_data;
        *ddp->fault = 0;
        return HOOP_OK;
    }
    HOOP_CHECK(ddp->k->fill(ddp->control, 1, has_data));
    HOOP_CHECK(ddp->k->fill(ddp->fault, 1, 0.0f));
    return hoop__ddp_dev_begin(ddp, join);
}

/* The reduced control float of the round just ended (on cuda the host waits for it). */
static hoop_status read_control(hoop_ddp *ddp, float *v)
{
    if (ddp->dev) return hoop__ddp_dev_control(ddp, v);
    *v = *ddp->control;
    return HOOP_OK;
}

/* g *= ws / k over every bucket: on the cpu in double, rounded once; on cuda by the
 * device's scale kernel with the factor rounded to f32 (within 1 ulp of the cpu's). */
static hoop_status rescale(hoop_ddp *ddp, int ws, double k)
{
    for (int b = 0; b < ddp->nbuckets; b++) {
        float *g = ddp->buckets[b].buf;
        if (ddp->dev) {
            HOOP_CHECK(ddp->k->scale(g, ddp->buckets[b].count, (float)((double)ws / k)));
            continue;
        }
        for (size_t i = 0; i < ddp->buckets[b].count; i++) g[i] = (float)((double)g[i] * ws / k);
    }
    return HOOP_OK;
}

/* After a round: *active = how many ranks had data in it (the control float is their
 * average). Where some had joined, applies the divisor of the config (the same
 * arithmetic on the same bits everywhere, so gradients stay bitwise equal) or, with
 * error_on_uneven, fails; every rank sees the same count, so every rank fails. */
static hoop_status finish_round(hoop_ddp *ddp, int *active)
{
    int ws = hoop_comm_world_size(ddp->comm);
    float control;
    if (!ddp->dev) {
        double failed = rint((double)*ddp->fault * ws);
        if (failed > 0)
            return HOOP_ERROR(HOOP_ERR_REMOTE,
                              "DDP: the backward pass failed on %d of %d ranks in this round "
                              "(see their messages: their own error, or a parameter without a "
                              "gradient under error_on_unused); the gradients this rank got "
                              "were averaged with theirs and are not valid",
                              (int)failed, ws);
    }
    HOOP_CHECK(read_control(ddp, &control));
    double k = rint((double)control * ws);
    if (!(k >= 0 && k <= ws))
        return HOOP_ERROR(HOOP_ERR_INTERNAL,
                          "DDP: the control value %g of the last bucket is not "
                          "a share of ranks (world_size %d)",
                          (double)control, ws);
    *active = (int)k;
    if (*active == ws || *active == 0) return HOOP_OK;
    if (ddp->cfg.error_on_uneven)
        return HOOP_ERROR(HOOP_ERR_USAGE,
                          "DDP: uneven inputs: %d of %d ranks ran out of data (joined) while "
                          "%d still had batches, and error_on_uneven is set",
                          ws - *active, ws, *active);
    if (ddp->cfg.divide_by_initial_world_size) return HOOP_OK;
    /* From sum / ws to sum / k: g * ws is exact in double, then one division and one
     * rounding to f32: within 2 ulp of the reduced sum / k. */
    return rescale(ddp, ws, k);
}

/* The status of the bucket all-reduces ordered on the device so far (none on the cpu):
 * the first failure, naming its call and culprit (hoop_stream_status). */
static hoop_status stream_status(hoop_ddp *ddp)
{
    if (!ddp->dev) return HOOP_OK;
    hoop_status st = hoop_stream_status(ddp->comm);
    if (st == HOOP_OK) return HOOP_OK;
    char why[512]; /* the message is rewritten below: copy it first */
    snprintf(why, sizeof(why), "%s", hoop_last_error());
    return HOOP_ERROR(st, "DDP bucket all-reduce failed: %s", why);
}

/* hoop_ddp_backward on cuda: the same round, ordered on the device. The host waits for
 * nothing unless the configuration needs the round's control float at once (a divisor
 * other than world_size, or error_on_uneven); the statistics are read from the device's
 * times later (ddp_dev.c). A failure of a bucket's all-reduce that comes after the return
 * is reported by the next call (or hoop_ddp_wait). */
static hoop_status backward_dev(hoop_ddp *ddp, hoop_tape *tape, hoop_tensor *loss)
{
    HOOP_CHECK(reset_step(ddp, 1.0f, 0));
    int64_t bwd_b = hoop_ddp_now_us();
    hoop_status st = hoop_backward(tape, loss);
    char why[512] = ""; /* this rank's own failure: the calls below may set other messages */
    if (st != HOOP_OK) snprintf(why, sizeof(why), "%s", hoop_last_error());
    hoop_status end_st = hoop__ddp_dev_backward_end(ddp);
    int64_t bwd_e = hoop_ddp_now_us();
    hoop_status unused_st = mark_unused(ddp, tape);
    hoop_status wait_st = hoop__ddp_dev_end(ddp);
    if (ddp->tracing) hoop__ddp_trace_add(ddp, "backward (host)", bwd_b, bwd_e, DDP_LANE_HOST);
    if (st != HOOP_OK) return HOOP_ERROR(st, "%s", why);
    if (ddp->hook_st != HOOP_OK)
        return HOOP_ERROR(ddp->hook_st, "DDP bucket all-reduce failed: %s", ddp->hook_msg);
    HOOP_CHECK(end_st);
    HOOP_CHECK(wait_st);
    if (ddp->cfg.error_on_uneven || !ddp->cfg.divide_by_initial_world_size) {
        float control;
        int active;
        HOOP_CHECK(hoop__ddp_dev_control(ddp, &control)); /* the host waits for the round */
        HOOP_CHECK(stream_status(ddp)); /* a failed round's control float means nothing */
        HOOP_CHECK(finish_round(ddp, &active));
    }
    HOOP_CHECK(stream_status(ddp));
    return unused_st;
}

/* hoop_ddp_backward on the cpu. */
static hoop_status backward_host(hoop_ddp *ddp, hoop_tape *tape, hoop_tensor *loss)
{
    reset_step(ddp, 1.0f, 0);
    int64_t bwd_b = hoop_ddp_now_us();
    ddp->t_last_hook_us = 0;
    hoop_status st = hoop_backward(tape, loss);
    char why[512] = ""; /* this rank's own failure: the waits below may set other messages */
    if (st != HOOP_OK) snprintf(why, sizeof(why), "%s", hoop_last_error());
    /* Backward's computation ends when the last gradient is final (the last hook). Its
     * return can come later only because the all-reduce just launched shares the CPU
     * (the progress thread preempts the tail of the pass); counting that tail as
     * backward would report communication as hidden when it only competed. */
    int64_t bwd_e = ddp->t_last_hook_us ? ddp->t_last_hook_us : hoop_ddp_now_us();
    /* Even when backward failed, launch every bucket so no peer waits for this rank, and
     * tell them it failed. */
    if (st != HOOP_OK) set_fault(ddp);
    hoop_status unused_st = mark_unused(ddp, tape);
    hoop_status wait_st = wait_all(ddp);
    record_step(ddp, bwd_b, bwd_e, hoop_ddp_now_us());
    if (st != HOOP_OK) return HOOP_ERROR(st, "%s", why);
    if (ddp->hook_st != HOOP_OK)
        return HOOP_ERROR(ddp->hook_st, "DDP bucket all-reduce failed: %s", ddp->hook_msg);
    if (wait_st != HOOP_OK) return wait_st;
    if (unused_st != HOOP_OK) return unused_st; /* this rank's own error first */
    int ws = hoop_comm_world_size(ddp->comm), active = ws;
    HOOP_CHECK(finish_round(ddp, &active));
    if (active < ws) ddp->stats.uneven_steps++;
    return unused_st;
}

HOOP_API hoop_status hoop_ddp_backward(hoop_ddp *ddp, hoop_tape *tape, hoop_tensor *loss)
{
    if (!ddp || !tape || !loss)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_ddp_backward: ddp, tape and loss must be set");
    ddp->in_call = 1;
    if (!ddp->sync) {
        hoop_status st = hoop_backward(tape, loss);
        ddp->in_call = 0;
        return st;
    }
    ddp->in_backward = 1; /* its hooks launch the buckets; any other pass's are strays */
    hoop_status st = ddp->dev ? backward_dev(ddp, tape, loss) : backward_host(ddp, tape, loss);
    ddp->in_backward = ddp->in_call = 0;
    HOOP_CHECK(st);
    /* after the round, so that every rank took part in it */
    return stray_status(ddp, "hoop_ddp_backward");
}

// ----------------------------------------------------------------- join

/* One round for a rank without data: zero gradients and control, every bucket launched
 * in index order (as backward's hooks would), all awaited. */
static hoop_status shadow_round(hoop_ddp *ddp, int *active)
{
    int64_t t0 = hoop_ddp_now_us();
    for (int b = 0; b < ddp->nbuckets; b++) {
        if (ddp->dev)
            HOOP_CHECK(ddp->k->fill(ddp->buckets[b].buf, ddp->buckets[b].count, 0.0f));
        else
            memset(ddp->buckets[b].buf, 0, ddp->buckets[b].count * sizeof(float));
    }
    HOOP_CHECK(reset_step(ddp, 0.0f, 1));
    for (size_t i = 0; i < ddp->nparams; i++) mark_ready(ddp, (int)i);
    hoop_status wait_st = ddp->dev ? hoop__ddp_dev_end(ddp) : wait_all(ddp);
    if (ddp->dev) {
        if (ddp->tracing)
            hoop__ddp_trace_add(ddp, "join round (host)", t0, hoop_ddp_now_us(), DDP_LANE_HOST);
    } else {
        trace_round(ddp, "join round", t0, hoop_ddp_now_us());
    }
    if (ddp->hook_st != HOOP_OK)
        return HOOP_ERROR(ddp->hook_st, "DDP join: bucket all-reduce failed: %s", ddp->hook_msg);
    if (wait_st != HOOP_OK) return wait_st;
    if (ddp->dev) { /* the round's count is needed now: the host waits for it */
        float control;
        HOOP_CHECK(hoop__ddp_dev_control(ddp, &control));
        HOOP_CHECK(stream_status(ddp));
    }
    return finish_round(ddp, active);
}

HOOP_API hoop_status hoop_ddp_join(hoop_ddp *ddp, hoop_ddp_step_fn step, void *user)
{
    if (!ddp || !step)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_ddp_join: %s is NULL", ddp ? "step" : "ddp");
    if (!ddp->sync)
        return HOOP_ERROR(HOOP_ERR_USAGE,
                          "hoop_ddp_join under no_sync: the accumulated "
                          "gradients would never be reduced (call hoop_ddp_set_sync(ddp, 1) "
                          "and one more hoop_ddp_backward first)");
    hoop_status step_st = HOOP_OK, round_st = HOOP_OK;
    char step_msg[512] = "";
    ddp->in_call = 1;
    for (;;) {
        int active;
        if ((round_st = shadow_round(ddp, &active)) != HOOP_OK) break;
        if (active == 0) break; /* every rank has joined */
        ddp->stats.joined_steps++;
        if (step_st != HOOP_OK) continue; /* keep answering; the error waits for the end */
        step_st = step(user);
        if (step_st != HOOP_OK) snprintf(step_msg, sizeof(step_msg), "%s", hoop_last_error());
    }
    ddp->in_call = 0;
    HOOP_CHECK(round_st);
    if (step_st != HOOP_OK)
        return HOOP_ERROR(step_st, "DDP join: the step function failed: %s", step_msg);
    return stray_status(ddp, "hoop_ddp_join");
}

HOOP_API void hoop_ddp_set_sync(hoop_ddp *ddp, int sync)
{
    if (ddp) ddp->sync = sync != 0;
}

HOOP_API hoop_status hoop_ddp_wait(hoop_ddp *ddp)
{
    if (!ddp) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_ddp_wait: ddp is NULL");
    HOOP_CHECK(hoop__ddp_dev_harvest_all(ddp));
    HOOP_CHECK(stream_status(ddp));
    return stray_status(ddp, "hoop_ddp_wait");
}

HOOP_API void hoop_ddp_get_stats(const hoop_ddp *ddp, hoop_ddp_stats *stats)
{
    if (!stats) return;
    if (!ddp) {
        memset(stats, 0, sizeof(*stats));
        return;
    }
    /* cuda: the rounds still on the device are read first (the host waits for them); the
     * totals are what the caller sees, so this stays a read in the API's sense */
    if (ddp->dev && hoop__ddp_dev_harvest_all((hoop_ddp *)ddp) != HOOP_OK)
        HOOP_WARN("hoop_ddp_get_stats: the last rounds' times are left out: %s", hoop_last_error());
    *stats = ddp->stats;
}

HOOP_API void hoop_ddp_reset_stats(hoop_ddp *ddp)
{
    if (!ddp) return;
    /* cuda: the rounds before the reset are read first, so none counts after it */
    if (ddp->dev && hoop__ddp_dev_harvest_all(ddp) != HOOP_OK)
        HOOP_WARN("hoop_ddp_reset_stats: the last rounds' times are left out: %s",
                  hoop_last_error());
    int nb = ddp->stats.nbuckets;
    size_t bytes = ddp->stats.bucket_bytes;
    memset(&ddp->stats, 0, sizeof(ddp->stats));
    ddp->stats.nbuckets = nb;
    ddp->stats.bucket_bytes = bytes;
}
