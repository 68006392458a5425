/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/kern.c -- which kernel table runs an op: the per-device dispatch of
 * kern.h, the loading of the CUDA backend on first use, the device checks every op
 * makes, the table's ABI check, and the test-only override.
 *
 * The CUDA backend is a module loaded on first use (src/core/backend.h says where it is
 * looked for); its kernel table is validated here, and a failure is kept and repeated to
 * every later caller with the same message.
 *
 * Owns: one table pointer per device. Thread-safety: the load runs once (pthread_once);
 * the lookups only read; hoop__kern_override (tests) writes and must not run beside an op.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autograd/autograd_impl.h"
#include "autograd/kern.h"
#include "config.h"
#include "core/backend.h"
#include "core/check.h"
#include "core/log.h"

#define NDEVICES 2 /* HOOP_DEVICE_CPU, HOOP_DEVICE_CUDA */

static const struct hoop__kern *tables[NDEVICES] = {
    [HOOP_DEVICE_CPU] = &hoop__kern_cpu,
    [HOOP_DEVICE_CUDA] = NULL,
};

// ----- the CUDA backend ----------------------------------------------------------------------

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static const struct hoop__kern *cuda_loaded; /* the backend's table, once validated */
static hoop_status cuda_status = HOOP_OK;    /* why the table cannot be had, with cuda_why */
static char cuda_why[4096];

/* The backend's table (src/core/backend.c loads the module), validated. */
static void cuda_load(void)
{
    const struct hoop__kern *k = NULL;
    hoop_status st = hoop__cuda_backend(&k, NULL);
    if (st == HOOP_OK) st = hoop__kern_validate(k, "the CUDA backend's table");
    if (st == HOOP_OK && k->device != HOOP_DEVICE_CUDA)
        st = HOOP_ERROR(HOOP_ERR_INVALID, "the CUDA backend's table is for device %d, not cuda",
                        (int)k->device);
    if (st != HOOP_OK) {
        cuda_status = st;
        snprintf(cuda_why, sizeof(cuda_why), "%s", hoop_last_error());
        return;
    }
    cuda_loaded = k;
    tables[HOOP_DEVICE_CUDA] = k;
}

const struct hoop__kern *hoop__kern_for(hoop_device d)
{
    if ((unsigned)d >= NDEVICES) return NULL;
    if (d == HOOP_DEVICE_CUDA && tables[d] == NULL) pthread_once(&cuda_once, cuda_load);
    return tables[d];
}

hoop_status hoop__kern_get(hoop_device d, const char *fn, const struct hoop__kern **k)
{
    *k = hoop__kern_for(d);
    if (*k != NULL) return HOOP_OK;
    if (d == HOOP_DEVICE_CUDA && cuda_status != HOOP_OK)
        return HOOP_ERROR(cuda_status, "%s: device cuda: %s", fn, cuda_why);
    return HOOP_ERROR(HOOP_ERR_UNSUPPORTED, "%s: this build has no %s kernels", fn,
                      hoop__device_name(d));
}

const char *hoop__device_name(hoop_device d)
{
    switch (d) {
    case HOOP_DEVICE_CPU: return "cpu";
    case HOOP_DEVICE_CUDA: return "cuda";
    }
    return "unknown device";
}

hoop_status hoop__kern_validate(const struct hoop__kern *k, const char *what)
{
    if (k == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "%s is NULL", what);
    if (k->size != sizeof(struct hoop__kern))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s has size %zu bytes, this build expects %zu: it was built "
                          "against another version of hoop",
                          what, k->size, sizeof(struct hoop__kern));
    if (k->name == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "%s has no name", what);
    if ((unsigned)k->device >= NDEVICES)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s (%s) names device %d, which is unknown", what,
                          k->name, (int)k->device);
#define SLOT(f) \
    if (k->f == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "%s (%s) has no %s", what, k->name, #f)
    SLOT(describe);
    SLOT(mem_alloc);
    SLOT(mem_free);
    SLOT(copy);
    SLOT(sync);
    SLOT(mem_stats);
    SLOT(event_new);
    SLOT(event_free);
    SLOT(upload_async);
    SLOT(download_async);
    SLOT(compute_wait);
    SLOT(compute_record);
    SLOT(event_sync);
    SLOT(gemm);
    SLOT(fill);
    SLOT(axpy_or_copy);
    SLOT(add);
    SLOT(bias_fill);
    SLOT(bias_add);
    SLOT(bias_grad);
    SLOT(unary_fwd);
    SLOT(unary_bwd);
    SLOT(softmax_fwd);
    SLOT(softmax_bwd);
    SLOT(ce_fwd);
    SLOT(ce_bwd);
    SLOT(reduce_fwd);
    SLOT(reduce_bwd);
    SLOT(dropout_fwd);
    SLOT(dropout_bwd);
    SLOT(im2col);
    SLOT(col2im);
    SLOT(conv_scratch);
    SLOT(conv_fwd);
    SLOT(conv_bwd);
    SLOT(pool_fwd);
    SLOT(pool_bwd);
    SLOT(sgd);
    SLOT(adamw);
    SLOT(sqnorm);
    SLOT(scale);
    SLOT(clip_scale);
    SLOT(host_alloc);
    SLOT(host_free);
    SLOT(upload);
    SLOT(graph_begin);
    SLOT(graph_end);
    SLOT(graph_launch);
    SLOT(graph_sync);
    SLOT(graph_free);
    SLOT(stream_new);
    SLOT(stream_free);
    SLOT(stream_record);
    SLOT(stream_wait);
    SLOT(timer_new);
    SLOT(event_query);
    SLOT(event_elapsed);
#undef SLOT
    return HOOP_OK;
}

hoop_status hoop__op_kern(const char *op, hoop_tensor *const *in, const char *const *names, int nin,
                          const struct hoop__kern **k)
{
    int first = -1;
    for (int i = 0; i < nin; i++) {
        if (in[i] == NULL) continue;
        if (first < 0) {
            first = i;
            continue;
        }
        if (in[i]->device != in[first]->device)
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "%s: %s is on %s but %s is on %s; all inputs of an op must be on "
                              "one device",
                              op, names[first], hoop__device_name(in[first]->device), names[i],
                              hoop__device_name(in[i]->device));
    }
    const hoop_device d = first < 0 ? HOOP_DEVICE_CPU : in[first]->device;
    return hoop__kern_get(d, op, k);
}

hoop_status hoop__device_mem_stats(hoop_device d, struct hoop__mem_stats *st)
{
    const struct hoop__kern *k;
    HOOP_CHECK(hoop__kern_get(d, "hoop__device_mem_stats", &k));
    return k->mem_stats(st);
}

hoop_status hoop__kern_override(hoop_device d, const struct hoop__kern *k)
{
    if ((unsigned)d >= NDEVICES)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop__kern_override: device %d is unknown", (int)d);
    if (k == NULL) {
        tables[d] = d == HOOP_DEVICE_CPU ? &hoop__kern_cpu : cuda_loaded;
        return HOOP_OK;
    }
    HOOP_CHECK(hoop__kern_validate(k, "hoop__kern_override: the table"));
    tables[d] = k;
    return HOOP_OK;
}

// ----- events (kern.h: asynchronous uploads) ---------------------------------------------------

struct hoop__event {
    const struct hoop__kern *k;
    void *ev; /* the table's event */
};

hoop_status hoop__event_new(hoop_device d, hoop__event **ev)
{
    if (ev == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop__event_new: ev is NULL");
    *ev = NULL;
    if ((unsigned)d >= NDEVICES)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop__event_new: device %d is unknown", (int)d);
    const struct hoop__kern *k;
    HOOP_CHECK(hoop__kern_get(d, "hoop__event_new", &k));
    hoop__event *e;
    HOOP_CHECK(hoop__calloc(&e, 1));
    e->k = k;
    const hoop_status st = k->event_new(&e->ev);
    if (st != HOOP_OK) {
        free(e);
        return st;
    }
    *ev = e;
    return HOOP_OK;
}

void hoop__event_free(hoop__event *ev)
{
    if (ev == NULL) return;
    ev->k->event_free(ev->ev);
    free(ev);
}

hoop_status hoop__event_record(hoop__event *ev)
{
    if (ev == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop__event_record: ev is NULL");
    return ev->k->compute_record(ev->ev);
}

hoop_status hoop__event_wait(hoop__event *ev)
{
    if (ev == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop__event_wait: ev is NULL");
    return ev->k->compute_wait(ev->ev);
}

hoop_status hoop__event_sync(hoop__event *ev)
{
    if (ev == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop__event_sync: ev is NULL");
    return ev->k->event_sync(ev->ev);
}

/* The table's event of ev for a copy on device d (NULL for a NULL ev). */
hoop_status hoop__event_of(hoop__event *ev, hoop_device d, const char *fn, const char *what,
                           void **out)
{
    *out = NULL;
    if (ev == NULL) return HOOP_OK;
    if (ev->k->device != d)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s: %s is an event of %s, the tensor is on %s", fn,
                          what, hoop__device_name(ev->k->device), hoop__device_name(d));
    *out = ev->ev;
    return HOOP_OK;
}
