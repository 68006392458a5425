/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/hoop-train.c -- the main job: trains an MLP or a small CNN on Fashion-MNIST.
 *
 * One thread drives the step (OpenBLAS may use more, see --threads). A step is: gather
 * a mini-batch of this rank's DistributedSampler shard (hoop/data.h, hoop/sampler.h),
 * forward on a tape, mean cross-entropy, zero_grad, backward (through DDP when started
 * by hooprun: buckets are all-reduced while backward runs), optimizer step with the
 * scheduled learning rate, tape reset. Rank 0 checks and loads the data first while the
 * others wait for its verdict. After each epoch the test set is evaluated (sharded
 * across ranks, sums all-reduced) and rank 0 prints one line (and one JSON line to
 * --metrics): loss, test accuracy, global samples/s and the share of all-reduce time
 * hidden behind backward; with --checkpoint rank 0 saves atomically (also every
 * --checkpoint-every steps, mid-epoch). With --bench-steps the tool instead times that
 * many steps and prints one JSON line (bench/ uses it).
 *
 * Devices (--device): on the cpu the loader gathers a batch straight into a tape tensor
 * (no copy) and the host reads losses and logits in place. On cuda the model is built on
 * the host as on the cpu (so both start from the same weights) and moved to the GPU, and
 * batches are double buffered, so that batch k+1 is uploaded while step k runs and no
 * step waits for its own loss (tools/train_step.c); with --cuda-graph each slot's step is
 * captured once and replayed. Checkpoints are the same file on both devices. Rank 0's
 * first line names the device. Under hooprun on cuda every worker takes its GPU (several
 * may share one) and DDP reduces each bucket on the device while backward runs (no host
 * wait per step); CUDA graphs are off then (the bucket all-reduces cannot be captured
 * yet), said once.
 *
 * Preemption: SIGINT, SIGTERM and SIGUSR1 (Slurm's --signal) only set a flag. The ranks
 * agree on it with a one-int maximum all-reduce posted after every step and collected
 * after the next one (so no step waits for it; a signal that reached only some ranks, or
 * reached them during different steps, stops all of them after the same step, one step
 * later); then rank 0 saves the checkpoint with the position inside the epoch, every
 * rank waits for that save, rank 0 prints "preempted ..." and all exit with 128 + the
 * signal's number. A second SIGINT stops at once. --resume continues from that position
 * with the same sampler order, optimizer state and dropout stream (seeded per step), so
 * the run ends with the same checkpoint as an uninterrupted one, byte for byte.
 *
 * Exit status: 0 success; 2 bad flags, a missing data directory, a corrupt data file or
 * ranks that loaded different data (any HOOP_ERR_INVALID before training starts), ranks
 * started with environments that disagree (hoop__store_exit_code), or --device cuda
 * where no GPU can be had; 1 any other failure; 128 + N after a stop by
 * signal N (130 SIGINT, 138 SIGUSR1, 143 SIGTERM), with the checkpoint saved when
 * --checkpoint was given (else the "preempted" line says nothing was). Every failure
 * prints one line "hoop-train: <message>" on stderr.
 *
 * Files (tools/train.h lists them): this one holds main, the epoch and benchmark loops
 * and the stop signals; the set-up, data, step, evaluation, reporting and checkpoint
 * parts are train_setup.c, train_data.c, train_step.c, train_eval.c, train_report.c and
 * train_ckpt.c, beside train_cli.c (flags) and train_dist.c (the distributed side).
 */
#define _GNU_SOURCE
#include <cblas.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"
#include "bootstrap/store_proto.h"
#include "core/clock.h"
#include "core/stop.h"
#include "train.h"

// ----- stop signals -----------------------------------------------------------------------

/* The first stop signal is kept (hoop__stop_requested); its copies (timeout(1), Slurm and
 * hooprun each sending it) are the same request. */
static void on_stop_signal(int sig)
{
    if (hoop__stop_request(sig) == HOOP__STOP_AGAIN && sig == SIGINT) {
        signal(SIGINT, SIG_DFL); /* Ctrl-C twice: stop now, as the default would */
        raise(SIGINT);
    }
}

/* SIGUSR1 (a preemption's notice: Slurm's --signal, or hooprun forwarding one that came
 * to a node's hooprun alone) is caught from main's first line on: one that comes during
 * start-up (data loading, the rendezvous) stops every rank after the first steps, as
 * one during training does. Killed by it there, this rank's node exited 138 and the
 * others failed on their links with exit 1, or waited HOOP_TIMEOUT for a rank 0 that
 * never opened its store. From catch_stop_signals on, SIGINT and SIGTERM too ask for a
 * stop after the current step; before, they keep their default effect (nothing to save
 * yet, and a rank waiting at the rendezvous should not wait on). */
static void catch_stop_signal(int sig)
{
    struct sigaction sa = {.sa_handler = on_stop_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
}

static void catch_stop_signals(void)
{
    catch_stop_signal(SIGINT);
    catch_stop_signal(SIGTERM);
}

/* "SIGTERM" and friends, for the messages. */
static const char *signal_name(int sig)
{
    return sig == SIGINT    ? "SIGINT"
           : sig == SIGTERM ? "SIGTERM"
           : sig == SIGUSR1 ? "SIGUSR1"
                            : "a signal";
}

/* Do all ranks stop now? Sets t->stop_sig when any rank got a stop signal. After a step
 * (pipelined) the answer is the one agreed after the previous step, so the step never
 * waits for the slowest rank's flag: a stop comes one step after the signal. */
static hoop_status agree_stop(trainer *t, int pipelined)
{
    /* The maximum of sig << 16 | (0xffff - rank): the largest signal, and the lowest rank
     * that received it (named when it is not rank 0: a worker signalled on its own). */
    int32_t sig = (int32_t)hoop__stop_requested();
    if (sig) sig = sig << 16 | (0xffff - (t->dist.rank & 0xffff));
    int64_t t0 = hoop__now_ns();
    HOOP_CHECK(train_dist_agree(&t->dist, &sig, pipelined));
    t->agree_ns += hoop__now_ns() - t0;
    t->stop_sig = (int)(sig >> 16);
    t->stop_rank = sig ? 0xffff - (sig & 0xffff) : 0;
    return HOOP_OK;
}

/* "SIGTERM", or "SIGTERM to rank 3" when rank 0 did not receive it. (Rank 0 asks its own
 * flag again: a signal forwarded to every worker by hooprun may reach rank 0 just after
 * its flag went into the agreement, and that stop was not one worker's.) */
static const char *stop_text(const trainer *t)
{
    static char text[48];
    snprintf(text, sizeof text, "%s", signal_name(t->stop_sig));
    if (t->stop_rank != 0 && hoop__stop_requested() == 0)
        snprintf(text + strlen(text), sizeof text - strlen(text), " to rank %d", t->stop_rank);
    return text;
}

/* The stop all ranks agreed on, after batch b of epoch: rank 0 saves the position, every
 * rank waits for its verdict (nobody leaves before the file is on disk, and a failed save
 * fails everyone), and rank 0 prints the one line that says where it stopped. */
static hoop_status stop_in_epoch(trainer *t, int64_t epoch, size_t b)
{
    const train_opts *o = t->o;
    hoop_status st = train_ckpt_save(t, epoch, (int64_t)b, 0);
    HOOP_CHECK(train_dist_root_status(&t->dist, st));
    if (t->dist.rank != 0) return HOOP_OK;
    train_report_clear_bar(t);
    printf("hoop-train: preempted (%s) at epoch %lld step %zu/%zu; ", stop_text(t),
           (long long)epoch + 1, b, t->nbatches);
    if (o->checkpoint)
        printf("saved %s (step %lld)\n", o->checkpoint, (long long)t->step);
    else
        printf("no --checkpoint, nothing saved (step %lld)\n", (long long)t->step);
    fflush(stdout);
    return HOOP_OK;
}

/* After batch b (1-based) of epoch, the per-step collectives, in the same order on every
 * rank: step metrics, the stop agreement (a stop saves and ends the epoch), the periodic
 * checkpoint (not after an epoch's last batch: the epoch's own checkpoint follows). */
static hoop_status after_step(trainer *t, int64_t epoch, size_t b)
{
    const train_opts *o = t->o;
    HOOP_CHECK(train_report_step_metrics(t, epoch, b));
    HOOP_CHECK(agree_stop(t, 1));
    if (t->stop_sig) return stop_in_epoch(t, epoch, b);
    if (o->checkpoint_every > 0 && t->step % o->checkpoint_every == 0 && b < t->nbatches)
        HOOP_CHECK(train_ckpt_save(t, epoch, (int64_t)b, 1));
    return HOOP_OK;
}

// ----- loops ------------------------------------------------------------------------------

/* Global loss over loss_samples, throughput of e->samples (this process's timed samples)
 * and this epoch's DDP timings (rank 0's view). */
static hoop_status finish_epoch(trainer *t, epoch_stats *e, double loss_sum, size_t loss_samples)
{
    double g[3] = {loss_sum, (double)loss_samples, (double)e->samples};
    HOOP_CHECK(train_dist_sum(&t->dist, g, 3));
    e->train_loss = g[1] > 0 ? g[0] / g[1] : 0.0;
    e->samples = (size_t)g[1];
    e->sps = e->train_s > 0 ? g[2] / e->train_s : 0.0;
    if (t->dist.ddp) {
        hoop_ddp_stats ds;
        hoop_ddp_get_stats(t->dist.ddp, &ds);
        e->comm_ms = ds.steps ? ds.comm_ms / (double)ds.steps : 0.0;
        e->hidden = ds.comm_ms > 0 ? ds.hidden_ms / ds.comm_ms : 0.0;
        hoop_ddp_reset_stats(t->dist.ddp);
    }
    return HOOP_OK;
}

/* The cpu's batches of epoch from batch b on (t0: the epoch's start), each step after the
 * last. */
static hoop_status train_cpu(trainer *t, int64_t epoch, epoch_stats *e, size_t b, int64_t t0)
{
    size_t n;
    float loss;
    for (;;) {
        hoop_tensor *x;
        int64_t s0 = hoop__now_ns();
        HOOP_CHECK(train_data_next(t, &x, &n));
        if (n == 0) return HOOP_OK;
        HOOP_CHECK(train_step_cpu(t, x, &loss));
        t->loss_sum += (double)loss * (double)n;
        t->loss_samples += n;
        t->win_loss += (double)loss * (double)n;
        t->win_samples += n;
        t->win_ns += hoop__now_ns() - s0;
        e->samples += n;
        e->train_s = (double)(hoop__now_ns() - t0) * 1e-9;
        if (train_report_due(t, ++b, t->nbatches))
            train_report_progress(t, epoch, b, t->nbatches, t->loss_sum / (double)t->loss_samples,
                                  (double)e->samples * t->dist.world_size / e->train_s);
        HOOP_CHECK(after_step(t, epoch, b));
        if (t->stop_sig) return HOOP_OK;
    }
}

/* The same on cuda, double buffered: step k is issued, then batch k+1 is gathered and its
 * upload queued (which accounts step k-1's loss, having waited for it), while step k runs;
 * the losses are accounted in step order, and all of them before they are printed,
 * logged or saved. */
static hoop_status train_cuda(trainer *t, int64_t epoch, epoch_stats *e, size_t b, int64_t t0)
{
    int i = t->cur;
    HOOP_CHECK(train_step_prefetch(t, i));
    while (t->slot[i].n > 0) {
        const size_t n = t->slot[i].n;
        int64_t s0 = hoop__now_ns();
        HOOP_CHECK(train_step_cuda(t, i, 1));
        i = 1 - i;
        HOOP_CHECK(train_step_prefetch(t, i));
        t->win_ns += hoop__now_ns() - s0;
        e->samples += n;
        e->train_s = (double)(hoop__now_ns() - t0) * 1e-9;
        if (train_report_due(t, ++b, t->nbatches)) {
            HOOP_CHECK(train_step_drain(t));
            train_report_progress(t, epoch, b, t->nbatches, t->loss_sum / (double)t->loss_samples,
                                  (double)e->samples * t->dist.world_size / e->train_s);
        }
        HOOP_CHECK(after_step(t, epoch, b));
        if (t->stop_sig) return HOOP_OK;
    }
    return train_step_drain(t);
}

/* Trains the rest of epoch (all of it, or what a resumed run has left), then evaluates;
 * returns early, with t->stop_sig set, when the ranks agreed to stop. */
static hoop_status run_epoch(trainer *t, int64_t epoch, epoch_stats *e)
{
    int64_t first = epoch == t->start_epoch ? t->start_batch : 0;
    int64_t t0 = hoop__now_ns();
    memset(e, 0, sizeof *e);
    HOOP_CHECK(train_data_shard(t, epoch, first));
    if (t->device == HOOP_DEVICE_CPU)
        HOOP_CHECK(train_cpu(t, epoch, e, (size_t)first, t0));
    else
        HOOP_CHECK(train_cuda(t, epoch, e, (size_t)first, t0));
    if (t->stop_sig) return HOOP_OK;
    /* Out of batches: answer the steps of ranks that still have some (shards may differ). */
    HOOP_CHECK(train_dist_join(&t->dist, train_step_optimizer, t));
    HOOP_CHECK(finish_epoch(t, e, t->loss_sum, t->loss_samples));
    return train_eval(t, &e->test_loss, &e->test_acc);
}

// ----- benchmark --------------------------------------------------------------------------

/* Floating-point operations of one MLP step of batch b through the GEMMs: forward,
 * weight gradient, and input gradient for every layer but the first. 0 for the CNN. */
static double mlp_step_flops(const trainer *t, size_t b)
{
    double f = 0.0;
    int first = 1;
    if (t->o->model != TRAIN_MODEL_MLP) return 0.0;
    for (size_t i = 0; i < hoop_model_param_count(t->model); i++) {
        hoop_tensor *p = hoop_model_param(t->model, i);
        if (hoop_tensor_ndim(p) != 2) continue;
        double mac = (double)b * (double)hoop_tensor_count(p);
        f += 2.0 * mac * (first ? 2.0 : 3.0);
        first = 0;
    }
    return f;
}

/* Benchmark mode: bench_warmup untimed steps, then bench_steps timed ones; one JSON line.
 * Each step ends with the stop agreement, as in training, so the figure includes it; a
 * stop ends the benchmark without its line. */
static hoop_status run_bench(trainer *t)
{
    const train_opts *o = t->o;
    int64_t total = o->bench_warmup + o->bench_steps, t0 = 0, epoch = 0, samples = 0;
    float loss = 0.0f;
    size_t n;
    HOOP_CHECK(train_data_shard(t, 0, 0));
    /* On cuda the data stays on the device (the batch is uploaded once and every step
     * trains on it) and the loss is read back after the last step only, as a GPU
     * benchmark of the step itself asks; the cpu gathers a batch per step. */
    const int resident = t->device != HOOP_DEVICE_CPU;
    hoop_tensor *x = NULL;
    if (resident) { /* one batch in slot 0, full-sized when the shard has one */
        HOOP_CHECK(train_step_prefetch(t, 0));
        if (t->slot[0].n < (size_t)o->batch_size) {
            HOOP_CHECK(train_data_shard(t, ++epoch, 0));
            HOOP_CHECK(train_step_prefetch(t, 0));
        }
        n = t->slot[0].n;
    }
    for (int64_t s = 0; s < total; s++) {
        if (s == o->bench_warmup) {
            if (resident) HOOP_CHECK(hoop_device_sync(t->device));
            if (t->dist.ddp) hoop_ddp_reset_stats(t->dist.ddp); /* the timed steps' only */
            t0 = hoop__now_ns();
            t->agree_ns = 0;
        }
        if (resident) {
            HOOP_CHECK(train_step_cuda(t, 0, s + 1 == total));
        } else {
            HOOP_CHECK(train_data_next(t, &x, &n));
            if (n < (size_t)o->batch_size) { /* keep every timed batch full-sized */
                hoop_tape_reset(t->tape);
                HOOP_CHECK(train_data_shard(t, ++epoch, 0));
                HOOP_CHECK(train_data_next(t, &x, &n));
            }
            HOOP_CHECK(train_step_cpu(t, x, &loss));
        }
        if (s >= o->bench_warmup) samples += (int64_t)n;
        HOOP_CHECK(agree_stop(t, 1));
        if (!t->stop_sig) continue;
        if (t->dist.rank == 0)
            printf("hoop-train: stopped (%s) after %lld of %lld benchmark steps\n", stop_text(t),
                   (long long)s + 1, (long long)total);
        return HOOP_OK;
    }
    if (resident) { /* the last step's loss, waited for only now */
        HOOP_CHECK(train_step_drain(t));
        loss = *t->slot[0].loss;
    }
    double secs = (double)(hoop__now_ns() - t0) * 1e-9;
    double flops = mlp_step_flops(t, (size_t)o->batch_size);
    epoch_stats e = {.samples = (size_t)samples, .train_s = secs};
    HOOP_CHECK(finish_epoch(t, &e, 0.0, 0));
    if (t->dist.rank != 0) return HOOP_OK;
    printf(
        "{\"bench\":\"hoop_train\",\"model\":\"%s\",\"device\":\"%s\",\"resident\":%s,"
        "\"world_size\":%d,"
        "\"threads\":%d,\"batch_size\":%lld,\"steps\":%lld,\"seconds\":%.4f,\"samples_per_s\":%.1f,"
        "\"step_mflop\":%.3f,\"gflops_per_rank\":%.3f,\"allreduce_ms_per_step\":%.3f,"
        "\"hidden_share\":%.4f,\"stop_check_us_per_step\":%.2f,\"last_loss\":%.4f}\n",
        trainer_model_name(t), t->device == HOOP_DEVICE_CUDA ? "cuda" : "cpu",
        resident ? "true" : "false", t->dist.world_size, openblas_get_num_threads(),
        (long long)o->batch_size, (long long)o->bench_steps, secs, e.sps, flops * 1e-6,
        flops * (double)o->bench_steps / secs * 1e-9, e.comm_ms, e.hidden,
        (double)t->agree_ns * 1e-3 / (double)o->bench_steps, (double)loss);
    return HOOP_OK;
}

// ----- main -------------------------------------------------------------------------------

/* Between epochs: stop here when asked (the epoch's checkpoint is already written).
 * Returns 1 when training ends now. */
static int stop_between_epochs(trainer *t, int64_t epoch, hoop_status *st)
{
    const train_opts *o = t->o;
    if (o->exit_after_epoch > 0 && epoch + 1 >= o->exit_after_epoch) {
        if (t->dist.rank == 0)
            printf("hoop-train: stopping after epoch %lld (--exit-after-epoch)\n",
                   (long long)epoch + 1);
        return 1;
    }
    if (epoch + 1 >= o->epochs) return 1; /* done: nothing is left to preempt */
    *st = agree_stop(t, 0);
    if (*st != HOOP_OK || !t->stop_sig) return *st != HOOP_OK;
    if (t->dist.rank == 0) {
        printf("hoop-train: preempted (%s) after epoch %lld; ", stop_text(t), (long long)epoch + 1);
        if (o->checkpoint)
            printf("saved %s (step %lld)\n", o->checkpoint, (long long)t->step);
        else
            printf("no --checkpoint, nothing saved (step %lld)\n", (long long)t->step);
    }
    return 1;
}

static hoop_status run(trainer *t)
{
    const train_opts *o = t->o;
    hoop_status st = HOOP_OK;
    catch_stop_signals();
    if (o->bench_steps > 0) {
        HOOP_CHECK(run_bench(t));
        return t->dist.ddp ? hoop_ddp_trace_flush(t->dist.ddp) : HOOP_OK;
    }
    if (t->dist.rank == 0 && t->start_epoch < o->epochs) { /* else resumed, nothing to do */
        printf("hoop-train: %s, %zu parameters, %zu train / %zu test samples, %d worker(s) x "
               "batch %lld, %s lr %g, %lld epoch%s, %d OpenBLAS thread(s)\n",
               trainer_model_name(t), hoop_model_numel(t->model), t->ntrain,
               hoop_dataset_count(t->test), t->dist.world_size, (long long)o->batch_size,
               o->optimizer == TRAIN_OPT_SGD ? "sgd" : "adamw", (double)o->lr, (long long)o->epochs,
               o->epochs == 1 ? "" : "s", openblas_get_num_threads());
        fflush(stdout);
    }
    for (int64_t epoch = t->start_epoch; epoch < o->epochs; epoch++) {
        epoch_stats e;
        HOOP_CHECK(run_epoch(t, epoch, &e));
        if (t->stop_sig) break; /* saved and said by run_epoch */
        train_report_epoch(t, epoch, &e);
        HOOP_CHECK(train_ckpt_save(t, epoch + 1, 0, 1));
        t->loss_sum = 0.0;
        t->loss_samples = 0;
        if (stop_between_epochs(t, epoch, &st)) break;
    }
    HOOP_CHECK(st);
    if (t->dist.ddp) HOOP_CHECK(hoop_ddp_trace_flush(t->dist.ddp));
    return HOOP_OK;
}

int main(int argc, char **argv)
{
    train_opts o;
    trainer t;
    catch_stop_signal(SIGUSR1);
    hoop_status st = train_cli_parse(&o, argc, argv);
    if (st == HOOP_ERR_USAGE) /* --help, --version: 1 when stdout could not take them */
        return fflush(stdout) != 0 || ferror(stdout);
    const char *rank = getenv("RANK"); /* rank 0 speaks (the header shows the count too) */
    if (st != HOOP_OK) {               /* and the job hears it, not only this rank */
        char why[600];
        snprintf(why, sizeof why, "hoop-train: %s", hoop_last_error());
        if (!rank || !*rank || !strcmp(rank, "0")) { /* said once, then rank 0's store */
            fprintf(stderr, "%s\n", why);
            (void)hoop__store_env_refuse_said(HOOP_ERROR(st, "%s", why), NULL);
            return 2;
        }
        /* Another rank says it only when the job heard its reason (the same bad flag on
         * every rank: rank 0's alone), and lingers a moment so that rank 0's line is out
         * before the launcher stops everyone on this rank's exit. */
        int told = 0;
        (void)hoop__store_env_refuse(HOOP_ERROR(st, "%s", why), &told);
        if (told != 0) fprintf(stderr, "%s\n", why);
        if (told == 0) usleep(300 * 1000);
        return 2;
    }
    if (o.threads > 0) openblas_set_num_threads((int)o.threads);
    if (o.threads > 0 && openblas_get_num_threads() < o.threads && (!rank || !strcmp(rank, "0")))
        fprintf(stderr, "hoop-train: --threads %lld: this OpenBLAS runs at most %d threads\n",
                (long long)o.threads, openblas_get_num_threads());
    /* The same for a user's OMP_NUM_THREADS */
    const char *omp = train_users_omp();
    if (o.threads == 0 && omp && atoi(omp) > openblas_get_num_threads() &&
        (!rank || !strcmp(rank, "0")))
        fprintf(stderr,
                "hoop-train: OMP_NUM_THREADS=%s: this OpenBLAS runs at most %d threads here (as "
                "many as the CPUs this process may use; hooprun binds each worker to its own: "
                "--bind none lets it use more)\n",
                omp, openblas_get_num_threads());
    st = trainer_init(&t, &o);
    if (st != HOOP_OK) {
        /* Rank 0 explains its own failures; the others only follow it out. */
        if (!t.dist.root_failed && !t.dist.reported)
            fprintf(stderr, "hoop-train: %s\n", hoop_last_error());
        int rc = hoop__store_exit_code(st); /* before the destroy's connections */
        trainer_destroy(&t);
        return rc;
    }
    st = run(&t);
    if (st != HOOP_OK && !t.dist.root_failed && !t.dist.reported)
        fprintf(stderr, "hoop-train: %s\n", hoop_last_error());
    int stop_sig = t.stop_sig;
    hoop_status dst = trainer_destroy(&t);
    if (st == HOOP_OK && dst != HOOP_OK) {
        fprintf(stderr, "hoop-train: %s\n", hoop_last_error());
        st = dst;
    }
    if (st != HOOP_OK) return 1;
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) { /* > /dev/full: the log is lost */
        /* (an earlier write's failure left only the stream's error flag: no reason) */
        fprintf(stderr, "hoop-train: writing the log to the standard output failed%s%s\n",
                errno ? ": " : "", errno ? hoop__strerror(errno) : "");
        return 1;
    }
    return stop_sig ? 128 + stop_sig : 0; /* stopped by a signal (saved with --checkpoint) */
}
