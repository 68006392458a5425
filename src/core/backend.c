/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/backend.c -- finding and loading the CUDA backend module (see backend.h).
 *
 * Its entry point (HOOP__BACKEND_OPEN) receives this library's error and log functions,
 * so its messages are ours, and its reader of the environment (hoop__backend_settings,
 * below), so its settings are read by env.c's rules alone, and returns its kernel table;
 * the second entry (HOOP__BACKEND_COLL) gives the collectives' table. A failure (no
 * backend, no GPU) is kept and repeated to every later caller with the same message.
 *
 * Owns: the loaded backend (never unloaded: CUDA's libraries do not survive dlclose).
 * Thread-safety: the load runs once (pthread_once); the lookups only read.
 */
#define _GNU_SOURCE /* dladdr, RTLD_NOLOAD */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "core/backend.h"
#include "core/check.h"
#include "core/env.h"
#include "core/log.h"

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static const struct hoop__kern *cuda_kern; /* the backend's tables, once it loaded */
static const struct hoop__cuda_coll *cuda_coll;
static atomic_int cuda_loaded;
static hoop_status cuda_status = HOOP_OK; /* why it did not, with cuda_why */
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
    if (dladdr((void *)&hoop__cuda_backend, &info) == 0 || info.dli_fname == NULL) return 0;
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
        .device_sync_ok = hoop__device_sync_ok,
        .settings = hoop__backend_settings,
    };
    hoop__log_init();
    struct hoop__backend_host h = host;
    h.log_level = hoop__log_level;
    h.log_mask = hoop__log_mask;
    static struct hoop__backend_host kept; /* the backend keeps the pointer */
    kept = h;
    const struct hoop__kern *k = NULL;
    hoop_status st = open_fn(&kept, &k);
    if (st == HOOP_OK && k == NULL)
        st = HOOP_ERROR(HOOP_ERR_INVALID, "%s gave no kernel table", path);
    if (st != HOOP_OK) {
        cuda_fail(st, "%s%s", hoop_last_error(), "");
        return;
    }
    hoop__backend_coll_fn coll_fn;
    *(void **)&coll_fn = dlsym(so, HOOP__BACKEND_COLL);
    cuda_coll = coll_fn ? coll_fn() : NULL;
    HOOP_INFO(INIT, "CUDA backend %s loaded", path);
    cuda_kern = k;
    atomic_store(&cuda_loaded, 1);
}

hoop_status hoop__cuda_backend(const struct hoop__kern **kern, const struct hoop__cuda_coll **coll)
{
    pthread_once(&cuda_once, cuda_load);
    if (kern) *kern = cuda_kern;
    if (coll) *coll = cuda_coll;
    if (cuda_kern) return HOOP_OK;
    return HOOP_ERROR(cuda_status, "%s", cuda_why);
}

/* dl_iterate_phdr's first callback: the count of objects ever loaded (dlpi_adds). */
static int loads_cb(struct dl_phdr_info *info, size_t size, void *out)
{
    (void)size;
    *(unsigned long long *)out = info->dlpi_adds;
    return 1; /* the first object says it: stop */
}

int hoop__cuda_in_process(void)
{
    static atomic_int seen;
    static _Atomic unsigned long long checked_at; /* dlpi_adds when libcuda was absent */
    if (atomic_load(&cuda_loaded) || atomic_load(&seen)) return 1;
    /* A dlopen(RTLD_NOLOAD) of an absent library costs tens of microseconds (it is
     * looked for along the library path): ask again only once something was loaded
     * since the last answer, which dl_iterate_phdr tells in nanoseconds. */
    unsigned long long adds = 0;
    dl_iterate_phdr(loads_cb, &adds);
    if (adds != 0 && adds == atomic_load(&checked_at)) return 0;
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!drv) {
        atomic_store(&checked_at, adds);
        return 0;
    }
    dlclose(drv); /* drops the reference NOLOAD took: the library stays */
    atomic_store(&seen, 1);
    return 1;
}

// ----------------------------------------------------------------- device synchronisation

static _Thread_local int no_device_sync; /* nested marks of hoop__device_sync_forbid */

void hoop__device_sync_forbid(int delta)
{
    no_device_sync += delta;
}

int hoop__device_sync_ok(void)
{
    return no_device_sync <= 0;
}

// ----------------------------------------------------------------- the module's settings

/* The contract's local rank (env.h), for a device chosen by it. */
static hoop_status settings_local_rank(int *local_rank)
{
    *local_rank = 0;
    if (!hoop__env_dist_wanted()) return HOOP_OK;
    hoop_dist_env d;
    hoop_status st = hoop__env_dist(&d);
    if (st != HOOP_OK) {
        char why[1024];
        snprintf(why, sizeof(why), "%s", hoop_last_error());
        return HOOP_ERROR(st, "choosing the GPU by local rank (HOOP_CUDA_DEVICE is unset): %s",
                          why);
    }
    *local_rank = d.local_rank;
    return HOOP_OK;
}

hoop_status hoop__backend_settings(struct hoop__backend_settings *out, size_t size)
{
    if (size != sizeof(struct hoop__backend_settings))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "the CUDA backend was built against another version of hoop (settings "
                          "of %zu bytes, expected %zu)",
                          size, sizeof(struct hoop__backend_settings));
    struct hoop__backend_settings s = {.device = -1};
    int64_t tf32;
    HOOP_CHECK(hoop__env_ms("HOOP_TIMEOUT", &s.timeout_ms));
    HOOP_CHECK(hoop__env_cuda_device(&s.device));
    HOOP_CHECK(hoop__env_int("HOOP_CUDA_TF32", &tf32));
    s.tf32 = (int)tf32;
    if (s.device < 0) HOOP_CHECK(settings_local_rank(&s.local_rank));
    *out = s;
    return HOOP_OK;
}
