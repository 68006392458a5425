/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/memops.c -- the host's memory-operation tables: sync and async
 * (see memops.h).
 *
 * async: one helper thread runs the started jobs in FIFO order. Each operation is a
 * heap record with an atomic done flag; the helper sets it with release order after the
 * job's stores, and test() reads it with acquire order, so the executor sees the bytes
 * once it sees the flag (what a device event's completion promises). The helper starts
 * a job only once the executor has polled it (test or wait) at least once: every job
 * finishes strictly after start() returned and after the first poll said "not yet", as
 * on a slow device, so a step that used the memory (or gave back a slot) before its
 * operation finished reads or overwrites bytes the job has not touched yet and fails
 * the tests that compare results, every time rather than by chance.
 *
 * Owns: the async instance's queue, thread and operation records.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collectives/coll.h"
#include "collectives/memops.h"
#include "core/check.h"
#include "core/clock.h"

void hoop__memjob_run(const hoop__memjob *j)
{
    switch (j->kind) {
    case HOOP__MJ_COPY:
        if (j->bytes) memmove(j->dst, j->a, j->bytes);
        break;
    case HOOP__MJ_REDUCE:
        hoop__reduce(j->dtype, j->op, j->dst, j->a, j->b, j->bytes / j->elem, j->divisor);
        break;
    case HOOP__MJ_DIRECT:
        hoop__direct_reduce(j->dtype, j->op, j->bufs, j->n, j->me, j->off, j->bytes, j->elem,
                            j->copy_out);
        break;
    }
}

// ----------------------------------------------------------------- sync

static hoop_status sync_start(hoop__memops *m, const hoop__memjob *j, hoop__memop **op)
{
    (void)m;
    hoop__memjob_run(j);
    *op = NULL;
    return HOOP_OK;
}

static hoop_status sync_test(hoop__memops *m, hoop__memop *op, int *done)
{
    (void)m;
    (void)op;
    *done = 1;
    return HOOP_OK;
}

static hoop_status sync_wait(hoop__memops *m, hoop__memop *op, int64_t timeout_ms)
{
    (void)m;
    (void)op;
    (void)timeout_ms;
    return HOOP_OK;
}

static hoop_status sync_close(hoop__memops *m)
{
    (void)m; /* the shared instance is static */
    return HOOP_OK;
}

static const hoop__memops_vt sync_vt = {.name = "sync",
                                        .sync = 1,
                                        .start = sync_start,
                                        .test = sync_test,
                                        .wait = sync_wait,
                                        .close = sync_close};

static hoop__memops host_sync = {.vt = &sync_vt};

hoop__memops *hoop__memops_host(void)
{
    return &host_sync;
}

// ----------------------------------------------------------------- async

struct hoop__memop {
    hoop__memjob job;
    atomic_int done;
    int polled; /* under the instance's mu: the executor asked for it once */
    struct hoop__memop *next;
};

typedef struct async_ops {
    hoop__memops base; /* first: a hoop__memops * is an async_ops * */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    hoop__memop *head, *tail;
    int stop;
} async_ops;

static void *async_main(void *arg)
{
    async_ops *a = arg;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while ((!a->head || !a->head->polled) && !a->stop) pthread_cond_wait(&a->cv, &a->mu);
        if (!a->head) break;       /* stopped, and nothing left */
        hoop__memop *op = a->head; /* polled, or stopping: run it now */
        if (!(a->head = op->next)) a->tail = NULL;
        pthread_mutex_unlock(&a->mu);
        hoop__memjob_run(&op->job);
        atomic_store_explicit(&op->done, 1, memory_order_release);
        if (a->base.wake) a->base.wake(a->base.wake_arg);
        pthread_mutex_lock(&a->mu);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static hoop_status async_start(hoop__memops *m, const hoop__memjob *j, hoop__memop **out)
{
    async_ops *a = (async_ops *)m;
    hoop__memop *op;
    HOOP_CHECK(hoop__calloc(&op, 1));
    op->job = *j;
    pthread_mutex_lock(&a->mu);
    if (a->tail)
        a->tail->next = op;
    else
        a->head = op;
    a->tail = op;
    pthread_mutex_unlock(&a->mu);
    *out = op;
    return HOOP_OK;
}

static hoop_status async_test(hoop__memops *m, hoop__memop *op, int *done)
{
    async_ops *a = (async_ops *)m;
    *done = atomic_load_explicit(&op->done, memory_order_acquire);
    if (*done) {
        free(op);
        return HOOP_OK;
    }
    pthread_mutex_lock(&a->mu);
    if (!op->polled) {
        op->polled = 1;
        pthread_cond_signal(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return HOOP_OK;
}

static hoop_status async_wait(hoop__memops *m, hoop__memop *op, int64_t timeout_ms)
{
    async_ops *a = (async_ops *)m;
    int64_t deadline = hoop__deadline_ns(timeout_ms);
    /* The helper runs the queue in order: every job queued before op must be let run,
     * or op (behind one never polled) would wait for nothing. */
    pthread_mutex_lock(&a->mu);
    for (hoop__memop *q = a->head; q; q = q->next) {
        q->polled = 1;
        if (q == op) break;
    }
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    for (;;) {
        int done;
        HOOP_CHECK(async_test(m, op, &done));
        if (done) return HOOP_OK;
        if (hoop__now_ns() > deadline)
            return HOOP_ERROR(HOOP_ERR_TIMEOUT,
                              "a memory operation (async table) did not finish within %lld ms",
                              (long long)timeout_ms);
        struct timespec nap = {.tv_nsec = 100 * 1000};
        nanosleep(&nap, NULL);
    }
}

static hoop_status async_close(hoop__memops *m)
{
    async_ops *a = (async_ops *)m;
    pthread_mutex_lock(&a->mu);
    a->stop = 1;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a);
    return HOOP_OK; /* the helper's jobs are host copies: they end */
}

static const hoop__memops_vt async_vt = {.name = "async",
                                         .sync = 0,
                                         .start = async_start,
                                         .test = async_test,
                                         .wait = async_wait,
                                         .close = async_close};

static hoop_status async_open(void (*wake)(void *), void *wake_arg, hoop__memops **out)
{
    async_ops *a;
    HOOP_CHECK(hoop__calloc(&a, 1));
    a->base = (hoop__memops){.vt = &async_vt, .wake = wake, .wake_arg = wake_arg};
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    int rc = pthread_create(&a->thread, NULL, async_main, a);
    if (rc != 0) {
        pthread_cond_destroy(&a->cv);
        pthread_mutex_destroy(&a->mu);
        free(a);
        return HOOP_ERROR(HOOP_ERR_SYSTEM, "HOOP_MEMOPS=async: cannot start its thread: %s",
                          hoop__strerror(rc));
    }
    *out = &a->base;
    return HOOP_OK;
}

// ----------------------------------------------------------------- choosing

hoop_status hoop__memops_open(const char *name, void (*wake)(void *), void *wake_arg,
                              hoop__memops **out)
{
    *out = NULL;
    if (!name || strcmp(name, "sync") == 0) {
        *out = &host_sync;
        return HOOP_OK;
    }
    if (strcmp(name, "async") == 0) return async_open(wake, wake_arg, out);
    return HOOP_ERROR(HOOP_ERR_INVALID, "memory operations '%s' unknown (choices: sync, async)",
                      name);
}

hoop_status hoop__memops_close(hoop__memops *m)
{
    return m && m != &host_sync ? m->vt->close(m) : HOOP_OK;
}
