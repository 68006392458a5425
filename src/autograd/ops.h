/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/ops.h -- helpers shared by the op files (ops.c, activ.c, conv.c): shape
 * messages and views. The numerical helpers moved to the kernel table (kern.h).
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

/* Records a view of x's data with a new shape (reshape, flatten, identity dropout); k is
 * x's kernel table (its backward copies or adds the gradient through it). */
hoop_status hoop__view_op(hoop_tape *tape, const struct hoop__kern *k, hoop_tensor *x, int ndim,
                          const int64_t *shape, const char *op, hoop_tensor **out);

#endif /* HOOP_AUTOGRAD_OPS_H */
