/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/backend.h -- the CUDA backend module: finding it, loading it once, and the two
 * tables it hands out (the autograd kernels, src/autograd/kern.h; the collectives' device
 * memory operations, src/cuda/coll.h). Internal.
 *
 * The module (libhoop-cuda.so, installed in $(pkglibdir)) alone links CUDA's libraries,
 * so a program that never asks for a GPU runs where they are not installed (ggml's
 * dynamic backends work the same way). It is dlopen()ed the first time a table is asked
 * for, from the first of:
 *   1. $HOOP_CUDA_BACKEND (a path; the tests point it at the host execution layer's
 *      build of the same sources, src/cuda/hx.h);
 *   2. PKGLIBDIR/libhoop-cuda.so (the installed one);
 *   3. in the build tree: libhoop-cuda.so beside libhoop.so (both in .libs/), or in
 *      ../.libs/ of the program holding this code (tools/hoop-train run uninstalled).
 * A HOOP_CUDA_BACKEND without a slash is searched for as dlopen(3) does (the library
 * path), not in the current directory: give ./NAME for that.
 * It lives in core because two layers need it (autograd's tensors, the collectives'
 * device buffers) and neither may call the other.
 */
#ifndef HOOP_CORE_BACKEND_H
#define HOOP_CORE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "core/log.h"
#include "hoop/status.h"

struct hoop__kern;
struct hoop__cuda_coll;
struct hoop__backend_settings;

/* What this library gives a backend module when it opens it (backend.c): its error and log
 * functions (core/check.h, core/log.h), which the module's own definitions of those
 * names forward to, the log settings at the time, and its readers of the module's settings
 * and thread marks (below). A module refuses a table of another size: a field added here
 * changes it. */
struct hoop__backend_host {
    size_t size; /* sizeof(struct hoop__backend_host) of the host's build */
    hoop_status (*set_error)(hoop_status st, const char *file, int line, const char *fmt, ...);
    void (*trace_status)(hoop_status st, const char *file, int line);
    void (*log)(hoop_log_level level, unsigned subsys, const char *file, int line, const char *fmt,
                ...);
    int log_level;
    unsigned log_mask;
    /* hoop__device_sync_ok (below), for the module's allocator. */
    int (*device_sync_ok)(void);
    /* hoop__backend_settings (below), for the module's context. */
    hoop_status (*settings)(struct hoop__backend_settings *out, size_t size);
};

/* A backend module's first exported function, named HOOP__BACKEND_OPEN: keeps host (it
 * outlives the module's use), checks that its device is usable and sets *kern to its
 * table. HOOP_OK, or the reason the device cannot be had (HOOP_ERR_UNSUPPORTED: no GPU,
 * with the driver's message; HOOP_ERR_INVALID: host's size differs). */
typedef hoop_status (*hoop__backend_open_fn)(const struct hoop__backend_host *host,
                                             const struct hoop__kern **kern);
#define HOOP__BACKEND_OPEN "hoop_backend_open"

/* Its second, named HOOP__BACKEND_COLL: the collectives' table (src/cuda/coll.h), made
 * by the open above; NULL when the module has none. */
typedef const struct hoop__cuda_coll *(*hoop__backend_coll_fn)(void);
#define HOOP__BACKEND_COLL "hoop_backend_coll"

/* Loads and opens the CUDA backend once (the search above) and returns its tables:
 * *kern (not NULL on success; the caller validates it) and *coll (NULL for a module
 * without one); either output may be NULL. A failure is kept and repeated to every later
 * caller with the same status and message: HOOP_ERR_UNSUPPORTED naming what was tried
 * and why (no module, dlopen's message, no entry point, no GPU with the driver's
 * message), HOOP_ERR_INVALID for a module of another version. Thread-safe (once). */
hoop_status hoop__cuda_backend(const struct hoop__kern **kern, const struct hoop__cuda_coll **coll);

/* 1 when this process already uses CUDA: the backend is loaded, or CUDA's driver
 * (libcuda.so.1) is (a program that made its own buffers with cudaMalloc). Loads nothing;
 * a dl_iterate_phdr call (nanoseconds) when nothing was loaded since the last answer, a
 * dlopen(RTLD_NOLOAD) (tens of microseconds) otherwise. Thread-safe. */
int hoop__cuda_in_process(void);

/* Whether the calling thread may make the host wait for the whole device (cudaFree,
 * cudaFreeHost: CUDA synchronises the device before it frees). A thread that runs a
 * communicator's progress may not: a stream's wait for a collective (hoop_*_stream) holds
 * the device until that thread has finished the collective, so such a wait would never end
 * (the CUDA allocator then refuses to give its cache back, src/cuda/alloc.h). forbid(+1)
 * marks the calling thread until a matching forbid(-1); the marks nest. The thread's own
 * state: thread-safe. The module's definition forwards to libhoop's (module.cu), as the
 * error functions do. */
HOOP_EXTERN_C_BEGIN
void hoop__device_sync_forbid(int delta);
int hoop__device_sync_ok(void);

/* What the CUDA backend takes from the environment, read by this library alone (env.c's
 * table and the env:// contract, src/core/env.h), so that the module and the rest of hoop
 * read each variable by one rule and name a bad value in one way. */
struct hoop__backend_settings {
    int64_t timeout_ms; /* HOOP_TIMEOUT, ms (> 0): the deadline of every host wait */
    int device;         /* HOOP_CUDA_DEVICE: the device index asked for; -1 when unset */
    int local_rank;     /* the contract's local rank when device is -1 (else 0); 0 alone */
    int tf32;           /* HOOP_CUDA_TF32: 1 lets cuBLAS use TF32 tensor cores */
};

/* Fills *out from the environment as it is now (size: sizeof(struct
 * hoop__backend_settings) of the caller's build). local_rank is read only when
 * HOOP_CUDA_DEVICE is unset and the environment describes a distributed job
 * (hoop__env_dist_wanted): hoop__env_dist's local rank (LOCAL_RANK, an srun step's
 * SLURM_LOCALID, or RANK mod LOCAL_WORLD_SIZE). Errors: HOOP_ERR_INVALID from the first
 * bad setting, with env.c's message naming the variable and its value (for the contract,
 * after "choosing the GPU by local rank: "), or for a size of another build. Reads the
 * environment: thread-safe as getenv is. The module's definition forwards to libhoop's
 * (module.cu), as the error functions do. */
hoop_status hoop__backend_settings(struct hoop__backend_settings *out, size_t size);
HOOP_EXTERN_C_END

#endif /* HOOP_CORE_BACKEND_H */
