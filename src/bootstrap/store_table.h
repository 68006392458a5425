/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/bootstrap/store_table.h -- the key-value table behind the store server (internal).
 *
 * A chained hash table (FNV-1a, power-of-two buckets, doubled when the load passes 1)
 * mapping byte-string keys to byte-string values. It owns copies of every key and
 * value. Not thread-safe: only the server thread touches it.
 */
#ifndef HOOP_BOOTSTRAP_STORE_TABLE_H
#define HOOP_BOOTSTRAP_STORE_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "hoop/status.h"

typedef struct hoop__store_entry {
    struct hoop__store_entry *next;
    uint64_t hash;
    uint8_t *key;
    size_t key_bytes;
    uint8_t *value;
    size_t value_bytes;
} hoop__store_entry;

typedef struct hoop__store_table {
    hoop__store_entry **buckets;
    size_t nbuckets; /* a power of two, or 0 before the first insert */
    size_t count;    /* number of keys */
} hoop__store_table;

/* The entry of key, or NULL. */
hoop__store_entry *hoop__store_table_find(const hoop__store_table *t, const uint8_t *key,
                                          size_t key_bytes);

/* Sets key to a copy of value (overwrites). HOOP_ERR_NOMEM leaves the table unchanged. */
hoop_status hoop__store_table_set(hoop__store_table *t, const uint8_t *key, size_t key_bytes,
                                  const uint8_t *value, size_t value_bytes);

/* Removes key; returns 1 when it existed. */
int hoop__store_table_delete(hoop__store_table *t, const uint8_t *key, size_t key_bytes);

/* Frees every entry and the bucket array; the table is empty and reusable after. */
void hoop__store_table_clear(hoop__store_table *t);

#endif /* HOOP_BOOTSTRAP_STORE_TABLE_H */
