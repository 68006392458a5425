/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/links.c -- the card a rank publishes, and which transport each link
 * uses.
 *
 * A card lists the transports a rank opened (by name, with each one's listen handle).
 * The link to a peer uses, among the transports both ranks opened, the one with the
 * lowest preference whose reachable accepts the peer's handle: shm within a host, ib
 * between hosts that both have a usable device, tcp otherwise. HOOP_TRANSPORT=tcp|shm|ib
 * opens only that transport, and a peer it cannot reach is an error, not a fallback.
 * Both ends of a link see the same two cards, so they agree without talking.
 *
 * Owns nothing. Thread-safe (pure functions; reachable is called on the caller's
 * contexts).
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "collectives/links.h"
#include "core/check.h"

void hoop__card_init(hoop__card *card)
{
    memset(card, 0, sizeof(*card));
    card->magic = HOOP__CARD_MAGIC;
}

hoop_status hoop__card_add(hoop__card *card, const char *name, void **handle)
{
    if (card->n >= HOOP__TP_MAX || strlen(name) >= HOOP__TP_NAME_MAX)
        return HOOP_INTERNAL_ERROR("transport '%s' does not fit a card (%u of %d entries, names "
                                   "below %d characters)",
                                   name, card->n, HOOP__TP_MAX, HOOP__TP_NAME_MAX);
    hoop__card_entry *e = &card->tp[card->n++];
    snprintf(e->name, sizeof(e->name), "%s", name);
    *handle = e->handle;
    return HOOP_OK;
}

int hoop__card_find(const hoop__card *card, const char *name)
{
    for (uint32_t i = 0; i < card->n && i < HOOP__TP_MAX; i++)
        if (strcasecmp(card->tp[i].name, name) == 0) return (int)i;
    return -1;
}

hoop_status hoop__card_check(const hoop__card *card, int rank)
{
    int ok = card->magic == HOOP__CARD_MAGIC && card->n <= HOOP__TP_MAX;
    for (uint32_t i = 0; ok && i < card->n; i++)
        ok = memchr(card->tp[i].name, '\0', HOOP__TP_NAME_MAX) != NULL && card->tp[i].name[0];
    if (ok) return HOOP_OK;
    return HOOP_ERROR(HOOP_ERR_REMOTE,
                      "rank %d published a malformed transport card (magic 0x%08x, %u entries): "
                      "is every rank running the same build of hoop?",
                      rank, card->magic, card->n);
}

void hoop__card_names(const hoop__card *card, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < card->n && i < HOOP__TP_MAX && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%.*s", i ? "," : "", HOOP__TP_NAME_MAX,
                                card->tp[i].name);
    if (card->n == 0) snprintf(buf, cap, "none");
}

/* The names of the transports open here, as hoop__card_names writes a card's. */
static void open_names(const hoop__tp_open *open, int nopen, char *buf, size_t cap)
{
    size_t len = 0;
    snprintf(buf, cap, "none");
    for (int i = 0; i < nopen && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? "," : "", open[i].tp->name);
}

/* Why a forced transport's reachable said no, for its message. */
static const char *unreachable_why(const char *name)
{
    return strcasecmp(name, "shm") == 0 ? "is on another host or network namespace than"
                                        : "cannot be reached over it from";
}

static hoop_status no_link(const hoop__tp_open *open, int nopen, const hoop__card *card,
                           const char *forced, int rank, int peer)
{
    char here[64], there[64];
    open_names(open, nopen, here, sizeof(here));
    hoop__card_names(card, there, sizeof(there));
    if (!forced)
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED,
                          "rank %d: no transport reaches rank %d (rank %d opened %s; rank %d "
                          "opened %s)",
                          rank, peer, rank, here, peer, there);
    if (hoop__card_find(card, forced) < 0)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "HOOP_TRANSPORT=%s, but rank %d has no %s transport (it opened %s; "
                          "rank %d opened %s)",
                          forced, peer, forced, there, rank, here);
    for (int i = 0; i < nopen; i++)
        if (strcasecmp(open[i].tp->name, forced) == 0)
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "HOOP_TRANSPORT=%s, but rank %d %s rank %d (use auto or tcp)", forced,
                              peer, unreachable_why(forced), rank);
    return HOOP_ERROR(HOOP_ERR_INVALID, "HOOP_TRANSPORT=%s, but rank %d has no %s transport",
                      forced, rank, forced);
}

void hoop__link_cost_init(hoop__link_cost *m)
{
    memset(m, 0, sizeof(*m));
    m->c.alpha = m->c.beta = -1;
}

void hoop__link_cost_of(hoop__link_cost *out, const struct hoop_transport *tp, void *ctx)
{
    memset(out, 0, sizeof(*out));
    hoop__transport_cost(tp, ctx, &out->c);
    snprintf(out->alpha_from, sizeof(out->alpha_from), "%s", tp->name);
    snprintf(out->beta_from, sizeof(out->beta_from), "%s", tp->name);
}

hoop_status hoop__link_cost_max(hoop__link_cost *m, const hoop__link_cost *x, int rank)
{
    const struct hoop_tp_cost *c = &x->c;
    if (!(c->alpha >= 0 && c->alpha < 1e3 && c->beta >= 0 && c->beta < 1e3))
        return HOOP_ERROR(HOOP_ERR_REMOTE,
                          "rank %d published a bad link cost (alpha %g s, beta %g s/B): is "
                          "every rank running the same build of hoop?",
                          rank, c->alpha, c->beta);
    if (c->alpha > m->c.alpha) {
        m->c.alpha = c->alpha;
        snprintf(m->alpha_from, sizeof(m->alpha_from), "%.*s", HOOP__TP_NAME_MAX - 1,
                 x->alpha_from);
    }
    if (c->beta > m->c.beta) {
        m->c.beta = c->beta;
        snprintf(m->beta_from, sizeof(m->beta_from), "%.*s", HOOP__TP_NAME_MAX - 1, x->beta_from);
    }
    return HOOP_OK;
}

hoop_status hoop__link_pick(const hoop__tp_open *open, int nopen, const hoop__card *card,
                            const char *forced, int rank, int peer, int *k)
{
    int best = -1;
    for (int i = 0; i < nopen; i++) {
        const struct hoop_transport *tp = open[i].tp;
        if (forced && strcasecmp(tp->name, forced) != 0) continue;
        int e = hoop__card_find(card, tp->name);
        if (e < 0 || (tp->reachable && !tp->reachable(open[i].ctx, card->tp[e].handle))) continue;
        if (best < 0 || tp->preference < open[best].tp->preference) best = i;
    }
    if (best < 0) return no_link(open, nopen, card, forced, rank, peer);
    *k = best;
    return HOOP_OK;
}
