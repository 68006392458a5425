/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/module.cu -- what makes the CUDA backend a loadable module (libhoop-cuda.so,
 * and its host-execution-layer twin for the tests): the two exported entry points, and
 * this module's own definitions of the error and log functions its sources call
 * (core/check.h, core/log.h) and of the settings and thread-mark readers
 * (core/backend.h), which forward to libhoop's through the table it gave at open (struct
 * hoop__backend_host, src/core/backend.h). Everything else in the module is hidden
 * (-fvisibility=hidden), so these never clash with libhoop's or with a program's.
 *
 * Owns: the host table pointer, kept from open on. Thread-safety: open runs once (the
 * host's pthread_once); the forwarders are as thread-safe as the host's functions.
 */
#include <stdarg.h>
#include <stdio.h>

#include "autograd/kern.h"
#include "core/backend.h"
#include "core/check.h"
#include "core/log.h"
#include "cuda/coll.h"
#include "cuda/ctx.h"
#include "cuda/kern_rt.h"

#ifndef HOOP__EXPORT
#define HOOP__EXPORT __attribute__((visibility("default")))
#endif

static const struct hoop__backend_host *host;

extern "C" {

int hoop__log_level;
unsigned hoop__log_mask;

void hoop__log_init(void)
{
}

hoop_status hoop__set_error(hoop_status st, const char *file, int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return host ? host->set_error(st, file, line, "%s", msg) : st;
}

void hoop__trace_status(hoop_status st, const char *file, int line)
{
    if (host) host->trace_status(st, file, line);
}

void hoop__log(hoop_log_level level, unsigned subsys, const char *file, int line, const char *fmt,
               ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (host) host->log(level, subsys, file, line, "%s", msg);
}

/* libhoop's thread mark (core/backend.h); a host without one lets every thread. */
int hoop__device_sync_ok(void)
{
    return host && host->device_sync_ok ? host->device_sync_ok() : 1;
}

/* libhoop's reader of the environment (core/backend.h), so that the module reads no
 * setting by a rule of its own. open checked the table's size, so the slot is there. */
hoop_status hoop__backend_settings(struct hoop__backend_settings *out, size_t size)
{
    if (host == NULL || host->settings == NULL)
        return HOOP_ERROR(HOOP_ERR_INTERNAL, "the CUDA backend was not opened by libhoop");
    return host->settings(out, size);
}

extern const struct hoop__kern hoop__kern_cuda;

/* The entry point (HOOP__BACKEND_OPEN, src/core/backend.h). */
HOOP__EXPORT hoop_status hoop_backend_open(const struct hoop__backend_host *h,
                                           const struct hoop__kern **kern);

hoop_status hoop_backend_open(const struct hoop__backend_host *h, const struct hoop__kern **kern)
{
    if (h == NULL || h->size != sizeof(struct hoop__backend_host) || kern == NULL)
        return h && h->set_error
                   ? h->set_error(HOOP_ERR_INVALID, __FILE__, __LINE__,
                                  "the CUDA backend was built against another version of hoop "
                                  "(host table of %zu bytes, expected %zu)",
                                  h->size, sizeof(struct hoop__backend_host))
                   : HOOP_ERR_INVALID;
    host = h;
    hoop__log_level = h->log_level;
    hoop__log_mask = h->log_mask;
    /* the worker's device and its streams: no GPU is HOOP_ERR_UNSUPPORTED with CUDA's
     * message (ctx.cu) */
    HOOP_CHECK(hoop__cuda_init());
    *kern = &hoop__kern_cuda;
    return HOOP_OK;
}

/* The second entry point (HOOP__BACKEND_COLL, src/core/backend.h): the collectives'
 * table, for a module that hoop_backend_open opened. */
HOOP__EXPORT const struct hoop__cuda_coll *hoop_backend_coll(void);

const struct hoop__cuda_coll *hoop_backend_coll(void)
{
    return host ? &hoop__cuda_coll_table : NULL;
}

/* For tests of the collectives' stream form (src/cuda/coll.h, HOOP__BACKEND_TEST_RT):
 * CUDA runtime calls on the module's own CUDA. */
HOOP__EXPORT const struct hoop__cuda_test_rt *hoop_backend_test_rt(void);

const struct hoop__cuda_test_rt *hoop_backend_test_rt(void)
{
    return &hoop__cuda_test_rt_table;
}

} /* extern "C" */
