/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/rendezvous.c -- an in-process meeting point for ranks that are threads.
 *
 * The same role as the TCP store for communicator set-up, without sockets: each rank
 * deposits its endpoint blob and waits until all world_size ranks have done so, then
 * copies everyone's blob. Rounds repeat (a new round starts once every rank has
 * collected the previous one), so one rendezvous can build several communicators in
 * sequence.
 *
 * Owns: the blobs. Thread-safety: every function may be called from any thread.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/comm.h"
#include "collectives/rendezvous.h"
#include "core/check.h"
#include "core/clock.h"

struct hoop_rendezvous {
    int world_size;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned char *blobs; /* world_size x HOOP__CARD_BYTES */
    unsigned char *present;
    int arrived, left, leaving;
};

hoop_status hoop_rendezvous_new(hoop_rendezvous **out, int world_size)
{
    hoop_rendezvous *rv;
    if (!out) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_rendezvous_new: out is NULL");
    if (world_size < 1)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_rendezvous_new: world_size=%d must be >= 1",
                          world_size);
    HOOP_CHECK(hoop__calloc(&rv, 1));
    rv->world_size = world_size;
    if (hoop__calloc(&rv->blobs, (size_t)world_size * HOOP__CARD_BYTES) != HOOP_OK ||
        hoop__calloc(&rv->present, (size_t)world_size) != HOOP_OK) {
        hoop_rendezvous_free(rv);
        return HOOP_ERR_NOMEM;
    }
    pthread_mutex_init(&rv->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&rv->cv, &ca);
    pthread_condattr_destroy(&ca);
    *out = rv;
    return HOOP_OK;
}

void hoop_rendezvous_free(hoop_rendezvous *rv)
{
    if (!rv) return;
    if (rv->blobs && rv->present) {
        pthread_mutex_destroy(&rv->mu);
        pthread_cond_destroy(&rv->cv);
    }
    free(rv->blobs);
    free(rv->present);
    free(rv);
}

int hoop__rendezvous_world_size(const hoop_rendezvous *rv)
{
    return rv->world_size;
}

/* Waits on the condition until woken or the deadline; returns 0 on timeout. */
static int wait_until(hoop_rendezvous *rv, int64_t deadline_ns)
{
    if (deadline_ns == INT64_MAX) return pthread_cond_wait(&rv->cv, &rv->mu), 1;
    struct timespec ts = {.tv_sec = deadline_ns / 1000000000LL,
                          .tv_nsec = deadline_ns % 1000000000LL};
    return pthread_cond_timedwait(&rv->cv, &rv->mu, &ts) == 0 || hoop__now_ns() < deadline_ns;
}

static hoop_status missing_error(hoop_rendezvous *rv)
{
    char list[256] = "";
    size_t len = 0;
    for (int r = 0; r < rv->world_size && len + 12 < sizeof(list); r++)
        if (!rv->present[r])
            len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%d", len ? "," : "", r);
    return HOOP_ERROR(HOOP_ERR_TIMEOUT, "rendezvous: ranks %s of %d never arrived", list,
                      rv->world_size);
}

hoop_status hoop__rendezvous_allgather(hoop_rendezvous *rv, int rank, const void *blob, void *out,
                                       int64_t deadline_ns)
{
    hoop_status st = HOOP_OK;
    pthread_mutex_lock(&rv->mu);
    while (rv->leaving && wait_until(rv, deadline_ns)) {
    }
    if (rv->leaving || rv->present[rank]) {
        pthread_mutex_unlock(&rv->mu);
        return HOOP_ERROR(
            rv->leaving ? HOOP_ERR_TIMEOUT : HOOP_ERR_USAGE, "rendezvous: rank %d %s", rank,
            rv->leaving ? "timed out waiting for the previous round" : "joined twice in one round");
    }
    memcpy(rv->blobs + (size_t)rank * HOOP__CARD_BYTES, blob, HOOP__CARD_BYTES);
    rv->present[rank] = 1;
    if (++rv->arrived == rv->world_size) {
        rv->leaving = 1;
        pthread_cond_broadcast(&rv->cv);
    }
    while (!rv->leaving && wait_until(rv, deadline_ns)) {
    }
    if (!rv->leaving) {
        st = missing_error(rv);
        rv->present[rank] = 0;
        rv->arrived--;
    } else {
        memcpy(out, rv->blobs, (size_t)rv->world_size * HOOP__CARD_BYTES);
        if (++rv->left == rv->world_size) {
            rv->arrived = rv->left = rv->leaving = 0;
            memset(rv->present, 0, (size_t)rv->world_size);
            pthread_cond_broadcast(&rv->cv);
        }
    }
    pthread_mutex_unlock(&rv->mu);
    return st;
}
