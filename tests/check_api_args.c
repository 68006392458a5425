/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_api_args.c -- every public function, called with NULL and with out-of-range
 * arguments, returns its documented error and a message naming the culprit; none crashes.
 *
 * The list of public functions is not written here: test_every_function_has_a_case reads
 * every HOOP_API declaration in the headers of include/hoop/ and fails, naming them, for functions
 * that no case below covers (and for cases naming a function that no longer exists), and
 * checks the shared library's exported hoop_* symbols against the headers. Adding a
 * public function therefore means adding its case to CASES.
 *
 * Each case runs in its own forked child (Check's default), so a crash fails that case
 * with its name and the run goes on. The program links the shared libhoop only, through
 * <hoop/hoop.h>, as a user's program does.
 *
 * Conventions asserted:
 *   - a function that returns hoop_status returns the documented code, and leaves a new
 *     message in hoop_last_error() that contains the argument's name as a word (before
 *     each call a marker message is planted, so a call that sets none is caught);
 *   - destroy/free functions accept NULL (HOOP_OK);
 *   - queries (int, size_t, pointer results) given NULL return a neutral value (0, -1,
 *     NULL, "" or "?", as their header says) and void functions do nothing.
 */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <check.h>
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hoop/hoop.h"
#include "run_suite.h"

/* Some cases ask for impossible allocations (2^62 bytes) and expect HOOP_ERR_NOMEM: under
 * AddressSanitizer, malloc must return NULL for them instead of aborting the process. */
#if defined(__SANITIZE_ADDRESS__)
__attribute__((visibility("default"))) const char *__asan_default_options(void);
__attribute__((visibility("default"))) const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}
#endif
#if defined(__SANITIZE_THREAD__) /* the same under ThreadSanitizer's allocator */
__attribute__((visibility("default"))) const char *__tsan_default_options(void);
__attribute__((visibility("default"))) const char *__tsan_default_options(void)
{
    return "allocator_may_return_null=1";
}
#endif

// ----- assertions ---------------------------------------------------------------------------

#define MARKER "stale-marker-message"

/* Leaves a known message as the thread's last error. */
static void plant_marker(void)
{
    hoop_algo a;
    hoop_algo_from_name(MARKER, &a);
}

/* 1 when word occurs in s with no identifier character on either side. */
static int has_word(const char *s, const char *word)
{
    const size_t n = strlen(word);
    for (const char *p = s; (p = strstr(p, word)) != NULL; p++) {
        const int left = p == s || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
        const int right = !(isalnum((unsigned char)p[n]) || p[n] == '_');
        if (left && right) return 1;
    }
    return 0;
}

static void expect_at(int line, const char *call, hoop_status got, hoop_status want,
                      const char *word)
{
    const char *msg = hoop_last_error();
    ck_assert_msg(got == want, "line %d: %s returned %s, expected %s (message: '%s')", line, call,
                  hoop_status_name(got), hoop_status_name(want), msg);
    if (want == HOOP_OK) return;
    ck_assert_msg(msg[0] != '\0' && strstr(msg, MARKER) == NULL,
                  "line %d: %s returned %s but left no message of its own", line, call,
                  hoop_status_name(got));
    ck_assert_msg(has_word(msg, word), "line %d: %s: the message '%s' does not name '%s'", line,
                  call, msg, word);
}

/* call returns want and, unless want is HOOP_OK, a fresh message containing word. */
#define EXPECT(want, word, call)                                \
    do {                                                        \
        plant_marker();                                         \
        hoop_status expect_st_ = (call);                        \
        expect_at(__LINE__, #call, expect_st_, (want), (word)); \
    } while (0)

#define INVALID(word, call) EXPECT(HOOP_ERR_INVALID, word, call)
#define OK(call) EXPECT(HOOP_OK, "", call)

// ----- fixtures (each case builds its own, in its own child) --------------------------------

static const int64_t S2x3[2] = {2, 3}, S3x2[2] = {3, 2}, S3[1] = {3}, S2x2[2] = {2, 2};
static const int64_t S1x1x4x4[4] = {1, 1, 4, 4}, S2x1x3x3[4] = {2, 1, 3, 3};

/* What tensor(), tape() and comm1() made; test_case frees it after the case, so cases
 * need not (the suite is also run under LeakSanitizer). */
#define MAX_OWNED 64
static struct {
    hoop_tensor *tensors[MAX_OWNED];
    hoop_tape *tapes[MAX_OWNED];
    hoop_rendezvous *rvs[MAX_OWNED];
    int ntensors, ntapes, nrvs;
} owned;

static hoop_tensor *own(hoop_tensor *t)
{
    ck_assert_int_lt(owned.ntensors, MAX_OWNED);
    owned.tensors[owned.ntensors++] = t;
    return t;
}

static void free_owned(void)
{
    for (int i = 0; i < owned.ntapes; i++) ck_assert_int_eq(hoop_tape_destroy(owned.tapes[i]), 0);
    for (int i = 0; i < owned.ntensors; i++) hoop_tensor_free(owned.tensors[i]);
    for (int i = 0; i < owned.nrvs; i++) hoop_rendezvous_free(owned.rvs[i]);
    owned.ntapes = owned.ntensors = owned.nrvs = 0;
}

static hoop_tensor *tensor(int ndim, const int64_t *shape, int requires_grad)
{
    hoop_tensor *t = NULL;
    ck_assert_int_eq(hoop_tensor_new(&t, ndim, shape, HOOP_DEVICE_CPU, requires_grad), HOOP_OK);
    own(t);
    for (size_t i = 0; i < hoop_tensor_count(t); i++)
        hoop_tensor_data(t)[i] = 0.25f * (float)i - 0.5f;
    return t;
}

static hoop_tape *tape(void)
{
    hoop_tape *tp = NULL;
    ck_assert_int_eq(hoop_tape_init(&tp), HOOP_OK);
    ck_assert_int_lt(owned.ntapes, MAX_OWNED);
    owned.tapes[owned.ntapes++] = tp;
    return tp;
}

/* A world_size 1 communicator, as tests/coll_harness.h builds them (one thread). */
static hoop_comm *comm1(void)
{
    hoop_rendezvous *rv;
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    hoop_comm *c = NULL;
    ck_assert_int_eq(hoop_rendezvous_new(&rv, 1), HOOP_OK);
    ck_assert_int_lt(owned.nrvs, MAX_OWNED);
    owned.rvs[owned.nrvs++] = rv;
    cfg.rank = 0;
    cfg.world_size = 1;
    cfg.rendezvous = rv;
    cfg.timeout_ms = 5000;
    ck_assert_msg(hoop_comm_init(&c, &cfg) == HOOP_OK, "%s", hoop_last_error());
    return c;
}

/* A store server on a free loopback port and a rank-0-of-1 client. */
static hoop_store *store1(hoop_store_server **srv)
{
    hoop_store_config cfg = HOOP_STORE_CONFIG_INIT;
    hoop_store *st = NULL;
    cfg.host = "127.0.0.1";
    cfg.token = "tok";
    cfg.timeout_ms = 5000;
    ck_assert_msg(hoop_store_server_init(srv, &cfg) == HOOP_OK, "%s", hoop_last_error());
    cfg.port = hoop_store_server_port(*srv);
    cfg.rank = 0;
    cfg.world_size = 1;
    ck_assert_msg(hoop_store_init(&st, &cfg) == HOOP_OK, "%s", hoop_last_error());
    return st;
}

static char tmpdir[64];

static const char *tmp_path(const char *name)
{
    static char path[128];
    if (tmpdir[0] == '\0') {
        snprintf(tmpdir, sizeof(tmpdir), "/tmp/hoop-api-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    }
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    return path;
}

static void write_file(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(bytes, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

/* Writes dir/train-{images-idx3,labels-idx1}-ubyte: 3 images of 2x2 pixels, labels 0, 1, 2. */
static const char *write_mnist(void)
{
    static const unsigned char img[16 + 12] = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0,  0,
                                               0, 2, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    static const unsigned char lab[8 + 3] = {0, 0, 8, 1, 0, 0, 0, 3, 0, 1, 2};
    char images[128];
    snprintf(images, sizeof(images), "%s", tmp_path("train-images-idx3-ubyte"));
    write_file(images, img, sizeof(img));
    write_file(tmp_path("train-labels-idx1-ubyte"), lab, sizeof(lab));
    return tmpdir;
}

static hoop_dataset *dataset3(void)
{
    hoop_dataset *ds = NULL;
    const char *dir = write_mnist();
    ck_assert_msg(hoop_dataset_load_mnist(&ds, dir, "train", NULL) == HOOP_OK, "%s",
                  hoop_last_error());
    return ds;
}

static void rm_tmpdir(void)
{
    if (tmpdir[0] == '\0') return;
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    char path[384];
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof(path), "%s/%s", tmpdir, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(tmpdir);
    tmpdir[0] = '\0';
}

// ----- status.h, log.h ----------------------------------------------------------------------

static void c_status(void)
{
    ck_assert_str_eq(hoop_status_str((hoop_status)99), "unknown status");
    ck_assert_str_eq(hoop_status_str((hoop_status)-1), "unknown status");
    ck_assert_str_eq(hoop_status_name((hoop_status)99), "HOOP_UNKNOWN");
    ck_assert_str_eq(hoop_status_name((hoop_status)-1), "HOOP_UNKNOWN");
    ck_assert_ptr_nonnull(hoop_last_error());
}

/* The version functions take no arguments: they answer what the header says. */
static void c_version(void)
{
    ck_assert_int_eq(hoop_version(), HOOP_VERSION_CODE);
    ck_assert_str_eq(hoop_version_string(), HOOP_VERSION_STRING);
}

static int lines_seen;
static char last_line[512];
static void count_line(hoop_log_level level, const char *line, void *user)
{
    (void)level;
    (void)user;
    lines_seen++;
    snprintf(last_line, sizeof(last_line), "%s", line);
}

static void c_log(void)
{
    hoop_log_set(NULL, NULL); /* the default sink */
    hoop_log_set(count_line, NULL);
    hoop_log_set_rank(-7); /* any negative rank hides the prefix */
    hoop_log_set_rank(INT_MAX);
    hoop_log_set_rank(-1);
    /* A WARN line (freeing an arena tensor is ignored with a warning) reaches the sink. */
    hoop_tape *tp = tape();
    hoop_tensor *t;
    OK(hoop_tape_tensor_new(tp, 1, S3, &t));
    hoop_tensor_free(t);
    ck_assert_int_eq(lines_seen, 1);
    ck_assert_ptr_null(strstr(last_line, "[-"));
    hoop_log_set(NULL, NULL);
}

// ----- tensor.h -----------------------------------------------------------------------------

static void c_tensor_new(void)
{
    hoop_tensor *t = (hoop_tensor *)&t;
    const int64_t zero[2] = {2, 0}, neg[1] = {-3}, huge[4] = {INT64_MAX, INT64_MAX, 2, 2};
    const int64_t big[3] = {1 << 20, 1 << 20, 1 << 20}; /* 2^62 bytes */
    INVALID("out", hoop_tensor_new(NULL, 1, S3, HOOP_DEVICE_CPU, 0));
    INVALID("ndim", hoop_tensor_new(&t, -1, S3, HOOP_DEVICE_CPU, 0));
    ck_assert_ptr_null(t); /* *out is NULL on failure */
    INVALID("ndim", hoop_tensor_new(&t, 5, S3, HOOP_DEVICE_CPU, 0));
    INVALID("ndim", hoop_tensor_new(&t, INT_MIN, S3, HOOP_DEVICE_CPU, 0));
    INVALID("shape", hoop_tensor_new(&t, 2, NULL, HOOP_DEVICE_CPU, 0));
    INVALID("dimension", hoop_tensor_new(&t, 2, zero, HOOP_DEVICE_CPU, 0));
    INVALID("dimension", hoop_tensor_new(&t, 1, neg, HOOP_DEVICE_CPU, 1));
    assert_error_has("hoop_tensor_new: dimension 0 is -3", NULL); /* named the function */
    INVALID("ndim", hoop_tensor_new(&t, 5, S3, HOOP_DEVICE_CPU, 0));
    assert_error_has("hoop_tensor_new: ndim=5", NULL);
    INVALID("shape", hoop_tensor_new(&t, 4, huge, HOOP_DEVICE_CPU, 1));
    EXPECT(HOOP_ERR_NOMEM, "allocate", hoop_tensor_new(&t, 3, big, HOOP_DEVICE_CPU, 1));
    /* 2^62 - 1 floats: 4 bytes short of SIZE_MAX, which wrapped to 0 when rounded up to the
     * alignment, so a tiny buffer came back with HOOP_OK. */
    const int64_t wrap[1] = {(int64_t)(SIZE_MAX / sizeof(float))};
    INVALID("shape", hoop_tensor_new(&t, 1, wrap, HOOP_DEVICE_CPU, 0));
    INVALID("shape", hoop_tensor_new(&t, 1, wrap, HOOP_DEVICE_CPU, 1));
    EXPECT(HOOP_ERR_UNSUPPORTED, "device", hoop_tensor_new(&t, 1, S3, HOOP_DEVICE_CUDA, 0));
    INVALID("device", hoop_tensor_new(&t, 1, S3, (hoop_device)42, 0));
    INVALID("device", hoop_tensor_new(&t, 1, S3, (hoop_device)-1, 0));
    ck_assert_ptr_null(t);
    hoop_tensor_free(NULL);
}

static void c_tensor_queries(void)
{
    char buf[32] = "untouched";
    ck_assert_int_eq(hoop_tensor_ndim(NULL), 0);
    ck_assert_int_eq(hoop_tensor_dim(NULL, 0), 0);
    ck_assert_uint_eq(hoop_tensor_count(NULL), 0);
    ck_assert_int_eq(hoop_tensor_device(NULL), HOOP_DEVICE_CPU);
    ck_assert_int_eq(hoop_tensor_requires_grad(NULL), 0);
    ck_assert_ptr_null(hoop_tensor_data(NULL));
    ck_assert_ptr_null(hoop_tensor_grad(NULL));
    ck_assert_str_eq(hoop_tensor_name(NULL), "");
    ck_assert_ptr_eq(hoop_tensor_shape_str(NULL, buf, sizeof(buf)), buf);
    ck_assert_str_eq(buf, "(NULL)");
    hoop_tensor *t = tensor(2, S2x3, 1);
    ck_assert_int_eq(hoop_tensor_dim(t, -1), 0);
    ck_assert_int_eq(hoop_tensor_dim(t, 2), 0);
    ck_assert_int_eq(hoop_tensor_dim(t, INT_MAX), 0);
    ck_assert_int_eq(hoop_tensor_dim(t, INT_MIN), 0);
    ck_assert_ptr_null(hoop_tensor_shape_str(t, NULL, 10));
    ck_assert_ptr_eq(hoop_tensor_shape_str(t, buf, 0), buf);
    ck_assert_str_eq(hoop_tensor_shape_str(t, buf, 4), "(2,");
}

static void c_tensor_writes(void)
{
    float src[6] = {0};
    hoop_tensor_zero_grad(NULL);
    hoop_tensor_fill(NULL, 1.0f);
    hoop_tensor_set_name(NULL, "x");
    hoop_tensor *t = tensor(2, S2x3, 1), *c = tensor(2, S2x3, 0);
    hoop_tensor_set_name(t, NULL);
    ck_assert_str_eq(hoop_tensor_name(t), "");
    INVALID("t", hoop_tensor_copy_from(NULL, src, 6));
    INVALID("src", hoop_tensor_copy_from(t, NULL, 6));
    INVALID("count", hoop_tensor_copy_from(t, src, 7));
    INVALID("count", hoop_tensor_copy_from(t, src, SIZE_MAX));
    OK(hoop_tensor_copy_from(t, src, 6));
    INVALID("param", hoop_tensor_set_grad_hook(NULL, NULL, NULL));
    INVALID("parameter", hoop_tensor_set_grad_hook(c, NULL, NULL));
    INVALID("param", hoop_tensor_set_grad_buffer(NULL, src));
    INVALID("parameter", hoop_tensor_set_grad_buffer(c, src));
}

/* The host copies, moves between devices and the device check (the CUDA backend is
 * pointed at a path that does not exist: see main). */
static void c_tensor_devices(void)
{
    float dst[6];
    hoop_tensor *t = tensor(2, S2x3, 1), *c = tensor(2, S2x3, 0);
    INVALID("t", hoop_tensor_copy_to_host(NULL, dst, 6));
    INVALID("dst", hoop_tensor_copy_to_host(t, NULL, 6));
    INVALID("count", hoop_tensor_copy_to_host(t, dst, 5));
    OK(hoop_tensor_copy_to_host(t, dst, 6));
    INVALID("t", hoop_tensor_grad_to_host(NULL, dst, 6));
    INVALID("dst", hoop_tensor_grad_to_host(t, NULL, 6));
    INVALID("count", hoop_tensor_grad_to_host(t, dst, SIZE_MAX));
    INVALID("gradient", hoop_tensor_grad_to_host(c, dst, 6));
    OK(hoop_tensor_grad_to_host(t, dst, 6));
    INVALID("t", hoop_tensor_to_device(NULL, HOOP_DEVICE_CPU));
    INVALID("device", hoop_tensor_to_device(t, (hoop_device)9));
    OK(hoop_tensor_to_device(t, HOOP_DEVICE_CPU));
    EXPECT(HOOP_ERR_UNSUPPORTED, "device", hoop_tensor_to_device(t, HOOP_DEVICE_CUDA));
    ck_assert_int_eq(hoop_tensor_device(t), HOOP_DEVICE_CPU); /* unchanged */
    float buf[6];
    OK(hoop_tensor_set_grad_buffer(t, buf));
    EXPECT(HOOP_ERR_USAGE, "hoop_tensor_set_grad_buffer",
           hoop_tensor_to_device(t, HOOP_DEVICE_CUDA));
    OK(hoop_tensor_set_grad_buffer(t, NULL));
    OK(hoop_device_check(HOOP_DEVICE_CPU));
    INVALID("device", hoop_device_check((hoop_device)-3));
    EXPECT(HOOP_ERR_UNSUPPORTED, "HOOP_CUDA_BACKEND", hoop_device_check(HOOP_DEVICE_CUDA));
    INVALID("m", hoop_model_to_device(NULL, HOOP_DEVICE_CPU));
    OK(hoop_device_sync(HOOP_DEVICE_CPU));
    INVALID("device", hoop_device_sync((hoop_device)4));
    EXPECT(HOOP_ERR_UNSUPPORTED, "device", hoop_device_sync(HOOP_DEVICE_CUDA));
    char dbuf[64];
    INVALID("buf", hoop_device_describe(HOOP_DEVICE_CPU, NULL, 8));
    INVALID("len", hoop_device_describe(HOOP_DEVICE_CPU, dbuf, 0));
    INVALID("device", hoop_device_describe((hoop_device)5, dbuf, sizeof(dbuf)));
    OK(hoop_device_describe(HOOP_DEVICE_CPU, dbuf, sizeof(dbuf)));
    ck_assert_str_eq(dbuf, "cpu");
    EXPECT(HOOP_ERR_UNSUPPORTED, "device", hoop_device_describe(HOOP_DEVICE_CUDA, dbuf, 64));
    void *p = (void *)1;
    INVALID("p", hoop_host_alloc(HOOP_DEVICE_CPU, 16, NULL));
    INVALID("device", hoop_host_alloc((hoop_device)-2, 16, &p));
    ck_assert_ptr_null(p);
    EXPECT(HOOP_ERR_UNSUPPORTED, "device", hoop_host_alloc(HOOP_DEVICE_CUDA, 16, &p));
    OK(hoop_host_alloc(HOOP_DEVICE_CPU, 16, &p));
    ck_assert_ptr_nonnull(p);
    hoop_host_free(HOOP_DEVICE_CPU, p);
    hoop_host_free(HOOP_DEVICE_CPU, NULL);
    hoop_host_free(HOOP_DEVICE_CUDA, NULL);
    hoop_host_free((hoop_device)9, NULL);
}

/* CUDA graphs without a CUDA backend (see main). */
static void c_graph(void)
{
    hoop_graph *g = (hoop_graph *)1;
    EXPECT(HOOP_ERR_UNSUPPORTED, "CPU", hoop_graph_begin(HOOP_DEVICE_CPU));
    INVALID("device", hoop_graph_begin((hoop_device)3));
    EXPECT(HOOP_ERR_UNSUPPORTED, "device", hoop_graph_begin(HOOP_DEVICE_CUDA));
    INVALID("out", hoop_graph_end(NULL));
    EXPECT(HOOP_ERR_USAGE, "hoop_graph_begin", hoop_graph_end(&g));
    ck_assert_ptr_null(g);
    INVALID("g", hoop_graph_replay(NULL));
    hoop_graph_free(NULL);
}

// ----- autograd.h: the tape -----------------------------------------------------------------

static void c_tape(void)
{
    INVALID("out", hoop_tape_init(NULL));
    OK(hoop_tape_destroy(NULL));
    hoop_tape_reset(NULL);
    hoop_tape_set_train(NULL, 0);
    ck_assert_int_eq(hoop_tape_train(NULL), 0);
    hoop_tape_set_grad_enabled(NULL, 0);
    hoop_tape_seed(NULL, 1);
    ck_assert_uint_eq(hoop_tape_node_count(NULL), 0);
    ck_assert_uint_eq(hoop_tape_arena_bytes(NULL), 0);
    hoop_tape *tp = tape();
    hoop_tensor *p = tensor(1, S3, 1);
    ck_assert_int_eq(hoop_tape_grad_was_ready(NULL, p), 0);
    ck_assert_int_eq(hoop_tape_grad_was_ready(tp, NULL), 0);
    hoop_tape_set_train(tp, -5); /* any non-zero is training mode */
    ck_assert_int_eq(hoop_tape_train(tp), 1);
}

static void c_tape_tensor_new(void)
{
    hoop_tape *tp = tape();
    hoop_tensor *t = (hoop_tensor *)&t;
    const int64_t zero[1] = {0}, huge[2] = {INT64_MAX, 4};
    INVALID("tape", hoop_tape_tensor_new(NULL, 1, S3, &t));
    INVALID("out", hoop_tape_tensor_new(tp, 1, S3, NULL));
    INVALID("ndim", hoop_tape_tensor_new(tp, -1, S3, &t));
    ck_assert_ptr_null(t);
    INVALID("ndim", hoop_tape_tensor_new(tp, 5, S3, &t));
    INVALID("shape", hoop_tape_tensor_new(tp, 1, NULL, &t));
    INVALID("dimension", hoop_tape_tensor_new(tp, 1, zero, &t));
    assert_error_has("hoop_tape_tensor_new: dimension 0 is 0", NULL);
    INVALID("ndim", hoop_tape_tensor_new(tp, 5, S3, &t));
    assert_error_has("hoop_tape_tensor_new: ndim=5", NULL);
    INVALID("shape", hoop_tape_tensor_new(tp, 2, huge, &t));
    const int64_t wrap[1] = {(int64_t)(SIZE_MAX / sizeof(float))}; /* see c_tensor_new */
    INVALID("shape", hoop_tape_tensor_new(tp, 1, wrap, &t));
    const int64_t big[1] = {(int64_t)1 << 61};
    EXPECT(HOOP_ERR_NOMEM, "allocate", hoop_tape_tensor_new(tp, 1, big, &t));
    ck_assert_ptr_null(t);
}

static void c_backward(void)
{
    hoop_tape *tp = tape(), *other = tape();
    hoop_tensor *p = tensor(2, S2x3, 1), *y, *loss, *loss2;
    INVALID("tape", hoop_backward(NULL, p));
    INVALID("loss", hoop_backward(tp, NULL));
    OK(hoop_tanh(tp, p, &y));
    INVALID("loss", hoop_backward(tp, y)); /* not a scalar */
    INVALID("loss", hoop_backward(tp, p)); /* a leaf, recorded nowhere */
    OK(hoop_sum(tp, y, &loss));
    INVALID("loss", hoop_backward(other, loss)); /* recorded on another tape */
    OK(hoop_backward(tp, loss));
    EXPECT(HOOP_ERR_USAGE, "backward", hoop_backward(tp, loss)); /* twice */
    hoop_tape_reset(tp);
    hoop_tape_set_grad_enabled(tp, 0);
    OK(hoop_sum(tp, p, &loss2));
    EXPECT(HOOP_ERR_USAGE, "recording", hoop_backward(tp, loss2));
}

// ----- autograd.h: the ops ------------------------------------------------------------------

/* The NULL cases every op shares: tape, out and each tensor argument. */
#define OP_NULLS(call_tape, call_out) \
    do {                              \
        INVALID("tape", call_tape);   \
        INVALID("out", call_out);     \
    } while (0)

static void c_matmul(void)
{
    hoop_tape *tp = tape();
    hoop_tensor *a = tensor(2, S2x3, 1), *b = tensor(2, S3x2, 1), *v = tensor(1, S3, 1), *o;
    OP_NULLS(hoop_matmul(NULL, a, b, &o), hoop_matmul(tp, a, b, NULL));
    INVALID("a", hoop_matmul(tp, NULL, b, &o));
    ck_assert_ptr_null(o);
    INVALID("b", hoop_matmul(tp, a, NULL, &o));
    INVALID("a", hoop_matmul(tp, v, b, &o));
    INVALID("b", hoop_matmul(tp, a, v, &o));
    INVALID("b", hoop_matmul(tp, a, a, &o)); /* (2,3) @ (2,3) */
    /* An output past INT_MAX elements (46341^2 = 2,147,488,281) is refused up front: it
     * was made, and every later op refused it. */
    const int64_t tall[2] = {46341, 1}, wide[2] = {1, 46341};
    INVALID("a", hoop_matmul(tp, tensor(2, tall, 0), tensor(2, wide, 0), &o));
    assert_error_has("(46341, 1) and b (1, 46341)", "2147488281 elements");
    ck_assert_uint_eq(hoop_tape_node_count(tp), 0);
}

static void c_linear(void)
{
    hoop_tape *tp = tape();
    hoop_tensor *x = tensor(2, S2x3, 0), *w = tensor(2, S2x3, 1), *b = tensor(1, S3, 1), *o;
    hoop_tensor *b2, *v = tensor(1, S3, 1);
    ck_assert_int_eq(hoop_tensor_new(&b2, 1, (const int64_t[]){2}, HOOP_DEVICE_CPU, 1), HOOP_OK);
    own(b2);
    OP_NULLS(hoop_linear(NULL, x, w, b2, &o), hoop_linear(tp, x, w, b2, NULL));
    INVALID("x", hoop_linear(tp, NULL, w, b2, &o));
    INVALID("w", hoop_linear(tp, x, NULL, b2, &o));
    INVALID("bias", hoop_linear(tp, x, w, b, &o)); /* (3) for 2 outputs */
    INVALID("x", hoop_linear(tp, v, w, NULL, &o));
    INVALID("w", hoop_linear(tp, x, v, NULL, &o));
    INVALID("w", hoop_linear(tp, tensor(2, S3x2, 0), w, NULL, &o));
    const int64_t tall[2] = {46341, 1}; /* (46341, 46341): past INT_MAX elements */
    INVALID("x", hoop_linear(tp, tensor(2, tall, 0), tensor(2, tall, 1), NULL, &o));
    assert_error_has("(46341, 1) and w (46341, 1)", "2147488281 elements");
    ck_assert_uint_eq(hoop_tape_node_count(tp), 0);
    OK(hoop_linear(tp, x, w, NULL, &o));
}

static void c_add(void)
{
    hoop_tape *tp = tape();
    hoop_tensor *a = tensor(2, S2x3, 1), *b = tensor(2, S3x2, 1), *o;
    OP_NULLS(hoop_add(NULL, a, a, &o), hoop_add(tp, a, a, NULL));
    INVALID("a", hoop_add(tp, NULL, a, &o));
    INVALID("b", hoop_add(tp, a, NULL, &o));
    INVALID("b", hoop_add(tp, a, b, &o)); /* (2,3) + (3,2) */
}

static void c_bias_add(void)
{
    hoop_tape *tp = tape();
    hoop_tensor *x = tensor(2, S2x3, 1), *b = tensor(1, S3, 1), *b2 = tensor(2, S2x2, 1), *o;
    OP_NULLS(hoop_bias_add(NULL, x, b, &o), hoop_bias_add(tp, x, b, NULL));
    INVALID("x", hoop_bias_add(tp, NULL, b, &o));
    INVALID("bias", hoop_bias_add(tp, x, NULL, &o));
    INVALID("bias", hoop_bias_add(tp, x, b2, &o));
    INVALID("x", hoop_bias_add(tp, b, b, &o)); /* x must be 2-D or 4-D */
}

typedef hoop_status (*unary_op)(hoop_tape *, hoop_tensor *, hoop_tensor **);

static void unary_cases(unary_op f, int needs_dims)
{
    hoop_tape *tp = tape();
    hoop_tensor *x = tensor(2, S2x3, 1), *s, *o;
    ck_assert_int_eq(hoop_tensor_new(&s, 0, NULL, HOOP_DEVICE_CPU, 1), HOOP_OK);
    own(s);
    OP_NULLS(f(NULL, x, &o), f(tp, x, NULL));
    INVALID("x", f(tp, NULL, &o));
    if (needs_dims)
        INVALID("x", f(tp, s, &o)); /* a scalar has no last dimension */
    else
        OK(f(tp, s, &o));
}

static void c_unary(void)
{
    unary_cases(hoop_relu, 0);
    unary_cases(hoop_gelu, 0);
    unary_cases(hoop_tanh, 0);
    unary_cases(hoop_sigmoid, 0);
    unary_cases(hoop_mean, 0);
    unary_cases(hoop_sum, 0);
    unary_cases(hoop_softmax, 1);
    unary_cases(hoop_flatten, 1);
}

static void c_cross_entropy(void)
{
    hoop_tape *tp = tape();
    hoop_tensor *x = tensor(2, S2x3, 1), *v = tensor(1, S3, 1), *o;
    const int32_t ok[2] = {0, 2}, high[2] = {0, 3}, neg[2] = {-1, 0}, min[2] = {0, INT32_MIN};
    OP_NULLS(hoop_cross_entropy(NULL, x, ok, 0, &o), hoop_cross_entropy(tp, x, ok, 0, NULL));
    INVALID("logits", hoop_cross_entropy(tp, NULL, ok, 0, &o));
    INVALID("labels", hoop_cross_entropy(tp, x, NULL, 0, &o));
    INVALID("logits", hoop_cross_entropy(tp, v, ok, 0, &o));
    INVALID("label", hoop_cross_entropy(tp, x, high, 0, &o));
    INVALID("label", hoop_cross_entropy(tp, x, neg, 0, &o));
    INVALID("label", hoop_cross_entropy(tp, x, min, 0, &o));
    INVALID("label_smoothing", hoop_cross_entropy(tp, x, ok, 1.0f, &o));
    INVALID("label_smoothing", hoop_cross_entropy(tp, x, ok, -0.1f, &o));
    INVALID("label_smoothing", hoop_cross_entropy(tp, x, ok, NAN, &o));
    INVALID("label_smoothing", hoop_cross_entropy(tp, x, ok, INFINITY, &o));
}

static void c_reshape(void)
{
    hoop_tape *tp = tape();
    hoop_tensor *x = tensor(2, S2x3, 1), *o;
    const int64_t six[1] = {6}, two_infer[2] = {-1, -1}, zero[2] = {0, 6}, bad[2] = {4, 2};
    const int64_t neg[2] = {-2, -3}, huge[2] = {INT64_MAX, INT64_MAX}, infer0[2] = {-1, 4};
    OP_NULLS(hoop_reshape(NULL, x, 1, six, &o), hoop_reshape(tp, x, 1, six, NULL));
    INVALID("x", hoop_reshape(tp, NULL, 1, six, &o));
    INVALID("shape", hoop_reshape(tp, x, 1, NULL, &o));
    INVALID("ndim", hoop_reshape(tp, x, -1, six, &o));
    INVALID("ndim", hoop_reshape(tp, x, 5, six, &o));
    INVALID("only one may be inferred", hoop_reshape(tp, x, 2, two_infer, &o));
    INVALID("dimension", hoop_reshape(tp, x, 2, zero, &o));
    INVALID("dimension", hoop_reshape(tp, x, 2, neg, &o));
    INVALID("x", hoop_reshape(tp, x, 2, bad, &o));
    INVALID("x", hoop_reshape(tp, x, 2, huge, &o));
    /* (2^32+1)(2^32-1)(2^32+1) 6(2^32-1) wraps to 6 in int64: it was accepted as a view of
     * x's 6 elements. */
    const int64_t wraps[4] = {(1ll << 32) + 1, (1ll << 32) - 1, (1ll << 32) + 1,
                              6 * ((1ll << 32) - 1)};
    INVALID("x", hoop_reshape(tp, x, 4, wraps, &o));
    INVALID("4 elements, which do not divide 6", hoop_reshape(tp, x, 2, infer0, &o));
    INVALID("x", hoop_reshape(tp, x, 0, NULL, &o)); /* 6 elements as a scalar */
}

static void c_conv2d(void)
{
    hoop_tape *tp = tape();
    hoop_tensor *x = tensor(4, S1x1x4x4, 1), *w = tensor(4, S2x1x3x3, 1), *o;
    hoop_tensor *b = tensor(1, (const int64_t[]){2}, 1), *b3 = tensor(1, S3, 1);
    hoop_tensor *big = tensor(4, (const int64_t[]){2, 1, 5, 5}, 1), *m = tensor(2, S2x3, 1);
    OP_NULLS(hoop_conv2d(NULL, x, w, b, 1, 0, &o), hoop_conv2d(tp, x, w, b, 1, 0, NULL));
    INVALID("x", hoop_conv2d(tp, NULL, w, b, 1, 0, &o));
    INVALID("w", hoop_conv2d(tp, x, NULL, b, 1, 0, &o));
    INVALID("bias", hoop_conv2d(tp, x, w, b3, 1, 0, &o));
    INVALID("x", hoop_conv2d(tp, m, w, b, 1, 0, &o));
    INVALID("w", hoop_conv2d(tp, x, m, b, 1, 0, &o));
    INVALID("stride", hoop_conv2d(tp, x, w, b, 0, 0, &o));
    INVALID("stride", hoop_conv2d(tp, x, w, b, INT_MIN, 0, &o));
    INVALID("padding", hoop_conv2d(tp, x, w, b, 1, -1, &o));
    INVALID("padding", hoop_conv2d(tp, x, w, b, 1, INT_MAX, &o));
    INVALID("w", hoop_conv2d(tp, x, big, NULL, 1, 0, &o)); /* 5x5 kernel, 4x4 input */
    INVALID("w", hoop_conv2d(tp, x, tensor(4, (const int64_t[]){2, 3, 3, 3}, 1), NULL, 1, 0, &o));
    OK(hoop_conv2d(tp, x, w, NULL, INT_MAX, 0, &o)); /* one output position */
}

static void c_max_pool2d(void)
{
    hoop_tape *tp = tape();
    hoop_tensor *x = tensor(4, S1x1x4x4, 1), *m = tensor(2, S2x3, 1), *o;
    OP_NULLS(hoop_max_pool2d(NULL, x, 2, 2, &o), hoop_max_pool2d(tp, x, 2, 2, NULL));
    INVALID("x", hoop_max_pool2d(tp, NULL, 2, 2, &o));
    INVALID("x", hoop_max_pool2d(tp, m, 2, 2, &o));
    INVALID("kernel", hoop_max_pool2d(tp, x, 0, 2, &o));
    INVALID("kernel", hoop_max_pool2d(tp, x, -2, 2, &o));
    INVALID("kernel", hoop_max_pool2d(tp, x, 5, 1, &o)); /* larger than the 4x4 input */
    INVALID("kernel", hoop_max_pool2d(tp, x, INT_MAX, 1, &o));
    INVALID("stride", hoop_max_pool2d(tp, x, 2, 0, &o));
    INVALID("stride", hoop_max_pool2d(tp, x, 2, INT_MIN, &o));
    OK(hoop_max_pool2d(tp, x, 2, INT_MAX, &o));
}

static void c_dropout(void)
{
    hoop_tape *tp = tape();
    hoop_tensor *x = tensor(2, S2x3, 1), *o;
    OP_NULLS(hoop_dropout(NULL, x, 0.5f, &o), hoop_dropout(tp, x, 0.5f, NULL));
    INVALID("x", hoop_dropout(tp, NULL, 0.5f, &o));
    INVALID("p", hoop_dropout(tp, x, 1.0f, &o));
    INVALID("p", hoop_dropout(tp, x, -0.5f, &o));
    INVALID("p", hoop_dropout(tp, x, NAN, &o));
    INVALID("p", hoop_dropout(tp, x, -INFINITY, &o));
    hoop_tape_set_train(tp, 0); /* also checked when dropout is the identity */
    INVALID("p", hoop_dropout(tp, x, 2.0f, &o));
}

// ----- nn.h ---------------------------------------------------------------------------------

static void c_rng(void)
{
    hoop_rng_seed(NULL, 1);
    ck_assert_uint_eq(hoop_rng_next(NULL), 0);
    ck_assert_float_eq(hoop_rng_uniform(NULL), 0.0f);
}

static void c_init(void)
{
    hoop_rng rng;
    hoop_rng_seed(&rng, 1);
    hoop_tensor *t = tensor(2, S2x3, 1);
    INVALID("t", hoop_init_kaiming_uniform(NULL, 3, 1.0f, &rng));
    INVALID("rng", hoop_init_kaiming_uniform(t, 3, 1.0f, NULL));
    INVALID("fan_in", hoop_init_kaiming_uniform(t, 0, 1.0f, &rng));
    INVALID("fan_in", hoop_init_kaiming_uniform(t, INT64_MIN, 1.0f, &rng));
    INVALID("gain", hoop_init_kaiming_uniform(t, 3, NAN, &rng));
    INVALID("t", hoop_init_xavier_uniform(NULL, 3, 2, 1.0f, &rng));
    INVALID("rng", hoop_init_xavier_uniform(t, 3, 2, 1.0f, NULL));
    INVALID("fan_in", hoop_init_xavier_uniform(t, 0, 0, 1.0f, &rng));
    INVALID("fan_in", hoop_init_xavier_uniform(t, -5, 10, 1.0f, &rng));
    INVALID("fan_out", hoop_init_xavier_uniform(t, 10, -5, 1.0f, &rng));
    INVALID("fan_in", hoop_init_xavier_uniform(t, INT64_MAX, INT64_MAX, 1.0f, &rng));
    INVALID("gain", hoop_init_xavier_uniform(t, 3, 2, INFINITY, &rng));
    hoop_init_uniform(NULL, 0, 1, &rng);
    hoop_init_uniform(t, 0, 1, NULL);
}

static void c_model_new(void)
{
    hoop_model *m = (hoop_model *)&m;
    const int64_t sizes[3] = {4, 3, 2}, zero[2] = {4, 0}, neg[2] = {-1, 2};
    const int64_t huge[2] = {INT64_MAX, INT64_MAX};
    hoop_cnn_config cnn = HOOP_CNN_CONFIG_INIT;
    INVALID("out", hoop_model_new(NULL));
    INVALID("out", hoop_model_new_mlp(NULL, sizes, 3, 1));
    INVALID("sizes", hoop_model_new_mlp(&m, NULL, 3, 1));
    INVALID("nsizes", hoop_model_new_mlp(&m, sizes, 1, 1));
    ck_assert_ptr_null(m);
    INVALID("nsizes", hoop_model_new_mlp(&m, sizes, 0, 1));
    INVALID("sizes", hoop_model_new_mlp(&m, zero, 2, 1));
    INVALID("sizes", hoop_model_new_mlp(&m, neg, 2, 1));
    INVALID("shape", hoop_model_new_mlp(&m, huge, 2, 1));
    INVALID("out", hoop_model_new_cnn(NULL, &cnn, 1));
    INVALID("cfg", hoop_model_new_cnn(&m, NULL, 1));
    cnn.height = 30; /* not a multiple of 4 */
    INVALID("height", hoop_model_new_cnn(&m, &cnn, 1));
    cnn.height = 28;
    cnn.in_channels = 0;
    INVALID("in_channels", hoop_model_new_cnn(&m, &cnn, 1));
    cnn.in_channels = 1;
    cnn.dropout = 1.0f;
    INVALID("dropout", hoop_model_new_cnn(&m, &cnn, 1));
    cnn.dropout = NAN;
    INVALID("dropout", hoop_model_new_cnn(&m, &cnn, 1));
    cnn.dropout = 0.0f;
    cnn.height = cnn.width = INT64_MAX - 3; /* a multiple of 4 whose products overflow */
    INVALID("height", hoop_model_new_cnn(&m, &cnn, 1));
    cnn.height = cnn.width = 28;
    cnn.hidden = INT64_MAX;
    INVALID("hidden", hoop_model_new_cnn(&m, &cnn, 1));
    ck_assert_ptr_null(m);
    hoop_model_free(NULL);
}

static void c_model_add_param(void)
{
    hoop_model *m;
    hoop_tensor *p = (hoop_tensor *)&p;
    const int64_t zero[1] = {0};
    ck_assert_int_eq(hoop_model_new(&m), HOOP_OK);
    INVALID("m", hoop_model_add_param(NULL, "w", 1, S3, &p));
    ck_assert_ptr_null(p);
    INVALID("name", hoop_model_add_param(m, NULL, 1, S3, &p));
    INVALID("name", hoop_model_add_param(m, "", 1, S3, &p));
    INVALID("ndim", hoop_model_add_param(m, "w", 9, S3, &p));
    INVALID("shape", hoop_model_add_param(m, "w", 1, NULL, &p));
    INVALID("dimension", hoop_model_add_param(m, "w", 1, zero, &p));
    OK(hoop_model_add_param(m, "w", 1, S3, NULL));
    INVALID("name", hoop_model_add_param(m, "w", 1, S3, &p)); /* duplicate */
    char longname[HOOP_TENSOR_NAME_MAX + 1];
    memset(longname, 'a', HOOP_TENSOR_NAME_MAX);
    longname[HOOP_TENSOR_NAME_MAX] = '\0'; /* would be cut: two such names would collide */
    INVALID("name", hoop_model_add_param(m, longname, 1, S3, &p));
    hoop_model_free(m);
}

static void c_model_forward(void)
{
    hoop_model *mlp, *custom;
    const int64_t sizes[2] = {3, 2};
    hoop_tape *tp = tape();
    hoop_tensor *x = tensor(2, S2x3, 0), *x4 = tensor(2, S2x2, 0), *o;
    hoop_cnn_config cnn = HOOP_CNN_CONFIG_INIT;
    ck_assert_int_eq(hoop_model_new_mlp(&mlp, sizes, 2, 1), HOOP_OK);
    ck_assert_int_eq(hoop_model_new(&custom), HOOP_OK);
    INVALID("m", hoop_model_forward(NULL, tp, x, &o));
    INVALID("tape", hoop_model_forward(mlp, NULL, x, &o));
    INVALID("x", hoop_model_forward(mlp, tp, NULL, &o));
    INVALID("logits", hoop_model_forward(mlp, tp, x, NULL));
    INVALID("x", hoop_model_forward(mlp, tp, x4, &o)); /* 2 features for fc1 (2, 3) */
    EXPECT(HOOP_ERR_USAGE, "hoop_model_new", hoop_model_forward(custom, tp, x, &o));
    hoop_model *cnn_m;
    cnn.conv1_channels = cnn.conv2_channels = 2;
    cnn.hidden = 4;
    ck_assert_int_eq(hoop_model_new_cnn(&cnn_m, &cnn, 1), HOOP_OK);
    INVALID("x", hoop_model_forward(cnn_m, tp, x, &o));
    hoop_model_free(mlp);
    hoop_model_free(custom);
    hoop_model_free(cnn_m);
}

static void c_model_queries(void)
{
    hoop_model *m;
    const int64_t sizes[2] = {3, 2};
    ck_assert_uint_eq(hoop_model_param_count(NULL), 0);
    ck_assert_ptr_null(hoop_model_param(NULL, 0));
    ck_assert_ptr_null(hoop_model_params(NULL));
    ck_assert_uint_eq(hoop_model_numel(NULL), 0);
    hoop_model_set_grad_hook(NULL, NULL, NULL);
    hoop_model_zero_grad(NULL);
    ck_assert_int_eq(hoop_model_new_mlp(&m, sizes, 2, 1), HOOP_OK);
    ck_assert_ptr_null(hoop_model_param(m, 2));
    ck_assert_ptr_null(hoop_model_param(m, SIZE_MAX));
    hoop_model_free(m);
}

// ----- optim.h ------------------------------------------------------------------------------

static void c_optim_new(void)
{
    hoop_optim *o = (hoop_optim *)&o;
    hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
    hoop_tensor *p = tensor(1, S3, 1), *c = tensor(1, S3, 0);
    hoop_tensor *ps[1] = {p}, *with_null[2] = {p, NULL}, *with_const[1] = {c};
    INVALID("out", hoop_optim_new(NULL, &cfg, ps, 1));
    INVALID("cfg", hoop_optim_new(&o, NULL, ps, 1));
    ck_assert_ptr_null(o);
    INVALID("params", hoop_optim_new(&o, &cfg, NULL, 1));
    INVALID("params", hoop_optim_new(&o, &cfg, with_null, 2));
    INVALID("params", hoop_optim_new(&o, &cfg, with_const, 1));
    cfg.kind = (hoop_optim_kind)7;
    INVALID("kind", hoop_optim_new(&o, &cfg, ps, 1));
    cfg.kind = (hoop_optim_kind)-1;
    INVALID("kind", hoop_optim_new(&o, &cfg, ps, 1));
    cfg.kind = HOOP_OPTIM_SGD;
    cfg.lr = -1.0f;
    INVALID("lr", hoop_optim_new(&o, &cfg, ps, 1));
    cfg.lr = NAN;
    INVALID("lr", hoop_optim_new(&o, &cfg, ps, 1));
    cfg.lr = INFINITY;
    INVALID("lr", hoop_optim_new(&o, &cfg, ps, 1));
    cfg.lr = 0.1f;
    cfg.momentum = -0.5f;
    INVALID("momentum", hoop_optim_new(&o, &cfg, ps, 1));
    cfg.momentum = 0.9f;
    cfg.dampening = NAN; /* a NaN parameter after the second step */
    INVALID("dampening", hoop_optim_new(&o, &cfg, ps, 1));
    cfg.dampening = 0.0f;
    cfg.momentum = 0.0f;
    cfg.nesterov = 1;
    INVALID("momentum", hoop_optim_new(&o, &cfg, ps, 1));
    cfg.nesterov = 0;
    cfg.kind = HOOP_OPTIM_ADAMW;
    cfg.beta1 = 1.0f;
    INVALID("betas", hoop_optim_new(&o, &cfg, ps, 1));
    cfg.beta1 = 0.9f;
    cfg.eps = -1.0f;
    INVALID("eps", hoop_optim_new(&o, &cfg, ps, 1));
    ck_assert_ptr_null(o);
    hoop_optim_free(NULL);
}

static void c_optim_use(void)
{
    INVALID("opt", hoop_optim_step(NULL));
    hoop_optim_zero_grad(NULL);
    INVALID("opt", hoop_optim_set_lr(NULL, 0.1f));
    ck_assert_float_eq(hoop_optim_lr(NULL), 0.0f);
    /* hoop_optim_new's rule for lr; a refused rate leaves the one set. */
    hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
    hoop_tensor *p = tensor(1, S3, 1);
    hoop_optim *o;
    OK(hoop_optim_new(&o, &cfg, &p, 1));
    OK(hoop_optim_set_lr(o, 0.5f));
    INVALID("lr", hoop_optim_set_lr(o, NAN));
    INVALID("lr", hoop_optim_set_lr(o, -1.0f));
    INVALID("lr", hoop_optim_set_lr(o, INFINITY));
    ck_assert_float_eq(hoop_optim_lr(o), 0.5f);
    OK(hoop_optim_set_lr(o, 0.0f));
    hoop_optim_free(o);
    ck_assert_int_eq(hoop_optim_step_count(NULL), 0);
}

static void c_lr_at(void)
{
    hoop_lr_schedule s = {.base_lr = 1.0f, .min_lr = 0.0f, .warmup_steps = 0, .total_steps = 10};
    ck_assert_float_eq(hoop_lr_at(NULL, 3), 0.0f);
    ck_assert_float_eq(hoop_lr_at(&s, -1), 1.0f);  /* before the start: step 0's rate */
    ck_assert_float_eq(hoop_lr_at(&s, 100), 0.0f); /* after the end: min_lr */
    ck_assert_float_eq(hoop_lr_at(&s, INT64_MAX), 0.0f);
    s.warmup_steps = -3; /* a negative warm-up is none */
    ck_assert_float_eq(hoop_lr_at(&s, 0), 1.0f);
    s.warmup_steps = 4;
    ck_assert_float_eq(hoop_lr_at(&s, INT64_MIN), 0.25f); /* step 0's, not a negative rate */
    ck_assert(isfinite(hoop_lr_at(&s, INT64_MAX)));
}

static void c_clip(void)
{
    hoop_tensor *p = tensor(1, S3, 1), *ps[2] = {p, NULL};
    float norm;
    INVALID("params", hoop_clip_grad_norm(NULL, 1, 1.0f, &norm));
    INVALID("params", hoop_clip_grad_norm(ps, 2, 1.0f, &norm));
    INVALID("max_norm", hoop_clip_grad_norm(ps, 1, 0.0f, &norm));
    INVALID("max_norm", hoop_clip_grad_norm(ps, 1, -1.0f, &norm));
    INVALID("max_norm", hoop_clip_grad_norm(ps, 1, NAN, &norm));
    OK(hoop_clip_grad_norm(NULL, 0, 1.0f, NULL));
}

static void c_checkpoint(void)
{
    hoop_tensor *p = tensor(1, S3, 1), *ps[2] = {p, NULL};
    hoop_optim *o;
    hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
    ck_assert_int_eq(hoop_optim_new(&o, &cfg, ps, 1), HOOP_OK);
    const char *path = tmp_path("ckpt");
    char xb[4];
    size_t n;
    INVALID("path", hoop_checkpoint_save(NULL, ps, 1, NULL, NULL, 0));
    INVALID("params", hoop_checkpoint_save(path, NULL, 1, NULL, NULL, 0));
    INVALID("params", hoop_checkpoint_save(path, ps, 2, NULL, NULL, 0));
    INVALID("extra", hoop_checkpoint_save(path, ps, 1, NULL, NULL, 4));
    INVALID("optimizer", hoop_checkpoint_save(path, ps, 0, o, NULL, 0));
    EXPECT(HOOP_ERR_SYSTEM, "/nonexistent/dir/ckpt",
           hoop_checkpoint_save("/nonexistent/dir/ckpt", ps, 1, NULL, NULL, 0));
    INVALID("path", hoop_checkpoint_load(NULL, ps, 1, NULL, NULL, 0, NULL));
    INVALID("params", hoop_checkpoint_load(path, NULL, 1, NULL, NULL, 0, NULL));
    INVALID("params", hoop_checkpoint_load(path, ps, 2, NULL, NULL, 0, NULL));
    INVALID("optimizer", hoop_checkpoint_load(path, ps, 0, o, NULL, 0, NULL));
    EXPECT(HOOP_ERR_SYSTEM, "/nonexistent/ckpt",
           hoop_checkpoint_load("/nonexistent/ckpt", ps, 1, NULL, xb, 4, &n));
    write_file(path, "not a checkpoint", 16);
    EXPECT(HOOP_ERR_INVALID, "checkpoint", hoop_checkpoint_load(path, ps, 1, NULL, xb, 4, &n));
    hoop_checkpoint_info info;
    INVALID("path", hoop_checkpoint_inspect(NULL, &info, NULL, 0));
    INVALID("info", hoop_checkpoint_inspect(path, NULL, NULL, 0));
    EXPECT(HOOP_ERR_SYSTEM, "/nonexistent/ckpt",
           hoop_checkpoint_inspect("/nonexistent/ckpt", &info, NULL, 0));
    EXPECT(HOOP_ERR_INVALID, "checkpoint", hoop_checkpoint_inspect(path, &info, xb, 4));
    void *rb;
    size_t rn;
    INVALID("path", hoop_checkpoint_read(NULL, &rb, &rn));
    INVALID("buf", hoop_checkpoint_read(path, NULL, &rn));
    INVALID("len", hoop_checkpoint_read(path, &rb, NULL));
    EXPECT(HOOP_ERR_SYSTEM, "/nonexistent/ckpt",
           hoop_checkpoint_read("/nonexistent/ckpt", &rb, &rn));
    /* The in-memory forms: NULL buf or info, bad bytes named by name. */
    static const char junk[] = "not a checkpoint";
    INVALID("buf", hoop_checkpoint_load_mem("m", NULL, 16, ps, 1, NULL, NULL, 0, NULL));
    INVALID("params", hoop_checkpoint_load_mem("m", junk, 16, NULL, 1, NULL, NULL, 0, NULL));
    INVALID("optimizer", hoop_checkpoint_load_mem("m", junk, 16, ps, 0, o, NULL, 0, NULL));
    EXPECT(HOOP_ERR_INVALID, "from-rank-0",
           hoop_checkpoint_load_mem("from-rank-0", junk, 16, ps, 1, NULL, xb, 4, &n));
    INVALID("buf", hoop_checkpoint_inspect_mem("m", NULL, 16, &info, NULL, 0));
    INVALID("info", hoop_checkpoint_inspect_mem("m", junk, 16, NULL, NULL, 0));
    INVALID("extra", hoop_checkpoint_inspect_mem("m", junk, 16, &info, NULL, 4));
    EXPECT(HOOP_ERR_INVALID, "(memory)", hoop_checkpoint_inspect_mem(NULL, junk, 0, &info, xb, 4));
    hoop_optim_free(o);
}

// ----- sampler.h ----------------------------------------------------------------------------
// (sampler guards: also being added on the DDP/sampler branch; reconcile there)

static void c_sampler(void)
{
    hoop_sampler *s = (hoop_sampler *)&s;
    hoop_sampler_config cfg = HOOP_SAMPLER_CONFIG_INIT;
    cfg.dataset_size = 10;
    INVALID("out", hoop_sampler_new(NULL, &cfg));
    INVALID("cfg", hoop_sampler_new(&s, NULL));
    ck_assert_ptr_null(s);
    cfg.world_size = 0;
    INVALID("world_size", hoop_sampler_new(&s, &cfg));
    cfg.world_size = INT_MIN;
    INVALID("world_size", hoop_sampler_new(&s, &cfg));
    cfg.world_size = 2;
    cfg.rank = 2;
    INVALID("rank", hoop_sampler_new(&s, &cfg));
    cfg.rank = -1;
    INVALID("rank", hoop_sampler_new(&s, &cfg));
    cfg.rank = 0;
    cfg.dataset_size = SIZE_MAX; /* refused before any allocation: above 2^40 samples */
    INVALID("dataset_size", hoop_sampler_new(&s, &cfg));
    ck_assert_ptr_null(s);
    hoop_sampler_free(NULL);
    INVALID("s", hoop_sampler_set_epoch(NULL, 1));
    ck_assert_uint_eq(hoop_sampler_num_samples(NULL), 0);
    ck_assert_ptr_null(hoop_sampler_indices(NULL));
}

// ----- data.h -------------------------------------------------------------------------------

static void c_dataset_load(void)
{
    hoop_dataset *ds = (hoop_dataset *)&ds;
    hoop_dataset_config cfg = HOOP_DATASET_CONFIG_INIT;
    const char *dir = write_mnist();
    char images[128], labels[128];
    snprintf(images, sizeof(images), "%s/train-images-idx3-ubyte", dir);
    snprintf(labels, sizeof(labels), "%s/train-labels-idx1-ubyte", dir);
    INVALID("out", hoop_dataset_load_idx(NULL, images, labels, NULL));
    INVALID("images_path", hoop_dataset_load_idx(&ds, NULL, labels, NULL));
    ck_assert_ptr_null(ds);
    INVALID("labels_path", hoop_dataset_load_idx(&ds, images, NULL, NULL));
    INVALID("/nonexistent/images", hoop_dataset_load_idx(&ds, "/nonexistent/images", labels, NULL));
    INVALID(images, hoop_dataset_load_idx(&ds, images, images, NULL)); /* 3 dims for labels */
    cfg.std = 0.0f;
    INVALID("std", hoop_dataset_load_idx(&ds, images, labels, &cfg));
    cfg.std = NAN;
    INVALID("std", hoop_dataset_load_idx(&ds, images, labels, &cfg));
    cfg.std = 1.0f;
    cfg.num_classes = 0;
    INVALID("num_classes", hoop_dataset_load_idx(&ds, images, labels, &cfg));
    cfg.num_classes = 2; /* label 2 is out of range */
    INVALID("label", hoop_dataset_load_idx(&ds, images, labels, &cfg));
    INVALID("out", hoop_dataset_load_mnist(NULL, dir, "train", NULL));
    INVALID("dir", hoop_dataset_load_mnist(&ds, NULL, "train", NULL));
    INVALID("split", hoop_dataset_load_mnist(&ds, dir, NULL, NULL));
    INVALID("split", hoop_dataset_load_mnist(&ds, dir, "validation", NULL));
    INVALID("/nonexistent", hoop_dataset_load_mnist(&ds, "/nonexistent", "train", NULL));
    ck_assert_ptr_null(ds);
    hoop_dataset_free(NULL);
}

static void c_dataset_use(void)
{
    double mean = -1, std = -1;
    float x[3 * 4];
    int32_t y[3];
    const int64_t idx[2] = {0, 2}, high[1] = {3}, neg[1] = {-1}, min[1] = {INT64_MIN};
    ck_assert_uint_eq(hoop_dataset_count(NULL), 0);
    ck_assert_int_eq(hoop_dataset_rows(NULL), 0);
    ck_assert_int_eq(hoop_dataset_cols(NULL), 0);
    ck_assert_int_eq(hoop_dataset_num_classes(NULL), 0);
    ck_assert_ptr_null(hoop_dataset_pixels(NULL));
    ck_assert_ptr_null(hoop_dataset_labels(NULL));
    hoop_dataset_pixel_stats(NULL, &mean, &std);
    ck_assert(mean == 0.0 && std == 0.0);
    hoop_dataset *ds = dataset3();
    hoop_dataset_pixel_stats(ds, NULL, NULL);
    INVALID("ds", hoop_dataset_gather(NULL, idx, 2, x, y));
    INVALID("idx", hoop_dataset_gather(ds, NULL, 2, x, y));
    INVALID("x", hoop_dataset_gather(ds, idx, 2, NULL, y));
    INVALID("index", hoop_dataset_gather(ds, high, 1, x, y));
    INVALID("index", hoop_dataset_gather(ds, neg, 1, x, y));
    INVALID("index", hoop_dataset_gather(ds, min, 1, x, NULL));
    OK(hoop_dataset_gather(ds, NULL, 0, NULL, NULL));
    hoop_data_permutation(NULL, 5, 1, 1);
    hoop_data_permutation(NULL, 0, 1, 1);
    hoop_dataset_free(ds);
}

static void c_loader(void)
{
    hoop_dataset *ds = dataset3();
    hoop_loader *ld = (hoop_loader *)&ld;
    float x[3 * 4];
    int32_t y[3];
    size_t n;
    const int64_t high[1] = {3}, neg[2] = {0, -1};
    INVALID("out", hoop_loader_new(NULL, ds, 2, 1));
    INVALID("ds", hoop_loader_new(&ld, NULL, 2, 1));
    ck_assert_ptr_null(ld);
    INVALID("batch_size", hoop_loader_new(&ld, ds, 0, 1));
    hoop_loader_free(NULL);
    INVALID("ld", hoop_loader_start_epoch(NULL, 1));
    INVALID("ld", hoop_loader_set_indices(NULL, high, 1));
    ck_assert_uint_eq(hoop_loader_num_batches(NULL), 0);
    INVALID("ld", hoop_loader_next(NULL, x, y, &n));
    OK(hoop_loader_new(&ld, ds, SIZE_MAX, 1)); /* one batch holding everything */
    ck_assert_uint_eq(hoop_loader_num_batches(ld), 1);
    INVALID("index", hoop_loader_set_indices(ld, high, 1));
    INVALID("index", hoop_loader_set_indices(ld, neg, 2));
    INVALID("x", hoop_loader_next(ld, NULL, y, &n));
    INVALID("count", hoop_loader_next(ld, x, y, NULL));
    OK(hoop_loader_next(ld, x, NULL, &n));
    ck_assert_uint_eq(n, 3);
    hoop_loader_free(ld);
    hoop_dataset_free(ds);
}

// ----- store.h ------------------------------------------------------------------------------

static void c_store_server(void)
{
    hoop_store_server *srv = (hoop_store_server *)&srv;
    hoop_store_config cfg = HOOP_STORE_CONFIG_INIT;
    cfg.host = "127.0.0.1";
    INVALID("out", hoop_store_server_init(NULL, &cfg));
    INVALID("config", hoop_store_server_init(&srv, NULL));
    ck_assert_ptr_null(srv);
    cfg.port = -1;
    INVALID("port", hoop_store_server_init(&srv, &cfg));
    cfg.port = 65536;
    INVALID("port", hoop_store_server_init(&srv, &cfg));
    cfg.port = 0;
    cfg.host = "no-such-host.invalid";
    INVALID("no-such-host.invalid", hoop_store_server_init(&srv, &cfg));
    ck_assert_ptr_null(srv);
    ck_assert_int_eq(hoop_store_server_port(NULL), -1);
    OK(hoop_store_server_destroy(NULL));
}

static void c_store_init(void)
{
    hoop_store *st = (hoop_store *)&st;
    hoop_store_config cfg = HOOP_STORE_CONFIG_INIT;
    cfg.host = "127.0.0.1";
    cfg.port = 1;
    cfg.timeout_ms = 100;
    INVALID("out", hoop_store_init(NULL, &cfg));
    INVALID("config", hoop_store_init(&st, NULL));
    ck_assert_ptr_null(st);
    cfg.port = 0;
    INVALID("port", hoop_store_init(&st, &cfg));
    cfg.port = 70000;
    INVALID("port", hoop_store_init(&st, &cfg));
    cfg.port = 1;
    cfg.host = NULL;
    INVALID("host", hoop_store_init(&st, &cfg));
    cfg.host = "no-such-host.invalid";
    INVALID("no-such-host.invalid", hoop_store_init(&st, &cfg));
    cfg.host = "127.0.0.1";
    cfg.world_size = 2;
    cfg.rank = 2;
    INVALID("rank", hoop_store_init(&st, &cfg));
    cfg.world_size = -1;
    INVALID("world_size", hoop_store_init(&st, &cfg));
    ck_assert_ptr_null(st);
    OK(hoop_store_destroy(NULL));
    ck_assert_int_eq(hoop_store_rank(NULL), -1);
    ck_assert_int_eq(hoop_store_world_size(NULL), 0);
}

/* The env:// contract, broken one variable at a time. */
static void env_contract(const char *rank, const char *world_size, const char *port)
{
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", port, 1);
    setenv("RANK", rank, 1);
    setenv("WORLD_SIZE", world_size, 1);
    unsetenv("LOCAL_RANK");
    unsetenv("LOCAL_WORLD_SIZE");
}

static void c_init_env(void)
{
    hoop_store *st = (hoop_store *)&st;
    hoop_comm *c = (hoop_comm *)&c;
    INVALID("out", hoop_store_init_env(NULL));
    INVALID("out", hoop_comm_init_env(NULL));
    env_contract("2", "2", "29999");
    INVALID("RANK", hoop_store_init_env(&st));
    ck_assert_ptr_null(st);
    INVALID("RANK", hoop_comm_init_env(&c));
    ck_assert_ptr_null(c);
    env_contract("-1", "2", "29999");
    INVALID("RANK", hoop_comm_init_env(&c));
    env_contract("0", "0", "29999");
    INVALID("WORLD_SIZE", hoop_comm_init_env(&c));
    env_contract("0", "1", "0");
    INVALID("MASTER_PORT", hoop_store_init_env(&st));
    env_contract("0", "1", "99999999999999999999");
    INVALID("MASTER_PORT", hoop_store_init_env(&st));
    unsetenv("MASTER_ADDR");
    INVALID("MASTER_ADDR", hoop_store_init_env(&st));
    /* Unknown enum values through the environment: a log level, an algorithm. */
    env_contract("0", "1", "29999");
    setenv("HOOP_DEBUG", "LOUD", 1);
    INVALID("HOOP_DEBUG", hoop_comm_init_env(&c));
    unsetenv("HOOP_DEBUG");
    setenv("HOOP_ALGO", "tree", 1);
    INVALID("HOOP_ALGO", hoop_comm_init_env(&c));
    ck_assert_ptr_null(c);
    unsetenv("HOOP_ALGO");
}

static void c_store_calls(void)
{
    hoop_store_server *srv;
    hoop_store *st = store1(&srv);
    char buf[8], longkey[HOOP_STORE_KEY_MAX + 2], longname[440];
    size_t n;
    int64_t v;
    int del;
    const char *keys[2] = {"a", NULL}, *ok_keys[1] = {"a"};
    memset(longkey, 'k', sizeof(longkey) - 1);
    longkey[sizeof(longkey) - 1] = '\0';
    memset(longname, 'n', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    INVALID("handle", hoop_store_set(NULL, "a", "1", 1));
    INVALID("key", hoop_store_set(st, NULL, "1", 1));
    INVALID("key", hoop_store_set(st, "", "1", 1));
    INVALID("key", hoop_store_set(st, longkey, "1", 1));
    INVALID("value", hoop_store_set(st, "a", NULL, 1));
    INVALID("value", hoop_store_set(st, "a", buf, (size_t)HOOP_STORE_VALUE_MAX + 1));
    INVALID("value", hoop_store_set(st, "a", buf, SIZE_MAX));
    OK(hoop_store_set(st, "a", "1", 1));
    INVALID("handle", hoop_store_get(NULL, "a", buf, sizeof(buf), &n, 0));
    INVALID("key", hoop_store_get(st, NULL, buf, sizeof(buf), &n, 0));
    INVALID("buf", hoop_store_get(st, "a", NULL, sizeof(buf), &n, 0));
    EXPECT(HOOP_ERR_TIMEOUT, "missing", hoop_store_get(st, "missing", buf, sizeof(buf), &n, 0));
    OK(hoop_store_get(st, "a", buf, sizeof(buf), &n, INT64_MAX));
    INVALID("handle", hoop_store_add(NULL, "c", 1, &v));
    INVALID("key", hoop_store_add(st, NULL, 1, &v));
    OK(hoop_store_set(st, "c", "9223372036854775807", 19));
    INVALID("c", hoop_store_add(st, "c", 1, &v)); /* overflows int64 */
    OK(hoop_store_set(st, "t", "text", 4));
    INVALID("t", hoop_store_add(st, "t", 1, &v)); /* not an integer */
    INVALID("handle", hoop_store_wait(NULL, ok_keys, 1, 0));
    INVALID("keys", hoop_store_wait(st, NULL, 1, 0));
    INVALID("key", hoop_store_wait(st, keys, 2, 0)); /* keys[1] is NULL */
    INVALID("keys", hoop_store_wait(st, ok_keys, 0, 0));
    INVALID("keys", hoop_store_wait(st, ok_keys, -1, 0));
    INVALID("keys", hoop_store_wait(st, ok_keys, 65537, 0));
    INVALID("handle", hoop_store_delete(NULL, "a", &del));
    INVALID("key", hoop_store_delete(st, NULL, &del));
    int won = 0;
    INVALID("handle", hoop_store_compare_set(NULL, "a", NULL, 0, "1", 1, &won, NULL, 0, NULL));
    INVALID("key", hoop_store_compare_set(st, NULL, NULL, 0, "1", 1, &won, NULL, 0, NULL));
    INVALID("desired", hoop_store_compare_set(st, "a", NULL, 0, NULL, 1, &won, NULL, 0, NULL));
    INVALID("expected_bytes",
            hoop_store_compare_set(st, "a", NULL, 5, "1", 1, &won, NULL, 0, NULL));
    INVALID("buf", hoop_store_compare_set(st, "a", NULL, 0, "1", 1, &won, NULL, 4, NULL));
    INVALID("expected",
            hoop_store_compare_set(st, "a", "1", SIZE_MAX, "1", 1, &won, NULL, 0, NULL));
    INVALID("a", hoop_store_compare_set(st, "a", NULL, 0, "2", 1, &won, buf, 0, &n)); /* cap */
    ck_assert_int_eq(won, 0); /* "a" exists: no swap */
    INVALID("handle", hoop_store_num_keys(NULL, &v));
    INVALID("count", hoop_store_num_keys(st, NULL));
    INVALID("handle", hoop_store_barrier(NULL, "b", 0));
    INVALID("name", hoop_store_barrier(st, NULL, 0));
    INVALID("name", hoop_store_barrier(st, "", 0));
    INVALID("name", hoop_store_barrier(st, longname, 0));
    INVALID("handle", hoop_store_allgather(NULL, "g", buf, 1, buf, 0));
    INVALID("name", hoop_store_allgather(st, NULL, buf, 1, buf, 0));
    INVALID("blob", hoop_store_allgather(st, "g", NULL, 1, buf, 0));
    INVALID("out", hoop_store_allgather(st, "g", buf, 1, NULL, 0));
    INVALID("bytes", hoop_store_allgather(st, "g", buf, SIZE_MAX, buf, 0));
    hoop_store_destroy(st);
    /* Barrier and all-gather need a rank and a world size. */
    hoop_store_config cfg = HOOP_STORE_CONFIG_INIT;
    cfg.host = "127.0.0.1";
    cfg.port = hoop_store_server_port(srv);
    cfg.token = "tok";
    ck_assert_int_eq(hoop_store_init(&st, &cfg), HOOP_OK);
    EXPECT(HOOP_ERR_USAGE, "rank", hoop_store_barrier(st, "b", 0));
    EXPECT(HOOP_ERR_USAGE, "rank", hoop_store_allgather(st, "g", buf, 1, buf, 0));
    hoop_store_destroy(st);
    hoop_store_server_destroy(srv);
}

// ----- comm.h -------------------------------------------------------------------------------

static void c_rendezvous(void)
{
    hoop_rendezvous *rv = (hoop_rendezvous *)&rv;
    INVALID("out", hoop_rendezvous_new(NULL, 1));
    INVALID("world_size", hoop_rendezvous_new(&rv, 0));
    INVALID("world_size", hoop_rendezvous_new(&rv, INT_MIN));
    hoop_rendezvous_free(NULL);
}

static void c_comm_init(void)
{
    hoop_comm *c = (hoop_comm *)&c;
    hoop_rendezvous *rv, *rv2;
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    ck_assert_int_eq(hoop_rendezvous_new(&rv, 1), HOOP_OK);
    ck_assert_int_eq(hoop_rendezvous_new(&rv2, 2), HOOP_OK);
    cfg.rank = 0;
    cfg.world_size = 1;
    cfg.rendezvous = rv;
    INVALID("out", hoop_comm_init(NULL, &cfg));
    INVALID("config", hoop_comm_init(&c, NULL));
    ck_assert_ptr_null(c);
    cfg.size = 8;
    INVALID("config", hoop_comm_init(&c, &cfg));
    cfg.size = sizeof(cfg);
    cfg.version = 99;
    INVALID("config", hoop_comm_init(&c, &cfg));
    cfg.version = HOOP_COMM_CONFIG_VERSION;
    cfg.world_size = 0;
    INVALID("world_size", hoop_comm_init(&c, &cfg));
    cfg.world_size = 1;
    cfg.rank = 1; /* rank >= world_size */
    INVALID("rank", hoop_comm_init(&c, &cfg));
    cfg.rank = -1;
    INVALID("rank", hoop_comm_init(&c, &cfg));
    cfg.rank = INT_MAX;
    INVALID("rank", hoop_comm_init(&c, &cfg));
    cfg.rank = 0;
    cfg.rendezvous = rv2; /* made for 2 ranks */
    INVALID("world_size", hoop_comm_init(&c, &cfg));
    cfg.rendezvous = rv;
    cfg.world_size = 2;
    cfg.rendezvous = NULL;
    INVALID("rendezvous", hoop_comm_init(&c, &cfg)); /* neither store nor rendezvous */
    cfg.world_size = 1;
    cfg.rendezvous = rv;
    cfg.algo = (hoop_algo)99;
    INVALID("algo", hoop_comm_init(&c, &cfg));
    cfg.algo = (hoop_algo)-1;
    INVALID("algo", hoop_comm_init(&c, &cfg));
    cfg.algo = HOOP_ALGO_AUTO;
    cfg.chunk_bytes = 1;
    INVALID("chunk_bytes", hoop_comm_init(&c, &cfg));
    cfg.chunk_bytes = SIZE_MAX;
    INVALID("chunk_bytes", hoop_comm_init(&c, &cfg));
    cfg.chunk_bytes = 100000000; /* the value given is named, and the field, not the env */
    INVALID("config.chunk_bytes=100000000 is out of range", hoop_comm_init(&c, &cfg));
    cfg.chunk_bytes = 0;
    cfg.nsocks = -3; /* was taken for 0 (HOOP_TCP_NSOCKS) */
    INVALID("config.nsocks=-3 is out of range [1, 16]", hoop_comm_init(&c, &cfg));
    cfg.nsocks = 17; /* was named "HOOP_TCP_NSOCKS=17" */
    INVALID("config.nsocks=17", hoop_comm_init(&c, &cfg));
    cfg.nsocks = 0;
    cfg.timeout_ms = 0; /* every wait failed at once */
    INVALID("config.timeout_ms=0", hoop_comm_init(&c, &cfg));
    cfg.timeout_ms = -1;
    ck_assert_ptr_null(c);
    OK(hoop_comm_destroy(NULL));
    hoop_rendezvous_free(rv);
    hoop_rendezvous_free(rv2);
}

static void c_comm_queries(void)
{
    char x;
    INVALID("comm", hoop_comm_abort(NULL));
    ck_assert_int_eq(hoop_comm_rank(NULL), -1);
    ck_assert_int_eq(hoop_comm_world_size(NULL), 0);
    ck_assert_int_eq(hoop_comm_local_rank(NULL), -1);
    ck_assert_uint_eq(hoop_comm_bytes_sent(NULL), 0);
    ck_assert_int_eq(hoop_comm_is_shared(NULL, &x, 1), 0);
    ck_assert_str_eq(hoop_algo_name((hoop_algo)99), "?");
    ck_assert_str_eq(hoop_algo_name((hoop_algo)-1), "?");
    hoop_comm *c = comm1();
    ck_assert_int_eq(hoop_comm_is_shared(c, NULL, 1), 0);
    ck_assert_int_eq(hoop_comm_is_shared(c, &x, SIZE_MAX), 0);
    INVALID("comm", hoop_comm_set_algo(NULL, HOOP_ALGO_RING));
    INVALID("algo", hoop_comm_set_algo(c, (hoop_algo)99));
    INVALID("algo", hoop_comm_set_algo(c, (hoop_algo)-1));
    OK(hoop_comm_abort(c));
    ck_assert_int_eq(hoop_comm_destroy(c), HOOP_OK);
}

static void c_algo_from_name(void)
{
    hoop_algo a;
    INVALID("name", hoop_algo_from_name(NULL, &a));
    INVALID("ringg", hoop_algo_from_name("ringg", &a));
    INVALID("", hoop_algo_from_name("", &a)); /* the message quotes the empty word: '' */
    INVALID("out", hoop_algo_from_name("ring", NULL));
}

static void c_shared(void)
{
    hoop_comm *c = comm1();
    void *p = &p;
    char x[8];
    INVALID("comm", hoop_comm_alloc_shared(NULL, 64, &p));
    INVALID("ptr", hoop_comm_alloc_shared(c, 64, NULL));
    INVALID("bytes", hoop_comm_alloc_shared(c, 0, &p));
    ck_assert_ptr_null(p);
    INVALID("bytes", hoop_comm_alloc_shared(c, SIZE_MAX, &p));
    OK(hoop_comm_free_shared(c, NULL));
    INVALID("comm", hoop_comm_free_shared(NULL, x));
    INVALID("hoop_comm_alloc_shared", hoop_comm_free_shared(c, x));
    OK(hoop_comm_alloc_shared(c, 64, &p));
    INVALID("hoop_comm_alloc_shared", hoop_comm_free_shared(c, (char *)p + 8));
    OK(hoop_comm_free_shared(c, p));
    ck_assert_int_eq(hoop_comm_destroy(c), HOOP_OK);
}

/* The argument checks come before any CUDA is asked for, so this needs no GPU. */
static void c_shared_cuda(void)
{
    hoop_comm *c = comm1();
    void *p = &p, *h = NULL;
    char x[8];
    INVALID("comm", hoop_comm_alloc_shared_cuda(NULL, 64, &p));
    INVALID("ptr", hoop_comm_alloc_shared_cuda(c, 64, NULL));
    INVALID("bytes", hoop_comm_alloc_shared_cuda(c, 0, &p));
    ck_assert_ptr_null(p);
    INVALID("bytes", hoop_comm_alloc_shared_cuda(c, SIZE_MAX, &p));
    OK(hoop_comm_free_shared_cuda(c, NULL));
    INVALID("comm", hoop_comm_free_shared_cuda(NULL, x));
    INVALID("hoop_comm_alloc_shared_cuda", hoop_comm_free_shared_cuda(c, x));
    OK(hoop_comm_alloc_shared(c, 64, &h)); /* host memory: freed by the other call */
    INVALID("hoop_comm_free_shared", hoop_comm_free_shared_cuda(c, h));
    OK(hoop_comm_free_shared(c, h));
    ck_assert_int_eq(hoop_comm_destroy(c), HOOP_OK);
}

static void c_requests(void)
{
    int done;
    hoop_comm *c = comm1();
    hoop_request *r;
    INVALID("req", hoop_test(NULL, &done));
    INVALID("req", hoop_wait(NULL, 10));
    OK(hoop_barrier(c, &r));
    INVALID("done", hoop_test(r, NULL));
    OK(hoop_wait(r, INT64_MAX)); /* centuries: the deadline saturates instead of wrapping */
    ck_assert_int_eq(hoop_comm_destroy(c), HOOP_OK);
    /* A comm whose own timeout is INT64_MAX ms: hoop_wait adds its grace to it. */
    hoop_rendezvous *rv;
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    ck_assert_int_eq(hoop_rendezvous_new(&rv, 1), HOOP_OK);
    cfg.rank = 0;
    cfg.world_size = 1;
    cfg.rendezvous = rv;
    cfg.timeout_ms = INT64_MAX;
    OK(hoop_comm_init(&c, &cfg));
    OK(hoop_barrier(c, &r));
    OK(hoop_wait(r, -1));
    OK(hoop_barrier(c, NULL));
    hoop_rendezvous_free(rv);
    ck_assert_int_eq(hoop_comm_destroy(c), HOOP_OK);
}

// ----- collectives.h ------------------------------------------------------------------------

static void c_dtype_names(void)
{
    ck_assert_uint_eq(hoop_dtype_size((hoop_dtype)HOOP_DTYPE_COUNT_), 0);
    ck_assert_uint_eq(hoop_dtype_size((hoop_dtype)-1), 0);
    ck_assert_str_eq(hoop_dtype_name((hoop_dtype)99), "?");
    ck_assert_str_eq(hoop_dtype_name((hoop_dtype)-1), "?");
    ck_assert_str_eq(hoop_op_name((hoop_op)HOOP_OP_COUNT_), "?");
    ck_assert_str_eq(hoop_op_name((hoop_op)-1), "?");
}

static void c_collectives(void)
{
    hoop_comm *c = comm1();
    float s[4] = {1, 2, 3, 4}, r[4];
    const size_t huge = SIZE_MAX / 2;
    const hoop_dtype F = HOOP_DTYPE_F32, bad_dt = (hoop_dtype)42;
    const hoop_op SUM = HOOP_OP_SUM, bad_op = (hoop_op)-3;
    /* all-reduce */
    INVALID("comm", hoop_allreduce(NULL, s, r, 4, F, SUM, NULL));
    INVALID("sendbuf", hoop_allreduce(c, NULL, r, 4, F, SUM, NULL));
    INVALID("recvbuf", hoop_allreduce(c, s, NULL, 4, F, SUM, NULL));
    INVALID("dtype", hoop_allreduce(c, s, r, 4, bad_dt, SUM, NULL));
    INVALID("op", hoop_allreduce(c, s, r, 4, F, bad_op, NULL));
    INVALID("HOOP_OP_AVG", hoop_allreduce(c, s, r, 4, HOOP_DTYPE_I32, HOOP_OP_AVG, NULL));
    INVALID("count", hoop_allreduce(c, s, r, huge, F, SUM, NULL));
    INVALID("sendbuf", hoop_allreduce(c, (char *)s + 1, r, 1, F, SUM, NULL)); /* misaligned */
    INVALID("recvbuf", hoop_allreduce(c, s, s + 1, 2, F, SUM, NULL)); /* overlap, not in place */
    /* broadcast */
    INVALID("comm", hoop_broadcast(NULL, s, r, 4, F, 0, NULL));
    INVALID("sendbuf", hoop_broadcast(c, NULL, r, 4, F, 0, NULL));
    INVALID("recvbuf", hoop_broadcast(c, s, NULL, 4, F, 0, NULL));
    INVALID("dtype", hoop_broadcast(c, s, r, 4, bad_dt, 0, NULL));
    INVALID("root", hoop_broadcast(c, s, r, 4, F, 1, NULL)); /* root >= world_size */
    INVALID("root", hoop_broadcast(c, s, r, 4, F, -1, NULL));
    INVALID("recvbuf", hoop_broadcast(c, s + 1, s, 2, F, 0, NULL)); /* overlap on the root */
    INVALID("count", hoop_broadcast(c, s, r, SIZE_MAX, F, 0, NULL));
    /* reduce */
    INVALID("comm", hoop_reduce(NULL, s, r, 4, F, SUM, 0, NULL));
    INVALID("sendbuf", hoop_reduce(c, NULL, r, 4, F, SUM, 0, NULL));
    INVALID("recvbuf", hoop_reduce(c, s, NULL, 4, F, SUM, 0, NULL)); /* on the root */
    INVALID("dtype", hoop_reduce(c, s, r, 4, bad_dt, SUM, 0, NULL));
    INVALID("op", hoop_reduce(c, s, r, 4, F, (hoop_op)HOOP_OP_COUNT_, 0, NULL));
    INVALID("root", hoop_reduce(c, s, r, 4, F, SUM, 1, NULL));
    INVALID("root", hoop_reduce(c, s, r, 4, F, SUM, INT_MIN, NULL));
    INVALID("recvbuf", hoop_reduce(c, s, s + 2, 4, F, SUM, 0, NULL)); /* overlap on the root */
    /* all-gather */
    INVALID("comm", hoop_allgather(NULL, s, r, 4, F, NULL));
    INVALID("sendbuf", hoop_allgather(c, NULL, r, 4, F, NULL));
    INVALID("recvbuf", hoop_allgather(c, s, NULL, 4, F, NULL));
    INVALID("dtype", hoop_allgather(c, s, r, 4, bad_dt, NULL));
    INVALID("count", hoop_allgather(c, s, r, huge, F, NULL));
    INVALID("recvbuf", hoop_allgather(c, s + 1, s, 2, F, NULL)); /* not recvbuf + 0 x count */
    /* reduce-scatter */
    INVALID("comm", hoop_reduce_scatter(NULL, s, r, 4, F, SUM, NULL));
    INVALID("sendbuf", hoop_reduce_scatter(c, NULL, r, 4, F, SUM, NULL));
    INVALID("recvbuf", hoop_reduce_scatter(c, s, NULL, 4, F, SUM, NULL));
    INVALID("dtype", hoop_reduce_scatter(c, s, r, 4, bad_dt, SUM, NULL));
    INVALID("op", hoop_reduce_scatter(c, s, r, 4, F, bad_op, NULL));
    INVALID("count", hoop_reduce_scatter(c, s, r, huge, F, SUM, NULL));
    INVALID("recvbuf", hoop_reduce_scatter(c, s, s + 1, 2, F, SUM, NULL)); /* not sendbuf + 0 */
    /* barrier */
    INVALID("comm", hoop_barrier(NULL, NULL));
    /* Nothing was enqueued by the calls above: the comm still works. */
    OK(hoop_allreduce(c, s, r, 4, F, SUM, NULL));
    ck_assert_float_eq(r[3], 4.0f);
    ck_assert_int_eq(hoop_comm_destroy(c), HOOP_OK);
}

/* The stream forms check their arguments as the forms above do, before anything touches
 * CUDA or the stream (the stream itself is CUDA's to check). */
static void c_collectives_stream(void)
{
    hoop_comm *c = comm1();
    float s[4] = {1, 2, 3, 4}, r[4];
    const size_t huge = SIZE_MAX / 2;
    const hoop_dtype F = HOOP_DTYPE_F32, bad_dt = (hoop_dtype)42;
    const hoop_op SUM = HOOP_OP_SUM, bad_op = (hoop_op)-3;
    INVALID("hoop_allreduce_stream", hoop_allreduce_stream(NULL, s, r, 4, F, SUM, NULL));
    INVALID("sendbuf", hoop_allreduce_stream(c, NULL, r, 4, F, SUM, NULL));
    INVALID("op", hoop_allreduce_stream(c, s, r, 4, F, bad_op, NULL));
    INVALID("count", hoop_allreduce_stream(c, s, r, huge, F, SUM, NULL));
    INVALID("hoop_broadcast_stream", hoop_broadcast_stream(NULL, s, r, 4, F, 0, NULL));
    INVALID("root", hoop_broadcast_stream(c, s, r, 4, F, 1, NULL));
    INVALID("hoop_reduce_stream", hoop_reduce_stream(NULL, s, r, 4, F, SUM, 0, NULL));
    INVALID("root", hoop_reduce_stream(c, s, r, 4, F, SUM, -1, NULL));
    INVALID("hoop_allgather_stream", hoop_allgather_stream(NULL, s, r, 4, F, NULL));
    INVALID("dtype", hoop_allgather_stream(c, s, r, 4, bad_dt, NULL));
    INVALID("hoop_reduce_scatter_stream", hoop_reduce_scatter_stream(NULL, s, r, 4, F, SUM, NULL));
    INVALID("recvbuf", hoop_reduce_scatter_stream(c, s, NULL, 4, F, SUM, NULL));
    INVALID("recvbuf", hoop_allreduce_stream(c, s + 1, s, 2, F, SUM, NULL)); /* overlap */
    INVALID("hoop_barrier_stream", hoop_barrier_stream(NULL, NULL));
    INVALID("comm", hoop_stream_status(NULL));
    OK(hoop_stream_status(c)); /* no stream call failed */
    /* Nothing was enqueued by the calls above: the comm still works. */
    OK(hoop_allreduce(c, s, r, 4, F, SUM, NULL));
    ck_assert_float_eq(r[3], 4.0f);
    ck_assert_int_eq(hoop_comm_destroy(c), HOOP_OK);
}

// ----- ddp.h --------------------------------------------------------------------------------
// (DDP guards: the DDP branch changes ddp.c too; reconcile there)

static hoop_status join_step(void *user)
{
    (void)user;
    return HOOP_OK;
}

static void c_ddp(void)
{
    hoop_comm *c = comm1();
    hoop_tensor *p = tensor(1, S3, 1), *k = tensor(1, S3, 0);
    hoop_tensor *ps[1] = {p}, *with_null[2] = {p, NULL}, *with_const[2] = {p, k};
    hoop_ddp *d = (hoop_ddp *)&d;
    hoop_ddp_stats stats;
    hoop_tape *tp = tape();
    hoop_tensor *loss;
    INVALID("out", hoop_ddp_init(NULL, c, ps, 1, NULL));
    INVALID("comm", hoop_ddp_init(&d, NULL, ps, 1, NULL));
    ck_assert_ptr_null(d);
    INVALID("params", hoop_ddp_init(&d, c, NULL, 1, NULL));
    INVALID("parameters", hoop_ddp_init(&d, c, ps, 0, NULL));
    INVALID("parameter", hoop_ddp_init(&d, c, with_null, 2, NULL));
    INVALID("parameter", hoop_ddp_init(&d, c, with_const, 2, NULL));
    OK(hoop_ddp_destroy(NULL));
    OK(hoop_sum(tp, p, &loss));
    INVALID("ddp", hoop_ddp_backward(NULL, tp, loss));
    hoop_ddp_set_sync(NULL, 0);
    hoop_ddp_get_stats(NULL, &stats);
    hoop_ddp_reset_stats(NULL);
    hoop_ddp_trace_event(NULL, "x", 0, 1);
    ck_assert_int_ge(hoop_ddp_now_us(), 0);
    INVALID("ddp", hoop_ddp_trace_enable(NULL, "x"));
    INVALID("ddp", hoop_ddp_trace_flush(NULL));
    INVALID("ddp", hoop_ddp_join(NULL, join_step, NULL));
    INVALID("ddp", hoop_ddp_wait(NULL));
    OK(hoop_ddp_init(&d, c, ps, 1, NULL));
    INVALID("step", hoop_ddp_join(d, NULL, NULL));
    INVALID("tape", hoop_ddp_backward(d, NULL, loss));
    INVALID("loss", hoop_ddp_backward(d, tp, NULL));
    hoop_ddp_get_stats(d, NULL);
    OK(hoop_ddp_wait(d)); /* on the cpu nothing is in flight */
    hoop_ddp_trace_event(d, NULL, 0, 1);
    hoop_ddp_trace_event(d, "backwards", 5, -5); /* an interval that ends before it starts */
    OK(hoop_ddp_destroy(d));
    ck_assert_int_eq(hoop_comm_destroy(c), HOOP_OK);
}

// ----- the table ----------------------------------------------------------------------------

struct api_case {
    const char *fns; /* the public functions this case covers, space-separated */
    void (*run)(void);
};

/* clang-format off */
static const struct api_case CASES[] = {
    {"hoop_status_str hoop_status_name hoop_last_error", c_status},
    {"hoop_version hoop_version_string", c_version},
    {"hoop_log_set hoop_log_set_rank", c_log},
    {"hoop_tensor_new hoop_tensor_free", c_tensor_new},
    {"hoop_tensor_ndim hoop_tensor_dim hoop_tensor_count hoop_tensor_device "
     "hoop_tensor_requires_grad hoop_tensor_shape_str hoop_tensor_data hoop_tensor_grad "
     "hoop_tensor_name", c_tensor_queries},
    {"hoop_tensor_zero_grad hoop_tensor_copy_from hoop_tensor_fill hoop_tensor_set_name "
     "hoop_tensor_set_grad_hook hoop_tensor_set_grad_buffer", c_tensor_writes},
    {"hoop_tensor_copy_to_host hoop_tensor_grad_to_host hoop_tensor_to_device hoop_device_check "
     "hoop_model_to_device hoop_device_describe hoop_host_alloc hoop_host_free hoop_device_sync",
     c_tensor_devices},
    {"hoop_graph_begin hoop_graph_end hoop_graph_replay hoop_graph_free", c_graph},
    {"hoop_tape_init hoop_tape_destroy hoop_tape_reset hoop_tape_set_train hoop_tape_train "
     "hoop_tape_set_grad_enabled hoop_tape_seed hoop_tape_node_count hoop_tape_arena_bytes "
     "hoop_tape_grad_was_ready", c_tape},
    {"hoop_tape_tensor_new", c_tape_tensor_new},
    {"hoop_backward", c_backward},
    {"hoop_matmul", c_matmul},
    {"hoop_linear", c_linear},
    {"hoop_add", c_add},
    {"hoop_bias_add", c_bias_add},
    {"hoop_relu hoop_gelu hoop_tanh hoop_sigmoid hoop_mean hoop_sum hoop_softmax hoop_flatten",
     c_unary},
    {"hoop_cross_entropy", c_cross_entropy},
    {"hoop_reshape", c_reshape},
    {"hoop_conv2d", c_conv2d},
    {"hoop_max_pool2d", c_max_pool2d},
    {"hoop_dropout", c_dropout},
    {"hoop_rng_seed hoop_rng_next hoop_rng_uniform", c_rng},
    {"hoop_init_kaiming_uniform hoop_init_xavier_uniform hoop_init_uniform", c_init},
    {"hoop_model_new hoop_model_new_mlp hoop_model_new_cnn hoop_model_free", c_model_new},
    {"hoop_model_add_param", c_model_add_param},
    {"hoop_model_forward", c_model_forward},
    {"hoop_model_param_count hoop_model_param hoop_model_params hoop_model_numel "
     "hoop_model_set_grad_hook hoop_model_zero_grad", c_model_queries},
    {"hoop_optim_new hoop_optim_free", c_optim_new},
    {"hoop_optim_step hoop_optim_zero_grad hoop_optim_set_lr hoop_optim_lr "
     "hoop_optim_step_count", c_optim_use},
    {"hoop_lr_at", c_lr_at},
    {"hoop_clip_grad_norm", c_clip},
    {"hoop_checkpoint_save hoop_checkpoint_load hoop_checkpoint_inspect "
     "hoop_checkpoint_load_mem hoop_checkpoint_inspect_mem hoop_checkpoint_read",
     c_checkpoint},
    {"hoop_sampler_new hoop_sampler_free hoop_sampler_set_epoch hoop_sampler_num_samples "
     "hoop_sampler_indices", c_sampler},
    {"hoop_dataset_load_idx hoop_dataset_load_mnist hoop_dataset_free", c_dataset_load},
    {"hoop_dataset_count hoop_dataset_rows hoop_dataset_cols hoop_dataset_num_classes "
     "hoop_dataset_pixels hoop_dataset_labels hoop_dataset_pixel_stats hoop_dataset_gather "
     "hoop_data_permutation", c_dataset_use},
    {"hoop_loader_new hoop_loader_free hoop_loader_start_epoch hoop_loader_set_indices "
     "hoop_loader_num_batches hoop_loader_next", c_loader},
    {"hoop_store_server_init hoop_store_server_port hoop_store_server_destroy", c_store_server},
    {"hoop_store_init hoop_store_destroy hoop_store_rank hoop_store_world_size", c_store_init},
    {"hoop_store_init_env hoop_comm_init_env", c_init_env},
    {"hoop_store_set hoop_store_get hoop_store_add hoop_store_compare_set hoop_store_wait "
     "hoop_store_delete hoop_store_num_keys hoop_store_barrier hoop_store_allgather",
     c_store_calls},
    {"hoop_rendezvous_new hoop_rendezvous_free", c_rendezvous},
    {"hoop_comm_init hoop_comm_destroy", c_comm_init},
    {"hoop_comm_abort hoop_comm_rank hoop_comm_world_size hoop_comm_local_rank "
     "hoop_comm_bytes_sent hoop_comm_is_shared hoop_comm_set_algo hoop_algo_name",
     c_comm_queries},
    {"hoop_algo_from_name", c_algo_from_name},
    {"hoop_comm_alloc_shared hoop_comm_free_shared", c_shared},
    {"hoop_comm_alloc_shared_cuda hoop_comm_free_shared_cuda", c_shared_cuda},
    {"hoop_test hoop_wait", c_requests},
    {"hoop_dtype_size hoop_dtype_name hoop_op_name", c_dtype_names},
    {"hoop_allreduce hoop_broadcast hoop_reduce hoop_allgather hoop_reduce_scatter "
     "hoop_barrier", c_collectives},
    {"hoop_allreduce_stream hoop_broadcast_stream hoop_reduce_stream hoop_allgather_stream "
     "hoop_reduce_scatter_stream hoop_barrier_stream hoop_stream_status", c_collectives_stream},
    {"hoop_ddp_init hoop_ddp_destroy hoop_ddp_backward hoop_ddp_set_sync hoop_ddp_get_stats "
     "hoop_ddp_reset_stats hoop_ddp_trace_event hoop_ddp_now_us hoop_ddp_trace_enable "
     "hoop_ddp_trace_flush hoop_ddp_join hoop_ddp_wait", c_ddp},
};
/* clang-format on */
#define NCASES ((int)(sizeof(CASES) / sizeof(CASES[0])))

START_TEST(test_case)
{
    printf("case %d: %s\n", _i, CASES[_i].fns);
    CASES[_i].run();
    free_owned();
    rm_tmpdir();
}
END_TEST

// ----- the list of public functions ---------------------------------------------------------

#define MAX_FNS 1024

struct names {
    char *v[MAX_FNS];
    int n;
};

static void names_add(struct names *s, const char *name, size_t len)
{
    for (int i = 0; i < s->n; i++)
        if (strlen(s->v[i]) == len && strncmp(s->v[i], name, len) == 0) return;
    ck_assert_int_lt(s->n, MAX_FNS);
    s->v[s->n++] = strndup(name, len);
}

static int names_has(const struct names *s, const char *name, size_t len)
{
    for (int i = 0; i < s->n; i++)
        if (strlen(s->v[i]) == len && strncmp(s->v[i], name, len) == 0) return 1;
    return 0;
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* Blanks out comments so that "HOOP_API" in prose does not count. */
static void strip_comments(char *s)
{
    for (char *p = s; *p; p++) {
        if (p[0] == '/' && p[1] == '*') {
            char *e = strstr(p + 2, "*/");
            char *end = e ? e + 2 : p + strlen(p);
            memset(p, ' ', (size_t)(end - p));
            p = end - 1;
        } else if (p[0] == '/' && p[1] == '/') {
            while (*p && *p != '\n') *p++ = ' ';
            if (!*p) break;
        }
    }
}

/* Adds the HOOP_API functions of the headers in dir (an in-tree build finds a generated
 * header in both trees: names_add keeps one). */
static void scan_headers(const char *dir, struct names *out, int required)
{
    DIR *d = opendir(dir);
    if (!d && !required) return;
    ck_assert_msg(d != NULL, "cannot open %s (is top_srcdir set?)", dir);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 3 || strcmp(e->d_name + len - 2, ".h") != 0) continue;
        char path[8192];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        char *text = read_all(path);
        strip_comments(text);
        for (char *p = text; (p = strstr(p, "HOOP_API")) != NULL; p += 8) {
            if (p >= text + 8 && strncmp(p - 8, "#define ", 8) == 0) continue;
            char *paren = strchr(p, '(');
            ck_assert_ptr_nonnull(paren);
            char *end = paren;
            while (end > p && isspace((unsigned char)end[-1])) end--;
            char *start = end;
            while (start > p && (isalnum((unsigned char)start[-1]) || start[-1] == '_')) start--;
            ck_assert_msg(end > start, "%s: a HOOP_API declaration without a name", path);
            names_add(out, start, (size_t)(end - start)); /* keeps one of each name */
        }
        free(text);
    }
    closedir(d);
}

/* Every function declared HOOP_API in include/hoop/ *.h, of the source tree and of the
 * build tree (configure generates version.h there): the identifier before the first
 * '(' after each HOOP_API (the macro's own definition in export.h is skipped). */
static void header_functions(struct names *out)
{
    const char *src = getenv("top_srcdir"), *build = getenv("top_builddir");
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/include/hoop", src ? src : ".");
    scan_headers(dir, out, 1);
    snprintf(dir, sizeof(dir), "%s/include/hoop", build ? build : ".");
    scan_headers(dir, out, 0);
}

static void case_functions(struct names *out)
{
    for (int i = 0; i < NCASES; i++)
        for (const char *p = CASES[i].fns; *p;) {
            while (*p == ' ') p++;
            const char *q = p;
            while (*q && *q != ' ') q++;
            if (q > p) names_add(out, p, (size_t)(q - p));
            p = q;
        }
}

START_TEST(test_every_function_has_a_case)
{
    struct names declared = {.n = 0}, covered = {.n = 0};
    header_functions(&declared);
    case_functions(&covered);
    ck_assert_int_gt(declared.n, 100);
    char missing[4096] = "", stale[4096] = "", hidden[4096] = "";
    for (int i = 0; i < declared.n; i++) {
        const char *f = declared.v[i];
        if (!names_has(&covered, f, strlen(f)))
            snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), " %s", f);
        if (dlsym(RTLD_DEFAULT, f) == NULL)
            snprintf(hidden + strlen(hidden), sizeof(hidden) - strlen(hidden), " %s", f);
    }
    for (int i = 0; i < covered.n; i++) {
        const char *f = covered.v[i];
        if (!names_has(&declared, f, strlen(f)))
            snprintf(stale + strlen(stale), sizeof(stale) - strlen(stale), " %s", f);
    }
    printf("%d public functions declared in include/hoop/*.h, %d covered by %d cases\n", declared.n,
           covered.n, NCASES);
    ck_assert_msg(missing[0] == '\0', "public functions without a NULL/range case in CASES:%s",
                  missing);
    ck_assert_msg(stale[0] == '\0', "CASES names functions no header declares:%s", stale);
    ck_assert_msg(hidden[0] == '\0', "declared HOOP_API but not exported by libhoop:%s", hidden);
    for (int i = 0; i < declared.n; i++) free(declared.v[i]);
    for (int i = 0; i < covered.n; i++) free(covered.v[i]);
}
END_TEST

/* The other direction: every hoop_ function the shared library exports is declared in a
 * header (so it has a case). Uses nm; skipped (with a line saying so) without it. */
START_TEST(test_every_export_is_declared)
{
    const char *b = getenv("top_builddir");
    char cmd[4200], line[512], undeclared[4096] = "";
    snprintf(cmd, sizeof(cmd), "nm -D --defined-only '%s/.libs/libhoop.so' 2>/dev/null",
             b ? b : ".");
    struct names declared = {.n = 0};
    header_functions(&declared);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    int exported = 0;
    while (fgets(line, sizeof(line), p)) {
        char type, name[256];
        unsigned long long addr;
        if (sscanf(line, "%llx %c %255s", &addr, &type, name) != 3 || type != 'T') continue;
        if (strncmp(name, "hoop_", 5) != 0 || strncmp(name, "hoop__", 6) == 0) continue;
        exported++;
        if (!names_has(&declared, name, strlen(name)))
            snprintf(undeclared + strlen(undeclared), sizeof(undeclared) - strlen(undeclared),
                     " %s", name);
    }
    pclose(p);
    if (exported == 0) {
        printf("SKIP test_every_export_is_declared: no nm or no %s/.libs/libhoop.so\n",
               b ? b : ".");
        return;
    }
    printf("%d hoop_ functions exported by libhoop.so\n", exported);
    ck_assert_msg(undeclared[0] == '\0', "exported by libhoop.so but declared in no header:%s",
                  undeclared);
    for (int i = 0; i < declared.n; i++) free(declared.v[i]);
}
END_TEST

int main(void)
{
    /* CUDA tensors must fail the same way on every machine: no backend at this path. */
    setenv("HOOP_CUDA_BACKEND", "/nonexistent/libhoop-cuda.so", 1);
    Suite *s = suite_create("api_args");
    TCase *tc = tcase_create("errors");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_every_function_has_a_case);
    tcase_add_test(tc, test_every_export_is_declared);
    tcase_add_loop_test(tc, test_case, 0, NCASES);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
