/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/bootstrap/store_table.c -- the store server's hash table of keys and values.
 *
 * Owns a copy of every key and value it holds. Not thread-safe (server thread only).
 * Hash: 64-bit FNV-1a (Fowler, Noll, Vo), which is plenty for the few thousand keys a
 * rendezvous holds; chains keep deletion simple.
 */
#include <stdlib.h>
#include <string.h>

#include "bootstrap/store_table.h"
#include "core/check.h"

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

static hoop__store_entry **slot_of(const hoop__store_table *t, const uint8_t *key, size_t key_bytes,
                                   uint64_t h)
{
    hoop__store_entry **pp = &t->buckets[h & (t->nbuckets - 1)];
    for (; *pp; pp = &(*pp)->next) {
        const hoop__store_entry *e = *pp;
        if (e->hash == h && e->key_bytes == key_bytes && memcmp(e->key, key, key_bytes) == 0) break;
    }
    return pp;
}

hoop__store_entry *hoop__store_table_find(const hoop__store_table *t, const uint8_t *key,
                                          size_t key_bytes)
{
    if (t->nbuckets == 0) return NULL;
    return *slot_of(t, key, key_bytes, fnv1a(key, key_bytes));
}

/* Doubles the bucket array (or creates it); on failure keeps the old one. */
static hoop_status grow(hoop__store_table *t)
{
    size_t n = t->nbuckets ? t->nbuckets * 2 : 64;
    hoop__store_entry **b;
    HOOP_CHECK(hoop__calloc(&b, n));
    for (size_t i = 0; i < t->nbuckets; i++) {
        hoop__store_entry *e = t->buckets[i];
        while (e) {
            hoop__store_entry *next = e->next;
            e->next = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
            e = next;
        }
    }
    free(t->buckets);
    t->buckets = b;
    t->nbuckets = n;
    return HOOP_OK;
}

/* Copies n bytes into a fresh allocation (at least 1 byte, so NULL means failure). */
static uint8_t *dup_bytes(const uint8_t *p, size_t n)
{
    uint8_t *q = malloc(n ? n : 1);
    if (q && n) memcpy(q, p, n);
    return q;
}

hoop_status hoop__store_table_set(hoop__store_table *t, const uint8_t *key, size_t key_bytes,
                                  const uint8_t *value, size_t value_bytes)
{
    if (t->count >= t->nbuckets) HOOP_CHECK(grow(t));
    uint64_t h = fnv1a(key, key_bytes);
    hoop__store_entry **pp = slot_of(t, key, key_bytes, h);
    uint8_t *v = dup_bytes(value, value_bytes);
    if (v == NULL)
        return HOOP_ERROR(HOOP_ERR_NOMEM, "store: no memory for a %zu-byte value", value_bytes);
    if (*pp) {
        free((*pp)->value);
        (*pp)->value = v;
        (*pp)->value_bytes = value_bytes;
        return HOOP_OK;
    }
    hoop__store_entry *e = calloc(1, sizeof(*e));
    uint8_t *k = dup_bytes(key, key_bytes);
    if (e == NULL || k == NULL) {
        free(e);
        free(k);
        free(v);
        return HOOP_ERROR(HOOP_ERR_NOMEM, "store: no memory for a new key");
    }
    *e = (hoop__store_entry){
        .hash = h, .key = k, .key_bytes = key_bytes, .value = v, .value_bytes = value_bytes};
    *pp = e;
    t->count++;
    return HOOP_OK;
}

static void entry_free(hoop__store_entry *e)
{
    free(e->key);
    free(e->value);
    free(e);
}

int hoop__store_table_delete(hoop__store_table *t, const uint8_t *key, size_t key_bytes)
{
    if (t->nbuckets == 0) return 0;
    hoop__store_entry **pp = slot_of(t, key, key_bytes, fnv1a(key, key_bytes));
    hoop__store_entry *e = *pp;
    if (e == NULL) return 0;
    *pp = e->next;
    entry_free(e);
    t->count--;
    return 1;
}

void hoop__store_table_clear(hoop__store_table *t)
{
    for (size_t i = 0; i < t->nbuckets; i++) {
        hoop__store_entry *e = t->buckets[i];
        while (e) {
            hoop__store_entry *next = e->next;
            entry_free(e);
            e = next;
        }
    }
    free(t->buckets);
    *t = (hoop__store_table){0};
}
