/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/memops.h -- the executor's memory operations, behind one small table.
 *
 * The executor moves bytes between links (the transports) and memory, and between
 * buffers: a copy, a reduction of a received chunk into its destination, and the direct
 * algorithm's reduction over every rank's mapped copy. What runs them depends on where
 * the memory is: the host's own loops (sync, each operation finished when its call
 * returns), or a device that queues them and says later that they are finished (a CUDA
 * stream and an event). The executor only sees the table: it starts a job, and when the
 * job hands back an operation in flight (hoop__memop), the step waits in a state that
 * the progress thread polls with test(), never blocking on the device.
 *
 * Implementations here:
 *   - "sync": the host loops (memmove, hoop__reduce, hoop__direct_reduce), run at once.
 *   - "async": the same loops run by one helper thread per communicator, in the order
 *     they were started, completion polled; selected with HOOP_MEMOPS=async. It is how
 *     make check drives the executor's asynchronous states on a machine without a GPU:
 *     a device's table differs from it only in who runs the jobs.
 * A device's table (CUDA: a stream, kernels, events) plugs in at hoop__memops_open.
 *
 * Ordering: the jobs of one table instance finish in the order they were started
 * (a stream's rule). The executor relies on that only for the local steps, which it
 * starts one at a time in schedule order anyway.
 *
 * Thread-safety: an instance belongs to one communicator's progress thread; its helper
 * thread (async) is internal.
 */
#ifndef HOOP_COLLECTIVES_MEMOPS_H
#define HOOP_COLLECTIVES_MEMOPS_H

#include <stddef.h>
#include <stdint.h>

#include "hoop/collectives.h"
#include "hoop/status.h"

/* Where a buffer lives: the memory kinds the collectives take (host, pinned host, CUDA). */
typedef enum hoop__mem_kind {
    HOOP__MEM_HOST = 0,   /* pageable host memory: the transports read and write it */
    HOOP__MEM_PINNED = 1, /* page-locked host memory: also what a GPU reaches directly */
    HOOP__MEM_CUDA = 2,   /* GPU memory: staged through host memory (stage.c) */
} hoop__mem_kind;

/* What one memory operation does. */
typedef enum hoop__memjob_kind {
    HOOP__MJ_COPY,   /* dst[0, bytes) = a[0, bytes) (may overlap: memmove) */
    HOOP__MJ_REDUCE, /* dst[i] = a[i] (op) b[i], i < bytes / elem; divisor as hoop__reduce */
    HOOP__MJ_DIRECT, /* hoop__direct_reduce(dtype, op, bufs, n, me, off, bytes, elem,
                      * copy_out): bytes [off, off + bytes) of n mapped copies */
} hoop__memjob_kind;

typedef struct hoop__memjob {
    hoop__memjob_kind kind;
    void *dst;
    const void *a, *b;
    size_t bytes, elem;
    hoop_dtype dtype;
    hoop_op op;
    int divisor;
    char *const *bufs; /* DIRECT: every rank's copy, as mapped here (n of them) */
    int n, me, copy_out;
    size_t off;
} hoop__memjob;

/* Runs a job on the host, at once (the sync table's work, and the async helper's). */
void hoop__memjob_run(const hoop__memjob *j);

typedef struct hoop__memop hoop__memop; /* an operation in flight */
typedef struct hoop__memops hoop__memops;

typedef struct hoop__memops_vt {
    const char *name;
    /* 1 when every job finishes inside start (no operation is ever handed back): the
     * executor may then reduce received bytes straight from a transport's memory. */
    int sync;
    /* Starts j. *op = NULL when it finished already, else the operation to poll.
     * Errors: HOOP_ERR_NOMEM; a device's errors (HOOP_ERR_CUDA naming the call). */
    hoop_status (*start)(hoop__memops *m, const hoop__memjob *j, hoop__memop **op);
    /* *done = 1 when op has finished; op is then released and must not be used again.
     * Never blocks. Errors: the device's (HOOP_ERR_CUDA naming what failed), op then
     * released as well. */
    hoop_status (*test)(hoop__memops *m, hoop__memop *op, int *done);
    /* Waits up to timeout_ms for op to finish and releases it: for a call that failed
     * with operations in flight, which must not write memory the caller gets back.
     * HOOP_ERR_TIMEOUT when it did not finish (op is then leaked, never freed twice). */
    hoop_status (*wait)(hoop__memops *m, hoop__memop *op, int64_t timeout_ms);
    /* Frees the instance once its own thread or stream is idle: HOOP_OK. A stream still
     * busy after HOOP_TIMEOUT (a device's wait has a deadline) is HOOP_ERR_TIMEOUT: the
     * instance is then leaked, with a WARN line, and so must be every buffer its jobs
     * touch, which the device may still write or read. */
    hoop_status (*close)(hoop__memops *m);
} hoop__memops_vt;

struct hoop__memops {
    const hoop__memops_vt *vt;
    void (*wake)(void *arg); /* called (from any thread) when an operation finishes */
    void *wake_arg;
};

/* The table chosen by name: "sync" or "async" (HOOP_MEMOPS' choices). wake (may be
 * NULL) is called from the helper thread whenever an operation finishes, so a sleeping
 * progress thread polls at once. Errors: HOOP_ERR_INVALID naming an unknown name,
 * HOOP_ERR_NOMEM, HOOP_ERR_SYSTEM when the helper thread cannot start. */
hoop_status hoop__memops_open(const char *name, void (*wake)(void *), void *wake_arg,
                              hoop__memops **out);
/* Closes m (NULL is a no-op: HOOP_OK); no operation may be in flight. Its close's status:
 * HOOP_ERR_TIMEOUT when m was leaked, its jobs' buffers then unsafe to free. */
hoop_status hoop__memops_close(hoop__memops *m);

/* The host's sync table, shared (never closed): the default of an executor given none. */
hoop__memops *hoop__memops_host(void);

#endif /* HOOP_COLLECTIVES_MEMOPS_H */
