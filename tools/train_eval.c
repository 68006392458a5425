/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/train_eval.c -- hoop-train's evaluation of the test set after each epoch.
 *
 * The test set is split exactly across the ranks (every sample on one rank, in order),
 * each rank runs its share through the model in batches of --eval-batch-size on the
 * trainer's tape with gradients and dropout off, and the loss and correct counts are
 * summed over the ranks. On cuda the batches are copied synchronously into the device
 * input tensor of their size and the logits read back into t->logits. Not thread-safe:
 * hoop-train's main thread only.
 */
#include <stdlib.h>

#include "core/check.h"
#include "train.h"

/* The logits' values on the host: in place on the cpu, copied into t->logits on cuda. */
static hoop_status host_logits(trainer *t, hoop_tensor *logits, const float **z)
{
    if (t->device == HOOP_DEVICE_CPU) {
        *z = hoop_tensor_data(logits);
        return HOOP_OK;
    }
    *z = t->logits;
    return hoop_tensor_copy_to_host(logits, t->logits, hoop_tensor_count(logits));
}

/* Rows of z (n x c logits) whose largest entry is at the label y (the first one on ties). */
static size_t count_correct(const float *z, int64_t c, const int32_t *y, size_t n)
{
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t best = 0;
        for (int64_t k = 1; k < c; k++)
            if (z[i * (size_t)c + (size_t)k] > z[i * (size_t)c + (size_t)best]) best = k;
        ok += best == y[i];
    }
    return ok;
}

/* Mean loss and accuracy (fraction) over the whole test set, in evaluation mode. */
hoop_status train_eval(trainer *t, double *loss, double *acc)
{
    size_t n_test = hoop_dataset_count(t->test), eb = (size_t)t->o->eval_batch_size;
    size_t mine, correct = 0;
    const size_t *shard; /* every test sample on exactly one rank */
    double sum = 0.0;
    hoop_status st = HOOP_OK;
    int64_t *idx;
    HOOP_CHECK(train_dist_eval_shard(&t->dist, n_test, &shard, &mine));
    HOOP_CHECK(hoop__calloc(&idx, eb));
    hoop_tape_set_train(t->tape, 0);
    hoop_tape_set_grad_enabled(t->tape, 0);
    for (size_t s = 0; s < mine; s += eb) {
        size_t n = mine - s < eb ? mine - s : eb;
        hoop_tensor *x, *logits, *l;
        const float *z;
        float lv;
        for (size_t i = 0; i < n; i++) idx[i] = (int64_t)shard[s + i];
        HOOP_CHECK_GOTO(hoop_dataset_gather(t->test, idx, n, t->x, t->y), st, done);
        HOOP_CHECK_GOTO(train_data_input(t, n, &x), st, done);
        HOOP_CHECK_GOTO(hoop_model_forward(t->model, t->tape, x, &logits), st, done);
        HOOP_CHECK_GOTO(hoop_cross_entropy(t->tape, logits, t->y, 0.0f, &l), st, done);
        HOOP_CHECK_GOTO(hoop_tensor_copy_to_host(l, &lv, 1), st, done);
        HOOP_CHECK_GOTO(host_logits(t, logits, &z), st, done);
        sum += (double)lv * (double)n;
        correct += count_correct(z, hoop_tensor_dim(logits, 1), t->y, n);
        hoop_tape_reset(t->tape);
    }
    double g[2] = {sum, (double)correct};
    HOOP_CHECK_GOTO(train_dist_sum(&t->dist, g, 2), st, done);
    *loss = g[0] / (double)n_test;
    *acc = g[1] / (double)n_test;
done:
    hoop_tape_reset(t->tape);
    hoop_tape_set_grad_enabled(t->tape, 1);
    hoop_tape_set_train(t->tape, 1);
    free(idx);
    return st;
}
