/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_ddp_cuda.c -- DDP with parameters on cuda, its ranks processes (each its own
 * CUDA context and compute stream, as hooprun's workers; thread-ranks of one process would
 * share the compute stream), meeting through env:// on loopback.
 *
 * The references: one process training the same model on the concatenated batch (P x B
 * samples), on cuda (a child process) and on the cpu (this process), and the same DDP job
 * on the cpu; the cpu engine is itself checked by check_ddp and check_autograd_ref. What
 * is checked: equivalence to those (and ranks bitwise equal), the same parameters with
 * the host layer's lazy streams (queued work runs only when the host needs it, so a
 * missing device wait trains on stale gradients), no device allocation in the steady
 * state, the statistics read from the device's times, unused parameters, no_sync
 * accumulation, uneven inputs (join, both divisors, error_on_uneven), and a rank killed
 * mid-training failing the others within seconds, naming it.
 *
 * In make check the backend is the host execution layer's (TEST_CUDA_HX_BACKEND): the
 * CUDA kernels and streams run on the CPU. tests/gpu/run.sh runs the same binary on the
 * GPU with the real module (every rank on the one GPU). 77 without a backend. The parent
 * never touches CUDA: the ranks and the cuda reference are children.
 */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "autograd/kern.h"
#include "coll_harness.h"
#include "core/clock.h"
#include "core/rng.h"
#include "hoop/autograd.h"
#include "hoop/ddp.h"
#include "hoop/nn.h"
#include "hoop/optim.h"
#include "run_suite.h"

#define MAXP 4
#define IN 12
#define CLASSES 5
#define STEPS 20
#define WARM 3 /* steps before the steady state */
#define B 8
#define NUMEL_MAX 2048
#define JOIN_STRIDE 12
#define MICRO 3

static const int64_t mlp_sizes[] = {IN, 16, 10, CLASSES};

static float data_x[MAXP * B * STEPS * IN * 2];
static int32_t data_y[MAXP * B * STEPS * 2];

static void make_data(void)
{
    hoop__rng r = hoop__rng_seed(2024);
    for (size_t i = 0; i < sizeof(data_x) / sizeof(data_x[0]); i++)
        data_x[i] = 2.0f * hoop__rng_float(&r) - 1.0f;
    for (size_t i = 0; i < sizeof(data_y) / sizeof(data_y[0]); i++)
        data_y[i] = (int32_t)hoop__rng_below(&r, CLASSES);
}

static size_t mlp_numel(void)
{
    size_t n = 0;
    for (int i = 0; i < 3; i++) n += (size_t)(mlp_sizes[i] * mlp_sizes[i + 1] + mlp_sizes[i + 1]);
    return n;
}

// ----------------------------------------------------------------- what a child reports

typedef struct rank_out {
    int ran;        /* the child got to its end */
    hoop_status st; /* the first failure (a step, join, wait) */
    char msg[600];  /* its message, or why the child gave up */
    float params[NUMEL_MAX];
    double grads[NUMEL_MAX]; /* no_sync: the reduced accumulated gradients */
    hoop_ddp_stats stats;
    struct hoop__mem_stats warm, end; /* device allocator after WARM steps and at the end */
    int64_t died_ns;                  /* the victim: when it killed itself */
    int64_t failed_ns;                /* the others: when they saw the failure */
} rank_out;

typedef struct shared_out {
    rank_out r[MAXP + 1]; /* [MAXP]: the one-process reference */
} shared_out;

static shared_out *out;

/* In a child: records why it gives up and exits 1 (Check's assertions belong to the
 * parent). */
static void child_fail(rank_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void child_fail(rank_out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->msg, sizeof(o->msg), fmt, ap);
    va_end(ap);
    fflush(stdout);
    _exit(1);
}

#define C_OK(o, call)                                                                     \
    do {                                                                                  \
        hoop_status st_ = (call);                                                         \
        if (st_ != HOOP_OK)                                                               \
            child_fail(o, "%s: %s: %s", #call, hoop_status_name(st_), hoop_last_error()); \
    } while (0)

static void keep(rank_out *o, hoop_status st)
{
    if (st == HOOP_OK || o->st != HOOP_OK) return;
    o->st = st;
    o->failed_ns = hoop__now_ns();
    snprintf(o->msg, sizeof(o->msg), "%s", hoop_last_error());
}

// ----------------------------------------------------------------- a job on one device

typedef struct job {
    hoop_device dev;
    hoop_model *m;
    hoop_optim *opt;
    hoop_tape *tape;
    hoop_tensor *x[MAXP]; /* long-lived inputs, one per row count */
} job;

static void job_init(rank_out *o, job *j, hoop_device dev, uint64_t seed)
{
    memset(j, 0, sizeof(*j));
    j->dev = dev;
    C_OK(o, hoop_model_new_mlp(&j->m, mlp_sizes, 4, seed));
    C_OK(o, hoop_model_to_device(j->m, dev));
    hoop_optim_config oc = HOOP_OPTIM_CONFIG_INIT;
    oc.lr = 0.1f;
    oc.momentum = 0.9f;
    C_OK(o, hoop_optim_new(&j->opt, &oc, hoop_model_params(j->m), hoop_model_param_count(j->m)));
    C_OK(o, hoop_tape_init(&j->tape));
}

static void job_free(job *j)
{
    hoop_tape_destroy(j->tape);
    hoop_optim_free(j->opt);
    hoop_model_free(j->m);
    for (int i = 0; i < MAXP; i++) hoop_tensor_free(j->x[i]);
}

/* The input tensor for n rows on the job's device, made once per size. */
static hoop_tensor *input(rank_out *o, job *j, int64_t n)
{
    for (int i = 0; i < MAXP; i++) {
        if (j->x[i] && hoop_tensor_dim(j->x[i], 0) == n) return j->x[i];
        if (j->x[i]) continue;
        const int64_t shape[2] = {n, IN};
        C_OK(o, hoop_tensor_new(&j->x[i], 2, shape, j->dev, 0));
        return j->x[i];
    }
    child_fail(o, "more than %d input sizes (%lld rows)", MAXP, (long long)n);
    return NULL;
}

/* Forward and loss over nb batches of B samples starting at firsts[i], concatenated; y
 * receives the labels (it must live until backward has run). */
static hoop_tensor *forward_batches(rank_out *o, job *j, const size_t *firsts, int nb, int32_t *y)
{
    static float x[MAXP * B * IN];
    for (int i = 0; i < nb; i++) {
        memcpy(x + (size_t)i * B * IN, data_x + firsts[i] * IN, B * IN * sizeof(float));
        memcpy(y + (size_t)i * B, data_y + firsts[i], B * sizeof(int32_t));
    }
    hoop_tensor *in = input(o, j, (int64_t)nb * B), *logits, *loss;
    C_OK(o, hoop_tensor_copy_from(in, x, (size_t)nb * B * IN));
    C_OK(o, hoop_model_forward(j->m, j->tape, in, &logits));
    C_OK(o, hoop_cross_entropy(j->tape, logits, y, 0.0f, &loss));
    return loss;
}

static void snapshot(rank_out *o, job *j, float *dst)
{
    for (size_t i = 0, k = 0; i < hoop_model_param_count(j->m); i++) {
        hoop_tensor *p = hoop_model_param(j->m, i);
        C_OK(o, hoop_tensor_copy_to_host(p, dst + k, hoop_tensor_count(p)));
        k += hoop_tensor_count(p);
    }
}

// ----------------------------------------------------------------- scenarios (in the ranks)

typedef struct join_case {
    int ws;
    int counts[MAXP];
    int divide_initial;
    int error_on_uneven;
} join_case;

typedef struct scenario {
    int mode; /* MODE_* */
    int ws;
    hoop_device dev;
    const join_case *jc;
    int error_on_unused;
    int victim; /* MODE_DEATH: the rank that dies */
    int lazy;   /* the host layer's lazy streams (TEST_HX_LAZY=1) */
} scenario;

enum { MODE_EQUIV, MODE_UNUSED, MODE_NO_SYNC, MODE_JOIN, MODE_DEATH, MODE_TRACE };

static char trace_path[64];

static hoop_ddp *wrap(rank_out *o, job *j, hoop_comm *comm, const hoop_ddp_config *dc)
{
    hoop_ddp *ddp;
    C_OK(o, hoop_ddp_init(&ddp, comm, hoop_model_params(j->m), hoop_model_param_count(j->m), dc));
    return ddp;
}

static hoop_ddp_config small_buckets(void)
{
    hoop_ddp_config dc = HOOP_DDP_CONFIG_INIT;
    dc.first_bucket_bytes = 256; /* several buckets even for this small model */
    dc.bucket_cap_bytes = 512;
    return dc;
}

/* P ranks x B samples a step for STEPS steps; the allocator's counters after WARM steps
 * and at the end. */
static void run_equiv(const scenario *sc, int rank, hoop_comm *comm, rank_out *o)
{
    job j;
    job_init(o, &j, sc->dev, 7 + (uint64_t)rank); /* DDP's broadcast makes them equal */
    hoop_ddp_config dc = small_buckets();
    hoop_ddp *ddp = wrap(o, &j, comm, &dc);
    for (int s = 0; s < STEPS; s++) {
        size_t first = ((size_t)s * (size_t)sc->ws + (size_t)rank) * B;
        int32_t y[B];
        hoop_tensor *loss = forward_batches(o, &j, &first, 1, y);
        C_OK(o, hoop_optim_zero_grad(j.opt));
        C_OK(o, hoop_ddp_backward(ddp, j.tape, loss));
        C_OK(o, hoop_optim_step(j.opt));
        hoop_tape_reset(j.tape);
        if (s == WARM - 1 && sc->dev == HOOP_DEVICE_CUDA)
            C_OK(o, hoop__device_mem_stats(sc->dev, &o->warm));
    }
    if (sc->dev == HOOP_DEVICE_CUDA) C_OK(o, hoop__device_mem_stats(sc->dev, &o->end));
    C_OK(o, hoop_ddp_wait(ddp));
    hoop_ddp_get_stats(ddp, &o->stats);
    snapshot(o, &j, o->params);
    C_OK(o, hoop_ddp_destroy(ddp));
    job_free(&j);
}

/* Rank 0 uses w2 in its loss, the others do not. */
static void run_unused(const scenario *sc, int rank, hoop_comm *comm, rank_out *o)
{
    hoop_model *m;
    C_OK(o, hoop_model_new(&m));
    int64_t ws_[2] = {CLASSES, IN}, bs[1] = {CLASSES};
    hoop_tensor *w1, *b1, *w2;
    C_OK(o, hoop_model_add_param(m, "w1", 2, ws_, &w1));
    C_OK(o, hoop_model_add_param(m, "b1", 1, bs, &b1));
    C_OK(o, hoop_model_add_param(m, "w2", 2, ws_, &w2));
    hoop__rng r = hoop__rng_seed(99);
    for (size_t i = 0; i < hoop_tensor_count(w1); i++) {
        hoop_tensor_data(w1)[i] = hoop__rng_float(&r) - 0.5f;
        hoop_tensor_data(w2)[i] = hoop__rng_float(&r) - 0.5f;
    }
    C_OK(o, hoop_model_to_device(m, sc->dev));
    job j = {.dev = sc->dev, .m = m};
    hoop_optim_config oc = HOOP_OPTIM_CONFIG_INIT;
    oc.lr = 0.1f;
    C_OK(o, hoop_optim_new(&j.opt, &oc, hoop_model_params(m), 3));
    C_OK(o, hoop_tape_init(&j.tape));
    hoop_ddp_config dc = HOOP_DDP_CONFIG_INIT;
    dc.error_on_unused = sc->error_on_unused;
    hoop_ddp *ddp = wrap(o, &j, comm, &dc);
    for (int s = 0; s < 3; s++) {
        hoop_tensor *x = input(o, &j, B), *y, *y2, *loss;
        C_OK(o, hoop_tensor_copy_from(x, data_x + (size_t)(s * 8 + rank) * B * IN, B * IN));
        C_OK(o, hoop_linear(j.tape, x, w1, b1, &y));
        if (rank == 0) {
            C_OK(o, hoop_linear(j.tape, x, w2, NULL, &y2));
            C_OK(o, hoop_add(j.tape, y, y2, &y));
        }
        C_OK(o, hoop_cross_entropy(j.tape, y, data_y, 0.0f, &loss));
        C_OK(o, hoop_optim_zero_grad(j.opt));
        keep(o, hoop_ddp_backward(ddp, j.tape, loss));
        C_OK(o, hoop_optim_step(j.opt));
        hoop_tape_reset(j.tape);
    }
    C_OK(o, hoop_ddp_wait(ddp));
    snapshot(o, &j, o->params);
    C_OK(o, hoop_ddp_destroy(ddp));
    job_free(&j);
}

/* MICRO micro-batches: all but the last under no_sync; the reduced gradients. */
static void run_no_sync(const scenario *sc, int rank, hoop_comm *comm, rank_out *o)
{
    job j;
    job_init(o, &j, sc->dev, 7);
    hoop_ddp *ddp = wrap(o, &j, comm, NULL);
    C_OK(o, hoop_model_zero_grad(j.m));
    for (int k = 0; k < MICRO; k++) {
        hoop_ddp_set_sync(ddp, k == MICRO - 1);
        size_t first = ((size_t)rank * MICRO + (size_t)k) * B;
        int32_t y[B];
        hoop_tensor *loss = forward_batches(o, &j, &first, 1, y);
        C_OK(o, hoop_ddp_backward(ddp, j.tape, loss));
        hoop_tape_reset(j.tape);
    }
    C_OK(o, hoop_ddp_wait(ddp));
    float g[NUMEL_MAX];
    for (size_t i = 0, k = 0; i < hoop_model_param_count(j.m); i++) {
        hoop_tensor *p = hoop_model_param(j.m, i);
        C_OK(o, hoop_tensor_grad_to_host(p, g, hoop_tensor_count(p)));
        for (size_t e = 0; e < hoop_tensor_count(p); e++) o->grads[k++] = g[e];
    }
    C_OK(o, hoop_ddp_destroy(ddp));
    job_free(&j);
}

static int join_batches(const join_case *jc, int epoch, int rank)
{
    return epoch == 0 ? jc->counts[rank] : 1;
}

static size_t join_first(const join_case *jc, int e, int k, int r)
{
    return ((size_t)(e * JOIN_STRIDE + k) * (size_t)jc->ws + (size_t)r) * B;
}

static hoop_status join_step(void *user)
{
    return hoop_optim_step(((job *)user)->opt);
}

/* Two epochs: the case's batch counts, then one batch each; hoop_ddp_join after each. */
static void run_join(const scenario *sc, int rank, hoop_comm *comm, rank_out *o)
{
    const join_case *jc = sc->jc;
    job j;
    job_init(o, &j, sc->dev, 7 + (uint64_t)rank);
    hoop_ddp_config dc = small_buckets();
    dc.divide_by_initial_world_size = jc->divide_initial;
    dc.error_on_uneven = jc->error_on_uneven;
    hoop_ddp *ddp = wrap(o, &j, comm, &dc);
    hoop_status st = HOOP_OK;
    for (int e = 0; e < 2 && st == HOOP_OK; e++) {
        for (int k = 0; k < join_batches(jc, e, rank) && st == HOOP_OK; k++) {
            size_t first = join_first(jc, e, k, rank);
            int32_t y[B];
            hoop_tensor *loss = forward_batches(o, &j, &first, 1, y);
            C_OK(o, hoop_optim_zero_grad(j.opt));
            st = hoop_ddp_backward(ddp, j.tape, loss);
            hoop_tape_reset(j.tape);
            keep(o, st);
            if (st == HOOP_OK) C_OK(o, hoop_optim_step(j.opt));
        }
        if (st != HOOP_OK) break; /* error_on_uneven: every rank stops in this round */
        st = hoop_ddp_join(ddp, join_step, &j);
        keep(o, st);
    }
    if (st == HOOP_OK) keep(o, hoop_ddp_wait(ddp));
    hoop_ddp_get_stats(ddp, &o->stats);
    snapshot(o, &j, o->params);
    C_OK(o, hoop_ddp_destroy(ddp));
    job_free(&j);
}

/* The victim kills itself after WARM steps; the others train on until a call fails. */
static void run_death(const scenario *sc, int rank, hoop_comm *comm, rank_out *o)
{
    job j;
    job_init(o, &j, sc->dev, 7);
    hoop_ddp_config dc = small_buckets();
    hoop_ddp *ddp = wrap(o, &j, comm, &dc);
    for (int s = 0; s < 200 && o->st == HOOP_OK; s++) {
        if (rank == sc->victim && s == WARM) {
            o->died_ns = hoop__now_ns();
            raise(SIGKILL);
        }
        size_t first = ((size_t)(s % STEPS) * (size_t)sc->ws + (size_t)rank) * B;
        int32_t y[B];
        hoop_tensor *loss = forward_batches(o, &j, &first, 1, y);
        C_OK(o, hoop_optim_zero_grad(j.opt));
        keep(o, hoop_ddp_backward(ddp, j.tape, loss));
        C_OK(o, hoop_optim_step(j.opt));
        hoop_tape_reset(j.tape);
    }
    keep(o, hoop_ddp_wait(ddp));
    /* each survivor must see the failure itself, before another's destroy closes links */
    for (int q = 0, waited = 0; q < sc->ws && waited < 10000; q++)
        while (q != sc->victim && !__atomic_load_n(&out->r[q].failed_ns, __ATOMIC_ACQUIRE) &&
               waited++ < 10000)
            usleep(1000);
    hoop_ddp_destroy(ddp); /* the comm failed: its status says so again */
    job_free(&j);
}

/* Two steps of a wider MLP (several buckets of real size), traced. */
static void run_trace(const scenario *sc, int rank, hoop_comm *comm, rank_out *o)
{
    static const int64_t wide[] = {256, 512, 512, 10};
    job j = {.dev = sc->dev};
    C_OK(o, hoop_model_new_mlp(&j.m, wide, 4, 3));
    C_OK(o, hoop_model_to_device(j.m, sc->dev));
    C_OK(o, hoop_tape_init(&j.tape));
    hoop_ddp_config dc = HOOP_DDP_CONFIG_INIT;
    dc.first_bucket_bytes = 64 << 10;
    hoop_ddp *ddp = wrap(o, &j, comm, &dc);
    C_OK(o, hoop_ddp_trace_enable(ddp, trace_path));
    const int64_t shape[2] = {64, 256};
    C_OK(o, hoop_tensor_new(&j.x[0], 2, shape, sc->dev, 0));
    float *x = calloc(64 * 256, sizeof(float));
    if (!x) child_fail(o, "no memory");
    for (size_t i = 0; i < 64 * 256; i++) x[i] = data_x[(i + (size_t)rank) % (sizeof(data_x) / 4)];
    C_OK(o, hoop_tensor_copy_from(j.x[0], x, 64 * 256));
    free(x);
    for (int s = 0; s < 2; s++) {
        hoop_tensor *logits, *loss;
        int64_t f0 = hoop_ddp_now_us();
        C_OK(o, hoop_model_forward(j.m, j.tape, j.x[0], &logits));
        C_OK(o, hoop_cross_entropy(j.tape, logits, data_y, 0.0f, &loss));
        hoop_ddp_trace_event(ddp, "forward", f0, hoop_ddp_now_us());
        C_OK(o, hoop_model_zero_grad(j.m));
        C_OK(o, hoop_ddp_backward(ddp, j.tape, loss));
        hoop_tape_reset(j.tape);
    }
    C_OK(o, hoop_ddp_trace_flush(ddp));
    hoop_ddp_get_stats(ddp, &o->stats);
    C_OK(o, hoop_ddp_destroy(ddp));
    job_free(&j);
}

static void rank_main(const scenario *sc, int rank, int port)
{
    rank_out *o = &out->r[rank];
    alarm(240); /* a hang ends the child; the parent sees it die */
    if (sc->lazy) setenv("TEST_HX_LAZY", "1", 1);
    h_set_env(rank, sc->ws, port, "check-ddp-cuda", "20");
    hoop_comm *comm;
    C_OK(o, hoop_comm_init_env(&comm));
    switch (sc->mode) {
    case MODE_EQUIV: run_equiv(sc, rank, comm, o); break;
    case MODE_UNUSED: run_unused(sc, rank, comm, o); break;
    case MODE_NO_SYNC: run_no_sync(sc, rank, comm, o); break;
    case MODE_JOIN: run_join(sc, rank, comm, o); break;
    case MODE_TRACE: run_trace(sc, rank, comm, o); break;
    default: run_death(sc, rank, comm, o); break;
    }
    hoop_status dst = hoop_comm_destroy(comm);
    if (dst != HOOP_OK && sc->mode != MODE_DEATH)
        child_fail(o, "hoop_comm_destroy: %s", hoop_last_error());
    o->ran = 1;
    fflush(stdout);
    _exit(0);
}

/* Runs sc's ranks as processes; every one but the victim must end well. */
static void run_ranks_proc(const scenario *sc)
{
    memset(out, 0, sizeof(*out));
    int port = h_free_port();
    pid_t pid[MAXP];
    fflush(stdout);
    for (int r = 0; r < sc->ws; r++) {
        pid[r] = fork();
        ck_assert_int_ge(pid[r], 0);
        if (pid[r] == 0) rank_main(sc, r, port);
    }
    for (int r = 0; r < sc->ws; r++) {
        int status;
        ck_assert_int_eq(waitpid(pid[r], &status, 0), pid[r]);
        if (sc->mode == MODE_DEATH && r == sc->victim) {
            ck_assert(WIFSIGNALED(status));
            continue;
        }
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0 && out->r[r].ran,
                      "rank %d of %d (%s) ended with status %#x: %s", r, sc->ws,
                      hoop__device_name(sc->dev), status, out->r[r].msg);
    }
}

// ----------------------------------------------------------------- references

/* One process, batch ws x B, the same data order; on cuda in a child (the parent stays
 * away from CUDA), on the cpu here. */
static void reference_run(rank_out *o, hoop_device dev, int ws)
{
    job j;
    job_init(o, &j, dev, 7);
    for (int s = 0; s < STEPS; s++) {
        size_t firsts[MAXP];
        for (int r = 0; r < ws; r++) firsts[r] = ((size_t)s * (size_t)ws + (size_t)r) * B;
        int32_t y[MAXP * B];
        hoop_tensor *loss = forward_batches(o, &j, firsts, ws, y);
        C_OK(o, hoop_optim_zero_grad(j.opt));
        C_OK(o, hoop_backward(j.tape, loss));
        C_OK(o, hoop_optim_step(j.opt));
        hoop_tape_reset(j.tape);
    }
    snapshot(o, &j, o->params);
    job_free(&j);
}

static void reference(hoop_device dev, int ws, float *dst)
{
    rank_out *o = &out->r[MAXP];
    memset(o, 0, sizeof(*o));
    if (dev == HOOP_DEVICE_CPU) {
        reference_run(o, dev, ws);
    } else {
        fflush(stdout);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            alarm(240);
            reference_run(o, dev, ws);
            o->ran = 1;
            _exit(0);
        }
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0 && o->ran,
                      "the cuda reference ended with %#x: %s", status, o->msg);
    }
    memcpy(dst, o->params, mlp_numel() * sizeof(float));
}

/* max |a - b| over max(|b|, 1e-3): the largest difference relative to the largest value. */
static double rel_diff(const float *a, const float *b, size_t n, double *absmax)
{
    double num = 0.0, den = 1e-3;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > num || d != d) num = d;
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    if (absmax) *absmax = num;
    return num / den;
}

// ----------------------------------------------------------------- tests

#define TOL 1e-4 /* cuda kernels add in another order than the cpu engine (tree sums) */

/* P ranks x B on cuda == one process on P x B (cuda and cpu), == the same DDP job on the
 * cpu; ranks bitwise equal; the same parameters on lazy streams; no device allocation in
 * the steady state; the statistics from the device's times. */
START_TEST(test_equivalence)
{
    const int ws = _i == 0 ? 2 : 3;
    const size_t n = mlp_numel();
    float *got = calloc(n, sizeof(float)), *ref_cuda = calloc(n, sizeof(float));
    float *ref_cpu = calloc(n, sizeof(float)), *ddp_cpu = calloc(n, sizeof(float));
    scenario sc = {.mode = MODE_EQUIV, .ws = ws, .dev = HOOP_DEVICE_CUDA};
    run_ranks_proc(&sc);
    memcpy(got, out->r[0].params, n * sizeof(float));
    for (int r = 1; r < ws; r++)
        ck_assert_msg(memcmp(out->r[r].params, got, n * sizeof(float)) == 0,
                      "rank %d's parameters differ from rank 0's", r);
    const hoop_ddp_stats st = out->r[0].stats;
    ck_assert_int_eq(st.steps, STEPS);
    ck_assert_int_ge(st.nbuckets, 3);
    ck_assert_int_eq(st.uneven_steps, 0);
    ck_assert_msg(st.backward_ms > 0 && st.comm_ms > 0 && st.hidden_ms >= 0 &&
                      st.hidden_ms <= st.comm_ms + 1e-9 && st.wait_ms >= 0,
                  "stats: backward %g comm %g hidden %g wait %g ms", st.backward_ms, st.comm_ms,
                  st.hidden_ms, st.wait_ms);
    for (int r = 0; r < ws; r++) {
        const rank_out *o = &out->r[r];
        ck_assert_msg(o->end.device_mallocs == o->warm.device_mallocs &&
                          o->end.device_frees == o->warm.device_frees,
                      "rank %d: %llu cudaMalloc and %llu cudaFree calls in %d steady steps", r,
                      (unsigned long long)(o->end.device_mallocs - o->warm.device_mallocs),
                      (unsigned long long)(o->end.device_frees - o->warm.device_frees),
                      STEPS - WARM);
    }
    printf("cuda DDP, %d ranks: %d buckets, backward %.3f ms/step, all-reduce %.3f ms/step, "
           "%.0f%% hidden, wait %.3f ms/step (device times); device allocator after %d "
           "steps: %llu cudaMalloc, %llu cudaFree, %zu bytes in use, none in the %d after\n",
           ws, st.nbuckets, st.backward_ms / STEPS, st.comm_ms / STEPS,
           st.comm_ms > 0 ? 100.0 * st.hidden_ms / st.comm_ms : 0.0, st.wait_ms / STEPS, WARM,
           (unsigned long long)out->r[0].warm.device_mallocs,
           (unsigned long long)out->r[0].warm.device_frees, out->r[0].warm.bytes_in_use,
           STEPS - WARM);
    /* the same job with the host layer's lazy streams (on a GPU: a second run) */
    sc.lazy = 1;
    run_ranks_proc(&sc);
    ck_assert_msg(memcmp(out->r[0].params, got, n * sizeof(float)) == 0,
                  "lazy streams: other parameters (max difference %g)",
                  rel_diff(out->r[0].params, got, n, NULL));
    /* the same DDP job on the cpu */
    sc.lazy = 0;
    sc.dev = HOOP_DEVICE_CPU;
    run_ranks_proc(&sc);
    memcpy(ddp_cpu, out->r[0].params, n * sizeof(float));
    reference(HOOP_DEVICE_CUDA, ws, ref_cuda);
    reference(HOOP_DEVICE_CPU, ws, ref_cpu);
    double a1, a2, a3, a4;
    const double r1 = rel_diff(got, ref_cuda, n, &a1), r2 = rel_diff(got, ref_cpu, n, &a2);
    const double r3 = rel_diff(got, ddp_cpu, n, &a3), r4 = rel_diff(ddp_cpu, ref_cpu, n, &a4);
    printf("%d ranks x %d on cuda, %d steps: max relative difference %.3g (abs %.3g) to one "
           "cuda process on %d, %.3g (abs %.3g) to one cpu process, %.3g (abs %.3g) to DDP on "
           "the cpu (which is %.3g from one cpu process)\n",
           ws, B, STEPS, r1, a1, ws * B, r2, a2, r3, a3, r4);
    ck_assert_msg(r1 <= TOL, "cuda DDP vs one cuda process: %g", r1);
    ck_assert_msg(r2 <= TOL, "cuda DDP vs one cpu process: %g", r2);
    ck_assert_msg(r3 <= TOL, "cuda DDP vs cpu DDP: %g", r3);
    ck_assert_msg(r1 > 0 || r2 > 0, "every reference agrees to the bit: is this comparing "
                                    "the same buffer?");
    free(got);
    free(ref_cuda);
    free(ref_cpu);
    free(ddp_cpu);
}
END_TEST

/* A parameter only rank 0 uses: reduced as zeros elsewhere (no hang), the ranks stay equal;
 * with error_on_unused rank 1 names it. */
START_TEST(test_unused_parameter)
{
    scenario sc = {.mode = MODE_UNUSED, .ws = 2, .dev = HOOP_DEVICE_CUDA, .error_on_unused = _i};
    run_ranks_proc(&sc);
    ck_assert_msg(out->r[0].st == HOOP_OK, "rank 0: %s", out->r[0].msg);
    if (_i) {
        ck_assert_int_eq(out->r[1].st, HOOP_ERR_USAGE);
        ck_assert_msg(strstr(out->r[1].msg, "'w2'") != NULL, "message: %s", out->r[1].msg);
    } else {
        ck_assert_msg(out->r[1].st == HOOP_OK, "rank 1: %s", out->r[1].msg);
    }
    ck_assert(memcmp(out->r[0].params, out->r[1].params, 3 * CLASSES * IN * sizeof(float)) == 0);
}
END_TEST

/* no_sync: MICRO - 1 local passes accumulate, the last reduces the sums: the rank average
 * of plain local gradient sums (float64, on the cpu). */
START_TEST(test_no_sync)
{
    const int ws = 2;
    const size_t n = mlp_numel();
    scenario sc = {.mode = MODE_NO_SYNC, .ws = ws, .dev = HOOP_DEVICE_CUDA};
    run_ranks_proc(&sc);
    double *want = calloc(n, sizeof(double));
    for (int r = 0; r < ws; r++) {
        job j;
        job_init(&out->r[MAXP], &j, HOOP_DEVICE_CPU, 7);
        hoop_model_zero_grad(j.m);
        for (int k = 0; k < MICRO; k++) {
            size_t first = ((size_t)r * MICRO + (size_t)k) * B;
            int32_t y[B];
            hoop_tensor *loss = forward_batches(&out->r[MAXP], &j, &first, 1, y);
            ck_assert_int_eq(hoop_backward(j.tape, loss), HOOP_OK);
            hoop_tape_reset(j.tape);
        }
        for (size_t i = 0, o = 0; i < hoop_model_param_count(j.m); i++) {
            hoop_tensor *p = hoop_model_param(j.m, i);
            for (size_t e = 0; e < hoop_tensor_count(p); e++)
                want[o++] += hoop_tensor_grad(p)[e] / ws;
        }
        job_free(&j);
    }
    double maxdiff = 0, maxabs = 0;
    for (size_t i = 0; i < n; i++) {
        maxdiff = fmax(maxdiff, fabs(out->r[0].grads[i] - want[i]));
        maxabs = fmax(maxabs, fabs(want[i]));
        ck_assert(out->r[0].grads[i] == out->r[1].grads[i]);
    }
    ck_assert_double_gt(maxabs, 1e-3);
    ck_assert_msg(maxdiff <= 1e-6 * fmax(1.0, maxabs) * 10,
                  "no_sync grads differ from the averaged sums by %g (largest %g)", maxdiff,
                  maxabs);
    free(want);
}
END_TEST

/* One process: at each step the ranks that still have data contribute their batch; the
 * mean over those nb batches, scaled by nb / ws for divide_initial. */
static void join_reference(const join_case *jc, float *dst)
{
    job j;
    job_init(&out->r[MAXP], &j, HOOP_DEVICE_CPU, 7);
    for (int e = 0; e < 2; e++) {
        int most = 0;
        for (int r = 0; r < jc->ws; r++)
            most = join_batches(jc, e, r) > most ? join_batches(jc, e, r) : most;
        for (int k = 0; k < most; k++) {
            size_t firsts[MAXP];
            int nb = 0;
            for (int r = 0; r < jc->ws; r++)
                if (k < join_batches(jc, e, r)) firsts[nb++] = join_first(jc, e, k, r);
            int32_t y[MAXP * B];
            hoop_tensor *loss = forward_batches(&out->r[MAXP], &j, firsts, nb, y);
            hoop_optim_zero_grad(j.opt);
            ck_assert_int_eq(hoop_backward(j.tape, loss), HOOP_OK);
            float scale = jc->divide_initial ? (float)nb / (float)jc->ws : 1.0f;
            for (size_t i = 0; i < hoop_model_param_count(j.m); i++) {
                hoop_tensor *p = hoop_model_param(j.m, i);
                for (size_t q = 0; q < hoop_tensor_count(p); q++) hoop_tensor_grad(p)[q] *= scale;
            }
            ck_assert_int_eq(hoop_optim_step(j.opt), HOOP_OK);
            hoop_tape_reset(j.tape);
        }
    }
    snapshot(&out->r[MAXP], &j, dst);
    job_free(&j);
}

static const join_case join_cases[] = {
    {3, {3, 5, 4}, 1, 0}, /* ranks join at different steps, the default divisor */
    {3, {3, 5, 4}, 0, 0}, /* the divisor of the ranks with data: rescaled on the device */
};

/* Uneven inputs: every rank takes every step, bitwise equal, as the reference. */
START_TEST(test_join_uneven)
{
    const join_case *jc = &join_cases[_i];
    const size_t n = mlp_numel();
    scenario sc = {.mode = MODE_JOIN, .ws = jc->ws, .dev = HOOP_DEVICE_CUDA, .jc = jc};
    run_ranks_proc(&sc);
    float *ref = calloc(n, sizeof(float));
    join_reference(jc, ref);
    int most = 0;
    for (int r = 0; r < jc->ws; r++) most = jc->counts[r] > most ? jc->counts[r] : most;
    for (int r = 0; r < jc->ws; r++) {
        const rank_out *o = &out->r[r];
        ck_assert_msg(o->st == HOOP_OK, "rank %d: %s", r, o->msg);
        ck_assert_msg(memcmp(o->params, out->r[0].params, n * sizeof(float)) == 0,
                      "rank %d's parameters differ from rank 0's", r);
        ck_assert_int_eq(o->stats.joined_steps, most - jc->counts[r]);
        int uneven = 0;
        for (int k = 0; k < jc->counts[r]; k++) {
            int active = 0;
            for (int q = 0; q < jc->ws; q++) active += k < jc->counts[q];
            uneven += active < jc->ws;
        }
        ck_assert_int_eq(o->stats.uneven_steps, uneven);
        ck_assert_int_eq(o->stats.steps, jc->counts[r] + 1);
    }
    double a, d = rel_diff(out->r[0].params, ref, n, &a);
    printf("join %d ranks, batches %d/%d/%d, divisor %s: max relative difference to the "
           "reference %.3g (abs %.3g)\n",
           jc->ws, jc->counts[0], jc->counts[1], jc->counts[2],
           jc->divide_initial ? "world_size" : "ranks with data", d, a);
    ck_assert_msg(d <= TOL, "case %d: join vs reference: %g", _i, d);
    free(ref);
}
END_TEST

/* error_on_uneven: the first uneven round fails on every rank, the joined one included. */
START_TEST(test_join_error_on_uneven)
{
    static const join_case jc = {2, {2, 3}, 1, 1};
    scenario sc = {.mode = MODE_JOIN, .ws = 2, .dev = HOOP_DEVICE_CUDA, .jc = &jc};
    run_ranks_proc(&sc);
    for (int r = 0; r < 2; r++) {
        ck_assert_int_eq(out->r[r].st, HOOP_ERR_USAGE);
        ck_assert_msg(strstr(out->r[r].msg, "1 of 2 ranks ran out of data") &&
                          strstr(out->r[r].msg, "error_on_uneven"),
                      "rank %d: %s", r, out->r[r].msg);
    }
}
END_TEST

/* A rank killed mid-training: the others' next calls fail, naming it, within seconds
 * (HOOP_TIMEOUT is 20 s), and nothing hangs. */
START_TEST(test_peer_dies)
{
    scenario sc = {.mode = MODE_DEATH, .ws = 3, .dev = HOOP_DEVICE_CUDA, .victim = 2};
    run_ranks_proc(&sc);
    const int64_t died = out->r[2].died_ns;
    ck_assert_int_gt(died, 0);
    for (int r = 0; r < 2; r++) {
        const rank_out *o = &out->r[r];
        const double secs = (double)(o->failed_ns - died) / 1e9;
        printf("rank %d: %s %.2f s after rank 2 died: %s\n", r, hoop_status_name(o->st), secs,
               o->msg);
        ck_assert_msg(o->st == HOOP_ERR_REMOTE, "rank %d: %s: %s", r, hoop_status_name(o->st),
                      o->msg);
        ck_assert_msg(strstr(o->msg, "rank 2") != NULL, "rank %d does not name rank 2: %s", r,
                      o->msg);
        ck_assert_msg(secs < 5.0, "rank %d saw it %.2f s after", r, secs);
    }
}
END_TEST

/* "ts" and "dur" of the n-th (from 0) complete event of rank pid on row tid whose name is
 * name exactly; 0 when there is none. */
static int find_event(const char *json, const char *name, int pid, int tid, int nth, long long *ts,
                      long long *dur)
{
    char key[64];
    snprintf(key, sizeof(key), "{\"name\":\"%s\",\"ph\":\"X\"", name);
    for (const char *p = strstr(json, key); p; p = strstr(p + 1, key)) {
        int epid, etid;
        const char *t = strstr(p, "\"ts\":");
        if (t &&
            sscanf(t, "\"ts\":%lld,\"dur\":%lld,\"pid\":%d,\"tid\":%d", ts, dur, &epid, &etid) ==
                4 &&
            epid == pid && etid == tid && nth-- == 0)
            return 1;
    }
    return 0;
}

/* The trace of DDP on cuda: per rank the training thread (host), the compute stream and
 * the bucket stream as named rows with device times; in the second step the first
 * bucket's all-reduce starts on the bucket stream while the compute stream still runs
 * backward; the statistics count time hidden. */
START_TEST(test_trace_streams)
{
    snprintf(trace_path, sizeof(trace_path), "/tmp/hoop-ddp-cuda-trace-XXXXXX");
    int fd = mkstemp(trace_path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    scenario sc = {.mode = MODE_TRACE, .ws = 2, .dev = HOOP_DEVICE_CUDA};
    run_ranks_proc(&sc);
    FILE *f = fopen(trace_path, "r");
    ck_assert_ptr_nonnull(f);
    static char json[1 << 18];
    size_t len = fread(json, 1, sizeof(json) - 1, f);
    json[len] = '\0';
    fclose(f);
    unlink(trace_path);
    for (int r = 0; r < 2; r++) {
        char row[128];
        static const char *const rows[3] = {"training thread (host)", "compute stream (device)",
                                            "bucket stream (device)"};
        static const int tids[3] = {0, 2, 3};
        for (int k = 0; k < 3; k++) {
            snprintf(row, sizeof(row), "\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}", r,
                     tids[k], rows[k]);
            ck_assert_msg(strstr(json, row) != NULL, "rank %d: no row '%s'", r, rows[k]);
        }
        long long bts, bdur, ats, adur, hts, hdur, lts, ldur;
        ck_assert_msg(find_event(json, "backward", r, 2, 1, &bts, &bdur),
                      "rank %d: no second backward on the compute stream", r);
        ck_assert_msg(find_event(json, "allreduce bucket 0", r, 3, 1, &ats, &adur),
                      "rank %d: no bucket 0 on the bucket stream", r);
        ck_assert_msg(find_event(json, "backward (host)", r, 0, 1, &hts, &hdur),
                      "rank %d: no backward on the training thread's row", r);
        const int nb = out->r[r].stats.nbuckets;
        char last[40];
        snprintf(last, sizeof(last), "allreduce bucket %d", nb - 1);
        ck_assert_msg(find_event(json, last, r, 3, 1, &lts, &ldur), "rank %d: no %s", r, last);
        printf("rank %d, step 2 (device times, us): backward %lld+%lld, bucket 0 %lld+%lld, "
               "bucket %d %lld+%lld\n",
               r, bts, bdur, ats, adur, nb - 1, lts, ldur);
        ck_assert_msg(bts <= ats && ats < bts + bdur,
                      "rank %d: bucket 0 starts at %lld, outside backward [%lld, %lld)", r, ats,
                      bts, bts + bdur);
        ck_assert_msg(lts >= ats + adur, "rank %d: the buckets overlap on their stream", r);
        ck_assert_int_ge(nb, 2);
        ck_assert_int_eq(out->r[r].stats.steps, 2);
        ck_assert_msg(out->r[r].stats.hidden_ms > 0, "rank %d: nothing hidden", r);
    }
}
END_TEST

/* Two thread-ranks of one process (coll_harness.h's run_ranks) asking for DDP on cuda:
 * both must be refused at once, naming both ranks, where they would otherwise share one
 * compute stream and wait for each other until HOOP_TIMEOUT. */
static void thread_rank_ddp(h_rank *h)
{
    hoop_model *m = NULL;
    hoop_ddp *ddp = NULL;
    if (hoop_model_new_mlp(&m, mlp_sizes, 4, 7) != HOOP_OK ||
        hoop_model_to_device(m, HOOP_DEVICE_CUDA) != HOOP_OK) {
        h_fail(h, "model on cuda: %s", hoop_last_error());
        hoop_model_free(m);
        return;
    }
    hoop_status st =
        hoop_ddp_init(&ddp, h->comm, hoop_model_params(m), hoop_model_param_count(m), NULL);
    if (st != HOOP_ERR_UNSUPPORTED || ddp != NULL)
        h_fail(h, "hoop_ddp_init gave %s (%s), not HOOP_ERR_UNSUPPORTED", hoop_status_name(st),
               hoop_last_error());
    else if (!strstr(hoop_last_error(), "ranks 0 and 1 are threads of one process"))
        h_fail(h, "message does not name both ranks: %s", hoop_last_error());
    hoop_ddp_destroy(ddp);
    hoop_model_free(m);
}

static int thread_ranks_child(void)
{
    run_ranks_ms(2, 5000, thread_rank_ddp, NULL); /* a hang fails at 5 s, not 300 */
    return 0;
}

START_TEST(test_thread_ranks_refused)
{
    ck_assert_int_eq(in_child(thread_ranks_child), 0);
}
END_TEST

/* 0 when a CUDA device can be had, else 77 having said why. */
static int probe_device(void)
{
    if (hoop_device_check(HOOP_DEVICE_CUDA) == HOOP_OK) return 0;
    printf("SKIP: no CUDA backend: %s\n", hoop_last_error());
    return 77;
}

int main(void)
{
    use_test_cuda_backend();
    const int probe = in_child(probe_device);
    if (probe != 0) return probe == 77 ? 77 : EXIT_FAILURE;
    if (mlp_numel() > NUMEL_MAX) return EXIT_FAILURE;
    make_data();
    out = mmap(NULL, sizeof(*out), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (out == MAP_FAILED) return EXIT_FAILURE;
    Suite *s = suite_create("ddp_cuda");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_equivalence, 0, 2);
    tcase_add_loop_test(tc, test_unused_parameter, 0, 2);
    tcase_add_test(tc, test_no_sync);
    tcase_add_loop_test(tc, test_join_uneven, 0, 2);
    tcase_add_test(tc, test_join_error_on_uneven);
    tcase_add_test(tc, test_peer_dies);
    tcase_add_test(tc, test_trace_streams);
    tcase_add_test(tc, test_thread_ranks_refused);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
