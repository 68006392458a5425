/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * hoop/collectives.h -- all-reduce, broadcast, reduce, all-gather, reduce-scatter, barrier.
 *
 * Every collective is enqueued on the communicator's progress thread in call order and
 * returns at once. With req != NULL the caller gets a hoop_request to hoop_test or
 * hoop_wait (include/hoop/comm.h); with req == NULL the call blocks until done (async
 * + wait with the comm's timeout). Buffers must stay valid and untouched until the
 * request completes.
 *
 * Common rules:
 *   - count is in elements of dtype (size_t); 0 is allowed and moves no data.
 *   - In-place when sendbuf == recvbuf (all-gather: sendbuf == recvbuf + rank * count
 *     elements; reduce-scatter: recvbuf == sendbuf + rank * count elements).
 *   - Sums and products of integers wrap (two's complement); HOOP_OP_AVG is only
 *     defined for floating types (f32, f64, f16, bf16) and is rejected with
 *     HOOP_ERR_INVALID for integers: use HOOP_OP_SUM and divide.
 *   - f16 and bf16 are combined in f32 and each combination is rounded once to the
 *     destination type (round to nearest even).
 *   - Results are bitwise identical on every rank.
 *   - Buffers that are reduced (all-reduce, reduce, reduce-scatter) must be aligned to
 *     their elements (as any typed access in C); others may lie at any byte.
 *   - Errors: HOOP_ERR_INVALID (bad argument, named), HOOP_ERR_MISMATCH (ranks called
 *     different collectives, counts, dtypes, ops, roots or algorithms; the message names
 *     both calls), HOOP_ERR_REMOTE (a peer died or closed; named), HOOP_ERR_TIMEOUT.
 *   - Thread-safety: one thread issues collectives on a given comm at a time.
 */
#ifndef HOOP_COLLECTIVES_H
#define HOOP_COLLECTIVES_H

#include <stddef.h>

#include "hoop/comm.h"
#include "hoop/export.h"
#include "hoop/status.h"

HOOP_EXTERN_C_BEGIN

typedef enum hoop_dtype {
    HOOP_DTYPE_F32 = 0,
    HOOP_DTYPE_F64 = 1,
    HOOP_DTYPE_F16 = 2,  /* IEEE binary16, stored as uint16_t */
    HOOP_DTYPE_BF16 = 3, /* bfloat16, stored as uint16_t */
    HOOP_DTYPE_I32 = 4,
    HOOP_DTYPE_I64 = 5,
    HOOP_DTYPE_U8 = 6,
    HOOP_DTYPE_COUNT_ = 7
} hoop_dtype;

typedef enum hoop_op {
    HOOP_OP_SUM = 0,
    HOOP_OP_PROD = 1,
    HOOP_OP_MIN = 2,
    HOOP_OP_MAX = 3,
    HOOP_OP_AVG = 4, /* sum / world_size; floating types only */
    HOOP_OP_COUNT_ = 5
} hoop_op;

/* Size of one element in bytes; 0 for an unknown dtype. */
HOOP_API size_t hoop_dtype_size(hoop_dtype dtype);
/* "f32", "f64", "f16", "bf16", "i32", "i64", "u8"; "?" when unknown. */
HOOP_API const char *hoop_dtype_name(hoop_dtype dtype);
/* "sum", "prod", "min", "max", "avg"; "?" when unknown. */
HOOP_API const char *hoop_op_name(hoop_op op);

/* recvbuf[i] = op over ranks of sendbuf[i], i < count, on every rank. The algorithm is
 * the comm's (hoop_comm_set_algo / HOOP_ALGO / cost model): ring = reduce-scatter then
 * all-gather in pipelined chunks (Patarasuk & Yuan 2009), bandwidth-optimal, sending
 * 2(n-1)/n x count x size bytes per rank; rd and rhd from Thakur, Rabenseifner & Gropp
 * 2005. */
HOOP_API hoop_status hoop_allreduce(hoop_comm *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, hoop_dtype dtype, hoop_op op, hoop_request **req);

/* Copies root's sendbuf (count elements) into every rank's recvbuf; sendbuf is only read
 * on root (in-place when equal). Pipelined chain along the ring starting at root. */
HOOP_API hoop_status hoop_broadcast(hoop_comm *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, hoop_dtype dtype, int root, hoop_request **req);

/* root's recvbuf[i] = op over ranks of sendbuf[i]; recvbuf is ignored on other ranks
 * (may be NULL). Pipelined chain along the ring ending at root. */
HOOP_API hoop_status hoop_reduce(hoop_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                 hoop_dtype dtype, hoop_op op, int root, hoop_request **req);

/* recvbuf (world_size x count elements) receives rank r's sendbuf (count elements) at
 * offset r x count, on every rank. Ring, (n-1)/n x total bytes per rank; in place on
 * memory from hoop_comm_alloc_shared, direct (each rank copies the others' blocks from
 * their copies). */
HOOP_API hoop_status hoop_allgather(hoop_comm *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, hoop_dtype dtype, hoop_request **req);

/* sendbuf holds world_size x count elements; rank r's recvbuf (count elements) receives
 * op over ranks of block r. Ring, (n-1)/n x total bytes per rank; in place on memory
 * from hoop_comm_alloc_shared, direct (rank r reduces block r over every rank's copy). */
HOOP_API hoop_status hoop_reduce_scatter(hoop_comm *comm, const void *sendbuf, void *recvbuf,
                                         size_t count, hoop_dtype dtype, hoop_op op,
                                         hoop_request **req);

/* Returns on each rank only after every rank has entered it (a token twice round the
 * ring). */
HOOP_API hoop_status hoop_barrier(hoop_comm *comm, hoop_request **req);

HOOP_EXTERN_C_END

#endif /* HOOP_COLLECTIVES_H */
