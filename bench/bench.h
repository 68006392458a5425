/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench/bench.h -- hoop-bench's collectives, buffer layouts and correctness check.
 *
 * The check is independent of hoop's reduction code: every input element is a small
 * integer chosen by a hash of the rank and the element's index (no period, so data moved
 * to the wrong offset is seen), so the exact result of every collective is known in
 * float64 / wrapping 64-bit integer arithmetic and is rounded once to the destination
 * type. The half-precision conversions here are our own. Owns nothing; all functions
 * are pure or write only the buffers they are given. Thread-safe.
 */
#ifndef HOOP_BENCH_BENCH_H
#define HOOP_BENCH_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "hoop/collectives.h"

typedef enum bench_coll {
    BENCH_ALLREDUCE = 0,
    BENCH_BROADCAST,
    BENCH_REDUCE,
    BENCH_ALLGATHER,
    BENCH_REDUCESCATTER,
    BENCH_COLL_COUNT_
} bench_coll;

/* One size of the sweep, as nccl-tests counts it (common.cu setupArgs + the test's
 * GetCollByteCount): count = the count argument of the call; bytes = the "size" column
 * = max(send bytes, receive bytes) (all-gather: the gathered buffer; reduce-scatter:
 * the buffer scattered); algbw = bytes / time. */
typedef struct bench_layout {
    size_t count;      /* count argument of the collective */
    size_t send_elems; /* elements in this rank's send buffer */
    size_t recv_elems; /* elements in this rank's receive buffer */
    size_t bytes;      /* "size" column */
} bench_layout;

typedef struct bench_case {
    bench_coll coll;
    hoop_dtype dtype;
    hoop_op op;
    int root; /* broadcast and reduce; -1 otherwise */
    int rank, world_size;
} bench_case;

/* "allreduce", "broadcast", ... ; NULL when unknown. */
const char *bench_coll_name(bench_coll c);

/* Parses a collective name; returns BENCH_COLL_COUNT_ when unknown. */
bench_coll bench_coll_from_name(const char *s);

/* nccl-tests' busbw factor: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n,
 * broadcast and reduce 1 (nccl-tests *GetBw). */
double bench_bus_factor(bench_coll c, int world_size);

/* The layout of a sweep point of size_bytes (rounded down to whole elements and, for
 * all-gather / reduce-scatter, to world_size equal blocks). */
bench_layout bench_layout_of(bench_coll c, size_t size_bytes, size_t elt, int world_size);

/* Bytes after each buffer's data that bench_prepare fills with a known pattern and
 * bench_count_damage checks: a call that writes past the end of its buffers shows. */
#define BENCH_GUARD_BYTES 64

/* Fills the buffers for one call (in_place: the buffer layout of collectives.h), and
 * the BENCH_GUARD_BYTES after each buffer's data. send/recv have room for the layout
 * and the guards; *call_send / *call_recv get the pointers to pass. */
void bench_prepare(const bench_case *bc, const bench_layout *L, int in_place, void *send,
                   void *recv, void **call_send, void **call_recv);

/* What a call changed that it must not have, after bench_prepare(in_place, send, recv)
 * and the call: the guard bytes after either buffer's data that changed, in *guard, and
 * for an out-of-place call the elements of this rank's send buffer that no longer hold
 * its input (a collective reads its send buffer only), in *sent. */
void bench_count_damage(const bench_case *bc, const bench_layout *L, int in_place, const void *send,
                        const void *recv, size_t *guard, size_t *sent);

/* Counts the elements of this rank's result that differ from the exact reference
 * (recv is the call's receive pointer). Ranks without a result (reduce, not root)
 * count 0. */
size_t bench_count_wrong(const bench_case *bc, const bench_layout *L, const void *recv);

/* Our own binary16 / bfloat16 conversions (round to nearest even), for the reference. */
uint16_t bench_f16_from_double(double x);
double bench_f16_to_double(uint16_t h);
uint16_t bench_bf16_from_double(double x);
double bench_bf16_to_double(uint16_t b);

#endif /* HOOP_BENCH_BENCH_H */
