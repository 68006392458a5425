/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/coll.h -- the collectives' work on the device (internal; C and C++): the
 * reduction of two buffers for every dtype and op, which the GPU path of the executor
 * (issue 13) runs after a chunk lands, and which gives the same bits as the host's
 * (src/collectives/reduce.c; both compute each element with reduce_elem.h).
 *
 * Thread-safety: as any launch on a stream (src/cuda/ctx.h).
 */
#ifndef HOOP_CUDA_COLL_H
#define HOOP_CUDA_COLL_H

#include <stddef.h>

#include "cuda/ctx.h"
#include "hoop/collectives.h"
#include "hoop/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = a[i] (op) b[i] for i < count, on stream s (returns once queued). dst may
 * alias a or b exactly (not partially); all three are device memory (or memory the
 * device can reach: pinned host). divisor > 0 with HOOP_OP_AVG divides each result
 * before its one rounding, as hoop__reduce does; op may also be the executor's internal
 * saturating sum (HOOP_OP_COUNT_, for 16-bit types). Integers wrap; f16 / bf16 combine
 * in f32, rounded once to nearest even; MIN / MAX propagate NaN. On the same inputs the
 * result is bitwise the host's, except which NaN a NaN-producing operation makes (the
 * hardware's default NaN: unspecified, as include/hoop/collectives.h says).
 * Errors: HOOP_ERR_INVALID for an unknown dtype or op, or count * size overflowing;
 * HOOP_ERR_CUDA naming the kernel when the launch fails. count 0 launches nothing. */
hoop_status hoop__cuda_coll_reduce(hoop_dtype dtype, hoop_op op, void *dst, const void *a,
                                   const void *b, size_t count, int divisor, hoop__cuda_stream_t s);

#ifdef __cplusplus
}
#endif

#endif /* HOOP_CUDA_COLL_H */
