/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/transport/reqpool.h -- the request pool every transport's comm keeps (internal).
 *
 * A comm hands out requests of one size; a released one is kept for reuse (a collective
 * posts a few per call, so the fast path never calls malloc), and the live ones stay on a
 * list so that closing the comm releases whatever its caller still holds. A request's
 * struct starts with a hoop__req_link. Used by one thread at a time, like its comm.
 */
#ifndef HOOP_TRANSPORT_REQPOOL_H
#define HOOP_TRANSPORT_REQPOOL_H

#include <stdlib.h>
#include <string.h>

#include "core/check.h"

typedef struct hoop__req_link {
    struct hoop__req_link *prev, *next;
} hoop__req_link;

typedef struct hoop__req_pool {
    size_t size;                  /* bytes of one request, hoop__req_link first */
    int keep, nspare;             /* released requests kept for reuse, at most keep */
    hoop__req_link *live, *spare; /* live: doubly linked; spare: through next */
} hoop__req_pool;

/* An empty pool of requests of `size` bytes (>= sizeof(hoop__req_link)) keeping up to
 * `keep` released ones. */
static inline void hoop__req_pool_init(hoop__req_pool *p, size_t size, int keep)
{
    *p = (hoop__req_pool){.size = size, .keep = keep};
}

/* A zeroed request, on the live list. Errors: HOOP_ERR_NOMEM. */
static inline hoop_status hoop__req_get(hoop__req_pool *p, void **out)
{
    hoop__req_link *r = p->spare;
    if (r) {
        p->spare = r->next;
        p->nspare--;
        memset(r, 0, p->size);
    } else {
        r = calloc(1, p->size);
        if (!r) return HOOP_ERROR(HOOP_ERR_NOMEM, "request of %zu bytes: out of memory", p->size);
    }
    r->next = p->live;
    if (p->live) p->live->prev = r;
    p->live = r;
    *out = r;
    return HOOP_OK;
}

/* Takes a live request off the live list, keeping it for reuse or freeing it. */
static inline void hoop__req_put(hoop__req_pool *p, void *req)
{
    hoop__req_link *r = req;
    if (r->prev)
        r->prev->next = r->next;
    else
        p->live = r->next;
    if (r->next) r->next->prev = r->prev;
    if (p->nspare >= p->keep) {
        free(r);
        return;
    }
    r->prev = NULL;
    r->next = p->spare;
    p->spare = r;
    p->nspare++;
}

/* Frees every request, live or spare (the comm is closing). */
static inline void hoop__req_pool_fini(hoop__req_pool *p)
{
    for (hoop__req_link *l = p->live, *n; l; l = n) {
        n = l->next;
        free(l);
    }
    for (hoop__req_link *l = p->spare, *n; l; l = n) {
        n = l->next;
        free(l);
    }
    p->live = p->spare = NULL;
    p->nspare = 0;
}

#endif /* HOOP_TRANSPORT_REQPOOL_H */
