/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/kern.h -- the kernel table: the numerical work of every op, forward and
 * backward, and of the optimizers, behind one table of function pointers per device.
 *
 * The ops (ops.c, activ.c, conv.c) and the optimizers (optim.c) check arguments, make
 * arena tensors and record nodes; every loop over tensor data is an entry of this table.
 * hoop__kern_for() gives a device's table: the CPU one (kern_cpu.c) is built in; a CUDA
 * one will come from a shared object loaded at first use, so a table begins with its own
 * size (the ABI check: hoop__kern_validate) and a name for messages.
 *
 * Conventions of every entry:
 * - Pointers are the device's memory (host memory for "cpu"); sizes are element counts
 *   (size_t) or dimensions; nothing takes a hoop_tensor.
 * - Every entry returns a hoop_status (HOOP_OK, or an error with the message set, e.g. a
 *   failed launch); none allocates.
 * - The accumulate rule (autograd_impl.h): where an entry has an acc flag, acc != 0 adds
 *   its result into the output (+=), acc == 0 writes it (=). Parameter gradients are
 *   always added; the first contribution to an activation gradient is written.
 * - All matrices are row-major and contiguous.
 *
 * Thread-safety: tables are immutable; an entry may run on several threads at once for
 * different outputs. hoop__kern_override() (tests only) is not thread-safe.
 */
#ifndef HOOP_AUTOGRAD_KERN_H
#define HOOP_AUTOGRAD_KERN_H

#include <stddef.h>
#include <stdint.h>

#include "hoop/log.h"
#include "hoop/status.h"
#include "hoop/tensor.h"

struct hoop_tensor;

/* The element-wise activations of unary_fwd / unary_bwd. */
enum hoop__unary {
    HOOP__UNARY_RELU,
    HOOP__UNARY_GELU, /* tanh approximation (Hendrycks & Gimpel 2016) */
    HOOP__UNARY_TANH,
    HOOP__UNARY_SIGMOID,
    HOOP__UNARY_COUNT
};

/* conv2d geometry, NCHW: x (N, C, H, W), w (O, C, KH, KW), y (N, O, OH, OW) with
 * OH = (H + 2 padding - KH) / stride + 1 and OW likewise. */
struct hoop__conv_geom {
    int64_t N, C, H, W, O, KH, KW, OH, OW;
    int stride, padding;
};

/* torch.optim.SGD's hyper-parameters that stay the same from step to step. */
struct hoop__sgd_args {
    float weight_decay, momentum;
    int nesterov;
};

/* torch.optim.AdamW's hyper-parameters that stay the same from step to step. */
struct hoop__adamw_args {
    float beta1, beta2, eps;
};

/* The scalars of one update that change from step to step (learning rate, step count),
 * computed by optim.c on the host as PyTorch 1.13 does (the bias corrections in double)
 * and read by the update kernels from the device's memory, so that a captured CUDA graph
 * uses each replay's values (a kernel's arguments are fixed at capture). */
struct hoop__step_scalars {
    float lr;
    float keep, take;          /* SGD: buf = keep buf + take d; first step 0 and 1, then
                                  momentum and 1 - dampening */
    float step_size, bc2_sqrt; /* AdamW at step t: lr / (1 - beta1^t), sqrt(1 - beta2^t) */
    float decay;               /* AdamW: 1 - lr weight_decay */
};

/* What a device's allocator has done (mem_stats): real allocations and frees of the
 * device's memory (cudaMalloc, cudaFree: a training step's steady state makes none), and
 * bytes handed out, kept for reuse, and the most handed out at once. */
struct hoop__mem_stats {
    uint64_t device_mallocs, device_frees;
    size_t bytes_in_use, bytes_cached, peak_bytes;
};

struct hoop__kern {
    size_t size;        /* sizeof(struct hoop__kern) of the build that made the table */
    const char *name;   /* the device's name, "cpu", for messages */
    hoop_device device; /* the device whose memory the entries take */
    /* One line for logs: "cpu", or "cuda:0 NVIDIA H200, 139.8 GiB" (the worker's GPU,
     * making the context when needed: its errors). */
    hoop_status (*describe)(char *buf, size_t len);

    // ----- memory (the only entries that allocate)

    /* *p = bytes of uninitialised device memory, aligned to 64 bytes at least (bytes 0 gives
     * a valid, freeable pointer). HOOP_ERR_NOMEM naming the size (and, on a GPU, what is in
     * use) when there is none. Freed by mem_free (NULL is a no-op). */
    hoop_status (*mem_alloc)(void **p, size_t bytes);
    void (*mem_free)(void *p);
    /* Copies bytes between host memory and the device's: to_device 1 copies host src to
     * device dst, 0 device src to host dst. Ordered after every kernel queued before it;
     * returns when the copy is complete (host memory may be reused or read at once). */
    hoop_status (*copy)(void *dst, const void *src, size_t bytes, int to_device);
    /* Waits until the device has run everything the calling thread queued on it; the
     * execution error of that work (HOOP_ERR_CUDA), HOOP_ERR_TIMEOUT past HOOP_TIMEOUT. */
    hoop_status (*sync)(void);
    /* The allocator's counters so far (the CPU keeps none: zeros). */
    hoop_status (*mem_stats)(struct hoop__mem_stats *st);
    /* Asynchronous uploads (on a GPU the copy stream, beside the compute stream where every
     * other entry's work runs), ordered by events: *ev = a new event (the CPU's: a token
     * that needs nothing), freed by event_free (NULL is a no-op). An event marks the work
     * queued on one stream up to the call that recorded it; one never recorded marks
     * nothing. */
    hoop_status (*event_new)(void **ev);
    void (*event_free)(void *ev);
    /* Queues on the copy stream, without waiting: a wait for after (NULL: none; an event
     * recorded on the compute stream, e.g. after the last work that read dst), the copy of
     * bytes from host src to device dst, then a record of done (NULL: none). src is read
     * when the copy runs: it must be host_alloc memory (else the copy may wait for itself)
     * and stay unchanged until done has completed. The CPU copies at once. */
    hoop_status (*upload_async)(void *dst, const void *src, size_t bytes, void *after, void *done);
    /* Queues on the compute stream, after the work queued there, a copy of bytes from
     * device src to host dst (host_alloc memory), without waiting: dst holds them once an
     * event recorded after it (compute_record) has completed. The CPU copies at once. */
    hoop_status (*download_async)(void *dst, const void *src, size_t bytes);
    /* The compute stream's later work waits, on the device, for the work ev marks (the host
     * does not wait). The CPU: nothing to do. */
    hoop_status (*compute_wait)(void *ev);
    /* Records ev on the compute stream: it marks the work queued there so far. */
    hoop_status (*compute_record)(void *ev);
    /* The host waits until the work ev marks has run (at once when it marks nothing),
     * polling up to HOOP_TIMEOUT: HOOP_ERR_TIMEOUT past it, HOOP_ERR_CUDA for the work's
     * execution failure. */
    hoop_status (*event_sync)(void *ev);

    // ----- linear algebra and copies

    /* C (M, N) = alpha op(A) op(B) + beta C, op(X) = X^T when trans_X != 0, as cblas_sgemm
     * with CblasRowMajor: op(A) is (M, K), op(B) is (K, N); lda, ldb, ldc are the row
     * strides of A, B and C as stored. beta 0 writes C (its old contents are not read). */
    hoop_status (*gemm)(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                        int lda, const float *B, int ldb, float beta, float *C, int ldc);
    /* dst[i] = value for i < count. */
    hoop_status (*fill)(float *dst, size_t count, float value);
    /* dst (+)= src over count floats (acc: +=, else =). */
    hoop_status (*axpy_or_copy)(float *dst, const float *src, size_t count, int acc);
    /* y = a + b over count floats. */
    hoop_status (*add)(float *y, const float *a, const float *b, size_t count);

    // ----- bias over rows: x viewed as (N, C, inner); inner = H*W for NCHW, 1 for (N, C)

    /* y[n][c][k] = bias[c] (0 when bias is NULL): a GEMM's starting value (beta = 1). */
    hoop_status (*bias_fill)(float *y, const float *bias, size_t N, size_t C, size_t inner);
    /* y[n][c][k] = x[n][c][k] + bias[c]. */
    hoop_status (*bias_add)(float *y, const float *x, const float *bias, size_t N, size_t C,
                            size_t inner);
    /* db[c] (+)= sum over n, k of dy[n][c][k]: the column sums; inner > 1 sums each
     * (n, c) plane with 8 interleaved partial sums (a fixed order) first. */
    hoop_status (*bias_grad)(float *db, const float *dy, size_t N, size_t C, size_t inner, int acc);

    // ----- activations

    /* y = f(x) over count floats, f by kind. */
    hoop_status (*unary_fwd)(enum hoop__unary kind, float *y, const float *x, size_t count);
    /* dx (+)= dy * f'(x), from the input x (gelu) or the saved output y (relu, tanh,
     * sigmoid). dy is left as it is: it is the output's gradient, which hoop_tensor_grad
     * returns after the pass. */
    hoop_status (*unary_bwd)(enum hoop__unary kind, float *dx, const float *dy, const float *x,
                             const float *y, size_t count, int acc);
    /* y (rows, C) = softmax of each row of x, max-subtracted (stable). */
    hoop_status (*softmax_fwd)(float *y, const float *x, size_t rows, size_t C);
    /* dx (+)= y * (dy - sum_c dy y) per row; y is the forward's output. */
    hoop_status (*softmax_bwd)(float *dx, const float *y, const float *dy, size_t rows, size_t C,
                               int acc);
    /* Softmax cross-entropy of logits x (N, C) with labels (N, each in 0..C-1, checked by
     * the op) and label smoothing eps in [0, 1) (Szegedy et al. 2016, as PyTorch's
     * label_smoothing): probs (N, C) = softmax(x); *loss (one float in the device's
     * memory) = mean over rows of (1 - eps) nll + eps * mean_c(-log p_c), in double. */
    hoop_status (*ce_fwd)(float *loss, float *probs, const float *x, const int32_t *labels,
                          size_t N, size_t C, float eps);
    /* dx (N, C) (+)= dloss[0] / N * (probs - ((1 - eps) onehot(label) + eps / C)). */
    hoop_status (*ce_bwd)(float *dx, const float *probs, const int32_t *labels, const float *dloss,
                          size_t N, size_t C, float eps, int acc);

    // ----- reductions and dropout

    /* y[0] = sum of x's count floats (mean: divided by count), accumulated in double. */
    hoop_status (*reduce_fwd)(float *y, const float *x, size_t count, int mean);
    /* dx[i] (+)= dy[0] * scale for i < count (scale 1 for sum, 1/count for mean). */
    hoop_status (*reduce_bwd)(float *dx, const float *dy, float scale, size_t count, int acc);
    /* Inverted dropout: mask[i] = 0 when u < p, else 1 / (1 - p), where u is element
     * offset + i of the Philox4x32-10 uniform stream keyed by *seed (in the device's
     * memory, so a captured graph uses each replay's key) (src/core/philox.h:
     * hoop__philox_uniform); y = x * mask. p in (0, 1). Every device draws the same mask
     * from the same (seed, offset). */
    hoop_status (*dropout_fwd)(float *y, float *mask, const float *x, size_t count, float p,
                               const uint64_t *seed, uint64_t offset);
    /* dx (+)= dy * mask. */
    hoop_status (*dropout_bwd)(float *dx, const float *dy, const float *mask, size_t count,
                               int acc);

    // ----- convolution and pooling (Chellapilla, Puri & Simard 2006 for im2col)

    /* One sample: col (C*KH*KW, OH*OW), col[(c*KH + kh)*KW + kw][oh*OW + ow] =
     * x[c][oh*stride - padding + kh][ow*stride - padding + kw], 0 outside x (C, H, W). */
    hoop_status (*im2col)(float *col, const float *x, const struct hoop__conv_geom *g);
    /* The adjoint of im2col for one sample: dx (C, H, W) += every col entry read from
     * there (always +=; zero dx first for a written gradient). */
    hoop_status (*col2im)(float *dx, const float *col, const struct hoop__conv_geom *g);
    /* conv2d over the whole batch, through the device's own lowering: *floats receives the
     * scratch (floats of device memory) conv_fwd and conv_bwd need for geometry g (the CPU
     * lowers one sample at a time: C*KH*KW * OH*OW; a GPU lowers the batch at once). */
    hoop_status (*conv_scratch)(const struct hoop__conv_geom *g, size_t *floats);
    /* y (N, O, OH*OW) += w (O, C*KH*KW) @ im2col(x[n]) for every sample n; y holds the
     * broadcast bias (or 0) on entry. scratch: conv_scratch's floats. */
    hoop_status (*conv_fwd)(float *y, const float *x, const float *w, float *scratch,
                            const struct hoop__conv_geom *g);
    /* From dy (N, O, OH*OW): dw (O, C*KH*KW) (+)= sum over n of dy[n] @ im2col(x[n])^T
     * (acc_w) and dx (N, C, H, W) (+)= col2im(w^T @ dy[n]) (acc_x); either may be NULL. */
    hoop_status (*conv_bwd)(float *dx, float *dw, const float *dy, const float *x, const float *w,
                            float *scratch, const struct hoop__conv_geom *g, int acc_x, int acc_w);
    /* Max pooling over planes (H, W) -> (OH, OW) with a kernel x kernel window and the
     * stride given, no padding: y = the window's maximum, arg = its offset in the input
     * plane (the first maximum in row-major window order, strict >). */
    hoop_status (*pool_fwd)(float *y, int32_t *arg, const float *x, size_t planes, int64_t H,
                            int64_t W, int64_t OH, int64_t OW, int kernel, int stride);
    /* dx (planes, H*W) (+)= dy (planes, OH*OW) scattered to arg (zeroed first unless acc),
     * each input's terms added in output order; the geometry is pool_fwd's (a device may
     * gather each input's terms from the windows that hold it). */
    hoop_status (*pool_bwd)(float *dx, const float *dy, const int32_t *arg, size_t planes,
                            int64_t H, int64_t W, int64_t OH, int64_t OW, int kernel, int stride,
                            int acc);

    // ----- optimizers and clipping

    /* torch.optim.SGD (PyTorch 1.13) on one parameter of count floats: d = g + wd p;
     * buf = keep buf + take d (d on the first step, where buf holds 0); p -= lr (nesterov ?
     * d + momentum buf : buf). buf NULL: plain SGD, p -= lr d. s is in the device's
     * memory (struct hoop__step_scalars). */
    hoop_status (*sgd)(const struct hoop__sgd_args *a, const struct hoop__step_scalars *s, float *p,
                       const float *g, float *buf, size_t count);
    /* torch.optim.AdamW (Loshchilov & Hutter 2019; PyTorch 1.13's single-tensor path) on
     * one parameter: p *= 1 - lr wd; m, v (first and second moments) updated; p -= lr /
     * (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps), the step's scalars from s
     * (device memory). */
    hoop_status (*adamw)(const struct hoop__adamw_args *a, const struct hoop__step_scalars *s,
                         float *p, const float *g, float *m, float *v, size_t count);
    /* *sq += sum of g[i]^2, accumulated in double in index order; sq is in the device's
     * memory. Called once per parameter, so the sum runs over all of them. */
    hoop_status (*sqnorm)(double *sq, const float *g, size_t count);
    /* g[i] *= coef (gradient clipping). */
    hoop_status (*scale)(float *g, size_t count, float coef);
    /* Clipping without a host round trip: coef = max_norm / (sqrt(*sq) + 1e-6) in f32 from
     * the device's double *sq, and g[i] *= coef when coef < 1 (g unchanged otherwise), as
     * hoop_clip_grad_norm computes on the host. */
    hoop_status (*clip_scale)(float *g, size_t count, const double *sq, float max_norm);

    // ----- staging and graphs

    /* Page-locked host memory (for a GPU: cudaMallocHost, from a cache), which upload
     * reads asynchronously and a captured graph reads at each replay; the CPU's is plain
     * memory. Errors as mem_alloc. */
    hoop_status (*host_alloc)(void **p, size_t bytes);
    void (*host_free)(void *p);
    /* Queues a copy of bytes from host src to device dst after the work already queued,
     * without waiting for it. src is read when the copy runs, not when it is queued: keep
     * it unchanged until later work is ordered after the copy (host_alloc memory; a
     * graph captured with it reads it at every replay). The CPU copies at once. */
    hoop_status (*upload)(void *dst, const void *src, size_t bytes);
    /* Stream capture (CUDA graphs): begin records instead of running everything queued on
     * the device from the calling thread; end stops and returns the instantiated graph in
     * *graph, or the reason capture failed (HOOP_ERR_UNSUPPORTED naming the call that
     * broke it: a synchronous copy, an allocation...), capture abandoned either way;
     * launch runs a graph's work once, in capture order, after the work already queued;
     * free releases it. The CPU has no graphs: HOOP_ERR_UNSUPPORTED. */
    hoop_status (*graph_begin)(void);
    hoop_status (*graph_end)(void **graph);
    hoop_status (*graph_launch)(void *graph);
    /* Waits until the graph's last launch has run (HOOP_OK at once when never launched):
     * what the launch reads from host memory may be rewritten after it. */
    hoop_status (*graph_sync)(void *graph);
    void (*graph_free)(void *graph);

    // ----- more streams, and timed events (DDP on the device, src/ddp/ddp.c)

    /* A stream of its own beside the compute and copy streams: *s (on a GPU a non-blocking
     * cudaStream_t, which the collectives' _stream forms take as a hoop_stream *; the
     * CPU's: a token that needs nothing), freed by stream_free (NULL is a no-op; work
     * queued on it still runs). Errors as event_new's. */
    hoop_status (*stream_new)(void **s);
    void (*stream_free)(void *s);
    /* Records ev on stream s (NULL: the compute stream): it marks the work queued there so
     * far (compute_record is stream_record(NULL, ev)). */
    hoop_status (*stream_record)(void *s, void *ev);
    /* Stream s's later work (NULL: the compute stream's) waits for the work ev marks, on
     * the device; the host does not wait (compute_wait is stream_wait(NULL, ev)). */
    hoop_status (*stream_wait)(void *s, void *ev);
    /* *ev = a new event that also keeps the device's time at which the work before its
     * record had run (event_elapsed); freed by event_free, usable wherever event_new's
     * are. Errors as event_new's. */
    hoop_status (*timer_new)(void **ev);
    /* *done = 1 when the work ev marks has run (also for an event never recorded), 0 while
     * it has not; never waits. HOOP_ERR_CUDA for that work's execution failure. */
    hoop_status (*event_query)(void *ev, int *done);
    /* *ms = the device time from timer a's record to timer b's (negative when b's came
     * first), once both have completed: HOOP_ERR_USAGE while either has not, or was never
     * recorded; HOOP_ERR_CUDA naming the call. A GPU's: cudaEventElapsedTime (about 0.5 us
     * resolution, in float); the CPU's: the host's clock at each record. */
    hoop_status (*event_elapsed)(void *a, void *b, double *ms);
};

/* The module's entry points and what it is given: src/core/backend.h. */

/* The CPU table (kern_cpu.c): host loops and OpenBLAS. */
extern const struct hoop__kern hoop__kern_cpu;

/* The table for device d: the CPU one for HOOP_DEVICE_CPU; for HOOP_DEVICE_CUDA the CUDA
 * backend's, loaded on the first call (kern.c); NULL when it cannot be had. */
const struct hoop__kern *hoop__kern_for(hoop_device d);

/* hoop__kern_for with the reason: HOOP_ERR_UNSUPPORTED "fn: device cuda: <why>" (no backend, no
 * GPU: the loader's message) or "fn: this build has no X kernels". */
hoop_status hoop__kern_get(hoop_device d, const char *fn, const struct hoop__kern **k);

/* Device d's allocator counters (mem_stats): hoop__kern_get's errors. For tests. */
hoop_status hoop__device_mem_stats(hoop_device d, struct hoop__mem_stats *st);

// ----- asynchronous uploads (internal; tools/hoop-train's double-buffered batches)
/*
 * What the table's event_new .. event_sync entries do, for tensors: a batch is uploaded on
 * the copy stream while the compute stream runs the previous step, and events order the
 * two without a host synchronisation per step. The protocol for a staging buffer (host
 * pinned memory, hoop_host_alloc) and the device tensor it fills:
 *   1. before the host refills the pinned buffer: hoop__event_sync(free) (free recorded on
 *      the compute stream after the last step that read the tensor: that step ran, so the
 *      copy it waited for has read the buffer);
 *   2. hoop__tensor_upload_async(t, buf, count, free, uploaded): the copy waits for free on
 *      the device (the tensor's last reader), then records uploaded;
 *   3. hoop__event_wait(uploaded) before the step that reads t, so the compute stream waits
 *      for the copy on the device;
 *   4. hoop__event_record(free) after that step.
 * Thread-safety: an event is used by one thread at a time; the calls are thread-safe.
 */
typedef struct hoop__event hoop__event;

/* *ev = a new event on device d (never recorded). HOOP_ERR_INVALID (ev NULL, unknown
 * device), hoop__kern_get's errors, HOOP_ERR_CUDA naming the call, HOOP_ERR_NOMEM. */
hoop_status hoop__event_new(hoop_device d, hoop__event **ev);
void hoop__event_free(hoop__event *ev); /* NULL is a no-op */
/* Records ev on its device's compute stream (the work queued there so far). */
hoop_status hoop__event_record(hoop__event *ev);
/* The compute stream's later work waits for ev, on the device (the host does not). */
hoop_status hoop__event_wait(hoop__event *ev);
/* The host waits for the work ev marks (at once when never recorded), up to HOOP_TIMEOUT:
 * HOOP_ERR_TIMEOUT naming the deadline; HOOP_ERR_CUDA for a failure of that work. */
hoop_status hoop__event_sync(hoop__event *ev);

/* Queues the copy of count floats from host src (hoop_host_alloc memory of t's device) into
 * t's data on the copy stream, after after (NULL: no wait) and before a record of done
 * (NULL: none); returns without waiting (see the protocol above). On the CPU it copies at
 * once. Errors: HOOP_ERR_INVALID (t or src NULL, count is not hoop_tensor_count(t), after
 * or done of another device), HOOP_ERR_CUDA naming the call. */
hoop_status hoop__tensor_upload_async(hoop_tensor *t, const float *src, size_t count,
                                      hoop__event *after, hoop__event *done);
/* Queues the copy of t's count floats into host dst (hoop_host_alloc memory) on the
 * compute stream, after the work queued there; dst holds them once an event recorded after
 * this call has completed (hoop__event_record, then hoop__event_sync). Errors as
 * hoop__tensor_upload_async. */
hoop_status hoop__tensor_download_async(const hoop_tensor *t, float *dst, size_t count);

/* For the copies above: *out = ev's table event (NULL for a NULL ev); HOOP_ERR_INVALID
 * "fn: what is an event of cuda, the tensor is on cpu" when ev is another device's. */
hoop_status hoop__event_of(hoop__event *ev, hoop_device d, const char *fn, const char *what,
                           void **out);

/* "cpu", "cuda" (for messages). */
const char *hoop__device_name(hoop_device d);

/* HOOP_OK when k's size is this build's sizeof(struct hoop__kern) and every entry is set;
 * HOOP_ERR_INVALID naming what (e.g. "the cuda kernel table") and the culprit otherwise. */
hoop_status hoop__kern_validate(const struct hoop__kern *k, const char *what);

/* The checks every op makes before it computes: the nin inputs (NULL entries skipped;
 * names[i] names in[i]) are on one device, else HOOP_ERR_INVALID "op: x is on cpu but w is
 * on cuda; ..."; that device has a table, else HOOP_ERR_UNSUPPORTED "op: this build has
 * no cuda kernels". *k receives the table. */
hoop_status hoop__op_kern(const char *op, struct hoop_tensor *const *in, const char *const *names,
                          int nin, const struct hoop__kern **k);

/* FOR TESTS ONLY: from now on hoop__kern_for(d) returns k (validated first); k NULL
 * restores the built-in table. k must outlive its use (nodes keep the table they ran
 * with). Not thread-safe: call it while no op runs. */
hoop_status hoop__kern_override(hoop_device d, const struct hoop__kern *k);

#endif /* HOOP_AUTOGRAD_KERN_H */
