/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/links.h -- the card a rank publishes and the choice of each link's
 * transport (internal; see links.c).
 */
#ifndef HOOP_COLLECTIVES_LINKS_H
#define HOOP_COLLECTIVES_LINKS_H

#include <stdint.h>

#include "transport/registry.h"
#include "transport/transport.h"

/* One transport this rank opened. */
typedef struct hoop__tp_open {
    const struct hoop_transport *tp;
    void *ctx;      /* init's context */
    void *slot_mr;  /* the comm's staging slots, registered with it (reg_mr); NULL = none */
    void *stage_mr; /* the comm's stage slots (stage.c), registered once; NULL = none */
} hoop__tp_open;

/* What a rank publishes through the rendezvous: the transports it opened, each by name
 * with the handle its listen filled. Every rank's card has the same size (the store's
 * allgather needs that); unused entries have an empty name. */
#define HOOP__CARD_MAGIC 0x686f6f70u /* "hoop"; a card of another layout fails the check */
typedef struct hoop__card_entry {
    char name[HOOP__TP_NAME_MAX]; /* NUL-terminated; "" = unused */
    _Alignas(8) unsigned char handle[HOOP_TP_HANDLE_MAX];
} hoop__card_entry;
typedef struct hoop__card {
    uint32_t magic, n; /* HOOP__CARD_MAGIC; entries used */
    hoop__card_entry tp[HOOP__TP_MAX];
} hoop__card;
#define HOOP__CARD_BYTES sizeof(hoop__card)

/* An empty card. */
void hoop__card_init(hoop__card *card);

/* Adds an entry for the transport called name; *handle is where its listen writes.
 * HOOP_ERR_INTERNAL when the card is full or the name does not fit. */
hoop_status hoop__card_add(hoop__card *card, const char *name, void **handle);

/* The index of name's entry in card, or -1. */
int hoop__card_find(const hoop__card *card, const char *name);

/* HOOP_OK when card (published by rank) is well formed: the magic, at most
 * HOOP__TP_MAX entries, NUL-terminated names; else HOOP_ERR_REMOTE naming the rank. */
hoop_status hoop__card_check(const hoop__card *card, int rank);

/* Writes card's transport names, comma-separated ("shm,tcp"; "none"), into buf. */
void hoop__card_names(const hoop__card *card, char *buf, size_t cap);

/* The transport of the link from `rank` to `peer`, whose card is `card`: among the
 * transports open here (open[0..nopen)) that card lists too and whose reachable (NULL =
 * any) accepts card's handle, the one with the lowest preference (ties: the lower index
 * in open). forced names the only transport allowed (HOOP_TRANSPORT=tcp|shm|ib), NULL
 * for auto. Sets *k to its index in open. Errors, naming both ranks:
 * HOOP_ERR_INVALID when the forced transport is missing on either side or cannot reach
 * the peer; HOOP_ERR_UNSUPPORTED when, in auto, no transport reaches the peer. Pure: it
 * only calls reachable. */
hoop_status hoop__link_pick(const hoop__tp_open *open, int nopen, const hoop__card *card,
                            const char *forced, int rank, int peer, int *k);

/* A link cost (alpha, beta) and the transports its two figures came from, for the log:
 * what each rank publishes about its data links once it has picked their transports,
 * and what the communicator keeps after folding every rank's (the slowest: every rank
 * must model the same comm, or ranks would pick different algorithms). */
typedef struct hoop__link_cost {
    struct hoop_tp_cost c;
    char alpha_from[HOOP__TP_NAME_MAX], beta_from[HOOP__TP_NAME_MAX];
} hoop__link_cost;

/* An empty maximum: alpha = beta = -1, no names. */
void hoop__link_cost_init(hoop__link_cost *m);

/* The cost of a link over tp (context ctx), named after it. */
void hoop__link_cost_of(hoop__link_cost *out, const struct hoop_transport *tp, void *ctx);

/* Folds x, published by rank, into the running maximum m (each figure on its own, with
 * the name it came with; ties keep m's). HOOP_ERR_REMOTE naming the rank when x is not a
 * cost (negative, NaN, 1000 s or more): another build, or garbage. */
hoop_status hoop__link_cost_max(hoop__link_cost *m, const hoop__link_cost *x, int rank);

#endif /* HOOP_COLLECTIVES_LINKS_H */
