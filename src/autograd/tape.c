/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/tape.c -- the tape: per-step arena, node recording, and the backward walk
 * with grad-ready hooks.
 *
 * Owns: the arena blocks (activations, their gradients, nodes, saved values) and the
 * growable array of node pointers. The arena is a bump allocator over a list of blocks;
 * hoop_tape_reset() rewinds it and, when a step needed more than one block, replaces them
 * by one block of the total size, so the steady state allocates nothing. With poisoning
 * on (HOOP_ARENA_POISON=1, or hoop__tape_poison) each allocation is filled with NaN, so
 * nothing can rely on fresh blocks happening to be zero.
 *
 * A node's backward returns a status; the walk stops at the first that fails (an arena
 * that cannot grow, a kernel's error) and hoop_backward returns it, naming the op.
 *
 * Hook timing: when a node is recorded, each parameter input seen for the first time in
 * this tape generation sets a bit in the node's ready_mask. In reverse order no node
 * before that one (in the forward order) uses the parameter, so right after that node's
 * backward the parameter's gradient is final and its hook fires.
 *
 * Thread-safety: a tape belongs to one thread at a time. The generation counters are
 * process-wide atomics so that stamps from different tapes never collide.
 */
#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "autograd/graph.h"
#include "autograd/kern.h"
#include "core/check.h"
#include "core/fault.h"
#include "core/env.h"
#include "core/log.h"
#include "hoop/nn.h"

#define ARENA_MIN_BLOCK ((size_t)1 << 20)
#define NDEVICES 2 /* HOOP_DEVICE_CPU, HOOP_DEVICE_CUDA */

/* A block's header lives in host memory; its bytes are the arena's device's. */
struct arena_block {
    struct arena_block *next;
    size_t cap, used;
    unsigned char *base; /* cap bytes from k->mem_alloc */
};

/* A bump allocator over blocks of one device's memory, through that device's table. */
struct arena {
    struct arena_block *blocks; /* head is the block being filled; older ones follow */
    size_t total;               /* sum of block capacities */
    const struct hoop__kern *k; /* set at the first block: frees go to the same table */
};

struct hoop_tape {
    /* [CPU] holds tensor headers, nodes, saved host values and CPU data; [CUDA] the data of
     * CUDA tensors (activations, their gradients, masks, im2col buffers). */
    struct arena arena[NDEVICES];
    struct hoop_node **nodes;
    size_t nnodes, nodes_cap;
    uint64_t gen;    /* this step's generation (first-use stamps) */
    uint64_t bw_gen; /* the last backward's generation (ready stamps), 0 = none */
    int backward_done;
    int train, grad_enabled;
    int poison; /* fill allocations with NaN (HOOP_ARENA_POISON, hoop__tape_poison) */
    /* dropout's stream: Philox keyed by seed, drawn elements counted since it was set */
    uint64_t seed, drawn;
    /* the seed as dropout kernels read it, per device: a host_alloc slot (hoop_tape_seed
     * writes it; a captured upload reads it at each replay) and its device copy, uploaded
     * at the first draw after the seed changed */
    uint64_t *seed_host[NDEVICES], *seed_dev[NDEVICES];
    int seed_stale[NDEVICES];
};

static atomic_uint_fast64_t next_gen = 1;

static uint64_t new_gen(void)
{
    return atomic_fetch_add(&next_gen, 1);
}

// ----- arena --------------------------------------------------------------------------------

static struct arena_block *block_new(const struct hoop__kern *k, size_t cap)
{
    struct arena_block *b = malloc(sizeof(*b));
    if (b == NULL) return NULL;
    void *base;
    if (k->mem_alloc(&base, cap) != HOOP_OK) {
        free(b);
        return NULL;
    }
    b->next = NULL;
    b->cap = cap;
    b->used = 0;
    b->base = base;
    return b;
}

static void *arena_alloc(hoop_tape *tape, hoop_device d, size_t bytes)
{
    struct arena *a = &tape->arena[d];
    if (a->k == NULL) a->k = hoop__kern_for(d);
    if (a->k == NULL) {
        HOOP_ERROR(HOOP_ERR_UNSUPPORTED, "tape arena: this build has no %s memory",
                   hoop__device_name(d));
        return NULL;
    }
    if (bytes > SIZE_MAX / 2) {
        HOOP_ERROR(HOOP_ERR_NOMEM, "tape arena: cannot allocate %zu bytes", bytes);
        return NULL;
    }
    bytes = (bytes + HOOP__ALIGN - 1) / HOOP__ALIGN * HOOP__ALIGN;
    struct arena_block *b = a->blocks;
    if (b == NULL || b->cap - b->used < bytes) {
        if (hoop__graph_capturing(d)) {
            /* A new block inside a capture may come from the allocator's cache (no
             * cudaMalloc, so CUDA does not break the capture), but the next reset merges
             * the blocks and frees the one the graph writes at every replay. */
            HOOP_ERROR(HOOP_ERR_UNSUPPORTED,
                       "tape arena: %zu more bytes of %s memory inside a CUDA graph capture; "
                       "the arena must not grow while capturing (run the step eagerly once "
                       "first, on the same tape)",
                       bytes, a->k->name);
            hoop__graph_fail(d, HOOP_ERR_UNSUPPORTED, hoop_last_error());
            return NULL;
        }
        size_t cap = a->total > ARENA_MIN_BLOCK ? a->total : ARENA_MIN_BLOCK;
        if (cap < bytes) cap = bytes;
        struct arena_block *nb = block_new(a->k, cap);
        if (nb == NULL) {
            char why[256];
            snprintf(why, sizeof(why), "%s", hoop_last_error());
            HOOP_ERROR(HOOP_ERR_NOMEM, "tape arena: cannot allocate a block of %zu bytes on %s: %s",
                       cap, a->k->name, why);
            return NULL;
        }
        nb->next = b;
        a->blocks = nb;
        a->total += cap;
        HOOP_DEBUGF(AUTOGRAD, "tape arena (%s) grows by %zu bytes to %zu", a->k->name, cap,
                    a->total);
        b = nb;
    }
    void *p = b->base + b->used;
    b->used += bytes;
    if (tape->poison) {
        /* every float 0xffffffff: a quiet NaN */
        const union {
            uint32_t u;
            float f;
        } nan_bits = {.u = 0xffffffffu};
        if (a->k->fill(p, bytes / sizeof(float), nan_bits.f) != HOOP_OK) return NULL;
    }
    return p;
}

void *hoop__arena_alloc(hoop_tape *tape, size_t bytes)
{
    return arena_alloc(tape, HOOP_DEVICE_CPU, bytes);
}

void *hoop__arena_data(hoop_tape *tape, hoop_device d, size_t bytes)
{
    if ((unsigned)d >= NDEVICES) {
        HOOP_ERROR(HOOP_ERR_INVALID, "tape arena: device %d is unknown", (int)d);
        return NULL;
    }
    return arena_alloc(tape, d, bytes);
}

static void arena_free_all(struct arena *a)
{
    struct arena_block *b = a->blocks;
    while (b != NULL) {
        struct arena_block *next = b->next;
        a->k->mem_free(b->base);
        free(b);
        b = next;
    }
    a->blocks = NULL;
    a->total = 0;
}

/* Rewinds the arena; merges several blocks into one of the high-water size (the bytes the
 * step used, rounded up to a MiB), so the next steps fit in one block. */
static void arena_reset(struct arena *a)
{
    if (a->blocks == NULL) return;
    if (a->blocks->next != NULL) {
        size_t total = 0;
        for (struct arena_block *b = a->blocks; b != NULL; b = b->next) total += b->used;
        total = (total + ARENA_MIN_BLOCK - 1) / ARENA_MIN_BLOCK * ARENA_MIN_BLOCK;
        arena_free_all(a);
        a->blocks = block_new(a->k, total); /* on failure, the next alloc retries */
        if (a->blocks != NULL) a->total = total;
        return;
    }
    a->blocks->used = 0;
}

hoop_status hoop__tensor_view(hoop_tape *tape, int ndim, const int64_t *shape, float *view_data,
                              hoop_tensor **out)
{
    size_t count;
    *out = NULL;
    HOOP_CHECK(hoop__shape_check("hoop__tensor_view", ndim, shape, &count)); /* ops check first */
    hoop_tensor *t = hoop__arena_alloc(tape, sizeof(*t));
    if (t == NULL) return HOOP_ERR_NOMEM;
    hoop__tensor_header(t, ndim, shape, count);
    t->data = view_data;
    *out = t;
    return HOOP_OK;
}

hoop_status hoop__tensor_arena(hoop_tape *tape, hoop_device d, int ndim, const int64_t *shape,
                               hoop_tensor **out)
{
    HOOP_CHECK(hoop__tensor_view(tape, ndim, shape, NULL, out));
    (*out)->device = d;
    (*out)->data = hoop__arena_data(tape, d, (*out)->count * sizeof(float));
    if ((*out)->data == NULL) {
        *out = NULL;
        return HOOP_ERR_NOMEM;
    }
    return HOOP_OK;
}

/* Says once which OpenBLAS kernels run the GEMMs. OpenBLAS 0.3.21 does not know AMD Zen 5
 * and falls back to its AVX2 (Haswell) kernels on CPUs that have AVX-512; on this kind of
 * machine OPENBLAS_CORETYPE=SkylakeX roughly doubles sgemm throughput. */
static void log_blas_once(void)
{
    const char *core = openblas_get_corename();
    HOOP_INFO(AUTOGRAD, "GEMM: %s, OpenBLAS core %s, %d thread(s)", openblas_get_config(), core,
              openblas_get_num_threads());
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx512f") &&
        (strcmp(core, "Haswell") == 0 || strncmp(core, "Zen", 3) == 0))
        HOOP_INFO(AUTOGRAD,
                  "the CPU has AVX-512 but OpenBLAS runs its %s kernels; "
                  "OPENBLAS_CORETYPE=SkylakeX may be faster",
                  core);
#endif
}

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

// ----- tape lifetime ------------------------------------------------------------------------

hoop_status hoop_tape_init(hoop_tape **out)
{
    if (out == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_tape_init: out is NULL");
    pthread_once(&blas_once, log_blas_once);
    int64_t poison;
    HOOP_CHECK(hoop__env_int("HOOP_ARENA_POISON", &poison));
    hoop_tape *tape;
    HOOP_CHECK(hoop__calloc(&tape, 1));
    tape->poison = poison != 0;
    tape->gen = new_gen();
    tape->train = 1;
    tape->grad_enabled = 1;
    *out = tape; /* seed 0, nothing drawn (calloc) */
    return HOOP_OK;
}

hoop_status hoop_tape_destroy(hoop_tape *tape)
{
    if (tape == NULL) return HOOP_OK;
    for (int d = 0; d < NDEVICES; d++) {
        arena_free_all(&tape->arena[d]);
        const struct hoop__kern *k = tape->seed_dev[d] ? hoop__kern_for((hoop_device)d) : NULL;
        if (k) {
            k->host_free(tape->seed_host[d]);
            k->mem_free(tape->seed_dev[d]);
        }
    }
    free(tape->nodes);
    free(tape);
    return HOOP_OK;
}

void hoop_tape_reset(hoop_tape *tape)
{
    if (tape == NULL) return;
    for (int d = 0; d < NDEVICES; d++) arena_reset(&tape->arena[d]);
    tape->nnodes = 0;
    tape->gen = new_gen();
    tape->backward_done = 0;
}

void hoop_tape_set_train(hoop_tape *tape, int train)
{
    if (tape) tape->train = train != 0;
}

int hoop_tape_train(const hoop_tape *tape)
{
    return tape ? tape->train : 0;
}

void hoop_tape_set_grad_enabled(hoop_tape *tape, int enabled)
{
    if (tape) tape->grad_enabled = enabled != 0;
}

void hoop_tape_seed(hoop_tape *tape, uint64_t seed)
{
    if (!tape) return;
    tape->seed = seed;
    tape->drawn = 0;
    for (int d = 0; d < NDEVICES; d++)
        if (tape->seed_host[d]) tape->seed_stale[d] = 1;
}

void hoop__tape_poison(hoop_tape *tape, int on)
{
    tape->poison = on != 0;
}

/* A replay's host side of a captured seed upload (graph.h): the key hoop_tape_seed set
 * since, into the slot the captured copy reads. */
static void replay_seed(void *user)
{
    hoop_tape *tape = user;
    for (int d = 0; d < NDEVICES; d++)
        if (tape->seed_host[d]) *tape->seed_host[d] = tape->seed;
}

/* A failed capture's undo of a captured seed upload (graph.h). */
static void restale_seeds(void *user)
{
    hoop_tape *tape = user;
    for (int d = 0; d < NDEVICES; d++)
        if (tape->seed_host[d]) tape->seed_stale[d] = 1;
}

hoop_status hoop__tape_draw(hoop_tape *tape, const struct hoop__kern *k, size_t count,
                            const uint64_t **seed, uint64_t *offset)
{
    const hoop_device d = k->device;
    if (tape->seed_dev[d] == NULL) {
        HOOP_CHECK(k->host_alloc((void **)&tape->seed_host[d], sizeof(uint64_t)));
        if (k->mem_alloc((void **)&tape->seed_dev[d], sizeof(uint64_t)) != HOOP_OK) {
            k->host_free(tape->seed_host[d]);
            tape->seed_host[d] = NULL;
            return HOOP_ERR_NOMEM;
        }
        *tape->seed_host[d] = tape->seed;
        tape->seed_stale[d] = 1;
    }
    if (tape->seed_stale[d]) {
        /* Written here, not by hoop_tape_seed: a graph's queued replay may still be reading
         * the slot; a replay writes it in its hook, after the previous one has run. */
        *tape->seed_host[d] = tape->seed;
        HOOP_CHECK(k->upload(tape->seed_dev[d], tape->seed_host[d], sizeof(uint64_t)));
        tape->seed_stale[d] = 0;
        /* a capture that fails never ran the upload: the seed is stale again */
        HOOP_CHECK(hoop__graph_on_replay(d, replay_seed, restale_seeds, tape));
    }
    *seed = tape->seed_dev[d];
    *offset = tape->drawn;
    tape->drawn += count;
    return HOOP_OK;
}

size_t hoop_tape_node_count(const hoop_tape *tape)
{
    return tape ? tape->nnodes : 0;
}

size_t hoop_tape_arena_bytes(const hoop_tape *tape)
{
    return tape ? tape->arena[HOOP_DEVICE_CPU].total + tape->arena[HOOP_DEVICE_CUDA].total : 0;
}

hoop_status hoop_tape_tensor_new(hoop_tape *tape, int ndim, const int64_t *shape, hoop_tensor **out)
{
    if (tape == NULL || out == NULL)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_tape_tensor_new: %s is NULL",
                          tape == NULL ? "tape" : "out");
    size_t count;
    *out = NULL;
    HOOP_CHECK(hoop__shape_check("hoop_tape_tensor_new", ndim, shape, &count));
    return hoop__tensor_arena(tape, HOOP_DEVICE_CPU, ndim, shape, out);
}

// ----- recording ----------------------------------------------------------------------------

int hoop__tape_wants_grad(const hoop_tape *tape, hoop_tensor *const *in, int nin)
{
    if (!tape->grad_enabled) return 0;
    for (int i = 0; i < nin; i++)
        if (in[i] != NULL && in[i]->requires_grad) return 1;
    return 0;
}

static hoop_status push_node(hoop_tape *tape, struct hoop_node *n)
{
    if (tape->nnodes == tape->nodes_cap) {
        size_t cap = tape->nodes_cap ? 2 * tape->nodes_cap : 64;
        HOOP_CHECK(hoop__realloc(&tape->nodes, cap));
        tape->nodes_cap = cap;
    }
    tape->nodes[tape->nnodes++] = n;
    return HOOP_OK;
}

hoop_status hoop__tape_record(hoop_tape *tape, const char *op, hoop__backward_fn backward,
                              const struct hoop__kern *kern, hoop_tensor *const *in, int nin,
                              hoop_tensor *out, struct hoop_node **node)
{
    if (node) *node = NULL;
    if (!hoop__tape_wants_grad(tape, in, nin)) return HOOP_OK;
    struct hoop_node *n = hoop__arena_alloc(tape, sizeof(*n));
    if (n == NULL) return HOOP_ERR_NOMEM;
    memset(n, 0, sizeof(*n));
    n->op = op;
    n->backward = backward;
    n->kern = kern;
    n->nin = nin;
    n->out = out;
    for (int i = 0; i < nin; i++) {
        hoop_tensor *t = in[i];
        n->in[i] = t;
        if (t != NULL && !t->long_lived && t->uses < 2) t->uses++;
        if (t == NULL || !t->long_lived || !t->requires_grad || t->use_gen == tape->gen) continue;
        t->use_gen = tape->gen;
        n->ready_mask |= 1u << i;
    }
    HOOP_CHECK(push_node(tape, n));
    out->requires_grad = 1;
    out->node = n;
    if (node) *node = n;
    return HOOP_OK;
}

// ----- backward -----------------------------------------------------------------------------

hoop_status hoop__grad_for(hoop_tape *tape, hoop_tensor *t, float **grad, int *accumulate)
{
    *accumulate = 1;
    *grad = NULL;
    if (t == NULL || !t->requires_grad) return HOOP_OK;
    if (t->long_lived || t->grad_set) {
        if (t->long_lived) t->grad_gen = tape->bw_gen; /* its hook may fire (fire_ready) */
        *grad = t->grad;
        return HOOP_OK;
    }
    if (t->grad == NULL) t->grad = hoop__arena_data(tape, t->device, t->count * sizeof(float));
    if (t->grad == NULL) return HOOP_ERR_NOMEM; /* message set by the arena */
    t->grad_set = 1;
    *accumulate = 0;
    *grad = t->grad;
    return HOOP_OK;
}

/* Fires the hooks of the parameters first used by n, in reverse argument order: those
 * that some processed node gave a gradient in this pass. One used only by nodes the loss
 * does not depend on gets none, and its hook does not fire (hoop_tape_grad_was_ready 0:
 * unused, as DDP takes it), though the walk passed its first use. */
static void fire_ready(hoop_tape *tape, struct hoop_node *n)
{
    for (int i = n->nin - 1; i >= 0; i--) {
        if (!(n->ready_mask & (1u << i))) continue;
        hoop_tensor *p = n->in[i];
        if (p->grad_gen != tape->bw_gen) continue;
        p->ready_gen = tape->bw_gen;
        if (p->hook) p->hook(p, p->hook_user);
    }
}

static hoop_status find_node(const hoop_tape *tape, const hoop_tensor *out, size_t *idx)
{
    if (out->node != NULL)
        for (size_t i = tape->nnodes; i-- > 0;)
            if (tape->nodes[i] == out->node) {
                *idx = i;
                return HOOP_OK;
            }
    if (!tape->grad_enabled)
        return HOOP_ERROR(HOOP_ERR_USAGE, "hoop_backward: gradient recording is off on this tape "
                                          "(hoop_tape_set_grad_enabled), so loss has no graph");
    return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_backward: loss was not produced by an op recorded "
                                        "on this tape (does any input require grad?)");
}

/* A node's backward failed with st: the walk stops there (hoop_backward's comment says
 * what holds then) and the message names the op around the kernel's own. */
static hoop_status backward_failed(const struct hoop_node *n, hoop_status st)
{
    char why[512];
    snprintf(why, sizeof(why), "%s", hoop_last_error());
    return HOOP_ERROR(st, "hoop_backward: %s backward: %s", n->op, why);
}

/* The test hook's moment in a backward pass: node n, the done-th of total walked. */
static void backward_fault(const struct hoop_node *n, size_t done, size_t total)
{
    char where[160];
    snprintf(where, sizeof(where), "a backward pass (%zu of %zu nodes walked, the last %s)", done,
             total, n->op);
    hoop__fault_raise(-1, where);
}

hoop_status hoop__backward_from(hoop_tape *tape, hoop_tensor *out, const float *dy)
{
    if (tape == NULL || out == NULL || dy == NULL)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_backward: %s is NULL",
                          tape == NULL  ? "tape"
                          : out == NULL ? "loss"
                                        : "dy");
    if (tape->backward_done)
        return HOOP_ERROR(HOOP_ERR_USAGE, "hoop_backward: backward already ran on this tape; "
                                          "call hoop_tape_reset and run a new forward pass");
    size_t last = 0;
    HOOP_CHECK(find_node(tape, out, &last));
    int acc;
    float *g;
    HOOP_CHECK(hoop__grad_for(tape, out, &g, &acc));
    if (g == NULL) return HOOP_ERROR(HOOP_ERR_INTERNAL, "hoop_backward: loss needs no gradient");
    /* dy is host memory; it goes to the loss's device through its node's table: a scalar
     * by a fill (a kernel: no wait, and a graph may capture it), else a copy */
    if (out->count == 1)
        HOOP_CHECK(out->node->kern->fill(g, 1, dy[0]));
    else
        HOOP_CHECK(out->node->kern->copy(g, dy, out->count * sizeof(float), 1));
    tape->backward_done = 1;
    tape->bw_gen = new_gen();
    /* test hook (HOOP_TEST_FAULT): half-way through the walk */
    size_t fault_at = hoop__fault_tick(HOOP__FAULT_BACKWARD, -1) ? last / 2 : SIZE_MAX;
    for (size_t i = last + 1; i-- > 0;) {
        struct hoop_node *n = tape->nodes[i];
        if (n->out->grad_set) {
            const hoop_status st = n->backward(tape, n);
            if (st != HOOP_OK) return backward_failed(n, st);
        }
        fire_ready(tape, n);
        if (i == fault_at) backward_fault(n, last + 1 - i, last + 1);
    }
    return HOOP_OK;
}

hoop_status hoop_backward(hoop_tape *tape, hoop_tensor *loss)
{
    if (tape != NULL && loss != NULL && loss->count != 1) {
        char s[96];
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "hoop_backward: loss has shape %s, expected a "
                          "scalar (1 element)",
                          hoop_tensor_shape_str(loss, s, sizeof(s)));
    }
    const float one = 1.0f;
    return hoop__backward_from(tape, loss, &one);
}

int hoop_tape_grad_was_ready(const hoop_tape *tape, const hoop_tensor *param)
{
    return tape && param && tape->bw_gen != 0 && param->ready_gen == tape->bw_gen;
}
