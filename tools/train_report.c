/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/train_report.c -- what hoop-train tells: the progress bar or step lines, each
 * epoch's line, and the --metrics records (JSON lines: one per epoch, one every
 * --metrics-every steps).
 *
 * Rank 0 alone speaks; the other workers work silently (their figures reach rank 0
 * through the sums the callers make). The bar is redrawn with '\r' on stderr at most
 * every BAR_EVERY_NS; plain lines go to stdout every --log-every steps. Not thread-safe:
 * hoop-train's main thread only.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>

#include "collectives/comm.h"
#include "core/check.h"
#include "core/clock.h"
#include "train.h"

#define BAR_WIDTH 30
#define BAR_EVERY_NS 100000000LL

void train_report_clear_bar(const trainer *t)
{
    if (t->bar) fprintf(stderr, "\r%*s\r", BAR_WIDTH + 60, "");
}

/* Is the progress due after batch b of nb (the bar at most every BAR_EVERY_NS, a line
 * every --log-every batches)? A bar that is due counts as drawn now. */
int train_report_due(trainer *t, size_t b, size_t nb)
{
    if (t->dist.rank != 0) return 0; /* the other workers work silently */
    if (t->bar) {
        int64_t now = hoop__now_ns();
        if (b < nb && now - t->bar_ns < BAR_EVERY_NS) return 0;
        t->bar_ns = now;
        return 1;
    }
    return t->o->log_every > 0 && b % (size_t)t->o->log_every == 0 && b < nb;
}

/* Draws the bar or prints the line for batch b of nb (when train_report_due said so). */
void train_report_progress(const trainer *t, int64_t epoch, size_t b, size_t nb, double loss,
                           double sps)
{
    const train_opts *o = t->o;
    if (t->bar) {
        char bar[BAR_WIDTH + 1];
        size_t fill = nb ? b * BAR_WIDTH / nb : BAR_WIDTH;
        for (size_t i = 0; i < BAR_WIDTH; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
        bar[BAR_WIDTH] = '\0';
        fprintf(stderr, "\repoch %lld/%lld [%s] %zu/%zu loss %.4f %.0f samples/s ",
                (long long)epoch + 1, (long long)o->epochs, bar, b, nb, loss, sps);
        fflush(stderr);
    } else {
        printf("epoch %lld/%lld step %zu/%zu loss %.4f %.0f samples/s\n", (long long)epoch + 1,
               (long long)o->epochs, b, nb, loss, sps);
        fflush(stdout);
    }
}

/* Flushes --metrics; the first failure (a full disk, /dev/full) is said at once and kept
 * for the exit status (trainer_destroy): training goes on, the file is incomplete. */
static void metrics_flush(trainer *t)
{
    int failed = fflush(t->metrics) != 0 || ferror(t->metrics);
    if (!failed || t->metrics_errno) return;
    t->metrics_errno = errno ? errno : EIO;
    train_report_clear_bar(t);
    fprintf(stderr,
            "hoop-train: --metrics: writing '%s' failed: %s; training goes on, and hoop-train "
            "will exit 1\n",
            t->o->metrics, hoop__strerror(t->metrics_errno));
}

/* v as JSON: "%.6f" ("%.9g" from 1e15 on), or null when it is not finite (a diverged
 * run's NaN loss; printf's "-nan" is no JSON). buf: 48 bytes. */
static const char *json_num(char *buf, double v)
{
    if (!isfinite(v)) return "null";
    snprintf(buf, 48, fabs(v) < 1e15 ? "%.6f" : "%.9g", v);
    return buf;
}

void train_report_epoch(trainer *t, int64_t epoch, const epoch_stats *e)
{
    if (t->dist.rank != 0) return;
    train_report_clear_bar(t);
    /* The bucket all-reduces ran as blocking calls (known once the first was made): once,
     * before the figures it explains. */
    if (t->dist.ddp && t->device == HOOP_DEVICE_CUDA && !t->said_blocking &&
        hoop__stream_calls_block()) {
        int q = hoop__stream_few_queues();
        char why[96];
        if (q)
            snprintf(why, sizeof why, "CUDA_DEVICE_MAX_CONNECTIONS=%d, under CUDA's default 8", q);
        else
            snprintf(why, sizeof why, "this CUDA driver has no stream memory operations");
        printf("hoop-train: %s: each bucket's all-reduce blocked backward's thread (none "
               "hidden)\n",
               why);
        t->said_blocking = 1;
    }
    char comm[96] = "";
    if (t->dist.ddp)
        snprintf(comm, sizeof comm, ", all-reduce %.2f ms/step, %.0f%% hidden", e->comm_ms,
                 100.0 * e->hidden);
    printf("epoch %lld/%lld loss %.4f test_loss %.4f test_acc %.2f%% %.0f samples/s "
           "(%.1f s%s)\n",
           (long long)epoch + 1, (long long)t->o->epochs, e->train_loss, e->test_loss,
           100.0 * e->test_acc, e->sps, e->train_s, comm);
    fflush(stdout);
    if (!t->metrics) return;
    char tl[48], vl[48], va[48];
    fprintf(t->metrics,
            "{\"type\":\"epoch\",\"epoch\":%lld,\"epochs\":%lld,\"step\":%lld,\"model\":\"%s\","
            "\"lr\":%.6g,\"train_loss\":%s,\"test_loss\":%s,\"test_acc\":%s,"
            "\"samples\":%zu,\"train_s\":%.3f,\"samples_per_s\":%.1f,\"world_size\":%d,"
            "\"allreduce_ms_per_step\":%.3f,\"hidden_share\":%.4f}\n",
            (long long)epoch + 1, (long long)t->o->epochs, (long long)t->step,
            trainer_model_name(t), (double)hoop_optim_lr(t->opt), json_num(tl, e->train_loss),
            json_num(vl, e->test_loss), json_num(va, e->test_acc), e->samples, e->train_s, e->sps,
            t->dist.world_size, e->comm_ms, e->hidden);
    metrics_flush(t);
}

/* --metrics-every N: after every N-th step (counted over the whole run, so a resumed run
 * logs at the same steps), one JSON line with the mean training loss of the steps since
 * the last one, over all ranks (a collective), and their throughput. */
hoop_status train_report_step_metrics(trainer *t, int64_t epoch, size_t b)
{
    const train_opts *o = t->o;
    if (o->metrics_every <= 0 || t->step % o->metrics_every != 0) return HOOP_OK;
    HOOP_CHECK(train_step_drain(t));
    double g[2] = {t->win_loss, (double)t->win_samples};
    HOOP_CHECK(train_dist_sum(&t->dist, g, 2));
    double secs = (double)t->win_ns * 1e-9;
    if (t->metrics && g[1] > 0) {
        char tl[48];
        fprintf(t->metrics,
                "{\"type\":\"step\",\"epoch\":%lld,\"epochs\":%lld,\"epoch_step\":%zu,"
                "\"epoch_steps\":%zu,\"step\":%lld,\"model\":\"%s\",\"lr\":%.6g,"
                "\"train_loss\":%s,\"samples\":%.0f,\"samples_per_s\":%.1f,\"world_size\":%d}\n",
                (long long)epoch + 1, (long long)o->epochs, b, t->nbatches, (long long)t->step,
                trainer_model_name(t), (double)hoop_optim_lr(t->opt), json_num(tl, g[0] / g[1]),
                g[1], secs > 0 ? g[1] / secs : 0.0, t->dist.world_size);
        metrics_flush(t);
    }
    t->win_loss = 0.0;
    t->win_samples = 0;
    t->win_ns = 0;
    return HOOP_OK;
}
