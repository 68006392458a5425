/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/ops.h -- helpers shared by the op files (ops.c, activ.c, conv.c).
 *
 * Thread-safety: the helpers keep no state.
 */
#ifndef HOOP_AUTOGRAD_OPS_H
#define HOOP_AUTOGRAD_OPS_H

#include <stddef.h>

#include "autograd/autograd_impl.h"

/* HOOP_ERR_INVALID: "op: an (shape) and bn (shape) do not fit: why". */
hoop_status hoop__shape_error(const char *op, const char *an, const hoop_tensor *a, const char *bn,
                              const hoop_tensor *b, const char *why);

/* HOOP_ERR_INVALID: "op: an has shape (..), expected want". */
hoop_status hoop__ndim_error(const char *op, const char *an, const hoop_tensor *a,
                             const char *want);

/* dst (+)= src over n floats: added when acc, copied otherwise. */
void hoop__axpy_or_copy(float *dst, const float *src, size_t n, int acc);

/* db(C) (+)= column sums of dy(rows, C). */
void hoop__bias_grad_rows(float *db, const float *dy, size_t rows, size_t C, int acc);

/* Sum of n floats with 8 interleaved partial sums (a fixed order, so deterministic; the
 * compiler vectorises it, unlike one serial float accumulator). */
float hoop__sum_f32(const float *p, size_t n);

/* Records a view of x's data with a new shape (reshape, flatten, identity dropout). */
hoop_status hoop__view_op(hoop_tape *tape, hoop_tensor *x, int ndim, const int64_t *shape,
                          const char *op, hoop_tensor **out);

#endif /* HOOP_AUTOGRAD_OPS_H */
