/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/autograd_impl.h -- internals shared by the autograd files: the tensor and
 * tape structs, the node record, the arena, and the helpers ops use to record nodes and
 * to accumulate gradients in backward.
 *
 * Accumulate contract (as llm.c): an op's backward ADDS into the gradient of a parameter
 * (long-lived leaf) and into an activation gradient that already holds a contribution;
 * the first contribution to an activation gradient is WRITTEN (=), so activation
 * gradients never need zeroing. hoop__grad_for() tells the backward which case it is in.
 *
 * Devices: every op computes through the kernel table (kern.h) of its inputs' device; the
 * node keeps that table, so its backward runs on the same one. A backward returns a
 * status; hoop__backward_from() stops at the first that fails.
 *
 * Thread-safety: none; a tape and its tensors belong to one thread at a time.
 */
#ifndef HOOP_AUTOGRAD_IMPL_H
#define HOOP_AUTOGRAD_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "hoop/autograd.h"
#include "hoop/tensor.h"

#define HOOP__ALIGN 64 /* bytes; every arena allocation and tensor buffer is aligned so */
#define HOOP__NODE_MAX_IN 3

struct hoop_node;

struct hoop_tensor {
    int ndim;
    int64_t shape[HOOP_TENSOR_MAX_DIMS];
    size_t count;
    float *data;
    float *grad; /* parameters: always set; activations: arena, set in backward */
    hoop_device device;
    uint8_t requires_grad;  /* parameters, and op outputs that depend on one */
    uint8_t long_lived;     /* from hoop_tensor_new (freed by hoop_tensor_free) */
    uint8_t owns_grad;      /* grad was allocated here (not a caller's bucket view) */
    uint8_t grad_set;       /* activations: grad holds this backward's first contribution */
    uint8_t uses;           /* activations: input of 0, 1 or 2 (2 or more) recorded nodes */
    struct hoop_node *node; /* the node that produced it, NULL for leaves */
    hoop_grad_hook_fn hook;
    void *hook_user;
    uint64_t use_gen;   /* tape generation in which it was first used as an op input */
    uint64_t ready_gen; /* backward generation in which its gradient became final */
    uint64_t grad_gen;  /* parameters: backward generation in which a node added to grad */
    char name[HOOP_TENSOR_NAME_MAX];
};

struct hoop__kern;

/* A node's backward: adds (or writes, see above) the gradients of n's inputs from
 * n->out->grad, through n->kern. HOOP_OK, or the status of the kernel or allocation that
 * failed, with its message set (hoop__backward_from names the op around it). */
typedef hoop_status (*hoop__backward_fn)(hoop_tape *tape, struct hoop_node *n);

/* Op-specific scalars kept by a node for its backward. */
union hoop__node_args {
    struct {
        int stride, padding;
    } conv;
    struct {
        int kernel, stride;
    } pool;
    float smoothing;
};

struct hoop_node {
    const char *op;                /* "linear", for messages and tracing */
    hoop__backward_fn backward;    /* NULL: op has no backward (never recorded then) */
    const struct hoop__kern *kern; /* the table the forward ran with; backward uses it */
    hoop_tensor *in[HOOP__NODE_MAX_IN];
    int nin;
    hoop_tensor *out;
    unsigned ready_mask; /* bit j: in[j] is a parameter first used by this node */
    void *saved;         /* op-specific arena buffer (mask, argmax, probs, labels) */
    union hoop__node_args args;
};

// ----- arena (tape.c) ----------------------------------------------------------------------

/* Returns bytes (rounded up to HOOP__ALIGN) of uninitialised host arena memory (tensor
 * headers, nodes, host-side saved values), or NULL with HOOP_ERR_NOMEM set in the thread's
 * error. */
void *hoop__arena_alloc(hoop_tape *tape, size_t bytes);

/* Like hoop__arena_alloc, in device d's memory (the tape keeps one arena per device, each
 * allocating blocks through its kernel table): a tensor's data and gradient, and what a
 * kernel reads or writes (masks, argmax indices, im2col columns). For HOOP_DEVICE_CPU it
 * is hoop__arena_alloc. NULL with the message set (HOOP_ERR_NOMEM, or a device without a
 * table). */
void *hoop__arena_data(hoop_tape *tape, hoop_device d, size_t bytes);

/* An arena tensor on device d of the given shape with uninitialised data; requires_grad
 * 0. NULL on failure (message set). shape already validated by the caller or validated
 * here. */
hoop_status hoop__tensor_arena(hoop_tape *tape, hoop_device d, int ndim, const int64_t *shape,
                               hoop_tensor **out);

/* Like hoop__tensor_arena but data points at view_data (no allocation); the device is
 * CPU: a view of a device tensor sets it. */
hoop_status hoop__tensor_view(hoop_tape *tape, int ndim, const int64_t *shape, float *view_data,
                              hoop_tensor **out);

// ----- recording (tape.c) -------------------------------------------------------------------

/* Is gradient recording on and does any of the nin inputs require grad? */
int hoop__tape_wants_grad(const hoop_tape *tape, hoop_tensor *const *in, int nin);

/* Records a node producing out from in[0..nin) (NULL entries allowed, e.g. no bias) when
 * hoop__tape_wants_grad(); kern is the table the forward ran with (the backward's). Marks
 * out->requires_grad. *node (may be NULL) receives the node or NULL when nothing was
 * recorded. */
hoop_status hoop__tape_record(hoop_tape *tape, const char *op, hoop__backward_fn backward,
                              const struct hoop__kern *kern, hoop_tensor *const *in, int nin,
                              hoop_tensor *out, struct hoop_node **node);

/* Seeds out's gradient with dy (out->count floats, copied) and runs backward from out's
 * node. hoop_backward() is this with dy = {1}. Used directly by the gradient tests. */
hoop_status hoop__backward_from(hoop_tape *tape, hoop_tensor *out, const float *dy);

/* *grad receives the gradient buffer a backward should put t's contribution into, or NULL
 * when t needs no gradient (t NULL or not requiring grad). *accumulate is 1 when the
 * contribution must be added (+=), 0 when it may be written (=). Allocates activation
 * gradients from the arena: HOOP_ERR_NOMEM (message set) when it cannot grow. */
hoop_status hoop__grad_for(hoop_tape *tape, hoop_tensor *t, float **grad, int *accumulate);

/* From now on every arena allocation of tape is filled with NaN (on = 1) or left as it is
 * (0). A backward that accumulates into a gradient it should have written, or a forward
 * that reads output memory before writing it, then yields NaN instead of passing on
 * zeroed memory. HOOP_ARENA_POISON=1 turns it on for every tape; the gradient tests call
 * this. */
void hoop__tape_poison(hoop_tape *tape, int on);

/* Dropout's next count elements of the tape's stream on k's device: *seed points at the key
 * (hoop_tape_seed's) in that device's memory, uploaded there after it changed, and *offset
 * is the first element's index; the tape then counts them as drawn. HOOP_ERR_NOMEM (or the
 * upload's error) with the message set. */
hoop_status hoop__tape_draw(hoop_tape *tape, const struct hoop__kern *k, size_t count,
                            const uint64_t **seed, uint64_t *offset);

// ----- shapes (tensor.c) --------------------------------------------------------------------

/* Validates ndim/shape and computes the element count. HOOP_ERR_INVALID with a message
 * that begins with fn (the public function that was given the shape). */
hoop_status hoop__shape_check(const char *fn, int ndim, const int64_t *shape, size_t *count);

/* 1 when a and b have identical shapes. */
int hoop__same_shape(const hoop_tensor *a, const hoop_tensor *b);

/* Fills a tensor header (no buffers). */
void hoop__tensor_header(hoop_tensor *t, int ndim, const int64_t *shape, size_t count);

/* HOOP_ERR_INVALID naming tape or out when either is NULL; sets *out = NULL otherwise. The
 * first check of every op (op is its public name, "hoop_matmul"). */
hoop_status hoop__check_call(const hoop_tape *tape, hoop_tensor **out, const char *op);

/* HOOP_ERR_INVALID when t is NULL or has more elements than an op takes (INT_MAX); what
 * names the argument ("x"). Devices are checked by hoop__op_kern (kern.h). */
hoop_status hoop__check_arg(const hoop_tensor *t, const char *op, const char *what);

#endif /* HOOP_AUTOGRAD_IMPL_H */
