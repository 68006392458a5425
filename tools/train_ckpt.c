/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/train_ckpt.c -- hoop-train's checkpoints: what a save records (parameters,
 * optimizer state, the position in the run and the settings that shape its math) and
 * --resume's continuation from it.
 *
 * Rank 0 writes, atomically (hoop_checkpoint_save), after every epoch, every
 * --checkpoint-every steps and at a stop; a save inside an epoch first sums the epoch's
 * loss so far over the ranks, so the resumed run reports the whole epoch's loss. A resume
 * loads rank 0's file on every rank (train_dist_load) after rank 0 has checked that it
 * belongs to this run. Not thread-safe: hoop-train's main thread only.
 */
#include <stdio.h>

#include "core/check.h"
#include "train.h"

/* What a checkpoint of this run records about it (and what a resumed file must match). */
static hoop_status run_identity(const trainer *t, train_ckpt_extra *ex)
{
    *ex = (train_ckpt_extra){
        .magic = TRAIN_CKPT_MAGIC,
        .seed = t->o->seed,
        .world_size = t->dist.world_size,
        .batch_size = t->o->batch_size,
        .ntrain = (int64_t)t->ntrain,
        .model = t->o->model == TRAIN_MODEL_MLP ? TRAIN_CKPT_MODEL_MLP : TRAIN_CKPT_MODEL_CNN,
    };
    return train_cli_settings(t->o, TRAIN_SAME_RESUME, ex->settings, sizeof ex->settings);
}

/* --resume: continue from the checkpoint (shared from rank 0) when there is one, at the
 * epoch and batch it records. */
hoop_status train_ckpt_resume(trainer *t)
{
    const train_opts *o = t->o;
    train_ckpt_extra ex, want;
    int found = 0;
    if (!o->resume) return HOOP_OK;
    HOOP_CHECK(run_identity(t, &want));
    HOOP_CHECK(train_dist_load(&t->dist, o->checkpoint, hoop_model_params(t->model),
                               hoop_model_param_count(t->model), t->opt, &want,
                               hoop_model_numel(t->model), &ex, &found));
    if (!found) {
        if (t->dist.rank == 0)
            printf("hoop-train: no checkpoint at %s yet; starting afresh\n", o->checkpoint);
        return HOOP_OK;
    }
    t->start_epoch = ex.epochs_done;
    t->start_batch = ex.batches_done;
    t->step = ex.step;
    if (t->dist.rank == 0) { /* the others add their own part of the epoch to it */
        t->loss_sum = ex.loss_sum;
        t->loss_samples = (size_t)ex.loss_samples;
    }
    if (t->dist.rank != 0) return HOOP_OK;
    if (ex.world_size != want.world_size) /* check_resumable: the same global batch */
        printf("hoop-train: %s was written by %lld ranks x --batch-size %lld; this run has %lld "
               "x %lld, the same global batch of %lld\n",
               o->checkpoint, (long long)ex.world_size, (long long)ex.batch_size,
               (long long)want.world_size, (long long)want.batch_size,
               (long long)(want.world_size * want.batch_size));
    if (ex.batches_done > 0)
        printf("hoop-train: resumed from %s in epoch %lld after batch %lld (step %lld)%s\n",
               o->checkpoint, (long long)ex.epochs_done + 1, (long long)ex.batches_done,
               (long long)ex.step,
               ex.epochs_done >= o->epochs ? "; that is past --epochs, nothing to do" : "");
    else
        printf("hoop-train: resumed from %s after epoch %lld (step %lld)%s\n", o->checkpoint,
               (long long)ex.epochs_done, (long long)ex.step,
               ex.epochs_done >= o->epochs ? "; it already has --epochs, nothing to do" : "");
    return HOOP_OK;
}

/* Saves parameters, optimizer state and the position: epochs_done whole epochs, then
 * batches_done batches of the next one, with that epoch's loss so far summed over the
 * ranks (a collective, when batches_done > 0). Rank 0 writes (atomically) and, when say,
 * prints "saved PATH (step S)". Nothing without --checkpoint. */
hoop_status train_ckpt_save(trainer *t, int64_t epochs_done, int64_t batches_done, int say)
{
    const train_opts *o = t->o;
    if (!o->checkpoint) return HOOP_OK;
    /* cuda: the last steps' bucket all-reduces have run, or their failure stops the save */
    if (t->dist.ddp) HOOP_CHECK(hoop_ddp_wait(t->dist.ddp));
    train_ckpt_extra ex;
    HOOP_CHECK(run_identity(t, &ex));
    ex.epochs_done = epochs_done;
    ex.batches_done = batches_done;
    ex.step = t->step;
    if (batches_done > 0) {
        HOOP_CHECK(train_step_drain(t));
        double g[2] = {t->loss_sum, (double)t->loss_samples};
        HOOP_CHECK(train_dist_sum(&t->dist, g, 2));
        ex.loss_sum = g[0];
        ex.loss_samples = (int64_t)g[1];
    }
    if (t->dist.rank != 0) return HOOP_OK;
    HOOP_CHECK(hoop_checkpoint_save(o->checkpoint, hoop_model_params(t->model),
                                    hoop_model_param_count(t->model), t->opt, &ex, sizeof ex));
    if (say) {
        train_report_clear_bar(t);
        printf("hoop-train: saved %s (step %lld)\n", o->checkpoint, (long long)t->step);
        fflush(stdout);
    }
    return HOOP_OK;
}
