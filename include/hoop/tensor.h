/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * hoop/tensor.h -- dense f32 tensors for the autograd engine.
 *
 * A hoop_tensor is an opaque handle to a contiguous, row-major f32 array of 0..4
 * dimensions (int64_t shape), with an optional gradient buffer of the same shape, a
 * requires_grad flag and a device: HOOP_DEVICE_CPU (host memory) or HOOP_DEVICE_CUDA
 * (the worker's GPU; see hoop_device_check for when one can be had).
 *
 * Where the data lives: hoop_tensor_data() and hoop_tensor_grad() return pointers into
 * the tensor's device's memory, so for a CUDA tensor they are device pointers (to pass to
 * CUDA code, never to dereference on the host). Host code moves values with
 * hoop_tensor_copy_from() (host -> tensor), hoop_tensor_copy_to_host() and
 * hoop_tensor_grad_to_host() (tensor -> host), which work on every device; these return
 * when the copy is complete and are ordered after every op already issued on the tensor.
 * Every op's inputs must be on one device; its output is on that device.
 *
 * Two lifetimes exist:
 *   - long-lived tensors (parameters, input buffers) made by hoop_tensor_new() and freed
 *     by hoop_tensor_free(); a parameter (requires_grad = 1) owns a zeroed grad buffer
 *     into which every backward pass accumulates (+=);
 *   - per-step tensors (activations, tensors from hoop_tape_tensor_new()) that live in a
 *     tape's arena and vanish at hoop_tape_reset(); they are never freed one by one.
 *
 * Example:
 *
 *     int64_t shape[2] = {128, 784};
 *     hoop_tensor *x;
 *     hoop_device dev = hoop_device_check(HOOP_DEVICE_CUDA) == HOOP_OK ? HOOP_DEVICE_CUDA
 *                                                                      : HOOP_DEVICE_CPU;
 *     if (hoop_tensor_new(&x, 2, shape, dev, 0) != HOOP_OK ||
 *         hoop_tensor_copy_from(x, pixels, 128 * 784) != HOOP_OK)
 *         fprintf(stderr, "%s\n", hoop_last_error());
 *     hoop_tensor_free(x);
 *
 * Thread-safety: a tensor is not synchronised. Reading one tensor from several threads
 * is safe; any write (data, grad, hooks) needs the caller's exclusion. A grad-ready hook
 * runs on the thread that called hoop_backward().
 */
#ifndef HOOP_TENSOR_H
#define HOOP_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "hoop/export.h"
#include "hoop/status.h"

HOOP_EXTERN_C_BEGIN

/* Most dimensions a tensor can have. */
#define HOOP_TENSOR_MAX_DIMS 4

/* Longest tensor name kept, including the terminating NUL (longer names are cut). */
#define HOOP_TENSOR_NAME_MAX 64

typedef struct hoop_tensor hoop_tensor;

/* Where a tensor's data and grad live. */
typedef enum hoop_device {
    HOOP_DEVICE_CPU = 0,
    HOOP_DEVICE_CUDA = 1,
} hoop_device;

/* Called once per backward pass when param's gradient is final (see hoop_backward()).
 * It runs on the backward thread, in the middle of the pass; it may read
 * hoop_tensor_grad(param) (and hand it to another thread, e.g. a communicator), but must
 * not record ops or modify param's grad until the pass has returned. */
typedef void (*hoop_grad_hook_fn)(hoop_tensor *param, void *user);

/* Creates a long-lived tensor of ndim (0..4) dimensions with the given shape (each
 * dimension >= 1; ndim 0 is a scalar and shape may be NULL). Data is zeroed. When
 * requires_grad is non-zero the tensor is a parameter (a leaf of the graph) and also owns
 * a zeroed grad buffer of the same shape.
 * Errors: HOOP_ERR_INVALID (ndim out of range, a dimension < 1, count overflow, out NULL,
 * a device outside the enum), HOOP_ERR_UNSUPPORTED (HOOP_DEVICE_CUDA where no GPU or no
 * CUDA backend can be had: hoop_device_check's message), HOOP_ERR_NOMEM (naming the
 * size), HOOP_ERR_CUDA (a CUDA call failed, named). On failure *out is NULL. Thread-safe. */
HOOP_API hoop_status hoop_tensor_new(hoop_tensor **out, int ndim, const int64_t *shape,
                                     hoop_device device, int requires_grad);

/* Frees a tensor made by hoop_tensor_new() with its data and owned grad buffer. NULL is
 * a no-op. Calling it on an arena tensor (from a tape) is ignored with a warning. */
HOOP_API void hoop_tensor_free(hoop_tensor *t);

/* Shape queries. hoop_tensor_dim() returns 0 for i outside 0..ndim-1. count is the number
 * of elements (1 for a scalar). Never fail; a NULL t gives 0 (device: CPU). */
HOOP_API int hoop_tensor_ndim(const hoop_tensor *t);
HOOP_API int64_t hoop_tensor_dim(const hoop_tensor *t, int i);
HOOP_API size_t hoop_tensor_count(const hoop_tensor *t);
HOOP_API hoop_device hoop_tensor_device(const hoop_tensor *t);
HOOP_API int hoop_tensor_requires_grad(const hoop_tensor *t);

/* Writes the shape as "(128, 784)" into buf (always NUL-terminated when bytes > 0) and
 * returns buf ("(NULL)" for a NULL t; NULL when buf is NULL). Used in error messages. */
HOOP_API char *hoop_tensor_shape_str(const hoop_tensor *t, char *buf, size_t bytes);

/* The contiguous row-major data, count floats, in the tensor's device's memory (a device
 * pointer for a CUDA tensor: see the top of this file). Writable: filling an input tensor
 * before the forward pass is the intended use. Writing the data of a tensor that an op has
 * already consumed on the current tape makes that op's backward wrong. */
HOOP_API float *hoop_tensor_data(hoop_tensor *t);

/* The gradient, count floats in the device's memory, or NULL when the tensor has none
 * (requires_grad == 0, or an activation whose gradient backward has not produced). For a
 * parameter it holds the sum over all backward passes since the last zero_grad. */
HOOP_API float *hoop_tensor_grad(hoop_tensor *t);

/* Sets every gradient element of a parameter to 0. HOOP_OK (also for a tensor without a
 * grad, or NULL), or the device's error (HOOP_ERR_CUDA naming the failed launch). */
HOOP_API hoop_status hoop_tensor_zero_grad(hoop_tensor *t);

/* Copies count floats from host memory src into t's data, on any device; returns when the
 * copy is done. Errors: HOOP_ERR_INVALID when count differs from hoop_tensor_count(t) (the
 * message names both) or src is NULL; HOOP_ERR_CUDA for a failed device copy. */
HOOP_API hoop_status hoop_tensor_copy_from(hoop_tensor *t, const float *src, size_t count);

/* Copies t's count floats of data (copy_to_host) or gradient (grad_to_host) into host
 * memory dst, from any device, after every op already issued on t; returns when dst
 * holds them. Errors as hoop_tensor_copy_from; grad_to_host also HOOP_ERR_INVALID when t
 * has no gradient (hoop_tensor_grad NULL). */
HOOP_API hoop_status hoop_tensor_copy_to_host(const hoop_tensor *t, float *dst, size_t count);
HOOP_API hoop_status hoop_tensor_grad_to_host(const hoop_tensor *t, float *dst, size_t count);

/* Sets every data element to value. Errors: HOOP_ERR_INVALID (t NULL), the device's. */
HOOP_API hoop_status hoop_tensor_fill(hoop_tensor *t, float value);

/* Moves a long-lived tensor (data, and its own gradient) to device, in place, as
 * torch's Module.to(): the handle stays the same, hoop_tensor_data() changes. The values
 * are copied exactly. A no-op when t is already there. Errors: HOOP_ERR_INVALID (t NULL,
 * an arena tensor, an unknown device), HOOP_ERR_USAGE (its gradient is a caller's buffer,
 * hoop_tensor_set_grad_buffer), HOOP_ERR_UNSUPPORTED / HOOP_ERR_NOMEM / HOOP_ERR_CUDA
 * from the device; on failure t is unchanged. Not while a tape holds ops on t. */
HOOP_API hoop_status hoop_tensor_to_device(hoop_tensor *t, hoop_device device);

/* HOOP_OK when tensors can be made on device. For HOOP_DEVICE_CUDA this loads the CUDA
 * backend (libhoop-cuda.so, or $HOOP_CUDA_BACKEND: a path; one without a slash is looked
 * up as dlopen(3) does) on the first call and checks that it
 * finds a GPU; otherwise HOOP_ERR_UNSUPPORTED with the reason (no backend installed, no
 * CUDA libraries, no GPU: the driver's message), which every later call repeats. A
 * program that never asks for CUDA never loads CUDA's libraries. Thread-safe. */
HOOP_API hoop_status hoop_device_check(hoop_device device);

/* Waits until device has run all the work the calling thread queued on it (ops, optimizer
 * steps, graph replays: on a GPU they run asynchronously); a no-op for the CPU. Errors:
 * HOOP_ERR_INVALID (unknown device), hoop_device_check's, HOOP_ERR_CUDA (the work failed:
 * CUDA's message), HOOP_ERR_TIMEOUT (not done within HOOP_TIMEOUT). */
HOOP_API hoop_status hoop_device_sync(hoop_device device);

/* Writes one line describing device into buf (always NUL-terminated when len > 0): "cpu",
 * or for CUDA the worker's GPU, "cuda:0 NVIDIA H200, 139.8 GiB". Errors:
 * HOOP_ERR_INVALID (buf NULL, len 0, unknown device), hoop_device_check's. */
HOOP_API hoop_status hoop_device_describe(hoop_device device, char *buf, size_t len);

/* Host memory for data that device work reads asynchronously: page-locked for a GPU (a
 * copy from it needs no staging, and a captured graph may read it at each replay: see
 * hoop_graph_begin), plain for the CPU. *p receives bytes (64-byte aligned); free with
 * hoop_host_free on the same device (NULL is a no-op). Errors: HOOP_ERR_INVALID (p NULL,
 * unknown device), HOOP_ERR_UNSUPPORTED (no such device), HOOP_ERR_NOMEM. */
HOOP_API hoop_status hoop_host_alloc(hoop_device device, size_t bytes, void **p);
HOOP_API void hoop_host_free(hoop_device device, void *p);

/* Name for messages, checkpoints and DDP logs ("fc1.weight"); "" by default. */
HOOP_API const char *hoop_tensor_name(const hoop_tensor *t);
HOOP_API void hoop_tensor_set_name(hoop_tensor *t, const char *name);

/* Registers fn(param, user) as param's grad-ready hook, replacing any previous one; fn
 * NULL removes it. See hoop_backward() for exactly when it fires.
 * Errors: HOOP_ERR_INVALID when param is not a long-lived tensor with requires_grad. */
HOOP_API hoop_status hoop_tensor_set_grad_hook(hoop_tensor *param, hoop_grad_hook_fn fn,
                                               void *user);

/* Makes param's gradient live in caller memory buf (count floats, 64-byte alignment
 * recommended), e.g. a slice of a DDP bucket so no copy is needed before an all-reduce.
 * The current gradient is copied into buf first; the tensor's own grad buffer is freed.
 * buf NULL gives the tensor back a private (zeroed-then-copied) buffer. buf is memory of
 * param's device. The caller keeps buf alive while param uses it. Errors:
 * HOOP_ERR_INVALID (not a parameter), HOOP_ERR_NOMEM. */
HOOP_API hoop_status hoop_tensor_set_grad_buffer(hoop_tensor *param, float *buf);

HOOP_EXTERN_C_END

#endif /* HOOP_TENSOR_H */
