/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/graph.c -- CUDA graphs of autograd work (hoop/autograd.h: hoop_graph_*):
 * capture through the device's kernel table (kern.h: graph_begin, graph_end,
 * graph_launch), and the host hooks that advance captured calls' host state at each
 * replay (graph.h).
 *
 * Owns: each graph's device handle and hook list. Thread-safety: a capture belongs to the
 * thread that began it (the thread-local current graph); a finished graph may be replayed
 * from any one thread at a time.
 */
#include <stdio.h>
#include <stdlib.h>

#include "autograd/graph.h"
#include "autograd/kern.h"
#include "core/check.h"
#include "core/log.h"
#include "hoop/autograd.h"

struct hook {
    void (*fn)(void *user), (*undo)(void *user);
    void *user;
};

struct hoop_graph {
    const struct hoop__kern *k;
    void *exec; /* the device's instantiated graph */
    struct hook *hooks;
    size_t nhooks, cap;
    int failed; /* a hook could not be kept, or hoop__graph_fail: end fails */
    hoop_status fail_st;
    char why[512]; /* what failed it */
    int launched;  /* replayed at least once (the first replay skips the hooks) */
};

static _Thread_local struct hoop_graph *capturing;

hoop_status hoop__graph_on_replay(hoop_device d, void (*fn)(void *user), void (*undo)(void *user),
                                  void *user)
{
    struct hoop_graph *g = capturing;
    if (g == NULL || g->k->device != d) return HOOP_OK;
    if (g->nhooks == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 8;
        if (hoop__realloc(&g->hooks, cap) != HOOP_OK) {
            hoop__graph_fail(d, HOOP_ERR_NOMEM, "a replay hook could not be kept");
            return HOOP_ERR_NOMEM;
        }
        g->cap = cap;
    }
    g->hooks[g->nhooks++] = (struct hook){fn, undo, user};
    return HOOP_OK;
}

void hoop__graph_fail(hoop_device d, hoop_status st, const char *why)
{
    struct hoop_graph *g = capturing;
    if (g == NULL || g->k->device != d || g->failed) return;
    g->failed = 1;
    g->fail_st = st;
    snprintf(g->why, sizeof(g->why), "%s", why);
}

int hoop__graph_capturing(hoop_device d)
{
    return capturing != NULL && capturing->k->device == d;
}

hoop_status hoop_graph_begin(hoop_device device)
{
    if (capturing != NULL)
        return HOOP_ERROR(HOOP_ERR_USAGE, "hoop_graph_begin: this thread is capturing a graph "
                                          "already (hoop_graph_end it first)");
    if (device != HOOP_DEVICE_CUDA)
        return HOOP_ERROR(device == HOOP_DEVICE_CPU ? HOOP_ERR_UNSUPPORTED : HOOP_ERR_INVALID,
                          "hoop_graph_begin: graphs capture CUDA work; device %d is %s",
                          (int)device, device == HOOP_DEVICE_CPU ? "the CPU" : "unknown");
    const struct hoop__kern *k;
    HOOP_CHECK(hoop__kern_get(device, "hoop_graph_begin", &k));
    /* The captured calls' host side runs now and rewrites what an earlier replay (of
     * another graph sharing an optimizer) may still read: let the device catch up. */
    HOOP_CHECK(k->sync());
    struct hoop_graph *g;
    HOOP_CHECK(hoop__calloc(&g, 1));
    g->k = k;
    const hoop_status st = k->graph_begin();
    if (st != HOOP_OK) {
        free(g);
        return st;
    }
    capturing = g;
    return HOOP_OK;
}

hoop_status hoop_graph_end(hoop_graph **out)
{
    if (out == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_graph_end: out is NULL");
    *out = NULL;
    struct hoop_graph *g = capturing;
    if (g == NULL)
        return HOOP_ERROR(HOOP_ERR_USAGE, "hoop_graph_end: this thread is not capturing "
                                          "(hoop_graph_begin first)");
    capturing = NULL;
    hoop_status st = g->k->graph_end(&g->exec);
    if (st == HOOP_OK && g->failed) st = HOOP_ERROR(g->fail_st, "%s", g->why);
    if (st != HOOP_OK) {
        char why[512];
        snprintf(why, sizeof(why), "%s", hoop_last_error());
        for (size_t i = g->nhooks; i-- > 0;)
            if (g->hooks[i].undo) g->hooks[i].undo(g->hooks[i].user);
        if (g->exec) g->k->graph_free(g->exec);
        free(g->hooks);
        free(g);
        return HOOP_ERROR(st, "hoop_graph_end: %s", why);
    }
    HOOP_DEBUGF(AUTOGRAD, "graph captured (%zu replay hooks)", g->nhooks);
    *out = g;
    return HOOP_OK;
}

hoop_status hoop_graph_replay(hoop_graph *g)
{
    if (g == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_graph_replay: g is NULL");
    if (capturing != NULL)
        return HOOP_ERROR(HOOP_ERR_USAGE, "hoop_graph_replay: this thread is capturing a graph");
    if (g->launched) {
        /* The hooks rewrite host memory the last launch reads (the optimizer's scalars, the
         * dropout key) when its captured copies run: let it finish first, and with it any
         * replay of another graph since (two graphs of one optimizer share its scalars:
         * hoop-train replays one per input buffer), i.e. all the device work queued. */
        HOOP_CHECK(g->k->sync());
        for (size_t i = 0; i < g->nhooks; i++)
            if (g->hooks[i].fn) g->hooks[i].fn(g->hooks[i].user);
    }
    g->launched = 1;
    return g->k->graph_launch(g->exec);
}

void hoop_graph_free(hoop_graph *g)
{
    if (g == NULL) return;
    g->k->graph_free(g->exec);
    free(g->hooks);
    free(g);
}
