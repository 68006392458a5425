/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_hx.c -- the host execution layer (src/cuda/hx.h) runs CUDA kernels as a GPU
 * would where it matters to a kernel's correctness: every thread of a grid of any shape,
 * shared memory per block, barriers and shuffles, CUDA's launch limits and errors; and it
 * exposes a kernel's bugs: a missing barrier, divergent barriers, a deadlock, a barrier
 * in a plain launch, a read of unwritten shared memory. References are host loops in
 * double precision. The kernels are tests/hx_kernels.cu. It also runs CUDA IPC between
 * real processes (the layer's model of it: memfds opened through /proc).
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>
#include "run_suite.h"

hoop_status hxk_axpy(float *y, const float *x, float a, size_t n, unsigned block);
hoop_status hxk_sum(float *out, const float *x, size_t n, unsigned grid, unsigned block, int how);
hoop_status hxk_transpose(float *out, const float *in, int rows, int cols);
hoop_status hxk_reverse(float *x, int n, unsigned block, size_t smem, int bug);
hoop_status hxk_divergent(float *x);
hoop_status hxk_deadlock(float *x);
hoop_status hxk_alloc(float **p, size_t count);
hoop_status hxk_copy(float *dst, const float *src, size_t count, int to_device);
void hxk_free(float *p);
hoop_status hxk_gemm_rows(float *C, const float *A, const float *B, int M, int N, int K, int acc,
                          int ldb_delta);
int hxk_gpu_count(void);
hoop_status hxk_shuffles(int *out, int which, unsigned grid, unsigned block, int arg);
hoop_status hxk_big_locals(float *out, unsigned block);
hoop_status hxk_sync(void);
void hxk_reset(void);
hoop_status hxk_bogus_math_mode(void);
hoop_status hxk_add(float *x, float v, size_t n);
int hxk_ipc_get(void *handle, void *p);
int hxk_ipc_open(void **p, const void *handle);
int hxk_ipc_close(void *p);
int hxk_mem_type(const void *p);
int hxk_free_rc(void *p);
#ifdef HOOP_HX_HOST_TESTS
const char *hxg_host_fn_and_wait(int lazy, int n);
const char *hxg_user_object_deferred(void);
const char *hxg_relaxed_alloc(void);
const char *hxg_shared_queue(void);
#endif

/* A device copy of host[0..n). */
static float *upload(const float *host, size_t n)
{
    float *d = NULL;
    ck_assert_int_eq(hxk_alloc(&d, n ? n : 1), HOOP_OK);
    if (n) ck_assert_int_eq(hxk_copy(d, host, n, 1), HOOP_OK);
    return d;
}

static void download(float *host, const float *d, size_t n)
{
    if (n) ck_assert_int_eq(hxk_copy(host, d, n, 0), HOOP_OK);
}

static float val(size_t i)
{
    return (float)((i * 2654435761u) % 1000) / 250.0f - 2.0f;
}

/* Sizes around the block size, 1, and several blocks with a short last one. */
static const size_t sizes[] = {1, 31, 32, 33, 255, 256, 257, 1000, 4097};

START_TEST(test_axpy_every_element)
{
    const unsigned blocks[] = {32, 256, 1024};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
        for (size_t b = 0; b < 3; b++) {
            size_t n = sizes[k];
            float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
            float *got = malloc(n * sizeof(float));
            for (size_t i = 0; i < n; i++) x[i] = val(i), y[i] = val(i + 7);
            float *dx = upload(x, n), *dy = upload(y, n);
            ck_assert_int_eq(hxk_axpy(dy, dx, 0.5f, n, blocks[b]), HOOP_OK);
            download(got, dy, n);
            for (size_t i = 0; i < n; i++)
                ck_assert_msg(got[i] == y[i] + 0.5f * x[i], "n=%zu block=%u: y[%zu]=%g, want %g", n,
                              blocks[b], i, got[i], y[i] + 0.5f * x[i]);
            hxk_free(dx);
            hxk_free(dy);
            free(x);
            free(y);
            free(got);
        }
}
END_TEST

/* Sums n values into a device float that starts at 1; returns it. */
static float device_sum(const float *x, size_t n, unsigned grid, unsigned block, int how,
                        hoop_status *st)
{
    float one = 1.0f, got = 0.0f, *dx = upload(x, n), *dout = upload(&one, 1);
    *st = hxk_sum(dout, dx, n, grid, block, how);
    download(&got, dout, 1);
    hxk_free(dx);
    hxk_free(dout);
    return got;
}

START_TEST(test_block_sum)
{
    const unsigned grids[] = {1, 3, 7}, blocks[] = {32, 96, 256, 1024};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
        for (size_t g = 0; g < 3; g++)
            for (size_t b = 0; b < 4; b++) {
                size_t n = sizes[k];
                float *x = malloc(n * sizeof(float));
                double ref = 1.0, mag = 1.0;
                for (size_t i = 0; i < n; i++) x[i] = val(i), ref += x[i], mag += fabs(x[i]);
                hoop_status st;
                float got = device_sum(x, n, grids[g], blocks[b], 0, &st);
                ck_assert_int_eq(st, HOOP_OK);
                /* a float sum in any order is within n ulps of the magnitudes' sum */
                ck_assert_msg(fabs(got - ref) <= 1e-6 * (double)n * mag,
                              "n=%zu grid=%u block=%u: %g, want %g", n, grids[g], blocks[b], got,
                              ref);
                free(x);
            }
}
END_TEST

START_TEST(test_missing_barrier_shows)
{
    size_t n = 4096;
    float *x = malloc(n * sizeof(float));
    double ref = 1.0;
    for (size_t i = 0; i < n; i++) x[i] = 1.0f, ref += 1.0;
    hoop_status st;
    float got = device_sum(x, n, 2, 256, 1, &st);
    ck_assert_int_eq(st, HOOP_OK);
    ck_assert_msg(got != (float)ref, "a sum without its barrier came out right (%g)", got);
    free(x);
}
END_TEST

START_TEST(test_transpose_2d)
{
    const int shapes[][2] = {{1, 1}, {32, 32}, {37, 70}, {70, 37}, {5, 129}};
    for (size_t k = 0; k < 5; k++) {
        int rows = shapes[k][0], cols = shapes[k][1];
        size_t n = (size_t)rows * (size_t)cols;
        float *in = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) in[i] = val(i);
        float *din = upload(in, n), *dout = upload(in, n);
        ck_assert_int_eq(hxk_transpose(dout, din, rows, cols), HOOP_OK);
        download(got, dout, n);
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++)
                ck_assert_msg(got[(size_t)c * (size_t)rows + (size_t)r] ==
                                  in[(size_t)r * (size_t)cols + (size_t)c],
                              "%dx%d: out[%d][%d]", rows, cols, c, r);
        hxk_free(din);
        hxk_free(dout);
        free(in);
        free(got);
    }
}
END_TEST

START_TEST(test_dynamic_shared)
{
    int n = 300;
    unsigned block = 128;
    float *x = malloc((size_t)n * sizeof(float)), *got = malloc((size_t)n * sizeof(float));
    for (int i = 0; i < n; i++) x[i] = (float)i;
    for (int bug = 0; bug < 2; bug++) {
        float *dx = upload(x, (size_t)n);
        ck_assert_int_eq(hxk_reverse(dx, n, block, block * sizeof(float), bug), HOOP_OK);
        download(got, dx, (size_t)n);
        int wrong = 0, nan = 0;
        for (int i = 0; i < n; i++) {
            int base = i / (int)block * (int)block;
            int m = n - base < (int)block ? n - base : (int)block;
            float want = (float)(base + m - 1 - (i - base));
            wrong += got[i] != want;
            nan += isnan(got[i]);
        }
        if (!bug) ck_assert_int_eq(wrong, 0);
        /* the buggy kernel reads the unwritten tail of the last block's buffer: NaN */
        if (bug) ck_assert_msg(nan > 0 && wrong > 0, "bug: %d wrong, %d NaN", wrong, nan);
        hxk_free(dx);
    }
    free(x);
    free(got);
}
END_TEST

/* cuBLAS's conventions (column-major, leading dimensions, beta) hold in the stand-in:
 * row-major products of odd shapes against a double loop, written and accumulated, and a
 * leading dimension too small refused as cuBLAS refuses it. */
START_TEST(test_gemm_conventions)
{
    const int shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 2, 33}, {64, 10, 128}};
    for (size_t s = 0; s < 4; s++)
        for (int acc = 0; acc < 2; acc++) {
            int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
            float *a = malloc(na * sizeof(float)), *b = malloc(nb * sizeof(float));
            float *c = malloc(nc * sizeof(float)), *got = malloc(nc * sizeof(float));
            for (size_t i = 0; i < na; i++) a[i] = val(i);
            for (size_t i = 0; i < nb; i++) b[i] = val(i + 101);
            for (size_t i = 0; i < nc; i++) c[i] = val(i + 303);
            float *da = upload(a, na), *db = upload(b, nb), *dc = upload(c, nc);
            ck_assert_int_eq(hxk_gemm_rows(dc, da, db, M, N, K, acc, 0), HOOP_OK);
            download(got, dc, nc);
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    double ref = acc ? c[(size_t)i * N + j] : 0.0, mag = fabs(ref);
                    for (int p = 0; p < K; p++) {
                        ref += (double)a[(size_t)i * K + p] * b[(size_t)p * N + j];
                        mag += fabs((double)a[(size_t)i * K + p] * b[(size_t)p * N + j]);
                    }
                    ck_assert_msg(fabs(got[(size_t)i * N + j] - ref) <= 1e-6 * K * mag + 1e-30,
                                  "%dx%dx%d acc=%d: C[%d][%d]=%g, want %g", M, N, K, acc, i, j,
                                  got[(size_t)i * N + j], ref);
                }
            hxk_free(da);
            hxk_free(db);
            hxk_free(dc);
            free(a);
            free(b);
            free(c);
            free(got);
        }
    float *d = NULL;
    ck_assert_int_eq(hxk_alloc(&d, 64), HOOP_OK);
    ck_assert_int_eq(hxk_gemm_rows(d, d, d, 4, 4, 4, 0, -1), HOOP_ERR_CUDA);
    assert_error_has("cublasSgemm", "CUBLAS_STATUS_INVALID_VALUE");
    ck_assert_int_eq(hxk_bogus_math_mode(), HOOP_ERR_CUDA);
    assert_error_has("cublasSetMathMode", "CUBLAS_STATUS_INVALID_VALUE");
    hxk_free(d);
}
END_TEST

START_TEST(test_launch_limits)
{
    float *d = NULL;
    ck_assert_int_eq(hxk_alloc(&d, 2048), HOOP_OK);
    ck_assert_int_eq(hxk_axpy(d, d, 1.0f, 2048, 1025), HOOP_ERR_CUDA);
    assert_error_has("axpy_kernel", "invalid configuration argument");
    assert_error_has("1025 threads", NULL);
    ck_assert_int_eq(hxk_reverse(d, 64, 64, 64 * 1024, 0), HOOP_ERR_CUDA);
    assert_error_has("reverse_kernel", "invalid argument");
    /* the error is reported once: the next good launch succeeds */
    ck_assert_int_eq(hxk_axpy(d, d, 1.0f, 2048, 1024), HOOP_OK);
    hxk_free(d);
}
END_TEST

/* Each broken kernel in its own test (process): an execution failure stays, as on a GPU,
 * until cudaDeviceReset. */
static void assert_sticky(void)
{
    float *d = NULL;
    ck_assert_int_eq(hxk_sync(), HOOP_ERR_CUDA); /* where a GPU reports it */
    assert_error_has("cudaDeviceSynchronize", "unspecified launch failure");
    hxk_reset();
    ck_assert_int_eq(hxk_alloc(&d, 64), HOOP_OK);
    ck_assert_int_eq(hxk_axpy(d, d, 1.0f, 64, 64), HOOP_OK); /* and the layer recovers */
    ck_assert_int_eq(hxk_sync(), HOOP_OK);
    hxk_free(d);
}

START_TEST(test_divergent_barriers_fail)
{
    float *d = NULL;
    ck_assert_int_eq(hxk_alloc(&d, 64), HOOP_OK);
    ck_assert_int_eq(hxk_divergent(d), HOOP_ERR_CUDA);
    assert_error_has("divergent_kernel", "different lines");
    ck_assert_int_eq(hxk_axpy(d, d, 1.0f, 64, 64), HOOP_ERR_CUDA); /* the failure stays */
    assert_error_has("earlier kernel failed", NULL);
    hxk_free(d);
    assert_sticky();
}
END_TEST

START_TEST(test_deadlock_fails)
{
    float *d = NULL;
    ck_assert_int_eq(hxk_alloc(&d, 64), HOOP_OK);
    ck_assert_int_eq(hxk_deadlock(d), HOOP_ERR_CUDA);
    assert_error_has("deadlock_kernel", "deadlocked");
    hxk_free(d);
    assert_sticky();
}
END_TEST

START_TEST(test_barrier_in_plain_launch_fails)
{
    float *d = NULL, one = 1.0f;
    ck_assert_int_eq(hxk_alloc(&d, 64), HOOP_OK);
    ck_assert_int_eq(hxk_copy(d, &one, 1, 1), HOOP_OK);
    ck_assert_int_eq(hxk_sum(d, d, 1, 1, 32, 2), HOOP_ERR_CUDA);
    assert_error_has("sum_kernel", "HOOP_KLAUNCH_SYNC");
    hxk_free(d);
    assert_sticky();
}
END_TEST

START_TEST(test_bad_mask_fails)
{
    float *d = NULL;
    ck_assert_int_eq(hxk_alloc(&d, 64), HOOP_OK);
    ck_assert_int_eq(hxk_shuffles((int *)d, 3, 1, 32, 0), HOOP_ERR_CUDA);
    assert_error_has("mask", "leaves it out");
    hxk_free(d);
    assert_sticky();
}
END_TEST

/* Legal shuffles: a per-lane source lane, and a half-warp mask beside a block barrier. */
START_TEST(test_shuffles)
{
    int *d = NULL, got[64];
    ck_assert_int_eq(hxk_alloc((float **)&d, 64), HOOP_OK);
    ck_assert_int_eq(hxk_shuffles(d, 0, 1, 64, 0), HOOP_OK);
    download((float *)got, (float *)d, 64);
    for (int t = 0; t < 64; t++)
        ck_assert_msg(got[t] == t / 32 * 32 + (t % 32 + 1) % 32, "rotate: out[%d]=%d", t, got[t]);
    ck_assert_int_eq(hxk_shuffles(d, 1, 1, 64, 0), HOOP_OK);
    download((float *)got, (float *)d, 64);
    for (int t = 0; t < 64; t++) {
        int lane = t % 32, want = lane >= 16 ? t : lane < 15 ? t + 1 : t; /* width 16: 15 keeps */
        ck_assert_msg(got[t] == want, "half warp: out[%d]=%d, want %d", t, got[t], want);
    }
    hxk_free((float *)d);
}
END_TEST

/* A missing barrier before a read of an earlier thread's write shows too (the blocks of
 * a grid alternate their order); with the barrier, every value is right. */
START_TEST(test_missing_barrier_either_way)
{
    int *d = NULL, got[512];
    ck_assert_int_eq(hxk_alloc((float **)&d, 512), HOOP_OK);
    for (int skip = 0; skip < 2; skip++) {
        ck_assert_int_eq(hxk_shuffles(d, 2, 2, 256, skip), HOOP_OK);
        download((float *)got, (float *)d, 512);
        int wrong = 0;
        for (int i = 0; i < 512; i++) {
            int b = i / 256, t = i % 256;
            wrong += got[i] != (t ? t - 1 + 1000 * b : -1);
        }
        if (skip)
            ck_assert_msg(wrong > 0,
                          "a read of an earlier thread's write without a barrier came out right");
        else
            ck_assert_int_eq(wrong, 0);
    }
    hxk_free((float *)d);
}
END_TEST

START_TEST(test_big_locals)
{
    float *d = NULL, got[4];
    ck_assert_int_eq(hxk_alloc(&d, 4), HOOP_OK);
    ck_assert_int_eq(hxk_big_locals(d, 4), HOOP_OK);
    download(got, d, 4);
    for (int t = 0; t < 4; t++) {
        float want = 0.0f;
        for (int i = 0; i < 20000; i += 1000) want += (float)(i + t);
        ck_assert_msg(got[t] == want, "out[%d]=%g, want %g", t, got[t], want);
    }
    hxk_free(d);
}
END_TEST

// ----------------------------------------------------------------- interprocess memory
/*
 * CUDA IPC between real processes: this process exports an allocation through a pointer
 * inside it, peers (this program again, exec'd: --ipc-peer, so no CUDA crosses a fork)
 * open the handle, add to their half through a kernel and close it; this process then
 * sees their writes, with the bytes before the exported pointer untouched (a handle
 * names the whole allocation: a peer that took the pointer it got for the exported one
 * would write in the wrong place). Also: opening a handle in its own process is refused
 * (CUDA: "invalid device context"), a second open in a peer gives the same pointer and
 * is counted, a freed allocation's handle no longer opens, and (host layer) no
 * descriptor or mapping is left after close and cudaFree.
 */
#define IPC_FLOATS ((size_t)3 << 18) /* 3 MiB */
#define IPC_OFF 1000                 /* the exported pointer, in floats into it */
#define IPC_STALE 2                  /* peer mode: the handle must not open */
#define IPC_HOLD 3   /* peer mode: open, wait for a byte, then see the freed memory's 0xff */
static int hx_layer; /* 1: the host execution layer (set in main, and in a peer) */

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

/* Mappings of this process made by the host layer's exports or imports. */
static int ipc_mappings(void)
{
    char line[512];
    int n = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    while (fgets(line, sizeof(line), f)) n += strstr(line, "hx-cuda-ipc") != NULL;
    fclose(f);
    return n;
}

/* check_hx --ipc-peer FD LO HI V MODE: reads a handle and a byte offset from FD, opens
 * the handle (twice: the same pointer), adds V to floats [LO, HI) at that offset, closes
 * it; MODE IPC_STALE: the open must fail. The exit code says what went wrong (0: all
 * right). */
static int ipc_peer(char **argv)
{
    unsigned char h[64];
    uint64_t off;
    void *b = NULL, *b2 = NULL;
    int fd = atoi(argv[2]), mode = atoi(argv[6]);
    size_t lo = strtoul(argv[3], NULL, 10), hi = strtoul(argv[4], NULL, 10);
    float v = strtof(argv[5], NULL);
    if (read(fd, h, 64) != 64 || read(fd, &off, 8) != 8) return 10;
    hx_layer = hxk_gpu_count() < 0;
    if (mode == IPC_HOLD) { /* the exporter frees it meanwhile (host layer: 0xff bytes) */
        char go;
        uint32_t first = 0;
        if (hxk_ipc_open(&b, h) != 0 || write(fd, "o", 1) != 1 || read(fd, &go, 1) != 1) return 18;
        memcpy(&first, b, 4);
        return hxk_ipc_close(b) == 0 && first == 0xffffffffu ? 0 : 19;
    }
    close(fd);
    int fds0 = open_fds();
    int e = hxk_ipc_open(&b, h);
    if (mode == IPC_STALE) return e != 0 ? 0 : 11;
    if (e != 0) return fprintf(stderr, "peer: open: error %d\n", e), 12;
    if (hxk_mem_type(b) != 2) return 13;
    if (hxk_ipc_open(&b2, h) != 0 || b2 != b || hxk_ipc_close(b2) != 0) return 14;
    if (hxk_add((float *)((char *)b + off) + lo, v, hi - lo) != HOOP_OK || hxk_sync() != HOOP_OK)
        return fprintf(stderr, "peer: %s\n", hoop_last_error()), 15;
    if (hxk_ipc_close(b) != 0 || hxk_ipc_close(b) == 0) return 16; /* the count is spent */
    if (hx_layer && (open_fds() != fds0 || ipc_mappings() != 0)) return 17;
    return 0;
}

/* Starts a peer (fork, then exec at once) and sends it the handle; returns its pid.
 * keep (may be NULL): the pipe's write end stays open there, for one more byte. */
static pid_t ipc_spawn_keep(const unsigned char *h, size_t lo, size_t hi, float v, int mode,
                            int *keep)
{
    int pfd[2];
    char a[5][32];
    uint64_t off = IPC_OFF * sizeof(float);
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, pfd), 0); /* both ways (IPC_HOLD) */
    snprintf(a[0], 32, "%d", pfd[0]);
    snprintf(a[1], 32, "%zu", lo);
    snprintf(a[2], 32, "%zu", hi);
    snprintf(a[3], 32, "%g", (double)v);
    snprintf(a[4], 32, "%d", mode);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(pfd[1]);
        execl("/proc/self/exe", "check_hx", "--ipc-peer", a[0], a[1], a[2], a[3], a[4],
              (char *)NULL);
        _exit(127);
    }
    close(pfd[0]);
    ck_assert_int_eq(write(pfd[1], h, 64), 64);
    ck_assert_int_eq(write(pfd[1], &off, 8), 8);
    if (keep)
        *keep = pfd[1];
    else
        close(pfd[1]);
    return pid;
}

static pid_t ipc_spawn(const unsigned char *h, size_t lo, size_t hi, float v, int mode)
{
    return ipc_spawn_keep(h, lo, hi, v, mode, NULL);
}

static void ipc_reap(pid_t pid, const char *who)
{
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: exit %d (signal %d)", who,
                  WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                  WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

START_TEST(test_ipc_processes)
{
    size_t n = IPC_FLOATS, half = (n - IPC_OFF) / 2;
    float *host = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    unsigned char h[64];
    void *own = NULL;
    ck_assert(host && got);
    for (size_t i = 0; i < n; i++) host[i] = val(i);
    int fds0 = open_fds();
    float *d = upload(host, n);
    ck_assert_int_eq(hxk_ipc_get(h, d + IPC_OFF), 0);
    int e = hxk_ipc_open(&own, h); /* CUDA: 201, "invalid device context" */
    ck_assert_msg(e != 0 && (!hx_layer || e == 201), "open in the exporting process: error %d", e);
    if (hx_layer) ck_assert_int_eq(ipc_mappings(), 1);
    pid_t p1 = ipc_spawn(h, 0, half, 1.0f, 0), p2 = ipc_spawn(h, half, n - IPC_OFF, 2.0f, 0);
    ipc_reap(p1, "peer 1");
    ipc_reap(p2, "peer 2");
    download(got, d, n);
    size_t wrong = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        float want = host[i] + (i < IPC_OFF ? 0.0f : i < IPC_OFF + half ? 1.0f : 2.0f);
        if (got[i] != want && !wrong++) first = i;
    }
    ck_assert_msg(wrong == 0, "%zu wrong, first at %zu: %g", wrong, first, (double)got[first]);
    hxk_free(d);
    if (hx_layer) {
        ck_assert_int_eq(ipc_mappings(), 0);
        ck_assert_int_eq(open_fds(), fds0);
    }
    free(host);
    free(got);
}
END_TEST

/* The handle of a freed allocation opens nowhere. */
START_TEST(test_ipc_stale_handle)
{
    unsigned char h[64];
    float *d = NULL;
    ck_assert_int_eq(hxk_alloc(&d, IPC_FLOATS), HOOP_OK);
    ck_assert_int_eq(hxk_ipc_get(h, d), 0);
    hxk_free(d);
    ipc_reap(ipc_spawn(h, 0, 0, 0.0f, IPC_STALE), "a peer opening a freed allocation's handle");
}
END_TEST

/* Host layer: cudaFree of an allocation a peer still has open (undefined in CUDA) fails,
 * naming the peer, and the peer reads 0xff bytes from then on. */
START_TEST(test_ipc_free_while_open)
{
    unsigned char h[64];
    float *d = NULL;
    int keep;
    ck_assert_int_eq(hxk_alloc(&d, IPC_FLOATS), HOOP_OK);
    ck_assert_int_eq(hxk_ipc_get(h, d), 0);
    char opened;
    pid_t p = ipc_spawn_keep(h, 0, 0, 0.0f, IPC_HOLD, &keep);
    ck_assert_msg(read(keep, &opened, 1) == 1, "the peer did not open the memory");
    int e = hxk_free_rc(d);
    ck_assert_msg(e == 1, "cudaFree of memory a peer maps: error %d (want 1)", e);
    ck_assert_int_eq(write(keep, "g", 1), 1);
    close(keep);
    ipc_reap(p, "a peer reading freed memory");
}
END_TEST

#ifdef HOOP_HX_HOST_TESTS
/* The layer's graphs as the collectives' captured calls use them (tests/hx_graph_host.cc):
 * a host function and a value wait kept by a capture run at every launch, in order, the
 * wait holding what follows it; on streams that run work when issued and on lazy ones. */
START_TEST(test_graph_host_fn_and_wait)
{
    const char *why = hxg_host_fn_and_wait(_i, 3);
    ck_assert_msg(why == NULL, "%s streams: %s", _i ? "lazy" : "eager", why);
}
END_TEST

START_TEST(test_graph_user_object)
{
    const char *why = hxg_user_object_deferred();
    ck_assert_msg(why == NULL, "%s", why);
}
END_TEST

START_TEST(test_graph_relaxed_alloc)
{
    const char *why = hxg_relaxed_alloc();
    ck_assert_msg(why == NULL, "%s", why);
}
END_TEST

START_TEST(test_shared_queue)
{
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "2", 1); /* this case's own process (Check forks) */
    const char *why = hxg_shared_queue();
    ck_assert_msg(why == NULL, "%s", why);
}
END_TEST
#endif

/* The same program runs on the host execution layer (check_hx) and, linked with the
 * nvcc build of the kernels, on a GPU (check_hx_gpu, for tests/gpu/run.sh). The broken
 * kernels run on the host layer only: on a GPU the deadlock would hang and a missing
 * barrier need not show. */
/* hxk_gpu_count for in_child: 255 stands for the host layer's -1. */
static int gpu_count_code(void)
{
    const int n = hxk_gpu_count();
    return n < 0 ? 255 : n > 254 ? 254 : n;
}

int main(int argc, char **argv)
{
    if (argc == 7 && strcmp(argv[1], "--ipc-peer") == 0) return ipc_peer(argv);
    /* in a child: the parent must not initialise CUDA before the cases fork */
    int gpus = in_child(gpu_count_code);
    if (gpus == 255) gpus = -1;
    hx_layer = gpus < 0;
    if (gpus == 0) {
        puts("check_hx_gpu: no usable GPU here: skipped (check_hx runs the same kernels on the "
             "host execution layer)");
        return 77;
    }
    Suite *s = suite_create(gpus < 0 ? "hx (host execution layer)" : "hx (GPU)");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_axpy_every_element);
    tcase_add_test(tc, test_block_sum);
    tcase_add_test(tc, test_transpose_2d);
    tcase_add_test(tc, test_dynamic_shared);
    tcase_add_test(tc, test_launch_limits);
    tcase_add_test(tc, test_gemm_conventions);
    tcase_add_test(tc, test_shuffles);
    tcase_add_test(tc, test_big_locals);
    tcase_add_test(tc, test_ipc_processes);
    tcase_add_test(tc, test_ipc_stale_handle);
    if (gpus < 0) {
        tcase_add_test(tc, test_missing_barrier_shows);
        tcase_add_test(tc, test_missing_barrier_either_way);
        tcase_add_test(tc, test_divergent_barriers_fail);
        tcase_add_test(tc, test_deadlock_fails);
        tcase_add_test(tc, test_barrier_in_plain_launch_fails);
        tcase_add_test(tc, test_bad_mask_fails);
        tcase_add_test(tc, test_ipc_free_while_open);
#ifdef HOOP_HX_HOST_TESTS
        tcase_add_loop_test(tc, test_graph_host_fn_and_wait, 0, 2);
        tcase_add_test(tc, test_graph_user_object);
        tcase_add_test(tc, test_graph_relaxed_alloc);
        tcase_add_test(tc, test_shared_queue);
#endif
    }
    suite_add_tcase(s, tc);
    return run_suite(s);
}
