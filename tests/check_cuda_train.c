/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_cuda_train.c -- whole models on CUDA tensors against the same models on the
 * CPU engine: 20 training steps of the MLP and of the CNN (with dropout) agree to 1e-4
 * relative, step by step (the loss) and at the end (every parameter); the same dropout
 * masks; gradients through a chain of ops; a checkpoint written on one device resumes on
 * the other; the steady state allocates no device memory; and errors (mixed devices)
 * name their culprit; a training step captured as a CUDA graph and replayed
 * trains exactly as the eager loop does; the asynchronous uploads, and a double-buffered
 * loop on them that trains exactly as the synchronous one (on the host layer's lazy
 * streams, which run queued work only when the host waits for it).
 *
 * The CUDA backend is loaded through the public API, as a program would: in make check
 * it is the host execution layer's build of the CUDA sources (TEST_CUDA_HX_BACKEND, see
 * Makefile.am), so the CUDA kernels run on the CPU under ASan; tests/gpu/run.sh runs the
 * same binary with HOOP_CUDA_BACKEND at the real libhoop-cuda.so on the GPU.
 *
 * The reference is the CPU engine (itself checked against float64 references and finite
 * differences by check_autograd_ref and check_ops_grad).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autograd/kern.h"
#include "core/philox.h"
#include "hoop/autograd.h"
#include "hoop/ddp.h"
#include "hoop/nn.h"
#include "hoop/optim.h"
#include "run_suite.h"

#define OKAY(call)                                                                \
    do {                                                                          \
        hoop_status st_ = (call);                                                 \
        ck_assert_msg(st_ == HOOP_OK, "%s: %s: %s", #call, hoop_status_name(st_), \
                      hoop_last_error());                                         \
    } while (0)

#define STEPS 20
#define RTOL 1e-4

/* One training job on one device: a model, its optimizer, a tape. */
struct job {
    hoop_device dev;
    hoop_model *model;
    hoop_optim *opt;
    hoop_tape *tape;
    hoop_tensor *x; /* the batch, long-lived on dev */
};

static void job_init(struct job *j, hoop_device dev, int cnn, const hoop_optim_config *cfg,
                     int64_t batch, uint64_t seed)
{
    memset(j, 0, sizeof(*j));
    j->dev = dev;
    if (cnn) {
        hoop_cnn_config c = HOOP_CNN_CONFIG_INIT;
        c.height = c.width = 12;
        c.conv1_channels = 4;
        c.conv2_channels = 6;
        c.hidden = 16;
        c.dropout = 0.25f;
        OKAY(hoop_model_new_cnn(&j->model, &c, seed));
        const int64_t shape[4] = {batch, 1, 12, 12};
        OKAY(hoop_tensor_new(&j->x, 4, shape, dev, 0));
    } else {
        const int64_t sizes[4] = {48, 40, 24, 10};
        OKAY(hoop_model_new_mlp(&j->model, sizes, 4, seed));
        const int64_t shape[2] = {batch, 48};
        OKAY(hoop_tensor_new(&j->x, 2, shape, dev, 0));
    }
    /* Built (and initialised) on the host, then moved: both devices start equal. */
    OKAY(hoop_model_to_device(j->model, dev));
    OKAY(hoop_optim_new(&j->opt, cfg, hoop_model_params(j->model),
                        hoop_model_param_count(j->model)));
    OKAY(hoop_tape_init(&j->tape));
}

static void job_free(struct job *j)
{
    hoop_tape_destroy(j->tape);
    hoop_optim_free(j->opt);
    hoop_model_free(j->model);
    hoop_tensor_free(j->x);
}

/* One step on (pixels, labels); returns the loss. clip > 0 clips the global norm. */
/* A step between the batch upload and the loss read-back, also what a graph captures:
 * forward, loss (*loss), zero_grad, backward, clipping (clip > 0; norm non-NULL reads the
 * global norm back, which breaks a capture, so its status is not asserted), optimizer.
 * Labels in hoop_host_alloc memory for a capture. */
static void step_body(struct job *j, const int32_t *labels, float clip, float smoothing,
                      hoop_tensor **loss, float *norm)
{
    hoop_tensor *logits;
    OKAY(hoop_model_forward(j->model, j->tape, j->x, &logits));
    ck_assert_int_eq(hoop_tensor_device(logits), j->dev);
    ck_assert_int_eq(hoop_tensor_dim(logits, 0), hoop_tensor_dim(j->x, 0));
    OKAY(hoop_cross_entropy(j->tape, logits, labels, smoothing, loss));
    OKAY(hoop_optim_zero_grad(j->opt));
    OKAY(hoop_backward(j->tape, *loss));
    hoop_tensor *const *params = hoop_model_params(j->model);
    const size_t np = hoop_model_param_count(j->model);
    if (clip > 0.0f && norm == NULL) OKAY(hoop_clip_grad_norm(params, np, clip, NULL));
    if (clip > 0.0f && norm != NULL) (void)hoop_clip_grad_norm(params, np, clip, norm);
    OKAY(hoop_optim_step(j->opt));
}

static float job_step(struct job *j, const float *pixels, const int32_t *labels, int step,
                      float clip, float smoothing)
{
    OKAY(hoop_tensor_copy_from(j->x, pixels, hoop_tensor_count(j->x)));
    hoop_tape_reset(j->tape);
    hoop_tape_seed(j->tape, 1000u + (uint64_t)step);
    hoop_tensor *loss;
    step_body(j, labels, clip, smoothing, &loss, NULL);
    float l;
    OKAY(hoop_tensor_copy_to_host(loss, &l, 1));
    return l;
}

/* Random inputs in [-1, 1) and labels in 0..9 for step s (the same on both devices). */
static void batch_of(float *pixels, size_t count, int32_t *labels, int64_t n, int s)
{
    hoop_rng rng;
    hoop_rng_seed(&rng, 77u + (uint64_t)s);
    for (size_t i = 0; i < count; i++) pixels[i] = 2.0f * hoop_rng_uniform(&rng) - 1.0f;
    for (int64_t i = 0; i < n; i++) labels[i] = (int32_t)(hoop_rng_next(&rng) % 10u);
}

/* max |a - b| / max(max |b|, 1e-3) over count floats. */
static double rel_diff(const float *a, const float *b, size_t count)
{
    double num = 0.0, den = 1e-3;
    for (size_t i = 0; i < count; i++) {
        const double d = fabs((double)a[i] - (double)b[i]);
        if (d > num || d != d) num = d;
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return num / den;
}

/* Every parameter of the two jobs' models agree to rtol (values and gradients). */
static void assert_params_close(const struct job *gpu, const struct job *cpu, double rtol)
{
    const size_t np = hoop_model_param_count(cpu->model);
    ck_assert_uint_eq(hoop_model_param_count(gpu->model), np);
    for (size_t i = 0; i < np; i++) {
        hoop_tensor *pg = hoop_model_param(gpu->model, i), *pc = hoop_model_param(cpu->model, i);
        ck_assert_int_eq(hoop_tensor_device(pg), gpu->dev);
        const size_t n = hoop_tensor_count(pc);
        float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_nonnull(b);
        OKAY(hoop_tensor_copy_to_host(pg, a, n));
        OKAY(hoop_tensor_copy_to_host(pc, b, n));
        double r = rel_diff(a, b, n);
        ck_assert_msg(r <= rtol, "%s: values differ by %.3g relative (tolerance %.1g)",
                      hoop_tensor_name(pc), r, rtol);
        OKAY(hoop_tensor_grad_to_host(pg, a, n));
        OKAY(hoop_tensor_grad_to_host(pc, b, n));
        r = rel_diff(a, b, n);
        ck_assert_msg(r <= 10 * rtol, "%s: gradients differ by %.3g relative", hoop_tensor_name(pc),
                      r);
        free(a);
        free(b);
    }
}

/* Trains the same job on cuda and on the CPU for STEPS steps, comparing as it goes. */
static void train_both(int cnn, const hoop_optim_config *cfg, float clip, float smoothing)
{
    const int64_t n = 16;
    struct job gpu, cpu;
    job_init(&gpu, HOOP_DEVICE_CUDA, cnn, cfg, n, 5);
    job_init(&cpu, HOOP_DEVICE_CPU, cnn, cfg, n, 5);
    assert_params_close(&gpu, &cpu, 0.0); /* the same initial weights, exactly */
    const size_t count = hoop_tensor_count(cpu.x);
    float *pixels = malloc(count * sizeof(float));
    int32_t labels[16];
    ck_assert_ptr_nonnull(pixels);
    float first = 0.0f, last = 0.0f;
    for (int s = 0; s < STEPS; s++) {
        batch_of(pixels, count, labels, n, s % 4);
        const float lg = job_step(&gpu, pixels, labels, s, clip, smoothing);
        const float lc = job_step(&cpu, pixels, labels, s, clip, smoothing);
        ck_assert_msg(isfinite(lg) && fabsf(lg - lc) <= RTOL * fabsf(lc),
                      "step %d: loss %.8g on cuda, %.8g on cpu", s, (double)lg, (double)lc);
        if (s == 0) first = lc;
        last = lc;
    }
    /* the job learns (four batches seen five times), so the comparison is not of noise */
    ck_assert_msg(last < first - 0.05f, "loss %g -> %g: no learning", (double)first, (double)last);
    assert_params_close(&gpu, &cpu, RTOL);
    free(pixels);
    job_free(&gpu);
    job_free(&cpu);
}

START_TEST(test_mlp_sgd)
{
    hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
    cfg.lr = 0.05f;
    cfg.momentum = 0.9f;
    cfg.nesterov = 1;
    cfg.weight_decay = 1e-4f;
    train_both(0, &cfg, 0.0f, 0.0f);
}
END_TEST

START_TEST(test_mlp_adamw_clip_smoothing)
{
    hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
    cfg.kind = HOOP_OPTIM_ADAMW;
    cfg.lr = 3e-3f;
    cfg.weight_decay = 0.01f;
    train_both(0, &cfg, 0.5f, 0.1f);
}
END_TEST

START_TEST(test_cnn_dropout)
{
    hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
    cfg.lr = 0.05f;
    cfg.momentum = 0.9f;
    cfg.dampening = 0.1f;
    train_both(1, &cfg, 1.0f, 0.0f);
}
END_TEST

/* A chain of the ops the models leave out (matmul, add, tanh, sigmoid, gelu, relu,
 * softmax, dropout, reshape, flatten, mean, sum) on both devices: the outputs and the gradients of
 * the leaves agree. */
static float chain(hoop_device dev, const float *av, const float *bv, float *ga, float *gb)
{
    const int64_t sa[2] = {7, 5}, sb[2] = {5, 33};
    const int64_t sc[2] = {33, 4};
    hoop_tensor *a, *b, *c;
    OKAY(hoop_tensor_new(&a, 2, sa, dev, 1));
    OKAY(hoop_tensor_new(&b, 2, sb, dev, 1));
    OKAY(hoop_tensor_new(&c, 2, sc, dev, 0));
    OKAY(hoop_tensor_copy_from(a, av, 35));
    OKAY(hoop_tensor_copy_from(b, bv, 165));
    OKAY(hoop_tensor_copy_from(c, bv, 132)); /* any fixed values */
    hoop_tape *t;
    OKAY(hoop_tape_init(&t));
    hoop_tape_seed(t, 99);
    hoop_tensor *m, *u, *v, *w, *s, *d, *r, *f, *sm, *p, *mean, *sum, *loss;
    OKAY(hoop_matmul(t, a, b, &m));
    OKAY(hoop_tanh(t, m, &u));
    OKAY(hoop_sigmoid(t, m, &v));
    OKAY(hoop_add(t, u, v, &w));
    OKAY(hoop_gelu(t, w, &s));
    OKAY(hoop_dropout(t, s, 0.3f, &d));
    const int64_t rs[3] = {7, 3, 11};
    OKAY(hoop_reshape(t, d, 3, rs, &r));
    OKAY(hoop_flatten(t, r, &f));
    OKAY(hoop_relu(t, f, &u));
    OKAY(hoop_softmax(t, u, &sm));
    OKAY(hoop_matmul(t, sm, c, &p)); /* the mean of a softmax alone has no gradient */
    OKAY(hoop_mean(t, p, &mean));
    OKAY(hoop_sum(t, m, &sum));
    OKAY(hoop_add(t, mean, sum, &loss));
    OKAY(hoop_backward(t, loss));
    float l;
    OKAY(hoop_tensor_copy_to_host(loss, &l, 1));
    OKAY(hoop_tensor_grad_to_host(a, ga, 35));
    OKAY(hoop_tensor_grad_to_host(b, gb, 165));
    hoop_tape_destroy(t);
    hoop_tensor_free(a);
    hoop_tensor_free(b);
    hoop_tensor_free(c);
    return l;
}

START_TEST(test_op_chain)
{
    float av[35], bv[165], ga[2][35], gb[2][165];
    hoop_rng rng;
    hoop_rng_seed(&rng, 3);
    for (int i = 0; i < 35; i++) av[i] = hoop_rng_uniform(&rng) - 0.5f;
    for (int i = 0; i < 165; i++) bv[i] = hoop_rng_uniform(&rng) - 0.5f;
    const float lg = chain(HOOP_DEVICE_CUDA, av, bv, ga[0], gb[0]);
    const float lc = chain(HOOP_DEVICE_CPU, av, bv, ga[1], gb[1]);
    ck_assert_msg(fabsf(lg - lc) <= 1e-5f * fabsf(lc), "loss %.8g vs %.8g", (double)lg, (double)lc);
    ck_assert_msg(rel_diff(ga[0], ga[1], 35) <= 1e-5, "da differs by %g",
                  rel_diff(ga[0], ga[1], 35));
    ck_assert_msg(rel_diff(gb[0], gb[1], 165) <= 1e-5, "db differs by %g",
                  rel_diff(gb[0], gb[1], 165));
}
END_TEST

/* The same dropout mask on both devices: y = dropout(ones) is the mask itself; after a
 * reseed, both draw the new seed's mask (Philox computed here is the reference). */
START_TEST(test_dropout_masks)
{
    const int64_t shape[1] = {3001};
    float y[2][3001];
    for (int k = 0; k < 2; k++) {
        const hoop_device dev = k == 0 ? HOOP_DEVICE_CUDA : HOOP_DEVICE_CPU;
        hoop_tensor *x, *out;
        OKAY(hoop_tensor_new(&x, 1, shape, dev, 1));
        OKAY(hoop_tensor_fill(x, 1.0f));
        hoop_tape *t;
        OKAY(hoop_tape_init(&t));
        hoop_tape_seed(t, 0x5eed);
        OKAY(hoop_dropout(t, x, 0.4f, &out)); /* offset 0 */
        OKAY(hoop_dropout(t, x, 0.4f, &out)); /* offset 3001: the second draw */
        OKAY(hoop_tensor_copy_to_host(out, y[k], 3001));
        hoop_tape_reset(t);
        hoop_tape_seed(t, 0xabcdef); /* a new key, offsets from 0 again */
        OKAY(hoop_dropout(t, x, 0.4f, &out));
        float z[3001];
        OKAY(hoop_tensor_copy_to_host(out, z, 3001));
        for (int i = 0; i < 3001; i++) {
            const float want =
                hoop__philox_uniform(0xabcdef, (uint64_t)i) < 0.4f ? 0.0f : 1.0f / 0.6f;
            ck_assert_msg(z[i] == want, "%s, reseeded: element %d is %g, Philox says %g",
                          k == 0 ? "cuda" : "cpu", i, (double)z[i], (double)want);
        }
        hoop_tape_destroy(t);
        hoop_tensor_free(x);
    }
    int zeros = 0;
    for (int i = 0; i < 3001; i++) {
        ck_assert_msg(y[0][i] == y[1][i], "element %d: %g on cuda, %g on cpu", i, (double)y[0][i],
                      (double)y[1][i]);
        zeros += y[1][i] == 0.0f;
    }
    ck_assert_msg(zeros > 1050 && zeros < 1350, "%d of 3001 dropped at p = 0.4", zeros);
}
END_TEST

/* Saved on cuda, loaded on the CPU (and the reverse): the next step agrees. */
START_TEST(test_checkpoint_across_devices)
{
    char path[] = "/tmp/hoop-cuda-ckpt-XXXXXX";
    const int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
    cfg.kind = HOOP_OPTIM_ADAMW;
    cfg.lr = 1e-2f;
    const int64_t n = 8;
    float pixels[8 * 48];
    int32_t labels[8];
    for (int dir = 0; dir < 2; dir++) {
        const hoop_device from = dir == 0 ? HOOP_DEVICE_CUDA : HOOP_DEVICE_CPU;
        const hoop_device to = dir == 0 ? HOOP_DEVICE_CPU : HOOP_DEVICE_CUDA;
        struct job a, b;
        job_init(&a, from, 0, &cfg, n, 11);
        job_init(&b, to, 0, &cfg, n, 12); /* other weights: the load must replace them */
        for (int s = 0; s < 3; s++) {
            batch_of(pixels, sizeof(pixels) / sizeof(float), labels, n, s);
            job_step(&a, pixels, labels, s, 0.0f, 0.0f);
        }
        OKAY(hoop_checkpoint_save(path, hoop_model_params(a.model), hoop_model_param_count(a.model),
                                  a.opt, NULL, 0));
        OKAY(hoop_checkpoint_load(path, hoop_model_params(b.model), hoop_model_param_count(b.model),
                                  b.opt, NULL, 0, NULL));
        ck_assert_int_eq(hoop_optim_step_count(b.opt), 3);
        batch_of(pixels, sizeof(pixels) / sizeof(float), labels, n, 3);
        const float la = job_step(&a, pixels, labels, 3, 0.0f, 0.0f);
        const float lb = job_step(&b, pixels, labels, 3, 0.0f, 0.0f);
        ck_assert_msg(fabsf(la - lb) <= 1e-5f * fabsf(la), "direction %d: %.8g vs %.8g", dir,
                      (double)la, (double)lb);
        assert_params_close(&a, &b, 1e-5);
        job_free(&a);
        job_free(&b);
    }
    unlink(path);
}
END_TEST

/* After the first step, the tape's arenas and the optimizer allocate nothing more: the
 * arena keeps its size and the device allocator makes no cudaMalloc or cudaFree, eager or
 * replayed. */
START_TEST(test_steady_state)
{
    hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
    cfg.momentum = 0.9f;
    struct job j;
    job_init(&j, HOOP_DEVICE_CUDA, 1, &cfg, 8, 3);
    float pixels[8 * 144];
    int32_t labels[8];
    size_t arena = 0;
    for (int s = 0; s < 6; s++) {
        batch_of(pixels, 8 * 144, labels, 8, s);
        job_step(&j, pixels, labels, s, 1.0f, 0.0f);
        if (s == 1) arena = hoop_tape_arena_bytes(j.tape);
        if (s > 1) ck_assert_uint_eq(hoop_tape_arena_bytes(j.tape), arena);
    }
    ck_assert_uint_gt(arena, 0);
    struct hoop__mem_stats a, b;
    OKAY(hoop__device_mem_stats(HOOP_DEVICE_CUDA, &a));
    ck_assert_uint_gt(a.device_mallocs, 0);
    for (int s = 6; s < 12; s++) {
        batch_of(pixels, 8 * 144, labels, 8, s);
        job_step(&j, pixels, labels, s, 1.0f, 0.0f);
    }
    OKAY(hoop__device_mem_stats(HOOP_DEVICE_CUDA, &b));
    ck_assert_msg(b.device_mallocs == a.device_mallocs && b.device_frees == a.device_frees,
                  "6 eager steps made %llu cudaMalloc and %llu cudaFree calls",
                  (unsigned long long)(b.device_mallocs - a.device_mallocs),
                  (unsigned long long)(b.device_frees - a.device_frees));
    /* captured and replayed: none either (the labels in pinned memory) */
    int32_t *pinned;
    OKAY(hoop_host_alloc(HOOP_DEVICE_CUDA, sizeof(labels), (void **)&pinned));
    memcpy(pinned, labels, sizeof(labels));
    hoop_tape_reset(j.tape);
    hoop_graph *graph;
    hoop_tensor *loss;
    OKAY(hoop_graph_begin(HOOP_DEVICE_CUDA));
    step_body(&j, pinned, 1.0f, 0.0f, &loss, NULL);
    OKAY(hoop_graph_end(&graph));
    OKAY(hoop__device_mem_stats(HOOP_DEVICE_CUDA, &a));
    for (int r = 0; r < 5; r++) OKAY(hoop_graph_replay(graph));
    float l;
    OKAY(hoop_tensor_copy_to_host(loss, &l, 1));
    OKAY(hoop__device_mem_stats(HOOP_DEVICE_CUDA, &b));
    ck_assert_uint_eq(b.device_mallocs, a.device_mallocs);
    ck_assert_uint_eq(b.device_frees, a.device_frees);
    ck_assert(isfinite(l));
    hoop_graph_free(graph);
    hoop_host_free(HOOP_DEVICE_CUDA, pinned);
    job_free(&j);
}
END_TEST

START_TEST(test_errors)
{
    const int64_t s[2] = {4, 3}, sw[2] = {2, 3};
    hoop_tensor *x, *w, *y;
    OKAY(hoop_tensor_new(&x, 2, s, HOOP_DEVICE_CPU, 0));
    OKAY(hoop_tensor_new(&w, 2, sw, HOOP_DEVICE_CUDA, 1));
    hoop_tape *t;
    OKAY(hoop_tape_init(&t));
    ck_assert_int_eq(hoop_linear(t, x, w, NULL, &y), HOOP_ERR_INVALID);
    assert_error_has("x is on cpu but w is on cuda", NULL);
    /* a device's gradient buffer cannot move: the caller owns it */
    ck_assert_int_eq(hoop_tensor_to_device(w, HOOP_DEVICE_CPU), HOOP_OK);
    ck_assert_int_eq(hoop_tensor_device(w), HOOP_DEVICE_CPU);
    OKAY(hoop_tensor_to_device(w, HOOP_DEVICE_CUDA));
    float host[6];
    OKAY(hoop_tensor_grad_to_host(w, host, 6));
    for (int i = 0; i < 6; i++) ck_assert_float_eq(host[i], 0.0f);
    ck_assert_int_eq(hoop_tensor_copy_to_host(w, host, 5), HOOP_ERR_INVALID);
    assert_error_has("count=5", "(2, 3)");
    hoop_tape_destroy(t);
    hoop_tensor_free(x);
    hoop_tensor_free(w);
}
END_TEST

/* An optimizer made before its parameters moved (the order nn.h says not to use) must say
 * so, not hand the other device's pointers to its kernels (a host loop on device memory,
 * or a kernel on host memory, on a GPU). Both directions; nothing is updated. */
START_TEST(test_optim_after_move)
{
    const hoop_device devs[2] = {HOOP_DEVICE_CPU, HOOP_DEVICE_CUDA};
    for (int d = 0; d < 2; d++) {
        const int64_t n = 4;
        hoop_tensor *p;
        OKAY(hoop_tensor_new(&p, 1, &n, devs[d], 1));
        hoop_tensor_set_name(p, "fc9.weight");
        OKAY(hoop_tensor_fill(p, 1.0f));
        hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
        hoop_optim *o;
        OKAY(hoop_optim_new(&o, &cfg, &p, 1));
        OKAY(hoop_tensor_to_device(p, devs[1 - d]));
        ck_assert_int_eq(hoop_optim_zero_grad(o), HOOP_ERR_USAGE);
        assert_error_has("fc9.weight", "move the model first");
        ck_assert_int_eq(hoop_optim_step(o), HOOP_ERR_USAGE);
        assert_error_has("hoop_optim_step", "fc9.weight");
        ck_assert_int_eq(hoop_optim_step_count(o), 0);
        float host[4];
        OKAY(hoop_tensor_copy_to_host(p, host, 4));
        ck_assert_float_eq(host[0], 1.0f);
        hoop_optim_free(o);
        hoop_tensor_free(p);
    }
}
END_TEST

// ----- CUDA graphs

/* One job trains eagerly, the other captures its third step and replays it for the rest,
 * with a learning rate that changes every step (the schedule reaches the replays through
 * the optimizer's device scalars) and dropout reseeded every step (through the tape's
 * device seed). The two must agree exactly: a replay runs the captured kernels on the
 * same data. With fail_first, a first capture is broken (the norm read back inside it):
 * it must leave the step to run eagerly as if nothing happened, and capture comes a step
 * later. */
static void graph_vs_eager(int cnn, hoop_optim_kind kind, int fail_first)
{
    const int64_t n = 8;
    hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
    cfg.kind = kind;
    cfg.lr = kind == HOOP_OPTIM_SGD ? 0.05f : 3e-3f;
    cfg.momentum = kind == HOOP_OPTIM_SGD ? 0.9f : 0.0f;
    struct job e, g;
    job_init(&e, HOOP_DEVICE_CUDA, cnn, &cfg, n, 21);
    job_init(&g, HOOP_DEVICE_CUDA, cnn, &cfg, n, 21);
    const size_t count = hoop_tensor_count(e.x);
    float *pixels = malloc(count * sizeof(float));
    int32_t *labels;
    ck_assert_ptr_nonnull(pixels);
    OKAY(hoop_host_alloc(HOOP_DEVICE_CUDA, (size_t)n * sizeof(int32_t), (void **)&labels));
    hoop_graph *graph = NULL;
    hoop_tensor *gloss = NULL;
    for (int s = 0; s < 10; s++) {
        batch_of(pixels, count, labels, n, s);
        const float lr = cfg.lr * (1.0f - 0.05f * (float)s);
        hoop_optim_set_lr(e.opt, lr);
        hoop_optim_set_lr(g.opt, lr);
        const float le = job_step(&e, pixels, labels, s, 1.0f, 0.0f);
        OKAY(hoop_tensor_copy_from(g.x, pixels, count));
        hoop_tape_seed(g.tape, 1000u + (uint64_t)s);
        float lg;
        const int capture_at = fail_first ? 3 : 2;
        if (fail_first && s == 2) {
            hoop_tape_reset(g.tape);
            OKAY(hoop_graph_begin(HOOP_DEVICE_CUDA));
            float norm;
            step_body(&g, labels, 1.0f, 0.0f, &gloss, &norm);
            ck_assert_int_eq(hoop_graph_end(&graph), HOOP_ERR_UNSUPPORTED);
            ck_assert_ptr_null(graph);
            ck_assert_int_eq(hoop_optim_step_count(g.opt), 2); /* taken back */
        }
        if (s < capture_at) {
            lg = job_step(&g, pixels, labels, s, 1.0f, 0.0f); /* warm-up: the arena's size */
        } else {
            if (s == capture_at) {
                hoop_tape_reset(g.tape);
                hoop_tape_seed(g.tape, 1000u + (uint64_t)s);
                OKAY(hoop_graph_begin(HOOP_DEVICE_CUDA));
                step_body(&g, labels, 1.0f, 0.0f, &gloss, NULL);
                OKAY(hoop_graph_end(&graph));
            }
            OKAY(hoop_graph_replay(graph));
            OKAY(hoop_tensor_copy_to_host(gloss, &lg, 1));
        }
        ck_assert_msg(lg == le, "step %d: loss %.9g replayed, %.9g eager", s, (double)lg,
                      (double)le);
        ck_assert_int_eq(hoop_optim_step_count(g.opt), s + 1);
    }
    assert_params_close(&g, &e, 0.0);
    hoop_graph_free(graph);
    hoop_host_free(HOOP_DEVICE_CUDA, labels);
    free(pixels);
    job_free(&e);
    job_free(&g);
}

START_TEST(test_graph_mlp_sgd)
{
    graph_vs_eager(0, HOOP_OPTIM_SGD, 0);
}
END_TEST

START_TEST(test_graph_cnn_adamw)
{
    graph_vs_eager(1, HOOP_OPTIM_ADAMW, 1);
}
END_TEST

/* What breaks a capture is reported at hoop_graph_end, naming it, and leaves the thread
 * able to run eagerly and to capture again; misuse is HOOP_ERR_USAGE. */
START_TEST(test_graph_errors)
{
    hoop_graph *graph = (hoop_graph *)1;
    ck_assert_int_eq(hoop_graph_begin(HOOP_DEVICE_CPU), HOOP_ERR_UNSUPPORTED);
    assert_error_has("hoop_graph_begin", "CPU");
    ck_assert_int_eq(hoop_graph_end(&graph), HOOP_ERR_USAGE);
    ck_assert_ptr_null(graph);
    ck_assert_int_eq(hoop_graph_replay(NULL), HOOP_ERR_INVALID);
    const int64_t shape[1] = {64};
    hoop_tensor *t;
    OKAY(hoop_tensor_new(&t, 1, shape, HOOP_DEVICE_CUDA, 0));
    float host[64];
    OKAY(hoop_graph_begin(HOOP_DEVICE_CUDA));
    ck_assert_int_eq(hoop_graph_begin(HOOP_DEVICE_CUDA), HOOP_ERR_USAGE);
    OKAY(hoop_tensor_fill(t, 2.0f));
    /* a copy that waits for the device cannot be captured */
    ck_assert_int_ne(hoop_tensor_copy_to_host(t, host, 64), HOOP_OK);
    ck_assert_int_eq(hoop_graph_end(&graph), HOOP_ERR_UNSUPPORTED);
    assert_error_has("hoop_graph_end", "capture");
    ck_assert_ptr_null(graph);
    /* eager again, and a capture that works: fill 3, replayed after an eager fill 5 */
    OKAY(hoop_tensor_fill(t, 1.0f));
    OKAY(hoop_graph_begin(HOOP_DEVICE_CUDA));
    OKAY(hoop_tensor_fill(t, 3.0f));
    OKAY(hoop_graph_end(&graph));
    OKAY(hoop_tensor_copy_to_host(t, host, 64));
    ck_assert_float_eq(host[0], 1.0f); /* captured, not run */
    OKAY(hoop_tensor_fill(t, 5.0f));
    OKAY(hoop_graph_replay(graph));
    OKAY(hoop_tensor_copy_to_host(t, host, 64));
    ck_assert_float_eq(host[63], 3.0f);
    hoop_graph_free(graph);
    hoop_tensor_free(t);
}
END_TEST

/* A capture whose tape arena must grow fails, even when the allocator's cache serves the
 * new block without a cudaMalloc (which alone would break it): the next reset merges the
 * arena's blocks and frees the one the graph writes, and a replay then wrote into
 * whatever took that memory next. */
START_TEST(test_graph_arena_growth)
{
    const int64_t small = 1024, big = 1 << 20; /* 4 KiB, 4 MiB */
    hoop_tensor *a, *b, *cached, *y;
    OKAY(hoop_tensor_new(&a, 1, &small, HOOP_DEVICE_CUDA, 0));
    OKAY(hoop_tensor_new(&b, 1, &big, HOOP_DEVICE_CUDA, 0));
    OKAY(hoop_tensor_new(&cached, 1, &big, HOOP_DEVICE_CUDA, 0));
    hoop_tensor_free(cached); /* a 4 MiB block in the allocator's cache */
    hoop_tape *t;
    OKAY(hoop_tape_init(&t));
    OKAY(hoop_add(t, a, a, &y)); /* warm-up: the arena's first block */
    hoop_tape_reset(t);
    const size_t before = hoop_tape_arena_bytes(t);
    hoop_graph *graph = (hoop_graph *)1;
    OKAY(hoop_graph_begin(HOOP_DEVICE_CUDA));
    OKAY(hoop_add(t, a, a, &y)); /* fits */
    ck_assert_int_ne(hoop_add(t, b, b, &y), HOOP_OK);
    assert_error_has("arena", "capture");
    ck_assert_int_eq(hoop_graph_end(&graph), HOOP_ERR_UNSUPPORTED);
    assert_error_has("hoop_graph_end", "arena must not grow");
    ck_assert_ptr_null(graph);
    ck_assert_uint_eq(hoop_tape_arena_bytes(t), before);
    /* eager, the same op grows the arena as usual */
    hoop_tape_reset(t);
    OKAY(hoop_add(t, b, b, &y));
    hoop_tape_destroy(t);
    hoop_tensor_free(a);
    hoop_tensor_free(b);
}
END_TEST

/* hoop__tensor_upload_async / _download_async and the events (kern.h), on both devices,
 * under the host layer's lazy streams (TEST_HX_LAZY=1, set before this child first uses
 * CUDA: the copy stream's work runs only when something waits for it): x holds -1 when the
 * upload is queued, so an op that did not wait for the upload (hoop__event_wait) doubles
 * -1; the pinned source is refilled only after the host waited for the step that read it.
 * The real GPU runs this without the switch. */
START_TEST(test_upload_async)
{
    setenv("TEST_HX_LAZY", "1", 1);
    const int64_t n = 1000;
    const hoop_device devs[2] = {HOOP_DEVICE_CPU, HOOP_DEVICE_CUDA};
    for (int d = 0; d < 2; d++) {
        hoop_tensor *x, *y;
        hoop_tape *tape;
        float *src, *out;
        hoop__event *up, *fr;
        OKAY(hoop_tensor_new(&x, 1, &n, devs[d], 0));
        OKAY(hoop_tape_init(&tape));
        OKAY(hoop_host_alloc(devs[d], (size_t)n * sizeof(float), (void **)&src));
        OKAY(hoop_host_alloc(devs[d], (size_t)n * sizeof(float), (void **)&out));
        OKAY(hoop__event_new(devs[d], &up));
        OKAY(hoop__event_new(devs[d], &fr));
        OKAY(hoop__event_sync(fr)); /* never recorded: nothing to wait for */
        for (int round = 1; round <= 3; round++) {
            OKAY(hoop_tensor_fill(x, -1.0f));
            OKAY(hoop__event_record(fr));
            OKAY(hoop__event_sync(fr)); /* the refill below: the last reader has run */
            for (int64_t i = 0; i < n; i++) src[i] = (float)(round * i);
            OKAY(hoop__tensor_upload_async(x, src, (size_t)n, fr, up));
            OKAY(hoop__event_wait(up));
            OKAY(hoop_add(tape, x, x, &y));
            OKAY(hoop__tensor_download_async(y, out, (size_t)n));
            OKAY(hoop__event_record(fr));
            OKAY(hoop__event_sync(fr));
            for (int64_t i = 0; i < n; i++)
                ck_assert_msg(out[i] == (float)(2 * round * i), "%s round %d: [%lld] = %g, want %g",
                              hoop__device_name(devs[d]), round, (long long)i, (double)out[i],
                              (double)(2 * round * i));
            hoop_tape_reset(tape);
        }
        /* errors name the call and the culprit */
        ck_assert_int_eq(hoop__tensor_upload_async(x, src, 999, NULL, NULL), HOOP_ERR_INVALID);
        assert_error_has("hoop__tensor_upload_async", "count=999");
        ck_assert_int_eq(hoop__tensor_download_async(x, NULL, 1000), HOOP_ERR_INVALID);
        assert_error_has("hoop__tensor_download_async", "dst is NULL");
        hoop__event *other;
        OKAY(hoop__event_new(devs[1 - d], &other));
        ck_assert_int_eq(hoop__tensor_upload_async(x, src, 1000, other, NULL), HOOP_ERR_INVALID);
        assert_error_has("after is an event of", hoop__device_name(devs[1 - d]));
        hoop__event_free(other);
        ck_assert_int_eq(hoop__event_new((hoop_device)7, &other), HOOP_ERR_INVALID);
        ck_assert_ptr_null(other);
        ck_assert_int_eq(hoop__event_sync(NULL), HOOP_ERR_INVALID);
        hoop__event_free(NULL);
        hoop__event_free(up);
        hoop__event_free(fr);
        hoop_host_free(devs[d], src);
        hoop_host_free(devs[d], out);
        hoop_tape_destroy(tape);
        hoop_tensor_free(x);
    }
}
END_TEST

/* hoop-train's double-buffered loop (two pinned batches, two device inputs, the step of
 * batch k issued before batch k+1 is gathered and uploaded, every loss copied back and
 * read one step late) on lazy streams trains exactly as the synchronous loop does (the
 * same losses, bit for bit, and the same parameters), and its steady state makes no
 * cudaMalloc or cudaFree. */
START_TEST(test_double_buffered)
{
    setenv("TEST_HX_LAZY", "1", 1);
    enum { N = 8, STEPS_DB = 10 };
    hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
    cfg.momentum = 0.9f;
    struct job ref, db;
    job_init(&ref, HOOP_DEVICE_CUDA, 1, &cfg, N, 4);
    job_init(&db, HOOP_DEVICE_CUDA, 1, &cfg, N, 4);
    const size_t count = hoop_tensor_count(ref.x);
    float *pixels[2], *loss[2];
    int32_t *labels[2];
    hoop_tensor *in[2] = {db.x, NULL};
    hoop__event *up[2], *fr[2];
    const int64_t shape[4] = {N, 1, 12, 12};
    OKAY(hoop_tensor_new(&in[1], 4, shape, HOOP_DEVICE_CUDA, 0));
    for (int i = 0; i < 2; i++) {
        OKAY(hoop_host_alloc(HOOP_DEVICE_CUDA, count * sizeof(float), (void **)&pixels[i]));
        OKAY(hoop_host_alloc(HOOP_DEVICE_CUDA, N * sizeof(int32_t), (void **)&labels[i]));
        OKAY(hoop_host_alloc(HOOP_DEVICE_CUDA, sizeof(float), (void **)&loss[i]));
        OKAY(hoop__event_new(HOOP_DEVICE_CUDA, &up[i]));
        OKAY(hoop__event_new(HOOP_DEVICE_CUDA, &fr[i]));
        OKAY(hoop__event_record(fr[i]));
    }
    float want[STEPS_DB], got[STEPS_DB];
    float *ref_pixels = malloc(count * sizeof(float));
    int32_t ref_labels[N];
    ck_assert_ptr_nonnull(ref_pixels);
    for (int s = 0; s < STEPS_DB; s++) {
        batch_of(ref_pixels, count, ref_labels, N, s);
        want[s] = job_step(&ref, ref_pixels, ref_labels, s, 0.0f, 0.0f);
    }
    struct hoop__mem_stats a, b;
    /* prefetch(i): wait for the slot's last step, read its loss, refill, upload */
#define PREFETCH(i, s)                                                              \
    do {                                                                            \
        OKAY(hoop__event_sync(fr[i]));                                              \
        if ((s) >= 2) got[(s)-2] = *loss[i];                                        \
        if ((s) < STEPS_DB) {                                                       \
            batch_of(pixels[i], count, labels[i], N, (s));                          \
            OKAY(hoop__tensor_upload_async(in[i], pixels[i], count, fr[i], up[i])); \
        }                                                                           \
    } while (0)
    PREFETCH(0, 0);
    for (int s = 0; s < STEPS_DB; s++) {
        const int i = s % 2;
        if (s == 4) OKAY(hoop__device_mem_stats(HOOP_DEVICE_CUDA, &a));
        OKAY(hoop__event_wait(up[i]));
        db.x = in[i];
        hoop_tape_seed(db.tape, 1000u + (uint64_t)s);
        hoop_tensor *l;
        step_body(&db, labels[i], 0.0f, 0.0f, &l, NULL);
        OKAY(hoop__tensor_download_async(l, loss[i], 1));
        OKAY(hoop__event_record(fr[i]));
        hoop_tape_reset(db.tape);
        PREFETCH(1 - i, s + 1);
    }
    PREFETCH((STEPS_DB + 1) % 2, STEPS_DB + 1);
#undef PREFETCH
    OKAY(hoop__device_mem_stats(HOOP_DEVICE_CUDA, &b));
    ck_assert_msg(b.device_mallocs == a.device_mallocs && b.device_frees == a.device_frees,
                  "6 double-buffered steps made %llu cudaMalloc and %llu cudaFree calls",
                  (unsigned long long)(b.device_mallocs - a.device_mallocs),
                  (unsigned long long)(b.device_frees - a.device_frees));
    for (int s = 0; s < STEPS_DB; s++)
        ck_assert_msg(got[s] == want[s], "step %d: loss %.9g double-buffered, %.9g synchronous", s,
                      (double)got[s], (double)want[s]);
    db.x = in[0];
    assert_params_close(&db, &ref, 0.0);
    for (int i = 0; i < 2; i++) {
        hoop__event_free(up[i]);
        hoop__event_free(fr[i]);
        hoop_host_free(HOOP_DEVICE_CUDA, pixels[i]);
        hoop_host_free(HOOP_DEVICE_CUDA, labels[i]);
        hoop_host_free(HOOP_DEVICE_CUDA, loss[i]);
    }
    hoop_tensor_free(in[1]);
    free(ref_pixels);
    job_free(&ref);
    job_free(&db);
}
END_TEST

static Suite *cuda_train_suite(void)
{
    Suite *s = suite_create("cuda_train");
    TCase *tc = tcase_create("train");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_mlp_sgd);
    tcase_add_test(tc, test_mlp_adamw_clip_smoothing);
    tcase_add_test(tc, test_cnn_dropout);
    tcase_add_test(tc, test_op_chain);
    tcase_add_test(tc, test_dropout_masks);
    tcase_add_test(tc, test_checkpoint_across_devices);
    tcase_add_test(tc, test_steady_state);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_graph_mlp_sgd);
    tcase_add_test(tc, test_graph_cnn_adamw);
    tcase_add_test(tc, test_graph_errors);
    tcase_add_test(tc, test_optim_after_move);
    tcase_add_test(tc, test_graph_arena_growth);
    tcase_add_test(tc, test_upload_async);
    tcase_add_test(tc, test_double_buffered);
    suite_add_tcase(s, tc);
    return s;
}

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
    /* in a child: the parent must not initialise CUDA before the cases fork */
    const int probe = in_child(probe_device);
    if (probe != 0) return probe == 77 ? 77 : EXIT_FAILURE;
    return run_suite(cuda_train_suite());
}
