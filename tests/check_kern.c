/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_kern.c -- the kernel table seam (src/autograd/kern.c, kern.h): device checks
 * of the ops and optimizers, dispatch, the table's ABI check, and a backward's failure
 * reaching hoop_backward's caller.
 *
 * A CUDA tensor is made by flipping a CPU tensor's device field through the internal
 * header; the CUDA backend is pointed at a path that does not exist (HOOP_CUDA_BACKEND),
 * so the ops must report the loader's message. The tensor is flipped back before it is
 * freed.
 * Backward failures are injected with hoop__kern_override: a copy of the CPU table whose
 * GEMM fails on a chosen call.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autograd/autograd_impl.h"
#include "autograd/kern.h"
#include "core/check.h"
#include "hoop/autograd.h"
#include "hoop/nn.h"
#include "hoop/optim.h"
#include "run_suite.h"

#define NO_BACKEND "/nonexistent/libhoop-cuda.so"

static hoop_tensor *new_tensor(int ndim, const int64_t *shape, int requires_grad, float v)
{
    hoop_tensor *t;
    ck_assert_int_eq(hoop_tensor_new(&t, ndim, shape, HOOP_DEVICE_CPU, requires_grad), HOOP_OK);
    hoop_tensor_fill(t, v);
    return t;
}

static void free_tensor(hoop_tensor *t)
{
    t->device = HOOP_DEVICE_CPU;
    hoop_tensor_free(t);
}

// ----- dispatch and the ABI check -----------------------------------------------------------

START_TEST(test_dispatch)
{
    ck_assert_ptr_eq(hoop__kern_for(HOOP_DEVICE_CPU), &hoop__kern_cpu);
    ck_assert_ptr_null(hoop__kern_for(HOOP_DEVICE_CUDA));
    const struct hoop__kern *k0;
    ck_assert_int_eq(hoop__kern_get(HOOP_DEVICE_CUDA, "f", &k0), HOOP_ERR_UNSUPPORTED);
    assert_error_has("f: device cuda: cannot load the CUDA backend " NO_BACKEND, "No such file");
    ck_assert_int_eq(hoop_device_check(HOOP_DEVICE_CUDA), HOOP_ERR_UNSUPPORTED);
    assert_error_has("cannot load the CUDA backend", NULL);
    ck_assert_int_eq(hoop_device_check(HOOP_DEVICE_CPU), HOOP_OK);
    ck_assert_ptr_null(hoop__kern_for((hoop_device)7));
    ck_assert_str_eq(hoop__kern_cpu.name, "cpu");
    ck_assert_str_eq(hoop__device_name(HOOP_DEVICE_CUDA), "cuda");
    ck_assert_int_eq(hoop__kern_validate(&hoop__kern_cpu, "the cpu table"), HOOP_OK);
    struct hoop__kern k = hoop__kern_cpu;
    k.size -= sizeof(void *); /* a table built against an older, shorter struct */
    ck_assert_int_eq(hoop__kern_validate(&k, "the cuda kernel table"), HOOP_ERR_INVALID);
    assert_error_has("the cuda kernel table has size", "another version");
    ck_assert_int_eq(hoop__kern_override(HOOP_DEVICE_CPU, &k), HOOP_ERR_INVALID);
    ck_assert_ptr_eq(hoop__kern_for(HOOP_DEVICE_CPU), &hoop__kern_cpu);
    k = hoop__kern_cpu;
    k.col2im = NULL;
    ck_assert_int_eq(hoop__kern_validate(&k, "the cuda kernel table"), HOOP_ERR_INVALID);
    assert_error_has("has no col2im", NULL);
}
END_TEST

/* The CPU's side streams and timers (kern.h: stream_new .. event_elapsed): its work is
 * done when a call returns, so a stream is a token and a timer reads the host's clock. */
START_TEST(test_cpu_streams_and_timers)
{
    const struct hoop__kern *k = &hoop__kern_cpu;
    void *s = NULL, *a, *b, *plain;
    ck_assert_int_eq(k->stream_new(&s), HOOP_OK);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(k->timer_new(&a), HOOP_OK);
    ck_assert_int_eq(k->timer_new(&b), HOOP_OK);
    ck_assert_int_eq(k->event_new(&plain), HOOP_OK);
    double ms = -1;
    ck_assert_int_eq(k->event_elapsed(a, b, &ms), HOOP_ERR_USAGE);
    assert_error_has("never recorded", NULL);
    ck_assert_int_eq(k->stream_record(s, a), HOOP_OK);
    struct timespec nap = {0, 10 * 1000 * 1000};
    nanosleep(&nap, NULL);
    ck_assert_int_eq(k->compute_record(b), HOOP_OK);
    ck_assert_int_eq(k->stream_wait(s, b), HOOP_OK);
    int done = 0;
    ck_assert_int_eq(k->event_query(b, &done), HOOP_OK);
    ck_assert_int_eq(done, 1);
    ck_assert_int_eq(k->event_elapsed(a, b, &ms), HOOP_OK);
    ck_assert_msg(ms >= 9.5 && ms < 2000.0, "10 ms apart: %g ms", ms);
    ck_assert_int_eq(k->event_elapsed(a, plain, &ms), HOOP_ERR_USAGE);
    k->event_free(a);
    k->event_free(b);
    k->event_free(plain);
    k->stream_free(s);
}
END_TEST

/* The table's GEMM follows cblas_sgemm's row-major convention with transposes, alpha and
 * beta: A = [1 2 3; 4 5 6] (2, 3), B = [1 0; 0 1; 1 1] (3, 2). A B = [4 5; 10 11] (by
 * hand); A^T A (3, 3) has row 0 = [17 22 27]. */
START_TEST(test_cpu_gemm_conventions)
{
    const float A[6] = {1, 2, 3, 4, 5, 6}, B[6] = {1, 0, 0, 1, 1, 1};
    float C[4] = {1, 1, 1, 1};
    ck_assert_int_eq(hoop__kern_cpu.gemm(0, 0, 2, 2, 3, 1.0f, A, 3, B, 2, 0.0f, C, 2), HOOP_OK);
    const float ab[4] = {4, 5, 10, 11};
    for (int i = 0; i < 4; i++) ck_assert_float_eq(C[i], ab[i]);
    /* C = 2 A B + C, through B^T stored as (2, 3). */
    const float Bt[6] = {1, 0, 1, 0, 1, 1};
    ck_assert_int_eq(hoop__kern_cpu.gemm(0, 1, 2, 2, 3, 2.0f, A, 3, Bt, 3, 1.0f, C, 2), HOOP_OK);
    for (int i = 0; i < 4; i++) ck_assert_float_eq(C[i], 3.0f * ab[i]);
    float AtA[9];
    ck_assert_int_eq(hoop__kern_cpu.gemm(1, 0, 3, 3, 2, 1.0f, A, 3, A, 3, 0.0f, AtA, 3), HOOP_OK);
    ck_assert_float_eq(AtA[0], 17.0f);
    ck_assert_float_eq(AtA[1], 22.0f);
    ck_assert_float_eq(AtA[2], 27.0f);
}
END_TEST

// ----- mixing devices -----------------------------------------------------------------------

START_TEST(test_mixed_devices)
{
    hoop_tape *tape;
    ck_assert_int_eq(hoop_tape_init(&tape), HOOP_OK);
    const int64_t sx[2] = {4, 3}, sw[2] = {2, 3}, sb[1] = {2};
    hoop_tensor *x = new_tensor(2, sx, 0, 1.0f), *w = new_tensor(2, sw, 1, 0.5f);
    hoop_tensor *b = new_tensor(1, sb, 1, 0.0f), *y;
    w->device = HOOP_DEVICE_CUDA;
    ck_assert_int_eq(hoop_linear(tape, x, w, b, &y), HOOP_ERR_INVALID);
    assert_error_has("hoop_linear: x is on cpu but w is on cuda", "must be on one device");
    ck_assert_ptr_null(y);
    w->device = HOOP_DEVICE_CPU;
    b->device = HOOP_DEVICE_CUDA;
    ck_assert_int_eq(hoop_linear(tape, x, w, b, &y), HOOP_ERR_INVALID);
    assert_error_has("hoop_linear: x is on cpu but bias is on cuda", NULL);
    b->device = HOOP_DEVICE_CPU;

    hoop_tensor *a2 = new_tensor(2, sx, 0, 2.0f);
    a2->device = HOOP_DEVICE_CUDA;
    ck_assert_int_eq(hoop_add(tape, x, a2, &y), HOOP_ERR_INVALID);
    assert_error_has("hoop_add: a is on cpu but b is on cuda", NULL);
    ck_assert_int_eq(hoop_add(tape, a2, x, &y), HOOP_ERR_INVALID);
    assert_error_has("hoop_add: a is on cuda but b is on cpu", NULL);

    const int64_t si[4] = {1, 2, 4, 4}, sk[4] = {3, 2, 3, 3}, sc[1] = {3};
    hoop_tensor *img = new_tensor(4, si, 0, 1.0f), *k = new_tensor(4, sk, 1, 0.1f);
    hoop_tensor *kb = new_tensor(1, sc, 1, 0.0f);
    k->device = HOOP_DEVICE_CUDA;
    ck_assert_int_eq(hoop_conv2d(tape, img, k, kb, 1, 1, &y), HOOP_ERR_INVALID);
    assert_error_has("hoop_conv2d: x is on cpu but w is on cuda", NULL);
    k->device = HOOP_DEVICE_CPU;
    ck_assert_int_eq(hoop_conv2d(tape, img, k, kb, 1, 1, &y), HOOP_OK); /* all on cpu: fine */
    ck_assert_uint_eq(hoop_tape_node_count(tape), 1);

    /* Optimizers and clipping: all parameters on one device. */
    hoop_tensor *params[3] = {w, b, k};
    hoop_optim *opt;
    hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
    k->device = HOOP_DEVICE_CUDA;
    ck_assert_int_eq(hoop_optim_new(&opt, &cfg, params, 3), HOOP_ERR_INVALID);
    assert_error_has("hoop_optim_new: params[0] is on cpu but params[2] is on cuda", NULL);
    float norm;
    ck_assert_int_eq(hoop_clip_grad_norm(params, 3, 1.0f, &norm), HOOP_ERR_INVALID);
    assert_error_has("hoop_clip_grad_norm: params[0] is on cpu but params[2] is on cuda", NULL);

    free_tensor(x), free_tensor(w), free_tensor(b), free_tensor(a2);
    free_tensor(img), free_tensor(k), free_tensor(kb);
    ck_assert_int_eq(hoop_tape_destroy(tape), HOOP_OK);
}
END_TEST

START_TEST(test_no_cuda_kernels)
{
    hoop_tape *tape;
    ck_assert_int_eq(hoop_tape_init(&tape), HOOP_OK);
    const int64_t sx[2] = {4, 3}, sw[2] = {2, 3}, sb[1] = {2};
    hoop_tensor *x = new_tensor(2, sx, 0, 1.0f), *w = new_tensor(2, sw, 1, 0.5f);
    hoop_tensor *b = new_tensor(1, sb, 1, 0.0f), *y;
    x->device = w->device = b->device = HOOP_DEVICE_CUDA;
    ck_assert_int_eq(hoop_linear(tape, x, w, b, &y), HOOP_ERR_UNSUPPORTED);
    assert_error_has("hoop_linear: device cuda: cannot load the CUDA backend " NO_BACKEND, NULL);
    ck_assert_int_eq(hoop_add(tape, x, x, &y), HOOP_ERR_UNSUPPORTED);
    assert_error_has("hoop_add: device cuda: cannot load the CUDA backend " NO_BACKEND, NULL);
    ck_assert_int_eq(hoop_relu(tape, x, &y), HOOP_ERR_UNSUPPORTED);
    assert_error_has("hoop_relu: device cuda: cannot load the CUDA backend " NO_BACKEND, NULL);
    const int64_t si[4] = {1, 2, 4, 4}, sk[4] = {3, 2, 3, 3};
    hoop_tensor *img = new_tensor(4, si, 0, 1.0f), *k = new_tensor(4, sk, 1, 0.1f);
    img->device = k->device = HOOP_DEVICE_CUDA;
    ck_assert_int_eq(hoop_conv2d(tape, img, k, NULL, 1, 0, &y), HOOP_ERR_UNSUPPORTED);
    assert_error_has("hoop_conv2d: device cuda: cannot load the CUDA backend " NO_BACKEND, NULL);
    ck_assert_uint_eq(hoop_tape_node_count(tape), 0);
    hoop_tensor *params[2] = {w, b};
    hoop_optim *opt;
    hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
    ck_assert_int_eq(hoop_optim_new(&opt, &cfg, params, 2), HOOP_ERR_UNSUPPORTED);
    assert_error_has("hoop_optim_new: device cuda: cannot load the CUDA backend " NO_BACKEND, NULL);
    free_tensor(x), free_tensor(w), free_tensor(b), free_tensor(img), free_tensor(k);
    ck_assert_int_eq(hoop_tape_destroy(tape), HOOP_OK);
}
END_TEST

// ----- a backward's failure reaches hoop_backward's caller ----------------------------------

static int gemm_calls, gemm_fail_at;

static hoop_status failing_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                                int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (++gemm_calls == gemm_fail_at) return HOOP_ERROR(HOOP_ERR_CUDA, "injected");
    return hoop__kern_cpu.gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static int hooks_fired[4];

static void count_hook(hoop_tensor *p, void *user)
{
    (void)p;
    hooks_fired[(intptr_t)user]++;
}

struct two_layers {
    hoop_tensor *x, *p[4]; /* w1, b1, w2, b2 */
};

static void two_layers_new(struct two_layers *m)
{
    const int64_t sx[2] = {4, 3}, sw1[2] = {5, 3}, sb1[1] = {5}, sw2[2] = {2, 5}, sb2[1] = {2};
    m->x = new_tensor(2, sx, 0, 1.0f);
    m->p[0] = new_tensor(2, sw1, 1, 0.25f);
    m->p[1] = new_tensor(1, sb1, 1, 0.5f);
    m->p[2] = new_tensor(2, sw2, 1, -0.5f);
    m->p[3] = new_tensor(1, sb2, 1, 1.0f);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(hoop_tensor_set_grad_hook(m->p[i], count_hook, (void *)(intptr_t)i),
                         HOOP_OK);
}

/* loss = mean(linear(linear(x, w1, b1), w2, b2)); GEMM calls: 2 forward, then in
 * backward 3 (dh) and 4 (dw2) for layer 2, 5 (dw1) for layer 1 (x needs no gradient). */
static void two_layers_forward(hoop_tape *tape, struct two_layers *m, hoop_tensor **loss)
{
    hoop_tensor *h, *y;
    ck_assert_int_eq(hoop_linear(tape, m->x, m->p[0], m->p[1], &h), HOOP_OK);
    ck_assert_int_eq(hoop_linear(tape, h, m->p[2], m->p[3], &y), HOOP_OK);
    ck_assert_int_eq(hoop_mean(tape, y, loss), HOOP_OK);
}

START_TEST(test_backward_failure)
{
    hoop_tape *tape;
    ck_assert_int_eq(hoop_tape_init(&tape), HOOP_OK);
    struct two_layers m;
    two_layers_new(&m);
    struct hoop__kern bad = hoop__kern_cpu;
    bad.gemm = failing_gemm;
    gemm_calls = 0;
    gemm_fail_at = 5; /* layer 1's dw1 */
    memset(hooks_fired, 0, sizeof(hooks_fired));
    ck_assert_int_eq(hoop__kern_override(HOOP_DEVICE_CPU, &bad), HOOP_OK);
    hoop_tensor *loss;
    two_layers_forward(tape, &m, &loss); /* calls 1 and 2 pass through */
    const hoop_status st = hoop_backward(tape, loss);
    ck_assert_int_eq(hoop__kern_override(HOOP_DEVICE_CPU, NULL), HOOP_OK);
    ck_assert_int_eq(st, HOOP_ERR_CUDA);
    assert_error_has("hoop_backward: linear backward: injected", NULL);
    ck_assert_int_eq(gemm_calls, 5);
    /* As hoop_backward's comment says: layer 2 finished (its hooks fired, b2's grad is
     * d mean / d b2 = 1/2 each); layer 1 stopped at dw1, so b1 is untouched and no hook
     * of layer 1 fired. */
    ck_assert_int_eq(hooks_fired[3], 1);
    ck_assert_int_eq(hooks_fired[2], 1);
    ck_assert_int_eq(hooks_fired[1], 0);
    ck_assert_int_eq(hooks_fired[0], 0);
    ck_assert_float_eq(hoop_tensor_grad(m.p[3])[1], 0.5f);
    ck_assert_float_eq(hoop_tensor_grad(m.p[1])[0], 0.0f);
    ck_assert(!hoop_tape_grad_was_ready(tape, m.p[0]));

    /* The real table is back: a new step runs. */
    hoop_tape_reset(tape);
    for (int i = 0; i < 4; i++) hoop_tensor_zero_grad(m.p[i]);
    two_layers_forward(tape, &m, &loss);
    ck_assert_int_eq(hoop_backward(tape, loss), HOOP_OK);
    ck_assert_float_eq(hoop_tensor_grad(m.p[3])[1], 0.5f);
    /* d loss / d b1[j] = 4 rows * 1/8 * sum_o w2[o][j] = 0.5 * (2 * -0.5) */
    ck_assert_float_eq(hoop_tensor_grad(m.p[1])[0], -0.5f);
    for (int i = 0; i < 4; i++) free_tensor(m.p[i]);
    free_tensor(m.x);
    ck_assert_int_eq(hoop_tape_destroy(tape), HOOP_OK);
}
END_TEST

/* A node keeps the table its forward ran with: an override installed between forward
 * and backward does not reach the nodes already recorded. */
START_TEST(test_node_keeps_its_table)
{
    hoop_tape *tape;
    ck_assert_int_eq(hoop_tape_init(&tape), HOOP_OK);
    struct two_layers m;
    two_layers_new(&m);
    hoop_tensor *loss;
    two_layers_forward(tape, &m, &loss); /* on the real table */
    struct hoop__kern bad = hoop__kern_cpu;
    bad.gemm = failing_gemm;
    gemm_calls = 0;
    gemm_fail_at = 1; /* the first GEMM it sees fails */
    ck_assert_int_eq(hoop__kern_override(HOOP_DEVICE_CPU, &bad), HOOP_OK);
    const hoop_status st = hoop_backward(tape, loss);
    ck_assert_int_eq(hoop__kern_override(HOOP_DEVICE_CPU, NULL), HOOP_OK);
    ck_assert_int_eq(st, HOOP_OK);
    ck_assert_int_eq(gemm_calls, 0);
    ck_assert_float_eq(hoop_tensor_grad(m.p[1])[0], -0.5f);
    for (int i = 0; i < 4; i++) free_tensor(m.p[i]);
    free_tensor(m.x);
    ck_assert_int_eq(hoop_tape_destroy(tape), HOOP_OK);
}
END_TEST

/* A backward whose arena cannot grow returns HOOP_ERR_NOMEM naming its op. */
static hoop_status greedy_backward(hoop_tape *tape, struct hoop_node *n)
{
    (void)n;
    if (hoop__arena_alloc(tape, SIZE_MAX - 1) == NULL) return HOOP_ERR_NOMEM;
    return HOOP_OK;
}

START_TEST(test_backward_nomem)
{
    hoop_tape *tape;
    ck_assert_int_eq(hoop_tape_init(&tape), HOOP_OK);
    const int64_t s[1] = {3};
    hoop_tensor *p = new_tensor(1, s, 1, 1.0f), *y, *loss;
    ck_assert_int_eq(hoop__tensor_arena(tape, HOOP_DEVICE_CPU, 1, s, &y), HOOP_OK);
    memcpy(y->data, p->data, 3 * sizeof(float));
    ck_assert_int_eq(
        hoop__tape_record(tape, "greedy", greedy_backward, &hoop__kern_cpu, &p, 1, y, NULL),
        HOOP_OK);
    ck_assert_int_eq(hoop_sum(tape, y, &loss), HOOP_OK);
    ck_assert_int_eq(hoop_backward(tape, loss), HOOP_ERR_NOMEM);
    assert_error_has("hoop_backward: greedy backward: tape arena", NULL);
    free_tensor(p);
    ck_assert_int_eq(hoop_tape_destroy(tape), HOOP_OK);
}
END_TEST

static Suite *kern_suite(void)
{
    Suite *s = suite_create("kern");
    TCase *tc = tcase_create("dispatch");
    tcase_add_test(tc, test_dispatch);
    tcase_add_test(tc, test_cpu_gemm_conventions);
    tcase_add_test(tc, test_cpu_streams_and_timers);
    suite_add_tcase(s, tc);
    tc = tcase_create("devices");
    tcase_add_test(tc, test_mixed_devices);
    tcase_add_test(tc, test_no_cuda_kernels);
    suite_add_tcase(s, tc);
    tc = tcase_create("backward errors");
    tcase_add_test(tc, test_backward_failure);
    tcase_add_test(tc, test_node_keeps_its_table);
    tcase_add_test(tc, test_backward_nomem);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    setenv("HOOP_CUDA_BACKEND", NO_BACKEND, 1);
    return run_suite(kern_suite());
}
