/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/train_step.c -- hoop-train's optimizer step: forward on a tape, mean
 * cross-entropy, zero_grad, backward (through DDP when wrapped: buckets are all-reduced
 * while backward runs), the optimizer step at the scheduled learning rate, tape reset.
 *
 * On the cpu a step runs to its end and returns its loss. On cuda batches are double
 * buffered: two slots, each a pinned batch and labels, a device batch tensor and the
 * step's loss in pinned memory. Batch k+1 is gathered into the free slot and uploaded on
 * the copy stream while step k runs on the compute stream (which waits for the upload's
 * event, on the device); a slot is refilled only after the host has waited for the event
 * recorded after the step that read it, and the loss comes back with the step (an
 * asynchronous copy into the slot) and is read then, or when it is logged or saved
 * (train_step_drain): no step waits for its own loss. With --cuda-graph each slot has its
 * own tape and graph (two graphs, one per input buffer; see train_step_cuda).
 *
 * The dropout stream of a step is a function of (seed, step, rank) alone, so a resumed
 * run draws the same masks as an uninterrupted one. Not thread-safe: hoop-train's main
 * thread only.
 */
#include <math.h>

#include "core/check.h"
#include "train.h"

/* The optimizer step on the gradients in the parameters, at the scheduled rate. Also what
 * a rank that ran out of batches runs for the others' steps (hoop_ddp_join). */
hoop_status train_step_optimizer(void *user)
{
    trainer *t = user;
    int64_t o0 = hoop_ddp_now_us();
    HOOP_CHECK(hoop_optim_set_lr(t->opt, hoop_lr_at(&t->sched, t->step)));
    HOOP_CHECK(hoop_optim_step(t->opt));
    if (t->dist.ddp) hoop_ddp_trace_event(t->dist.ddp, "optimizer", o0, hoop_ddp_now_us());
    t->step++;
    return HOOP_OK;
}

/* The dropout stream of a step: a function of (seed, step, rank) alone (splitmix64's
 * finaliser over them), so a run resumed at any step draws the same masks. */
static uint64_t step_seed(const trainer *t)
{
    uint64_t z = (uint64_t)t->o->seed * 0x9E3779B97F4A7C15ULL ^ (uint64_t)t->step;
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL) ^ ((uint64_t)t->dist.rank << 48);
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* The diverged-loss check of step. */
static hoop_status check_loss(float loss, int64_t step)
{
    if (isfinite(loss)) return HOOP_OK;
    return HOOP_ERROR(HOOP_ERR_INVALID,
                      "loss is %g at step %lld: training diverged "
                      "(try a smaller --lr)",
                      (double)loss, (long long)step);
}

/* A step's forward, loss (into *l), zero_grad and backward (DDP's when wrapped) on tape,
 * for the batch x with labels y: what an eager step and a captured one share. */
static hoop_status forward_backward(trainer *t, hoop_tape *tape, hoop_tensor *x, const int32_t *y,
                                    hoop_tensor **l)
{
    hoop_tensor *logits;
    hoop_ddp *ddp = t->dist.ddp;
    int64_t f0 = hoop_ddp_now_us();
    HOOP_CHECK(hoop_model_forward(t->model, tape, x, &logits));
    HOOP_CHECK(hoop_cross_entropy(tape, logits, y, 0.0f, l));
    HOOP_CHECK(hoop_optim_zero_grad(t->opt));
    if (ddp) hoop_ddp_trace_event(ddp, "forward", f0, hoop_ddp_now_us());
    return ddp ? hoop_ddp_backward(ddp, tape, *l) : hoop_backward(tape, *l);
}

/* One optimizer step on the cpu on the batch x (labels in t->y); *loss gets its mean
 * loss. */
hoop_status train_step_cpu(trainer *t, hoop_tensor *x, float *loss)
{
    hoop_tensor *l;
    hoop_tape_seed(t->tape, step_seed(t));
    HOOP_CHECK(forward_backward(t, t->tape, x, t->y, &l));
    HOOP_CHECK(train_step_optimizer(t));
    HOOP_CHECK(hoop_tensor_copy_to_host(l, loss, 1));
    hoop_tape_reset(t->tape);
    return check_loss(*loss, t->step);
}

// ----- cuda: double-buffered batches ------------------------------------------------------

/* The step that read slot b, which has run: its loss into the epoch's and the window's
 * sums (a no-op when no step read the slot since). */
static hoop_status account(trainer *t, batch_slot *b)
{
    if (!b->pending) return HOOP_OK;
    b->pending = 0;
    const float loss = *b->loss;
    t->loss_sum += (double)loss * (double)b->n;
    t->loss_samples += b->n;
    t->win_loss += (double)loss * (double)b->n;
    t->win_samples += b->n;
    return check_loss(loss, b->step);
}

/* Every step's loss accounted, oldest first, each once the host has waited for its step
 * (before the sums are logged or saved). A no-op on the cpu, whose steps account their
 * own. */
hoop_status train_step_drain(trainer *t)
{
    if (t->device == HOOP_DEVICE_CPU) return HOOP_OK;
    for (int k = 0; k < SLOTS; k++) {
        batch_slot *b = &t->slot[(t->cur + 1 + k) % SLOTS];
        if (!b->pending) continue;
        HOOP_CHECK(hoop__event_sync(b->free));
        HOOP_CHECK(account(t, b));
    }
    return HOOP_OK;
}

/* The host waits until slot b may be refilled: the step that read it has run (and with
 * it the upload that step waited for and the copy of its loss), or, when no step has read
 * its last upload yet, that upload has. */
static hoop_status slot_wait(batch_slot *b)
{
    HOOP_CHECK(hoop__event_sync(b->free));
    return b->unread ? hoop__event_sync(b->uploaded) : HOOP_OK;
}

/* Gathers the loader's next batch into slot i (n 0: the epoch is over) and queues its
 * upload: once the slot's last step has run (slot_wait; its loss is accounted then), the
 * batch goes into the pinned buffers and the copy stream copies it into the device
 * tensor, after that step on the device too. A short batch goes to the tensor of its size,
 * which the evaluation may have used: its upload waits for all the compute stream's work. */
hoop_status train_step_prefetch(trainer *t, int i)
{
    batch_slot *b = &t->slot[i];
    HOOP_CHECK(slot_wait(b));
    HOOP_CHECK(account(t, b));
    HOOP_CHECK(hoop_loader_next(t->loader, b->x, b->y, &b->n));
    if (b->n == 0) return HOOP_OK;
    b->in = b->dev_x;
    if (b->n < (size_t)t->o->batch_size) {
        HOOP_CHECK(train_data_device_input(t, b->n, &b->in));
        HOOP_CHECK(hoop__event_record(b->free));
    }
    b->unread = 1;
    return hoop__tensor_upload_async(b->in, b->x, b->n * (size_t)t->sample, b->free, b->uploaded);
}

/* Captures slot b's step into b->graph (recorded, not run). A failed capture turns graphs
 * off with one line saying why; the library has then taken back what the capture
 * advanced, so the caller runs the step eagerly. */
static hoop_status capture_step(trainer *t, batch_slot *b)
{
    hoop_tensor *l = NULL;
    hoop_tape_seed(b->tape, step_seed(t));
    HOOP_CHECK(hoop_optim_set_lr(t->opt, hoop_lr_at(&t->sched, t->step)));
    HOOP_CHECK(hoop_graph_begin(t->device));
    hoop_status st = forward_backward(t, b->tape, b->in, b->y, &l);
    if (st == HOOP_OK) st = hoop_optim_step(t->opt);
    const hoop_status end = hoop_graph_end(&b->graph);
    if (st == HOOP_OK) st = end;
    if (st != HOOP_OK) {
        if (t->dist.rank == 0)
            printf("hoop-train: cuda graph: capture failed (%s); training eagerly\n",
                   hoop_last_error());
        hoop_graph_free(b->graph);
        b->graph = NULL;
        t->graphs = 0;
        hoop_tape_reset(b->tape);
        return HOOP_OK;
    }
    b->graph_loss = l;
    if (t->dist.rank == 0)
        printf("hoop-train: cuda graph: step %lld captured for input buffer %d of %d; its "
               "full-batch steps replay it\n",
               (long long)t->step + 1, (int)(b - t->slot) + 1, SLOTS);
    return HOOP_OK;
}

/* Slot b's step as a graph replay (capturing it first, on its second full batch); *l the
 * loss it writes. *l NULL: the capture failed, run the step eagerly. */
static hoop_status replay_step(trainer *t, batch_slot *b, hoop_tensor **l)
{
    *l = NULL;
    if (b->graph == NULL) {
        HOOP_CHECK(capture_step(t, b));
        if (b->graph == NULL) return HOOP_OK;
        /* the captured step itself: its host side ran during the capture */
    } else {
        hoop_tape_seed(b->tape, step_seed(t));
        HOOP_CHECK(hoop_optim_set_lr(t->opt, hoop_lr_at(&t->sched, t->step)));
    }
    HOOP_CHECK(hoop_graph_replay(b->graph));
    t->replay_queued = 1;
    t->step++;
    *l = b->graph_loss;
    return HOOP_OK;
}

/* Issues the optimizer step on slot i's batch, without waiting for it: the compute stream
 * waits for the batch's upload, runs the step (eagerly, or with --cuda-graph on a full
 * batch as the slot's graph after one eager warm-up on its tape and the capture), copies
 * the loss into the slot (want_loss) and records the slot's free event. Two graphs, one
 * per slot, rather than one graph fed by a device-to-device copy: the labels are read by
 * the graph from the slot's pinned memory (cross-entropy checks them on the host and
 * uploads them itself), and a fixed source would have to be rewritten on the host after
 * the previous replay; one graph per slot needs no copy and no host wait beyond the one a
 * replay makes (hoop_graph_replay). */
hoop_status train_step_cuda(trainer *t, int i, int want_loss)
{
    batch_slot *b = &t->slot[i];
    hoop_tensor *l = NULL;
    hoop_tape *tape = t->tape;
    HOOP_CHECK(hoop__event_wait(b->uploaded));
    b->unread = 0;
    if (t->graphs && b->n == (size_t)t->o->batch_size) {
        tape = b->tape;
        if (b->warm++ > 0) HOOP_CHECK(replay_step(t, b, &l));
    }
    const int replayed = l != NULL;
    if (!replayed) {
        /* An eager optimizer step rewrites the optimizer's scalars in pinned memory, which
         * a replay still queued reads when it runs: wait for it (a short batch's step,
         * once an epoch). */
        if (t->replay_queued) HOOP_CHECK(hoop_device_sync(t->device));
        t->replay_queued = 0;
        hoop_tape_seed(tape, step_seed(t));
        HOOP_CHECK(forward_backward(t, tape, b->in, b->y, &l));
        HOOP_CHECK(train_step_optimizer(t));
    }
    if (want_loss) HOOP_CHECK(hoop__tensor_download_async(l, b->loss, 1));
    HOOP_CHECK(hoop__event_record(b->free));
    /* eager: the arena's memory is reused in the compute stream's order, after the copy */
    if (!replayed) hoop_tape_reset(tape);
    b->pending = want_loss;
    b->step = t->step;
    t->cur = i;
    return HOOP_OK;
}
