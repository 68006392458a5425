/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * hoop/autograd.h -- the tape, the differentiable ops, and the backward pass.
 *
 * A hoop_tape records every op run on it (op, inputs, output, saved values) and owns a
 * per-step arena from which activations, their gradients and the tape nodes come.
 * hoop_backward() walks the tape in reverse and accumulates gradients into parameters.
 * hoop_tape_reset() (after the optimizer step) drops the step's tensors but keeps the
 * memory: the arena grows to its high-water mark once and is then reused, so a steady
 * training loop does no malloc per op.
 *
 * A training step:
 *
 *     hoop_tape *tape;
 *     hoop_tape_init(&tape);
 *     for (each batch) {
 *         hoop_tensor *logits, *loss;
 *         hoop_model_forward(model, tape, x, &logits);              // hoop/nn.h
 *         hoop_cross_entropy(tape, logits, labels, 0.0f, &loss);
 *         hoop_optim_zero_grad(opt);                                // hoop/optim.h
 *         hoop_backward(tape, loss);
 *         hoop_optim_step(opt);
 *         hoop_tape_reset(tape);
 *     }
 *     hoop_tape_destroy(tape);
 *
 * Every op takes its inputs as hoop_tensor * (backward writes their gradients), checks
 * shapes (a mismatch is HOOP_ERR_INVALID naming both shapes), and returns its output, a
 * new arena tensor, in *out. The output requires grad when an input does and the tape's
 * grad mode is on. Ops allocate from the arena only, so *out dies at hoop_tape_reset().
 * On failure *out is NULL and nothing is recorded. Errors common to all ops:
 * HOOP_ERR_INVALID (NULL argument, bad shape or parameter, a tensor of more than INT_MAX
 * elements, as BLAS indexes with int), HOOP_ERR_NOMEM (arena growth failed),
 * HOOP_ERR_UNSUPPORTED (a tensor on a device this build cannot compute on).
 *
 * Thread-safety: a tape and the tensors on it belong to one thread at a time. Different
 * tapes may run concurrently when they share no tensor that either writes (parameters'
 * gradients are written by backward). All math is f32; GEMMs go through OpenBLAS cblas
 * (its thread count is OpenBLAS's: OPENBLAS_NUM_THREADS).
 */
#ifndef HOOP_AUTOGRAD_H
#define HOOP_AUTOGRAD_H

#include <stddef.h>
#include <stdint.h>

#include "hoop/export.h"
#include "hoop/status.h"
#include "hoop/tensor.h"

HOOP_EXTERN_C_BEGIN

typedef struct hoop_tape hoop_tape;

// ----- the tape -------------------------------------------------------------------------

/* Creates an empty tape in training mode with gradients recorded and dropout seed 0.
 * With HOOP_ARENA_POISON=1 every arena allocation of the tape is filled with NaN (a
 * debugging aid: reads of memory no op wrote show up as NaN instead of zeros).
 * Errors: HOOP_ERR_INVALID (out NULL, or HOOP_ARENA_POISON malformed), HOOP_ERR_NOMEM. */
HOOP_API hoop_status hoop_tape_init(hoop_tape **out);

/* Frees the tape, its arena and every arena tensor. NULL is accepted. Returns HOOP_OK. */
HOOP_API hoop_status hoop_tape_destroy(hoop_tape *tape);

/* Forgets all recorded nodes and arena tensors (pointers to them become invalid) and
 * keeps the arena's memory for the next step. When the last step overflowed the first
 * arena block, the blocks are merged into one of the high-water size here, so later
 * steps allocate nothing. Parameters are untouched. */
HOOP_API void hoop_tape_reset(hoop_tape *tape);

/* Training mode (1, the default) or evaluation mode (0). It changes only dropout, which is
 * the identity in evaluation mode. */
HOOP_API void hoop_tape_set_train(hoop_tape *tape, int train);
HOOP_API int hoop_tape_train(const hoop_tape *tape);

/* Gradient recording on (1, the default) or off (0, for evaluation: ops run forward only,
 * record no node and save nothing; outputs never require grad). */
HOOP_API void hoop_tape_set_grad_enabled(hoop_tape *tape, int enabled);

/* Seeds the tape's random stream (used by dropout) and starts it over. The stream is
 * Philox4x32-10 (Salmon et al. 2011) keyed by seed: element e of it depends on (seed, e)
 * alone, and the tape counts the elements dropout has drawn since the seed was set, so
 * a mask is identical on every machine and on every device (CPU or CUDA). */
HOOP_API void hoop_tape_seed(hoop_tape *tape, uint64_t seed);

/* Makes a per-step tensor in the arena (no grad; data uninitialised), e.g. to hold a
 * batch. Same shape rules as hoop_tensor_new(). Dies at hoop_tape_reset(). */
HOOP_API hoop_status hoop_tape_tensor_new(hoop_tape *tape, int ndim, const int64_t *shape,
                                          hoop_tensor **out);

/* Number of nodes recorded since the last reset, and the arena's current capacity in
 * bytes (for tests and benchmarks). */
HOOP_API size_t hoop_tape_node_count(const hoop_tape *tape);
HOOP_API size_t hoop_tape_arena_bytes(const hoop_tape *tape);

// ----- backward ---------------------------------------------------------------------------

/* Backpropagates from loss, a scalar (count 1) tensor recorded on tape, seeding
 * d loss / d loss = 1. Nodes are processed in reverse recording order, from loss's node
 * down to the first node; nodes recorded after loss's are ignored. Gradients of
 * parameters are accumulated (+=) into their grad buffers; activation gradients are
 * written into the arena.
 *
 * Grad-ready hooks: a parameter's hook fires exactly once per call, right after the node
 * that used the parameter earliest in the forward pass has been processed; no later node
 * (in reverse order) touches that gradient, so it is final. Hooks therefore fire in
 * reverse order of (first) use; several parameters first used by the same node (weight
 * and bias of a linear op) fire in reverse argument order (bias before weight). A
 * parameter that no processed node gives a gradient (unused, or used only by ops the loss
 * does not depend on) does not fire; hoop_tape_grad_was_ready() tells which ones, so DDP
 * can mark them ready at the end.
 *
 * First use is tracked per tape and step: record a given parameter on one tape at a time
 * (between two resets), or its hook may fire once per tape.
 *
 * Errors: HOOP_ERR_INVALID (loss NULL, not scalar, or not produced on this tape),
 * HOOP_ERR_USAGE (backward already run since the last reset; grad mode decides only what
 * is recorded, so a graph recorded with it on may be walked with it off), and any
 * error of an op's backward: HOOP_ERR_NOMEM (the arena could not grow), HOOP_ERR_CUDA (a
 * kernel failed on the device), with the message "hoop_backward: linear backward: ..."
 * naming the op. A second backward on the same tape needs a reset and a new forward.
 *
 * After a failed backward: the walk stopped at the failing node. The nodes after it (in
 * forward order) have been processed: their contributions are in the parameters' grads,
 * and the hooks of parameters whose gradients were final before the failing node have
 * fired (DDP may have started reducing them). The failing node's own parameter grads may
 * hold part of its contribution; no earlier node ran and no later hook fires. The grads
 * are therefore unusable: do not step the optimizer; zero them (hoop_optim_zero_grad) and
 * reset the tape before the next step. */
HOOP_API hoop_status hoop_backward(hoop_tape *tape, hoop_tensor *loss);

/* Returns 1 when param's gradient was produced (and its hook, if any, fired) by the most
 * recent hoop_backward() on tape, 0 otherwise (an unused parameter). */
HOOP_API int hoop_tape_grad_was_ready(const hoop_tape *tape, const hoop_tensor *param);

// ----- ops --------------------------------------------------------------------------------

/* out(M,N) = a(M,K) @ b(K,N). sgemm. An output of more than INT_MAX elements (M * N) is
 * refused up front, HOOP_ERR_INVALID naming both shapes. */
HOOP_API hoop_status hoop_matmul(hoop_tape *tape, hoop_tensor *a, hoop_tensor *b,
                                 hoop_tensor **out);

/* out(N,O) = x(N,I) @ w(O,I)^T + bias(O): PyTorch's nn.Linear layout. bias may be NULL.
 * An output of more than INT_MAX elements (N * O) is refused up front, HOOP_ERR_INVALID
 * naming x's and w's shapes. */
HOOP_API hoop_status hoop_linear(hoop_tape *tape, hoop_tensor *x, hoop_tensor *w, hoop_tensor *bias,
                                 hoop_tensor **out);

/* out = a + b, element-wise; a and b have the same shape. */
HOOP_API hoop_status hoop_add(hoop_tape *tape, hoop_tensor *a, hoop_tensor *b, hoop_tensor **out);

/* out = x + bias broadcast along dimension 1: x is (N,C) or (N,C,H,W), bias is (C). */
HOOP_API hoop_status hoop_bias_add(hoop_tape *tape, hoop_tensor *x, hoop_tensor *bias,
                                   hoop_tensor **out);

/* Element-wise activations, out has x's shape.
 * relu: max(x, 0), NaN for NaN (gradient 0 at x <= 0, as PyTorch).
 * gelu: the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 *       (Hendrycks & Gimpel 2016; PyTorch's gelu(approximate="tanh")).
 * tanh, sigmoid: 1 / (1 + exp(-x)), computed without overflow for large |x|. */
HOOP_API hoop_status hoop_relu(hoop_tape *tape, hoop_tensor *x, hoop_tensor **out);
HOOP_API hoop_status hoop_gelu(hoop_tape *tape, hoop_tensor *x, hoop_tensor **out);
HOOP_API hoop_status hoop_tanh(hoop_tape *tape, hoop_tensor *x, hoop_tensor **out);
HOOP_API hoop_status hoop_sigmoid(hoop_tape *tape, hoop_tensor *x, hoop_tensor **out);

/* Softmax over the last dimension (rows of x viewed as (rows, C)), stabilised by
 * subtracting each row's maximum. */
HOOP_API hoop_status hoop_softmax(hoop_tape *tape, hoop_tensor *x, hoop_tensor **out);

/* Mean cross-entropy over the batch: logits (N,C), labels N ints in 0..C-1 (copied, so the
 * caller's buffer may change afterwards); out is a scalar. log-softmax uses the
 * log-sum-exp trick. label_smoothing in [0,1): the target is (1-s) one-hot + s/C uniform,
 * as torch.nn.functional.cross_entropy(label_smoothing=s); pass 0 for none.
 * Errors also: a label outside 0..C-1 (the message names the row and the label). */
HOOP_API hoop_status hoop_cross_entropy(hoop_tape *tape, hoop_tensor *logits, const int32_t *labels,
                                        float label_smoothing, hoop_tensor **out);

/* Scalar mean and sum of all elements of x. */
HOOP_API hoop_status hoop_mean(hoop_tape *tape, hoop_tensor *x, hoop_tensor **out);
HOOP_API hoop_status hoop_sum(hoop_tape *tape, hoop_tensor *x, hoop_tensor **out);

/* A view of x with a new shape of the same count (no copy: out's data is x's data). At
 * most one dimension may be -1 and is then inferred. */
HOOP_API hoop_status hoop_reshape(hoop_tape *tape, hoop_tensor *x, int ndim, const int64_t *shape,
                                  hoop_tensor **out);

/* A view of x (N, ...) as (N, rest); x needs at least 1 dimension. */
HOOP_API hoop_status hoop_flatten(hoop_tape *tape, hoop_tensor *x, hoop_tensor **out);

/* 2-D convolution (cross-correlation, as PyTorch): x (N,C,H,W), w (O,C,KH,KW), bias (O)
 * or NULL; stride >= 1 and padding >= 0 (zeros) apply to both spatial dimensions.
 * out (N,O,OH,OW), OH = (H + 2 padding - KH) / stride + 1 (>= 1 required; an output, or
 * a sample's column buffer C*KH*KW x OH*OW, of more than INT_MAX elements is refused).
 * Computed as im2col + sgemm (Chellapilla et al. 2006). */
HOOP_API hoop_status hoop_conv2d(hoop_tape *tape, hoop_tensor *x, hoop_tensor *w, hoop_tensor *bias,
                                 int stride, int padding, hoop_tensor **out);

/* 2-D max pooling without padding: x (N,C,H,W), window kernel x kernel, step stride;
 * out (N,C,(H-kernel)/stride+1,(W-kernel)/stride+1). The gradient goes to the first
 * maximum of each window; a window holding a NaN gives NaN, its gradient going to the
 * last NaN in row-major order (as PyTorch). */
HOOP_API hoop_status hoop_max_pool2d(hoop_tape *tape, hoop_tensor *x, int kernel, int stride,
                                     hoop_tensor **out);

/* Inverted dropout: in training mode each element is zeroed with probability p and the
 * others are scaled by 1/(1-p), the mask drawn from the tape's seeded stream; in
 * evaluation mode, or with p == 0, out is x's values (a view). p in [0,1). */
HOOP_API hoop_status hoop_dropout(hoop_tape *tape, hoop_tensor *x, float p, hoop_tensor **out);

// ----- CUDA graphs -------------------------------------------------------------------------

/* A recorded stretch of CUDA work (a whole training step: forward, backward, optimizer),
 * replayed with one launch instead of one per kernel: a small model is bound by kernel
 * launches, and a replay leaves the host's per-op work out entirely (CUDA graphs, CUDA C++
 * Programming Guide, "CUDA Graphs"). */
typedef struct hoop_graph hoop_graph;

/* Starts capturing, on the calling thread, the device work of everything it issues on
 * device (HOOP_DEVICE_CUDA) until hoop_graph_end: ops, backward, optimizer steps and
 * clipping are recorded, not run. Host work is not recorded: ops on CPU tensors and grad
 * hooks run once, now, and never at a replay. What may not happen inside (the call that
 * does it fails, and so does hoop_graph_end): a copy to or from the host that waits
 * (hoop_tensor_copy_from/_to_host, hoop_clip_grad_norm with total_norm), a tape arena
 * that must grow (run the step eagerly once first, so the arena has its size). Host data
 * a captured op reads when it runs (cross-entropy's labels) must be in hoop_host_alloc
 * memory: the graph reads it again at every replay, so it must not be rewritten while a
 * replay may still be running (read the replay's result, or hoop_device_sync, first).
 * Errors: HOOP_ERR_UNSUPPORTED (the CPU, or no CUDA), HOOP_ERR_INVALID (an unknown
 * device), HOOP_ERR_USAGE (already capturing). */
HOOP_API hoop_status hoop_graph_begin(hoop_device device);

/* Ends the calling thread's capture; *out receives the graph, ready to replay. Errors:
 * HOOP_ERR_INVALID (out NULL: the capture goes on), HOOP_ERR_USAGE (not capturing),
 * HOOP_ERR_UNSUPPORTED (the capture broke: CUDA's reason, and the arena's where it had to
 * grow; the call that broke it returned its own error at the time; nothing captured
 * ran, and what the captured calls advanced on the host, the optimizer's step count, is
 * taken back, so the caller runs the step eagerly), HOOP_ERR_CUDA. The tapes, tensors and
 * optimizers the capture used must outlive the graph, and tapes must not be reset for
 * other work while it is replayed (their arena memory is the graph's). */
HOOP_API hoop_status hoop_graph_end(hoop_graph **out);

/* Runs the graph's work once, after the work already queued, without waiting for it.
 * The first replay does what was captured (its host side, e.g. the optimizer's step
 * count, ran during capture); each later one first advances that host side as the
 * captured calls would (the optimizer's step count and scalars, from its current lr), so
 * a loop of { write the batch; hoop_tape_seed; hoop_optim_set_lr; hoop_graph_replay }
 * trains as the eager loop does. Read results with hoop_tensor_copy_to_host (it waits).
 * A replay after the first waits for the device work the thread queued (the previous
 * replay, of this graph or of another sharing its optimizer) to have run before it
 * advances the host side (that memory is what the previous one reads); hoop_graph_begin
 * waits so too. Errors: HOOP_ERR_INVALID (g
 * NULL), HOOP_ERR_USAGE (the thread is capturing), HOOP_ERR_CUDA. */
HOOP_API hoop_status hoop_graph_replay(hoop_graph *g);

/* Frees a graph (NULL is a no-op). */
HOOP_API void hoop_graph_free(hoop_graph *g);

HOOP_EXTERN_C_END

#endif /* HOOP_AUTOGRAD_H */
