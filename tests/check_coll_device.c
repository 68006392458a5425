/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_coll_device.c -- collectives on GPU buffers (device memory from CUDA
 * tensors), 2 to 4 thread-ranks over tcp: every collective with ring, rd and rhd, f32,
 * f64, f16 and bf16 (average included: the device pre-division), i32; chunks small
 * enough for many pipelined steps. Each call is made twice, once on device buffers and
 * once on host copies of the same data, and the results must be bitwise equal (the host
 * path is checked against exact references by check_collectives); a call mixing GPU and
 * host buffers is refused, naming both, and so are partly overlapping device buffers; a
 * rank that dies mid-call fails the others
 * within 2 s, naming it.
 *
 * In make check the CUDA backend is the host execution layer's build
 * (TEST_CUDA_HX_BACKEND): its "device" memory is host memory, so this checks the device
 * path's logic (finding the buffers' kind, the stream memory table, page-locked slots and
 * staging, device scratch, the pre-division), not that no transport touches device
 * memory; HOOP_MEMOPS=staged in check_collectives checks that every send and receive is
 * staged. tests/gpu/run.sh runs it on the GPU with the real backend. 77 without either.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_harness.h"
#include "collectives/coll.h"
#include "collectives/comm.h"
#include "core/clock.h"
#include "hoop/tensor.h"
#include "run_suite.h"

/* Device memory for bytes (a float tensor of ceil(bytes / 4) elements, at least 1). */
static size_t nfloats(size_t bytes)
{
    return bytes ? (bytes + 3) / 4 : 1;
}

static void *dev_alloc(hoop_tensor **t, size_t bytes)
{
    int64_t n = (int64_t)nfloats(bytes);
    if (hoop_tensor_new(t, 1, &n, HOOP_DEVICE_CUDA, 0) != HOOP_OK) return NULL;
    return hoop_tensor_data(*t);
}

/* The device tensor's bytes from or to host memory (through a float staging copy). */
static hoop_status put(hoop_tensor *t, const void *src, size_t bytes)
{
    size_t n = nfloats(bytes);
    float *tmp = calloc(n, 4);
    if (!tmp) return HOOP_ERR_NOMEM;
    memcpy(tmp, src, bytes);
    hoop_status st = hoop_tensor_copy_from(t, tmp, n);
    free(tmp);
    return st;
}

static hoop_status get(const hoop_tensor *t, void *dst, size_t bytes)
{
    size_t n = nfloats(bytes);
    float *tmp = calloc(n, 4);
    if (!tmp) return HOOP_ERR_NOMEM;
    hoop_status st = hoop_tensor_copy_to_host(t, tmp, n);
    memcpy(dst, tmp, bytes);
    free(tmp);
    return st;
}

typedef struct dcase {
    int coll; /* 0 allreduce, 1 broadcast, 2 reduce, 3 allgather, 4 reduce-scatter */
    hoop_dtype t;
    hoop_op op;
    size_t count;
    hoop_algo algo;
} dcase;

static void fill(h_rank *h, hoop_dtype t, void *p, size_t count, int salt)
{
    for (size_t i = 0; i < count; i++) {
        int v = (int)((i * 7 + (size_t)h->rank * 13 + (size_t)salt) % 41) - 20;
        switch (t) {
        case HOOP_DTYPE_F32: ((float *)p)[i] = (float)v / 3.0f; break;
        case HOOP_DTYPE_F64: ((double *)p)[i] = (double)v / 3.0; break;
        case HOOP_DTYPE_F16: ((uint16_t *)p)[i] = hoop__f32_to_f16((float)v / 3.0f); break;
        case HOOP_DTYPE_BF16: ((uint16_t *)p)[i] = hoop__f32_to_bf16((float)v / 3.0f); break;
        default: ((int32_t *)p)[i] = v * 1000003; break;
        }
    }
}

static hoop_status call(h_rank *h, const dcase *c, const void *s, void *r)
{
    switch (c->coll) {
    case 0: return hoop_allreduce(h->comm, s, r, c->count, c->t, c->op, NULL);
    case 1: return hoop_broadcast(h->comm, s, r, c->count, c->t, 1 % h->n, NULL);
    case 2: return hoop_reduce(h->comm, s, r, c->count, c->t, c->op, 0, NULL);
    case 3: return hoop_allgather(h->comm, s, r, c->count, c->t, NULL);
    default: return hoop_reduce_scatter(h->comm, s, r, c->count, c->t, c->op, NULL);
    }
}

static void run_dcase(h_rank *h, const dcase *c)
{
    size_t elem = hoop_dtype_size(c->t), n = (size_t)h->n;
    size_t sc = c->coll == 4 ? c->count * n : c->count; /* send elements */
    size_t rc = c->coll == 3 ? c->count * n : c->count; /* receive elements */
    char *hs = calloc(sc + 1, elem), *hr = calloc(rc + 1, elem), *got = calloc(rc + 1, elem);
    hoop_tensor *ts = NULL, *tr = NULL;
    void *ds = dev_alloc(&ts, sc * elem), *dr = dev_alloc(&tr, rc * elem);
    if (!ds || !dr) {
        h_fail(h, "device buffers: %s", hoop_last_error());
        goto out;
    }
    fill(h, c->t, hs, sc, (int)c->count);
    if (put(ts, hs, sc * elem) != HOOP_OK || put(tr, hr, rc * elem) != HOOP_OK) { /* hr: 0s */
        h_fail(h, "uploading: %s", hoop_last_error());
        goto out;
    }
    hoop_comm_set_algo(h->comm, c->algo);
    if (call(h, c, hs, hr) != HOOP_OK) {
        h_fail(h, "coll %d on host buffers: %s", c->coll, hoop_last_error());
        goto out;
    }
    if (call(h, c, ds, dr) != HOOP_OK) {
        h_fail(h, "coll %d on device buffers: %s", c->coll, hoop_last_error());
        goto out;
    }
    if (get(tr, got, rc * elem) != HOOP_OK) {
        h_fail(h, "downloading: %s", hoop_last_error());
        goto out;
    }
    int root_only = c->coll == 2 && h->rank != 0;
    if (!root_only && memcmp(got, hr, rc * elem) != 0) {
        size_t i = 0;
        while (memcmp(got + i * elem, hr + i * elem, elem) == 0) i++;
        h_fail(h,
               "coll %d %s %s count %zu algo %d: device result differs from the host's at "
               "element %zu",
               c->coll, hoop_dtype_name(c->t), hoop_op_name(c->op), c->count, (int)c->algo, i);
    }
out:
    hoop_tensor_free(ts);
    hoop_tensor_free(tr);
    free(hs), free(hr), free(got);
}

static void every_case(h_rank *h)
{
    static const struct {
        hoop_dtype t;
        hoop_op op;
    } kinds[] = {{HOOP_DTYPE_F32, HOOP_OP_SUM},
                 {HOOP_DTYPE_F64, HOOP_OP_AVG},
                 {HOOP_DTYPE_F16, HOOP_OP_AVG},
                 {HOOP_DTYPE_BF16, HOOP_OP_SUM},
                 {HOOP_DTYPE_I32, HOOP_OP_MAX}};
    static const size_t counts[] = {1, 37, 5003};
    if (h->comm->dev_mem) h_fail(h, "a device memory table before any call on GPU buffers");
    for (int coll = 0; coll < 5 && !h->err[0]; coll++)
        for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
            for (size_t j = 0; j < sizeof(counts) / sizeof(counts[0]); j++)
                for (int al = HOOP_ALGO_RING; al <= HOOP_ALGO_RHD; al++) {
                    if (coll != 0 && al != HOOP_ALGO_RING) continue; /* one schedule each */
                    dcase c = {coll, kinds[k].t, kinds[k].op, counts[j], (hoop_algo)al};
                    run_dcase(h, &c);
                }
    /* the calls took the device path: the backend's table, page-locked staging */
    if (!h->err[0] && (!h->comm->dev_mem || h->comm->stage_bytes == 0 || !h->comm->stage_pinned ||
                       !h->comm->slots_pinned))
        h_fail(h, "the calls on GPU buffers did not take the device path");
}

START_TEST(test_device_buffers)
{
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    cfg.chunk_bytes = 1024; /* many pipelined chunks at 5003 elements */
    cfg.timeout_ms = 60000;
    run_ranks(_i, &cfg, every_case, NULL);
}
END_TEST

static void mixed(h_rank *h)
{
    hoop_tensor *t = NULL;
    float host[16] = {0};
    void *d = dev_alloc(&t, sizeof(host));
    if (!d) {
        h_fail(h, "device buffer: %s", hoop_last_error());
        return;
    }
    hoop_status st = hoop_allreduce(h->comm, d, host, 16, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
    if (st != HOOP_ERR_INVALID || !strstr(hoop_last_error(), "hoop_allreduce") ||
        !strstr(hoop_last_error(), "GPU") || !strstr(hoop_last_error(), "host"))
        h_fail(h, "a call on a GPU sendbuf and a host recvbuf: %s (%s)", hoop_status_str(st),
               hoop_last_error());
    hoop_tensor_free(t);
}

START_TEST(test_mixed_refused)
{
    run_ranks_ms(2, 20000, mixed, NULL);
}
END_TEST

/* Device pointers into one allocation that overlap partly are refused as host ones are
 * (HOOP_ERR_INVALID naming both), on every rank; the in-place form still works. */
static void device_overlap(h_rank *h)
{
    hoop_tensor *t = NULL;
    float host[8] = {1, 1, 1, 1, 1, 1, 1, 1}, back[8];
    float *d = dev_alloc(&t, sizeof(host));
    if (!d || put(t, host, sizeof(host)) != HOOP_OK) {
        h_fail(h, "device buffer: %s", hoop_last_error());
        goto out;
    }
    hoop_status st = hoop_allreduce(h->comm, d, d + 1, 4, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
    if (st != HOOP_ERR_INVALID || !strstr(hoop_last_error(), "sendbuf") ||
        !strstr(hoop_last_error(), "recvbuf") || !strstr(hoop_last_error(), "overlap"))
        h_fail(h, "device (d, d + 1): %s (%s)", hoop_status_str(st), hoop_last_error());
    st = hoop_reduce_scatter(h->comm, d, d + 2 * h->rank + 1, 2, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
    if (st != HOOP_ERR_INVALID || !strstr(hoop_last_error(), "overlap"))
        h_fail(h, "device reduce-scatter off its block: %s (%s)", hoop_status_str(st),
               hoop_last_error());
    st = hoop_allreduce(h->comm, d, d, 4, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
    if (st != HOOP_OK || get(t, back, sizeof(back)) != HOOP_OK || back[3] != (float)h->n)
        h_fail(h, "device in place: %s (%s)", hoop_status_str(st), hoop_last_error());
out:
    hoop_tensor_free(t);
}

START_TEST(test_device_overlap)
{
    run_ranks_ms(2, 20000, device_overlap, NULL);
}
END_TEST

/* A rank that dies in the middle of an all-reduce on device buffers (its links closed
 * abruptly, as when its process is killed): the others fail within 2 s with
 * HOOP_ERR_REMOTE naming it, as on host buffers (check_direct's dead_peer), and nothing
 * hangs in the staging path. _i: 0 the victim dies before the data moves, 1 while its
 * own call is in flight. */
static void dead_peer(h_rank *h)
{
    size_t count = (size_t)1 << 18; /* 1 MiB of f32: many staged chunks */
    hoop_tensor *t = NULL;
    float *d = dev_alloc(&t, count * 4), *x = calloc(count, 4);
    int mode = *(const int *)h->user;
    if (!d || !x || put(t, x, count * 4) != HOOP_OK) {
        h_fail(h, "device buffer: %s", hoop_last_error());
        goto out;
    }
    if (h->rank == 2) {
        hoop_request *req = NULL;
        if (mode == 1)
            hoop_allreduce(h->comm, d, d, count, HOOP_DTYPE_F32, HOOP_OP_SUM, &req);
        else
            usleep(100 * 1000);
        hoop__comm_kill(h->comm);
        if (req) hoop_wait(req, -1);
        goto out;
    }
    int64_t t0 = hoop__now_ns();
    hoop_status st = hoop_allreduce(h->comm, d, d, count, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
    double secs = (double)(hoop__now_ns() - t0) / 1e9;
    if (st != HOOP_ERR_REMOTE && !(mode == 1 && st == HOOP_OK))
        h_fail(h, "want HOOP_ERR_REMOTE, got %s: %s", hoop_status_name(st), hoop_last_error());
    else if (st == HOOP_ERR_REMOTE && !strstr(hoop_last_error(), "rank 2"))
        h_fail(h, "the message does not name rank 2: %s", hoop_last_error());
    if (secs > 2.0) h_fail(h, "took %.2f s to notice the dead peer", secs);
out:
    hoop_tensor_free(t);
    free(x);
}

START_TEST(test_dead_peer)
{
    int mode = _i;
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    cfg.chunk_bytes = 16384;
    cfg.timeout_ms = 20000;
    run_ranks(4, &cfg, dead_peer, &mode);
}
END_TEST

int main(void)
{
    const char *hx = getenv("TEST_CUDA_HX_BACKEND");
    use_test_cuda_backend();
    if (hoop_device_check(HOOP_DEVICE_CUDA) != HOOP_OK) {
        printf("SKIP: no CUDA device for hoop: %s\n", hoop_last_error());
        return 77;
    }
    setenv("HOOP_TRANSPORT", "tcp", 1);
    Suite *s = suite_create("coll_device");
    TCase *tc = tcase_create("device");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_device_buffers, 2, 5);
    tcase_add_test(tc, test_mixed_refused);
    tcase_add_test(tc, test_device_overlap);
    tcase_add_loop_test(tc, test_dead_peer, 0, 2);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    if (!hx) srunner_set_fork_status(sr, CK_NOFORK); /* a real GPU: no CUDA across fork */
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
