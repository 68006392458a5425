/*
 * tools/hoop-train.c -- the main job: trains an MLP or a small CNN on Fashion-MNIST.
 *
 * One process, one thread driving the step (OpenBLAS may use more, see --threads). A
 * step is: gather a shuffled mini-batch (hoop/data.h), forward on a tape, mean
 * cross-entropy, zero_grad, backward, [after_backward: where DDP waits for its gradient
 * all-reduce], optimizer step with the scheduled learning rate, tape reset. After each
 * epoch the test set is evaluated (no grad, eval mode) and one line is printed (and one
 * JSON line written to --metrics): loss, test accuracy, samples/s. With --bench-steps
 * the tool instead times that many steps and prints one JSON line (bench/ uses it).
 *
 * Exit status: 0 success; 2 bad flags, a missing data directory or a corrupt data file
 * (any HOOP_ERR_INVALID before training starts); 1 any other failure. Every failure
 * prints one line "hoop-train: <message>" on stderr.
 */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"
#include "core/clock.h"
#include "hoop/autograd.h"
#include "hoop/data.h"
#include "hoop/nn.h"
#include "hoop/optim.h"
#include "train_cli.h"

#define BAR_WIDTH 30
#define BAR_EVERY_NS 100000000LL

typedef struct trainer {
    const train_opts *o;
    hoop_dataset *train, *test;
    hoop_loader *loader;
    hoop_model *model;
    hoop_optim *opt;
    hoop_tape *tape;
    hoop_lr_schedule sched;
    float *x;       /* batch_size x sample floats, the gathered batch */
    int32_t *y;     /* batch_size labels */
    int64_t sample; /* floats per sample (rows x cols) */
    int64_t step;   /* optimizer steps taken so far */
    int bar;        /* 1: redraw a progress bar on stderr */
    int64_t bar_ns; /* when the bar was last drawn (redrawn at most every BAR_EVERY_NS) */
    FILE *metrics;
    /* The hook a data-parallel wrapper fills: runs after backward, before the optimizer
     * step (wait for the gradient all-reduce there). NULL in single-process training. */
    hoop_status (*after_backward)(void *ctx);
    void *after_backward_ctx;
} trainer;

static const char *model_name(const trainer *t)
{
    return t->o->model == TRAIN_MODEL_MLP ? "mlp" : "cnn";
}

// ----- set-up and tear-down ---------------------------------------------------------------

static hoop_status load_data(trainer *t)
{
    hoop_dataset_config cfg = HOOP_DATASET_CONFIG_INIT;
    if (t->o->standardize) {
        cfg.mean = HOOP_FASHION_MNIST_MEAN;
        cfg.std = HOOP_FASHION_MNIST_STD;
    }
    HOOP_CHECK(hoop_dataset_load_mnist(&t->train, t->o->data, "train", &cfg));
    HOOP_CHECK(hoop_dataset_load_mnist(&t->test, t->o->data, "t10k", &cfg));
    t->sample = hoop_dataset_rows(t->train) * hoop_dataset_cols(t->train);
    if (hoop_dataset_rows(t->test) != hoop_dataset_rows(t->train) ||
        hoop_dataset_cols(t->test) != hoop_dataset_cols(t->train))
        return HOOP_ERROR(
            HOOP_ERR_INVALID, "%s: test images are %lldx%lld, train images %lldx%lld", t->o->data,
            (long long)hoop_dataset_rows(t->test), (long long)hoop_dataset_cols(t->test),
            (long long)hoop_dataset_rows(t->train), (long long)hoop_dataset_cols(t->train));
    return HOOP_OK;
}

static hoop_status build_model(trainer *t)
{
    const train_opts *o = t->o;
    if (o->model == TRAIN_MODEL_MLP) {
        const int64_t sizes[4] = {t->sample, 512, 256, hoop_dataset_num_classes(t->train)};
        return hoop_model_new_mlp(&t->model, sizes, 4, (uint64_t)o->seed);
    }
    hoop_cnn_config cfg = HOOP_CNN_CONFIG_INIT;
    cfg.height = hoop_dataset_rows(t->train);
    cfg.width = hoop_dataset_cols(t->train);
    cfg.classes = hoop_dataset_num_classes(t->train);
    cfg.dropout = o->dropout;
    return hoop_model_new_cnn(&t->model, &cfg, (uint64_t)o->seed);
}

static hoop_status build_optim(trainer *t)
{
    const train_opts *o = t->o;
    hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
    cfg.kind = o->optimizer == TRAIN_OPT_SGD ? HOOP_OPTIM_SGD : HOOP_OPTIM_ADAMW;
    cfg.lr = o->lr;
    cfg.weight_decay = o->weight_decay;
    if (o->optimizer == TRAIN_OPT_SGD) {
        cfg.momentum = o->momentum;
        cfg.nesterov = o->nesterov;
    }
    HOOP_CHECK(hoop_optim_new(&t->opt, &cfg, hoop_model_params(t->model),
                              hoop_model_param_count(t->model)));
    int64_t per_epoch = (int64_t)hoop_loader_num_batches(t->loader);
    t->sched = (hoop_lr_schedule){
        .base_lr = o->lr,
        .min_lr = o->schedule == TRAIN_SCHED_COSINE ? 0.0f : o->lr,
        .warmup_steps = o->warmup_steps,
        .total_steps = per_epoch * o->epochs,
    };
    return HOOP_OK;
}

static hoop_status trainer_init(trainer *t, const train_opts *o)
{
    memset(t, 0, sizeof *t);
    t->o = o;
    HOOP_CHECK(load_data(t));
    HOOP_CHECK(build_model(t));
    HOOP_CHECK(hoop_loader_new(&t->loader, t->train, (size_t)o->batch_size, (uint64_t)o->seed));
    HOOP_CHECK(build_optim(t));
    HOOP_CHECK(hoop_tape_init(&t->tape));
    hoop_tape_seed(t->tape, (uint64_t)o->seed);
    int64_t cap = o->batch_size > o->eval_batch_size ? o->batch_size : o->eval_batch_size;
    HOOP_CHECK(hoop__calloc(&t->x, (size_t)(cap * t->sample)));
    HOOP_CHECK(hoop__calloc(&t->y, (size_t)cap));
    if (o->metrics && !(t->metrics = fopen(o->metrics, "w")))
        return HOOP_ERROR(HOOP_ERR_INVALID, "--metrics: cannot open '%s': %s", o->metrics,
                          strerror(errno));
    t->bar = o->progress == 1 || (o->progress == -1 && isatty(STDERR_FILENO));
    return HOOP_OK;
}

static hoop_status trainer_destroy(trainer *t)
{
    hoop_status st = HOOP_OK;
    if (t->metrics && fclose(t->metrics) != 0)
        st = HOOP_ERROR(HOOP_ERR_SYSTEM, "--metrics: writing '%s' failed: %s", t->o->metrics,
                        strerror(errno));
    HOOP_CHECK_KEEP(hoop_tape_destroy(t->tape), st);
    hoop_optim_free(t->opt);
    hoop_model_free(t->model);
    hoop_loader_free(t->loader);
    hoop_dataset_free(t->train);
    hoop_dataset_free(t->test);
    free(t->x);
    free(t->y);
    return st;
}

// ----- one step ---------------------------------------------------------------------------

/* Makes a tape tensor for n samples, shaped for the model: (n, rows*cols) for the MLP,
 * (n, 1, rows, cols) for the CNN. */
static hoop_status new_input(trainer *t, size_t n, hoop_tensor **x)
{
    int64_t rows = hoop_dataset_rows(t->train), cols = hoop_dataset_cols(t->train);
    int64_t mlp_shape[2] = {(int64_t)n, t->sample};
    int64_t cnn_shape[4] = {(int64_t)n, 1, rows, cols};
    int mlp = t->o->model == TRAIN_MODEL_MLP;
    return hoop_tape_tensor_new(t->tape, mlp ? 2 : 4, mlp ? mlp_shape : cnn_shape, x);
}

/* Makes the input tensor holding the first n samples gathered into t->x. */
static hoop_status make_input(trainer *t, size_t n, hoop_tensor **x)
{
    HOOP_CHECK(new_input(t, n, x));
    return hoop_tensor_copy_from(*x, t->x, n * (size_t)t->sample);
}

/* Gathers the loader's next batch straight into a tape tensor (*n == 0: epoch over).
 * A short last batch is moved into a tensor of its own size. */
static hoop_status next_batch(trainer *t, hoop_tensor **x, size_t *n)
{
    size_t bs = (size_t)t->o->batch_size;
    HOOP_CHECK(new_input(t, bs, x));
    HOOP_CHECK(hoop_loader_next(t->loader, hoop_tensor_data(*x), t->y, n));
    if (*n == 0 || *n == bs) return HOOP_OK;
    memcpy(t->x, hoop_tensor_data(*x), *n * (size_t)t->sample * sizeof(float));
    return make_input(t, *n, x);
}

/* One optimizer step on the batch x (labels in t->y); *loss gets its mean loss. */
static hoop_status train_step(trainer *t, hoop_tensor *x, float *loss)
{
    hoop_tensor *logits, *l;
    hoop_optim_set_lr(t->opt, hoop_lr_at(&t->sched, t->step));
    HOOP_CHECK(hoop_model_forward(t->model, t->tape, x, &logits));
    HOOP_CHECK(hoop_cross_entropy(t->tape, logits, t->y, 0.0f, &l));
    *loss = hoop_tensor_data(l)[0];
    hoop_optim_zero_grad(t->opt);
    HOOP_CHECK(hoop_backward(t->tape, l));
    if (t->after_backward) HOOP_CHECK(t->after_backward(t->after_backward_ctx));
    HOOP_CHECK(hoop_optim_step(t->opt));
    hoop_tape_reset(t->tape);
    t->step++;
    if (!isfinite(*loss))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "loss is %g at step %lld: training diverged "
                          "(try a smaller --lr)",
                          (double)*loss, (long long)t->step);
    return HOOP_OK;
}

// ----- evaluation -------------------------------------------------------------------------

static size_t count_correct(hoop_tensor *logits, const int32_t *y, size_t n)
{
    const float *z = hoop_tensor_data(logits);
    int64_t c = hoop_tensor_dim(logits, 1);
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
static hoop_status evaluate(trainer *t, double *loss, double *acc)
{
    size_t n_all = hoop_dataset_count(t->test), correct = 0, eb = (size_t)t->o->eval_batch_size;
    double sum = 0.0;
    hoop_status st = HOOP_OK;
    int64_t *idx;
    HOOP_CHECK(hoop__calloc(&idx, eb));
    hoop_tape_set_train(t->tape, 0);
    hoop_tape_set_grad_enabled(t->tape, 0);
    for (size_t s = 0; s < n_all; s += eb) {
        size_t n = n_all - s < eb ? n_all - s : eb;
        hoop_tensor *x, *logits, *l;
        for (size_t i = 0; i < n; i++) idx[i] = (int64_t)(s + i);
        HOOP_CHECK_GOTO(hoop_dataset_gather(t->test, idx, n, t->x, t->y), st, done);
        HOOP_CHECK_GOTO(make_input(t, n, &x), st, done);
        HOOP_CHECK_GOTO(hoop_model_forward(t->model, t->tape, x, &logits), st, done);
        HOOP_CHECK_GOTO(hoop_cross_entropy(t->tape, logits, t->y, 0.0f, &l), st, done);
        sum += (double)hoop_tensor_data(l)[0] * (double)n;
        correct += count_correct(logits, t->y, n);
        hoop_tape_reset(t->tape);
    }
    *loss = sum / (double)n_all;
    *acc = (double)correct / (double)n_all;
done:
    hoop_tape_reset(t->tape);
    hoop_tape_set_grad_enabled(t->tape, 1);
    hoop_tape_set_train(t->tape, 1);
    free(idx);
    return st;
}

// ----- progress and metrics ---------------------------------------------------------------

static void show_progress(trainer *t, int64_t epoch, size_t b, size_t nb, double loss, double sps)
{
    const train_opts *o = t->o;
    if (t->bar) {
        int64_t now = hoop__now_ns();
        if (b < nb && now - t->bar_ns < BAR_EVERY_NS) return;
        t->bar_ns = now;
        char bar[BAR_WIDTH + 1];
        size_t fill = nb ? b * BAR_WIDTH / nb : BAR_WIDTH;
        for (size_t i = 0; i < BAR_WIDTH; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
        bar[BAR_WIDTH] = '\0';
        fprintf(stderr, "\repoch %lld/%lld [%s] %zu/%zu loss %.4f %.0f samples/s ",
                (long long)epoch + 1, (long long)o->epochs, bar, b, nb, loss, sps);
        fflush(stderr);
    } else if (o->log_every > 0 && b % (size_t)o->log_every == 0 && b < nb) {
        printf("epoch %lld/%lld step %zu/%zu loss %.4f %.0f samples/s\n", (long long)epoch + 1,
               (long long)o->epochs, b, nb, loss, sps);
        fflush(stdout);
    }
}

typedef struct epoch_stats {
    double train_loss, test_loss, test_acc, train_s, sps;
    size_t samples;
} epoch_stats;

static void report_epoch(trainer *t, int64_t epoch, const epoch_stats *e)
{
    if (t->bar) fprintf(stderr, "\r%*s\r", BAR_WIDTH + 60, "");
    printf("epoch %lld/%lld loss %.4f test_loss %.4f test_acc %.2f%% %.0f samples/s "
           "(%.1f s)\n",
           (long long)epoch + 1, (long long)t->o->epochs, e->train_loss, e->test_loss,
           100.0 * e->test_acc, e->sps, e->train_s);
    fflush(stdout);
    if (!t->metrics) return;
    fprintf(t->metrics,
            "{\"epoch\":%lld,\"epochs\":%lld,\"step\":%lld,\"model\":\"%s\",\"lr\":%.6g,"
            "\"train_loss\":%.6f,\"test_loss\":%.6f,\"test_acc\":%.6f,\"samples\":%zu,"
            "\"train_s\":%.3f,\"samples_per_s\":%.1f}\n",
            (long long)epoch + 1, (long long)t->o->epochs, (long long)t->step, model_name(t),
            (double)hoop_optim_lr(t->opt), e->train_loss, e->test_loss, e->test_acc, e->samples,
            e->train_s, e->sps);
    fflush(t->metrics);
}

// ----- loops ------------------------------------------------------------------------------

static hoop_status run_epoch(trainer *t, int64_t epoch, epoch_stats *e)
{
    size_t nb = hoop_loader_num_batches(t->loader), n, b = 0;
    double loss_sum = 0.0;
    float loss;
    int64_t t0 = hoop__now_ns();
    memset(e, 0, sizeof *e);
    HOOP_CHECK(hoop_loader_start_epoch(t->loader, (uint64_t)epoch));
    for (;;) {
        hoop_tensor *x;
        HOOP_CHECK(next_batch(t, &x, &n));
        if (n == 0) break;
        HOOP_CHECK(train_step(t, x, &loss));
        loss_sum += (double)loss * (double)n;
        e->samples += n;
        e->train_s = (double)(hoop__now_ns() - t0) * 1e-9;
        show_progress(t, epoch, ++b, nb, loss_sum / (double)e->samples,
                      (double)e->samples / e->train_s);
    }
    e->train_loss = loss_sum / (double)e->samples;
    e->sps = (double)e->samples / e->train_s;
    return evaluate(t, &e->test_loss, &e->test_acc);
}

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

/* Benchmark mode: bench_warmup untimed steps, then bench_steps timed ones; one JSON line. */
static hoop_status run_bench(trainer *t)
{
    const train_opts *o = t->o;
    int64_t total = o->bench_warmup + o->bench_steps, t0 = 0, epoch = 0, samples = 0;
    float loss = 0.0f;
    size_t n;
    HOOP_CHECK(hoop_loader_start_epoch(t->loader, 0));
    for (int64_t s = 0; s < total; s++) {
        if (s == o->bench_warmup) t0 = hoop__now_ns();
        hoop_tensor *x;
        HOOP_CHECK(next_batch(t, &x, &n));
        if (n < (size_t)o->batch_size) { /* keep every timed batch full-sized */
            hoop_tape_reset(t->tape);
            HOOP_CHECK(hoop_loader_start_epoch(t->loader, (uint64_t)++epoch));
            HOOP_CHECK(next_batch(t, &x, &n));
        }
        HOOP_CHECK(train_step(t, x, &loss));
        if (s >= o->bench_warmup) samples += (int64_t)n;
    }
    double secs = (double)(hoop__now_ns() - t0) * 1e-9;
    double flops = mlp_step_flops(t, (size_t)o->batch_size);
    printf("{\"bench\":\"hoop_train\",\"model\":\"%s\",\"threads\":%d,\"batch_size\":%lld,"
           "\"steps\":%lld,\"seconds\":%.4f,\"samples_per_s\":%.1f,\"step_mflop\":%.3f,"
           "\"gflops\":%.3f,\"last_loss\":%.4f}\n",
           model_name(t), openblas_get_num_threads(), (long long)o->batch_size,
           (long long)o->bench_steps, secs, (double)samples / secs, flops * 1e-6,
           flops * (double)o->bench_steps / secs * 1e-9, (double)loss);
    return HOOP_OK;
}

static hoop_status run(trainer *t)
{
    const train_opts *o = t->o;
    if (o->bench_steps > 0) return run_bench(t);
    printf("hoop-train: %s, %zu parameters, %zu train / %zu test samples, batch %lld, "
           "%s lr %g, %lld epochs, %d OpenBLAS thread(s)\n",
           model_name(t), hoop_model_numel(t->model), hoop_dataset_count(t->train),
           hoop_dataset_count(t->test), (long long)o->batch_size,
           o->optimizer == TRAIN_OPT_SGD ? "sgd" : "adamw", (double)o->lr, (long long)o->epochs,
           openblas_get_num_threads());
    fflush(stdout);
    for (int64_t epoch = 0; epoch < o->epochs; epoch++) {
        epoch_stats e;
        HOOP_CHECK(run_epoch(t, epoch, &e));
        report_epoch(t, epoch, &e);
    }
    return HOOP_OK;
}

int main(int argc, char **argv)
{
    train_opts o;
    trainer t;
    hoop_status st = train_cli_parse(&o, argc, argv);
    if (st == HOOP_ERR_USAGE) return 0; /* --help */
    if (st != HOOP_OK) {
        fprintf(stderr, "hoop-train: %s\n", hoop_last_error());
        return 2;
    }
    if (o.threads > 0) openblas_set_num_threads((int)o.threads);
    st = trainer_init(&t, &o);
    if (st != HOOP_OK) {
        fprintf(stderr, "hoop-train: %s\n", hoop_last_error());
        trainer_destroy(&t);
        return st == HOOP_ERR_INVALID ? 2 : 1;
    }
    st = run(&t);
    if (st != HOOP_OK) fprintf(stderr, "hoop-train: %s\n", hoop_last_error());
    hoop_status dst = trainer_destroy(&t);
    if (st == HOOP_OK && dst != HOOP_OK) {
        fprintf(stderr, "hoop-train: %s\n", hoop_last_error());
        st = dst;
    }
    return st == HOOP_OK ? 0 : 1;
}
