/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/kern.c -- which kernel table runs an op: the per-device dispatch of
 * kern.h, the loading of the CUDA backend on first use, the device checks every op
 * makes, the table's ABI check, and the test-only override.
 *
 * The CUDA backend is a shared object (libhoop-cuda.so, installed in $(pkglibdir)) that
 * alone links CUDA's libraries, so a program that never asks for a GPU runs where they
 * are not installed (ggml's dynamic backends work the same way). It is dlopen()ed the
 * first time a CUDA table is asked for, from the first of:
 *   1. $HOOP_CUDA_BACKEND (a path; the tests point it at the host execution layer's
 *      build of the same sources, src/cuda/hx.h);
 *   2. PKGLIBDIR/libhoop-cuda.so (the installed one);
 *   3. in the build tree: libhoop-cuda.so beside libhoop.so (both in .libs/), or in
 *      ../.libs/ of the program holding this code (tools/hoop-train run uninstalled).
 * A HOOP_CUDA_BACKEND without a slash is searched for as dlopen(3) does (the library
 * path), not in the current directory: give ./NAME for that.
 * Its entry point (HOOP__BACKEND_OPEN) receives this library's error and log functions,
 * so its messages are ours, and returns its table, which is validated here. A failure
 * (no backend, no GPU, a table of another version) is kept and repeated to every later
 * caller with the same message.
 *
 * Owns: one table pointer per device and the loaded backend (never unloaded: CUDA's
 * libraries do not survive dlclose). Thread-safety: the load runs once (pthread_once);
 * the lookups only read; hoop__kern_override (tests) writes and must not run beside an op.
 */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autograd/autograd_impl.h"
#include "autograd/kern.h"
#include "config.h"
#include "core/check.h"
#include "core/log.h"

#define NDEVICES 2 /* HOOP_DEVICE_CPU, HOOP_DEVICE_CUDA */

static const struct hoop__kern *tables[NDEVICES] = {
    [HOOP_DEVICE_CPU] = &hoop__kern_cpu,
    [HOOP_DEVICE_CUDA] = NULL,
};

// ----- the CUDA backend ----------------------------------------------------------------------

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static const struct hoop__kern *cuda_loaded; /* the backend's table, once it loaded */
static hoop_status cuda_status = HOOP_OK;    /* why it did not, with cuda_why */
static char cuda_why[4096];

static hoop_status cuda_fail(hoop_status st, const char *fmt, const char *a, const char *b)
{
    cuda_status = st;
    snprintf(cuda_why, sizeof(cuda_why), fmt, a, b);
    return st;
}

/* The directory of the file (program or libhoop.so) holding this code, into dir. */
static int code_dir(char *dir, size_t len)
{
    Dl_info info;
    if (dladdr((void *)&hoop__kern_for, &info) == 0 || info.dli_fname == NULL) return 0;
    char path[1024];
    if (strchr(info.dli_fname, '/') == NULL) {
        /* the main program, named without a directory: its real path */
        ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
        if (n <= 0) return 0;
        path[n] = '\0';
    } else {
        snprintf(path, sizeof(path), "%s", info.dli_fname);
    }
    char *slash = strrchr(path, '/');
    if (slash == NULL) return 0;
    *slash = '\0';
    snprintf(dir, len, "%s", path);
    return 1;
}

/* Picks the backend's path (see the file comment) into path; 0 when none exists. */
static int backend_path(char *path, size_t len, char *tried, size_t tried_len, int *from_env)
{
    const char *env = getenv("HOOP_CUDA_BACKEND");
    *from_env = env != NULL && env[0] != '\0';
    if (*from_env) {
        snprintf(path, len, "%s", env);
        return 1; /* used as given: dlopen's message says what is wrong with it */
    }
    snprintf(path, len, "%s/libhoop-cuda.so", PKGLIBDIR);
    snprintf(tried, tried_len, "%s", path);
    if (access(path, R_OK) == 0) return 1;
    char dir[1024];
    /* the build tree: libhoop.so itself in .libs/ (the module beside it), or a program in
     * a directory of the tree (tools/, tests/: the module in ../.libs/) */
    static const char *const below[2] = {"", "/../.libs"};
    for (int i = 0; i < 2 && code_dir(dir, sizeof(dir)); i++) {
        snprintf(path, len, "%s%s/libhoop-cuda.so", dir, below[i]);
        size_t used = strlen(tried);
        snprintf(tried + used, tried_len - used, ", %s", path);
        if (access(path, R_OK) == 0) return 1;
    }
    return 0;
}

static void cuda_load(void)
{
    char path[1100], tried[3400] = "";
    int from_env;
    if (!backend_path(path, sizeof(path), tried, sizeof(tried), &from_env)) {
#ifdef HOOP_HAVE_CUDA
        cuda_fail(HOOP_ERR_UNSUPPORTED,
                  "the CUDA backend (libhoop-cuda.so) is not installed: tried %s%s; set "
                  "HOOP_CUDA_BACKEND to its path",
                  tried, "");
#else
        cuda_fail(HOOP_ERR_UNSUPPORTED,
                  "this build of hoop has no CUDA backend (configure found no nvcc)%s%s; set "
                  "HOOP_CUDA_BACKEND to a backend built elsewhere",
                  tried[0] ? ": tried " : "", tried);
#endif
        return;
    }
    void *so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (so == NULL) {
        cuda_fail(HOOP_ERR_UNSUPPORTED, "cannot load the CUDA backend %s: %s", path, dlerror());
        if (from_env) {
            const size_t used = strlen(cuda_why);
            snprintf(cuda_why + used, sizeof(cuda_why) - used,
                     " (the path is HOOP_CUDA_BACKEND's)");
        }
        return;
    }
    hoop__backend_open_fn open_fn;
    *(void **)&open_fn = dlsym(so, HOOP__BACKEND_OPEN);
    if (open_fn == NULL) {
        cuda_fail(HOOP_ERR_UNSUPPORTED, "%s is not a hoop CUDA backend: %s", path, dlerror());
        return;
    }
    static const struct hoop__backend_host host = {
        .size = sizeof(struct hoop__backend_host),
        .set_error = hoop__set_error,
        .trace_status = hoop__trace_status,
        .log = hoop__log,
    };
    hoop__log_init();
    struct hoop__backend_host h = host;
    h.log_level = hoop__log_level;
    h.log_mask = hoop__log_mask;
    static struct hoop__backend_host kept; /* the backend keeps the pointer */
    kept = h;
    const struct hoop__kern *k = NULL;
    hoop_status st = open_fn(&kept, &k);
    if (st == HOOP_OK) st = hoop__kern_validate(k, "the CUDA backend's table");
    if (st == HOOP_OK && k->device != HOOP_DEVICE_CUDA)
        st = HOOP_ERROR(HOOP_ERR_INVALID, "the table of %s is for device %d, not cuda", path,
                        (int)k->device);
    if (st != HOOP_OK) {
        cuda_fail(st, "%s%s", hoop_last_error(), "");
        return;
    }
    HOOP_INFO(AUTOGRAD, "CUDA backend %s loaded", path);
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
