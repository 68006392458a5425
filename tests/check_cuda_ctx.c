/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_cuda_ctx.c -- the CUDA device layer (src/cuda/ctx.h, alloc.h): which device
 * a worker gets (HOOP_CUDA_DEVICE, LOCAL_RANK round-robin, no device at all), each in a
 * child process of its own, since the choice is made once per process; the caching
 * allocator (its size classes, reuse without a new cudaMalloc, alignment, the cache given
 * back on out-of-memory and the retry, the errors and their messages); pinned memory,
 * asynchronous copies and the ordering of the compute and copy streams.
 *
 * check_cuda_ctx runs the backend on the host execution layer (src/cuda/hx.h), which
 * pretends 4 devices for the device choice and lets a test shrink the device memory or
 * fail cudaMalloc on purpose; its counts of CUDA calls are the independent reference for
 * the allocator's. check_cuda_ctx_gpu runs the checks that need no such hook on a GPU
 * (skipping, 77, without one), in one process (Check's no-fork mode, as a GPU test must:
 * CUDA after fork is undefined), the device-choice cases first, each in a child forked
 * before the parent has touched CUDA.
 */
#include "config.h"

#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "autograd/kern.h"
#include "core/backend.h"
#include "core/clock.h"
#include "core/env.h"
#include "cuda/coll.h"
#include "cuda/ctx.h"
#include "hoop/log.h"
#include "run_suite.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

extern const struct hoop__kern hoop__kern_cuda;

#ifdef HOOP_KERN_CUDA_GPU
#include <cuda_runtime_api.h>
#define HX 0
/* The devices this process sees (0 when CUDA finds none). */
static int gpu_devices(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? n : 0;
}
#else
#define HX 1
/* The host execution layer's test hooks (src/cuda/hx.h). */
void hoop__hx_set_devices(int count, size_t bytes);
void hoop__hx_fail_malloc_after(long n, int e);
unsigned long hoop__hx_count(const char *call);
int hoop__hx_stream_ordered(hoop__cuda_stream_t waiter, hoop__cuda_stream_t producer);
void hoop__hx_set_lazy(int on);
unsigned long hoop__hx_queued(hoop__cuda_stream_t s);
#define HX_DEVICES 4 /* what the device-choice children pretend */
#define HX_ERR_INVALID_VALUE 1
#define HX_ERR_MEMORY_ALLOCATION 2
#endif

#define MIB ((size_t)1024 * 1024)

// ----------------------------------------------------------------- a child per device choice

/* What a child reports back through its pipe. */
struct child_out {
    int st;       /* the case's status */
    int dev;      /* the device the context chose */
    int count;    /* devices this process sees */
    int rr_lines; /* INFO lines saying workers share GPUs round-robin */
    size_t total; /* the device's memory */
    char name[64];
    char err[512]; /* hoop_last_error() when st != HOOP_OK */
    int extra;     /* the case's own result */
};

static struct child_out *child_res;

static void child_log(hoop_log_level level, const char *line, void *user)
{
    (void)level;
    (void)user;
    if (strstr(line, "round-robin")) child_res->rr_lines++;
}

/* The case body for a child: hoop__cuda_init, then the device's identity. */
static void case_init(struct child_out *o)
{
    o->st = hoop__cuda_init();
    if (o->st == HOOP_OK)
        o->st = hoop__cuda_device_info(&o->dev, o->name, sizeof(o->name), &o->total);
}

/* Runs body in a child with only the given variables set among those the choice reads
 * (names[i] = values[i]; n of them) and returns its report. */
static struct child_out fork_case(const char *const *names, const char *const *values, int n,
                                  void (*body)(struct child_out *))
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct child_out o;
        memset(&o, 0, sizeof(o));
        o.dev = -1;
        child_res = &o;
        static const char *const clear[] = {"HOOP_CUDA_DEVICE",
                                            "HOOP_TIMEOUT",
                                            "HOOP_CUDA_TF32",
                                            "MASTER_ADDR",
                                            "MASTER_PORT",
                                            "RANK",
                                            "WORLD_SIZE",
                                            "LOCAL_RANK",
                                            "LOCAL_WORLD_SIZE",
                                            "SLURM_STEP_ID",
                                            "SLURM_JOB_ID",
                                            "SLURM_PROCID",
                                            "SLURM_LOCALID",
                                            "SLURM_NODEID",
                                            "SLURM_STEP_NUM_TASKS",
                                            "SLURM_NTASKS",
                                            "SLURM_STEP_TASKS_PER_NODE",
                                            "SLURM_TASKS_PER_NODE",
                                            "SLURM_NTASKS_PER_NODE",
                                            "SLURM_STEP_NODELIST",
                                            "SLURM_JOB_NODELIST",
                                            "SLURM_NODELIST"};
        for (size_t i = 0; i < sizeof(clear) / sizeof(clear[0]); i++) unsetenv(clear[i]);
        for (int i = 0; i < n; i++) setenv(names[i], values[i], 1);
#if HX
        hoop__hx_set_devices(HX_DEVICES, 0);
        o.count = HX_DEVICES;
#else
        o.count = gpu_devices();
#endif
        hoop_log_set(child_log, NULL);
        body(&o);
        if (o.st != HOOP_OK && !o.err[0]) snprintf(o.err, sizeof(o.err), "%s", hoop_last_error());
        ssize_t w = write(fds[1], &o, sizeof(o));
        _exit(w == (ssize_t)sizeof(o) ? 0 : 3);
    }
    close(fds[1]);
    struct child_out o;
    size_t got = 0;
    while (got < sizeof(o)) {
        ssize_t r = read(fds[0], (char *)&o + got, sizeof(o) - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fds[0]);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0 && got == sizeof(o),
                  "the child died (status 0x%x) or reported %zu of %zu bytes", status, got,
                  sizeof(o));
    return o;
}

static struct child_out choose(const char *name, const char *value)
{
    const char *names[1] = {name}, *values[1] = {value};
    return fork_case(names, values, name ? 1 : 0, case_init);
}

START_TEST(test_default_device)
{
    struct child_out o = choose(NULL, NULL);
    ck_assert_msg(o.st == HOOP_OK, "%s", o.err);
    ck_assert_int_eq(o.dev, 0);
    ck_assert_int_eq(o.rr_lines, 0);
    ck_assert_uint_gt(o.total, 0);
    ck_assert_msg(o.name[0] != '\0', "the device has no name");
#if HX
    ck_assert_str_eq(o.name, "host execution layer");
#endif
}
END_TEST

START_TEST(test_hoop_cuda_device)
{
    struct child_out o = choose("HOOP_CUDA_DEVICE", "0");
    ck_assert_msg(o.st == HOOP_OK, "%s", o.err);
    ck_assert_int_eq(o.dev, 0);
    char last[16];
    snprintf(last, sizeof(last), "%d", o.count - 1);
    o = choose("HOOP_CUDA_DEVICE", last);
    ck_assert_msg(o.st == HOOP_OK, "%s", o.err);
    ck_assert_int_eq(o.dev, o.count - 1);
    ck_assert_int_eq(o.rr_lines, 0);
    /* HOOP_CUDA_DEVICE wins over LOCAL_RANK */
    const char *names[2] = {"HOOP_CUDA_DEVICE", "LOCAL_RANK"}, *values[2] = {"0", last};
    o = fork_case(names, values, 2, case_init);
    ck_assert_msg(o.st == HOOP_OK, "%s", o.err);
    ck_assert_int_eq(o.dev, 0);
}
END_TEST

/* libhoop's own reading of name=value (env.c; the parent's environment is left as it
 * was): its status, its value (*v) and its message (msg, "" when it accepts). */
static hoop_status libhoop_reads(const char *name, const char *value, int64_t *v, char *msg,
                                 size_t len)
{
    const char *was = getenv(name);
    char old[256];
    snprintf(old, sizeof(old), "%s", was ? was : "");
    setenv(name, value, 1);
    hoop_status st;
    int dev = -1;
    if (strcmp(name, "HOOP_TIMEOUT") == 0) {
        st = hoop__env_ms(name, v);
    } else if (strcmp(name, "HOOP_CUDA_DEVICE") == 0) {
        st = hoop__env_cuda_device(&dev);
        *v = dev;
    } else {
        st = hoop__env_int(name, v);
    }
    snprintf(msg, len, "%s", st == HOOP_OK ? "" : hoop_last_error());
    if (was)
        setenv(name, old, 1);
    else
        unsetenv(name);
    return st;
}

/* A malformed HOOP_CUDA_DEVICE is refused as libhoop refuses it, with its message (the
 * backend parses nothing itself); a well-formed index past the devices names the count. */
START_TEST(test_hoop_cuda_device_bad)
{
    char count[16], want[128], msg[512];
    int64_t v;
    struct child_out o = choose(NULL, NULL);
    snprintf(count, sizeof(count), "%d", o.count);
    snprintf(want, sizeof(want),
             "HOOP_CUDA_DEVICE=%d is not a device of this process: it sees %d "
             "CUDA device",
             o.count, o.count);
    o = choose("HOOP_CUDA_DEVICE", count);
    ck_assert_msg(o.st == HOOP_ERR_INVALID && strstr(o.err, want), "%d: %s", o.st, o.err);
    o = choose("HOOP_CUDA_DEVICE", ""); /* empty is unset: the default */
    ck_assert_int_eq(o.st, HOOP_OK);
    const char *bad[] = {"-1", "x", "1x", " 0", "0 ", "+1", "99999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_int_eq(libhoop_reads("HOOP_CUDA_DEVICE", bad[i], &v, msg, sizeof(msg)),
                         HOOP_ERR_INVALID);
        o = choose("HOOP_CUDA_DEVICE", bad[i]);
        ck_assert_msg(o.st == HOOP_ERR_INVALID, "HOOP_CUDA_DEVICE='%s': status %d (%s)", bad[i],
                      o.st, o.err);
        ck_assert_msg(strcmp(o.err, msg) == 0, "the backend said '%s', libhoop '%s'", o.err, msg);
        ck_assert_msg(strstr(o.err, "HOOP_CUDA_DEVICE") && strstr(o.err, bad[i]), "%s", o.err);
    }
}
END_TEST

/* The host waits for a stream that never finishes (it waits for a flag nobody sets):
 * hoop__cuda_stream_sync's HOOP_ERR_TIMEOUT says the deadline it kept (o->err), and
 * o->extra is how long it took, in ms. */
static void case_deadline(struct child_out *o)
{
    case_init(o);
    if (o->st != HOOP_OK) return;
    const struct hoop__cuda_coll *cc = &hoop__cuda_coll_table;
    const struct hoop__cuda_test_rt *rt = &hoop__cuda_test_rt_table;
    uint32_t *flag = NULL;
    void *s = NULL;
    if ((o->st = cc->flag_alloc(&flag)) != HOOP_OK) return;
    if (rt->stream_create(&s) != 0 || rt->wait_value(s, flag, 1) != 0) {
        o->st = HOOP_ERR_INTERNAL;
        snprintf(o->err, sizeof(o->err), "the stream or its wait could not be made");
        return;
    }
    int64_t t0 = hoop__now_ns();
    o->st = hoop__cuda_stream_sync((hoop__cuda_stream_t)s);
    o->extra = (int)((hoop__now_ns() - t0) / 1000000);
    snprintf(o->err, sizeof(o->err), "%s", hoop_last_error());
    cc->flag_write(flag, 1);
    if (hoop__cuda_stream_sync((hoop__cuda_stream_t)s) != HOOP_OK) o->extra = -1;
}

/* The backend takes HOOP_TIMEOUT and HOOP_CUDA_TF32 as libhoop reads them (env.c): what
 * libhoop refuses the context refuses with libhoop's message; what it accepts (a leading
 * point, a value far under a millisecond) the context takes, and its host waits keep
 * libhoop's deadline to the millisecond. A parser of the backend's own would differ:
 * each of these cases failed with the one ctx.cu had. */
START_TEST(test_settings_from_libhoop)
{
    static const struct {
        const char *name, *value;
    } refused[] = {{"HOOP_TIMEOUT", "abc"}, {"HOOP_TIMEOUT", "0"},   {"HOOP_TIMEOUT", "+5"},
                   {"HOOP_TIMEOUT", "2e9"}, {"HOOP_TIMEOUT", " 5"},  {"HOOP_TIMEOUT", "nan"},
                   {"HOOP_CUDA_TF32", "2"}, {"HOOP_CUDA_TF32", "on"}};
    char msg[512];
    int64_t v;
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        hoop_status want = libhoop_reads(refused[i].name, refused[i].value, &v, msg, sizeof(msg));
        ck_assert_int_eq(want, HOOP_ERR_INVALID);
        struct child_out o = choose(refused[i].name, refused[i].value);
        ck_assert_msg(o.st == (int)want && strcmp(o.err, msg) == 0,
                      "%s='%s': the backend said %d '%s', libhoop %d '%s'", refused[i].name,
                      refused[i].value, o.st, o.err, want, msg);
    }
    ck_assert_int_eq(choose("HOOP_CUDA_TF32", "1").st, HOOP_OK);
    static const char *const accepted[] = {".25", "1e-400", "0.0004"};
    for (size_t i = 0; i < sizeof(accepted) / sizeof(accepted[0]); i++) {
        ck_assert_int_eq(libhoop_reads("HOOP_TIMEOUT", accepted[i], &v, msg, sizeof(msg)), HOOP_OK);
        const char *names[1] = {"HOOP_TIMEOUT"}, *values[1] = {accepted[i]};
        struct child_out o = fork_case(names, values, 1, case_deadline);
        char within[64];
        snprintf(within, sizeof(within), "within %lld ms (HOOP_TIMEOUT)", (long long)v);
        ck_assert_msg(o.st == HOOP_ERR_TIMEOUT && strstr(o.err, within),
                      "HOOP_TIMEOUT='%s' (%lld ms): %d %s", accepted[i], (long long)v, o.st, o.err);
        ck_assert_msg(o.extra >= v && o.extra < v + 10000, "waited %d ms for %lld", o.extra,
                      (long long)v);
    }
}
END_TEST

/* A job of ws workers on one node, as hooprun starts it; local_rank NULL leaves LOCAL_RANK
 * unset (the contract then takes RANK mod LOCAL_WORLD_SIZE). */
static struct child_out choose_in_job(const char *rank, const char *local_rank, const char *ws)
{
    const char *names[6] = {"MASTER_ADDR", "MASTER_PORT",      "RANK",
                            "WORLD_SIZE",  "LOCAL_WORLD_SIZE", "LOCAL_RANK"};
    const char *values[6] = {"127.0.0.1", "29500", rank, ws, ws, local_rank};
    return fork_case(names, values, local_rank ? 6 : 5, case_init);
}

/* The device follows the local rank of the env:// contract as libhoop reads it
 * (hoop__env_dist): LOCAL_RANK, an srun step's SLURM_LOCALID, else RANK mod
 * LOCAL_WORLD_SIZE; a contract libhoop refuses is refused, naming what is wrong. */
START_TEST(test_local_rank_round_robin)
{
    int count = choose(NULL, NULL).count;
    char ws[16];
    snprintf(ws, sizeof(ws), "%d", 2 * count + 1);
    for (int rank = 0; rank <= 2 * count; rank++) { /* up to twice round the devices */
        char v[16];
        snprintf(v, sizeof(v), "%d", rank);
        struct child_out o = choose_in_job(v, v, ws);
        ck_assert_msg(o.st == HOOP_OK, "LOCAL_RANK=%d: %s", rank, o.err);
        ck_assert_int_eq(o.dev, rank % o.count);
        /* one INFO line when workers outnumber the devices, none otherwise */
        ck_assert_int_eq(o.rr_lines, rank >= o.count ? 1 : 0);
    }
    /* no LOCAL_RANK: the contract's RANK mod LOCAL_WORLD_SIZE (not 0) */
    struct child_out o = choose_in_job("1", NULL, "2");
    ck_assert_msg(o.st == HOOP_OK, "%s", o.err);
    ck_assert_int_eq(o.dev, 1 % o.count);
    /* srun without LOCAL_RANK: SLURM_LOCALID (task 3 of 2 nodes x 2 tasks) */
    const char *names[9] = {"SLURM_STEP_ID",
                            "SLURM_JOB_ID",
                            "SLURM_PROCID",
                            "SLURM_LOCALID",
                            "SLURM_NODEID",
                            "SLURM_STEP_NUM_TASKS",
                            "SLURM_STEP_TASKS_PER_NODE",
                            "SLURM_STEP_NODELIST",
                            "HOOP_TOKEN"};
    const char *values[9] = {"3", "4242", "3", "1", "1", "4", "2(x2)", "node[1-2]", "t"};
    o = fork_case(names, values, 9, case_init);
    ck_assert_msg(o.st == HOOP_OK, "%s", o.err);
    ck_assert_int_eq(o.dev, 1 % o.count);
    o = choose_in_job("0", "two", "2");
    ck_assert_int_eq(o.st, HOOP_ERR_INVALID);
    ck_assert_msg(strstr(o.err, "LOCAL_RANK='two' is not an integer"), "%s", o.err);
    o = choose("LOCAL_RANK", "1"); /* a contract without its master: libhoop refuses it */
    ck_assert_int_eq(o.st, HOOP_ERR_INVALID);
    ck_assert_msg(strstr(o.err, "choosing the GPU by local rank") && strstr(o.err, "MASTER_ADDR"),
                  "%s", o.err);
    o = choose("HOOP_TIMEOUT", "soon");
    ck_assert_int_eq(o.st, HOOP_ERR_INVALID);
    ck_assert_msg(strstr(o.err, "HOOP_TIMEOUT"), "%s", o.err);
}
END_TEST

/* A failed choice leaves nothing behind: the next call, with a good setting, works. */
static void case_retry(struct child_out *o)
{
    o->extra = hoop__cuda_init();
    void *p = (void *)1;
    o->st = hoop__cuda_malloc(&p, 64);
    if (o->st == HOOP_OK || p != NULL) o->extra = -1;
    unsetenv("HOOP_CUDA_DEVICE");
    o->st = hoop__cuda_init();
    if (o->st == HOOP_OK) o->st = hoop__cuda_device_info(&o->dev, NULL, 0, NULL);
}

START_TEST(test_failed_init_retries)
{
    const char *names[1] = {"HOOP_CUDA_DEVICE"}, *values[1] = {"77"};
    struct child_out o = fork_case(names, values, 1, case_retry);
    ck_assert_int_eq(o.extra, HOOP_ERR_INVALID);
    ck_assert_msg(o.st == HOOP_OK, "%s", o.err);
    ck_assert_int_eq(o.dev, 0);
}
END_TEST

#if HX
static void case_no_device(struct child_out *o)
{
    hoop__hx_set_devices(0, 0);
    case_init(o);
    void *p = NULL;
    o->extra = hoop__cuda_malloc(&p, 16);
}

START_TEST(test_no_device)
{
    struct child_out o = fork_case(NULL, NULL, 0, case_no_device);
    ck_assert_int_eq(o.st, HOOP_ERR_UNSUPPORTED);
    ck_assert_int_eq(o.extra, HOOP_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(o.err, "no CUDA device") && strstr(o.err, "no CUDA-capable device"), "%s",
                  o.err);
}
END_TEST

static void case_no_driver(struct child_out *o)
{
    hoop__hx_set_devices(-1, 0);
    case_init(o);
}

/* The runtime's "driver version is insufficient" also means "no driver at all": where
 * libcuda.so.1 does not load, the message says that instead. */
START_TEST(test_no_driver)
{
    struct child_out o = fork_case(NULL, NULL, 0, case_no_driver);
    ck_assert_int_eq(o.st, HOOP_ERR_UNSUPPORTED);
    void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    const char *want = drv ? "no CUDA device: cudaGetDeviceCount:"
                           : "no CUDA device: no NVIDIA driver on this machine (libcuda.so.1 "
                             "cannot be loaded: ";
    if (drv) dlclose(drv);
    ck_assert_msg(strstr(o.err, want), "'%s' lacks '%s'", o.err, want);
}
END_TEST
#endif

/* Another thread's first kernel runs on the context's device: each thread is bound to it
 * (on the host layer a launch from a thread on another device fails, as in CUDA). */
struct fill_job {
    float *buf;
    hoop_status st;
    char err[256];
};

static void *thread_fill(void *arg)
{
    struct fill_job *j = arg;
    j->st = hoop__kern_cuda.fill(j->buf, 1000, 3.0f);
    if (j->st == HOOP_OK) j->st = hoop__cuda_sync();
    if (j->st != HOOP_OK) snprintf(j->err, sizeof(j->err), "%s", hoop_last_error());
    return NULL;
}

static void case_other_thread(struct child_out *o)
{
    float host[1000];
    struct fill_job j = {NULL, HOOP_OK, ""};
    o->st = hoop__cuda_malloc((void **)&j.buf, sizeof(host));
    if (o->st != HOOP_OK) return;
    pthread_t t;
    if (pthread_create(&t, NULL, thread_fill, &j) != 0 || pthread_join(t, NULL) != 0) {
        o->st = HOOP_ERR_SYSTEM;
        return;
    }
    if (j.st != HOOP_OK) {
        o->st = j.st;
        snprintf(o->err, sizeof(o->err), "the other thread: %s", j.err);
        return;
    }
    float *d = j.buf;
    o->st = hoop__cuda_copy(host, d, sizeof(host), 0);
    o->extra = 0;
    for (int i = 0; i < 1000; i++) o->extra += host[i] != 3.0f;
    hoop__cuda_device_info(&o->dev, NULL, 0, NULL);
}

START_TEST(test_other_thread_bound)
{
    const char *names[6] = {"MASTER_ADDR", "MASTER_PORT",      "RANK",
                            "WORLD_SIZE",  "LOCAL_WORLD_SIZE", "LOCAL_RANK"};
    const char *values[6] = {"127.0.0.1", "29500", "2", "3", "3", "2"};
    struct child_out o = fork_case(names, values, 6, case_other_thread);
    ck_assert_msg(o.st == HOOP_OK, "%s", o.err);
    ck_assert_int_eq(o.dev, 2 % o.count);
    ck_assert_int_eq(o.extra, 0);
}
END_TEST

// ----------------------------------------------------------------- the allocator

START_TEST(test_classes)
{
    /* {request, class}: 512-byte steps up to 1 MiB, 2 MiB steps above */
    static const size_t want[][2] = {
        {0, 512},
        {1, 512},
        {511, 512},
        {512, 512},
        {513, 1024},
        {4096, 4096},
        {4097, 4608},
        {MIB - 1, MIB},
        {MIB, MIB},
        {MIB + 1, 2 * MIB},
        {2 * MIB, 2 * MIB},
        {2 * MIB + 1, 4 * MIB},
        {100 * MIB + 5, 102 * MIB},
        {SIZE_MAX, 0},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        ck_assert_msg(hoop__cuda_alloc_class(want[i][0]) == want[i][1],
                      "class(%zu) = %zu, want %zu", want[i][0], hoop__cuda_alloc_class(want[i][0]),
                      want[i][1]);
}
END_TEST

static struct hoop__cuda_mem_stats stats(void)
{
    struct hoop__cuda_mem_stats s;
    hoop__cuda_mem_stats(&s);
    return s;
}

START_TEST(test_reuse)
{
    ck_assert_int_eq(hoop__cuda_empty_cache(), HOOP_OK);
    struct hoop__cuda_mem_stats s0 = stats();
#if HX
    unsigned long m0 = hoop__hx_count("cudaMalloc");
#endif
    void *p = NULL, *q = NULL, *r = NULL;
    ck_assert_int_eq(hoop__cuda_malloc(&p, 1000), HOOP_OK);
    struct hoop__cuda_mem_stats s = stats();
    ck_assert_uint_eq(s.device_mallocs, s0.device_mallocs + 1);
    ck_assert_uint_eq(s.bytes_in_use, s0.bytes_in_use + 1024);
    hoop__cuda_free(p);
    s = stats();
    ck_assert_uint_eq(s.bytes_in_use, s0.bytes_in_use);
    ck_assert_uint_eq(s.bytes_cached, s0.bytes_cached + 1024);
    ck_assert_uint_eq(s.blocks_cached, s0.blocks_cached + 1);
    /* the same class (513..1024 bytes): the same block, no cudaMalloc */
    ck_assert_int_eq(hoop__cuda_malloc(&q, 600), HOOP_OK);
    ck_assert_ptr_eq(q, p);
    s = stats();
    ck_assert_uint_eq(s.device_mallocs, s0.device_mallocs + 1);
    ck_assert_uint_eq(s.cache_hits, s0.cache_hits + 1);
    ck_assert_uint_eq(s.bytes_cached, s0.bytes_cached);
    /* another class: a new block */
    ck_assert_int_eq(hoop__cuda_malloc(&r, 1025), HOOP_OK);
    ck_assert_ptr_ne(r, q);
    s = stats();
    ck_assert_uint_eq(s.device_mallocs, s0.device_mallocs + 2);
    ck_assert_uint_eq(s.bytes_in_use, s0.bytes_in_use + 1024 + 1536);
    ck_assert_uint_ge(s.peak_bytes, s.bytes_in_use);
#if HX
    ck_assert_uint_eq(hoop__hx_count("cudaMalloc") - m0, 2);
#endif
    hoop__cuda_free(q);
    hoop__cuda_free(r);
}
END_TEST

/* A training step's allocations, repeated: after the first step no cudaMalloc. */
START_TEST(test_steady_state)
{
    static const size_t sizes[] = {4, 4096, 784 * 128 * 4, 128 * 4, 10 * 4, 3 * MIB + 7, 512};
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    uint64_t after_first = 0;
#if HX
    unsigned long m_first = 0;
#endif
    for (int step = 0; step < 50; step++) {
        void *p[N];
        for (int i = 0; i < N; i++) ck_assert_int_eq(hoop__cuda_malloc(&p[i], sizes[i]), HOOP_OK);
        for (int i = N - 1; i >= 0; i--) hoop__cuda_free(p[(i * 3) % N]);
        if (step == 0) {
            after_first = stats().device_mallocs;
#if HX
            m_first = hoop__hx_count("cudaMalloc");
#endif
        }
    }
    ck_assert_uint_eq(stats().device_mallocs, after_first);
#if HX
    ck_assert_uint_eq(hoop__hx_count("cudaMalloc"), m_first);
#endif
}
END_TEST

START_TEST(test_alignment)
{
    static const size_t sizes[] = {1, 3, 255, 257, 511, 513, 4097, MIB + 3, 0};
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    void *p[N], *h[N];
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(hoop__cuda_malloc(&p[i], sizes[i]), HOOP_OK);
        ck_assert_int_eq(hoop__cuda_host_alloc(&h[i], sizes[i]), HOOP_OK);
        ck_assert_msg((uintptr_t)p[i] % 256 == 0, "device block %p of %zu bytes", p[i], sizes[i]);
        ck_assert_msg((uintptr_t)h[i] % 256 == 0, "pinned block %p of %zu bytes", h[i], sizes[i]);
        for (int j = 0; j < i; j++) ck_assert_ptr_ne(p[i], p[j]);
    }
    for (int i = 0; i < N; i++) {
        hoop__cuda_free(p[i]);
        hoop__cuda_host_free(h[i]);
    }
}
END_TEST

/* Freeing twice, or what is no block, changes nothing (a warning says so). */
START_TEST(test_bad_free_ignored)
{
    void *p = NULL, *q = NULL;
    ck_assert_int_eq(hoop__cuda_malloc(&p, 100), HOOP_OK);
    hoop__cuda_free(p);
    struct hoop__cuda_mem_stats s = stats();
    hoop__cuda_free(p);
    int local;
    hoop__cuda_free(&local);
    struct hoop__cuda_mem_stats t = stats();
    ck_assert_uint_eq(t.blocks_cached, s.blocks_cached);
    ck_assert_uint_eq(t.bytes_in_use, s.bytes_in_use);
    /* and the block is handed out once, not twice */
    ck_assert_int_eq(hoop__cuda_malloc(&p, 100), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_malloc(&q, 100), HOOP_OK);
    ck_assert_ptr_ne(p, q);
    hoop__cuda_free(p);
    hoop__cuda_free(q);
    ck_assert_int_eq(hoop__cuda_malloc(NULL, 100), HOOP_ERR_INVALID);
}
END_TEST

START_TEST(test_empty_cache)
{
    void *p[3];
    ck_assert_int_eq(hoop__cuda_empty_cache(), HOOP_OK);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(hoop__cuda_malloc(&p[i], (size_t)(i + 1) * MIB), HOOP_OK);
    for (int i = 0; i < 3; i++) hoop__cuda_free(p[i]);
    struct hoop__cuda_mem_stats s = stats();
    ck_assert_uint_eq(s.blocks_cached, 3);
    ck_assert_uint_eq(s.bytes_cached, MIB + 2 * MIB + 4 * MIB);
#if HX
    unsigned long f0 = hoop__hx_count("cudaFree");
#endif
    ck_assert_int_eq(hoop__cuda_empty_cache(), HOOP_OK);
    struct hoop__cuda_mem_stats t = stats();
    ck_assert_uint_eq(t.blocks_cached, 0);
    ck_assert_uint_eq(t.bytes_cached, 0);
    ck_assert_uint_eq(t.device_frees, s.device_frees + 3);
#if HX
    ck_assert_uint_eq(hoop__hx_count("cudaFree") - f0, 3);
#endif
}
END_TEST

/* More than any device holds: the cache goes back to CUDA first, then HOOP_ERR_NOMEM
 * naming the size and the device. */
START_TEST(test_oom_message)
{
    void *p = NULL;
    ck_assert_int_eq(hoop__cuda_malloc(&p, 8 * MIB), HOOP_OK);
    hoop__cuda_free(p);
    struct hoop__cuda_mem_stats s = stats();
    ck_assert_uint_ge(s.bytes_cached, 8 * MIB);
    size_t huge = (size_t)1 << 50; /* 1 PiB */
    p = (void *)1;
    ck_assert_int_eq(hoop__cuda_malloc(&p, huge), HOOP_ERR_NOMEM);
    ck_assert_ptr_null(p);
    int dev = -1;
    char want[96];
    ck_assert_int_eq(hoop__cuda_device_info(&dev, NULL, 0, NULL), HOOP_OK);
    snprintf(want, sizeof(want), "cannot allocate 1125899906842624 bytes on cuda:%d", dev);
    assert_error_has(want, "device free");
    assert_error_has("in use", "cached 0 B after giving");
    struct hoop__cuda_mem_stats t = stats();
    ck_assert_uint_eq(t.bytes_cached, 0);
    ck_assert_uint_eq(t.cache_flushes, s.cache_flushes + 1);
    ck_assert_uint_eq(t.device_frees, s.device_frees + s.blocks_cached);
    /* the failure left no CUDA error behind for the next launch's check */
    ck_assert_int_eq(hoop__cuda_malloc(&p, 64), HOOP_OK);
    ck_assert_int_eq(hoop__kern_cuda.fill(p, 16, 1.0f), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_sync(), HOOP_OK);
    hoop__cuda_free(p);
    ck_assert_int_eq(hoop__cuda_host_alloc(&p, huge), HOOP_ERR_NOMEM);
    assert_error_has("cannot allocate 1125899906842624 bytes of pinned host memory", NULL);
}
END_TEST

#if HX
/* A device of 64 MiB: a request that fits only once the cache is given back succeeds. */
START_TEST(test_oom_retry)
{
    hoop__hx_set_devices(1, 64 * MIB);
    void *a = NULL, *b = NULL;
    ck_assert_int_eq(hoop__cuda_malloc(&a, 40 * MIB), HOOP_OK);
    hoop__cuda_free(a);
    struct hoop__cuda_mem_stats s = stats();
    unsigned long f0 = hoop__hx_count("cudaFree"), m0 = hoop__hx_count("cudaMalloc");
    ck_assert_int_eq(hoop__cuda_malloc(&b, 30 * MIB), HOOP_OK);
    struct hoop__cuda_mem_stats t = stats();
    ck_assert_uint_eq(t.cache_flushes, s.cache_flushes + 1);
    ck_assert_uint_eq(t.device_frees, s.device_frees + 1);
    ck_assert_uint_eq(t.device_mallocs, s.device_mallocs + 1);
    ck_assert_uint_eq(t.bytes_cached, 0);
    ck_assert_uint_eq(t.bytes_in_use, s.bytes_in_use + 30 * MIB);
    ck_assert_uint_eq(hoop__hx_count("cudaFree") - f0, 1);
    ck_assert_uint_eq(hoop__hx_count("cudaMalloc") - m0, 1);
    /* 30 MiB in use: 40 more do not fit, and the message says what is where */
    ck_assert_int_eq(hoop__cuda_malloc(&a, 40 * MIB), HOOP_ERR_NOMEM);
    assert_error_has("cannot allocate 41943040 bytes on cuda:0", "in use 30.0 MiB");
    assert_error_has("device free 34.0 MiB of 64.0 MiB", NULL);
    hoop__cuda_free(b);
    hoop__hx_set_devices(1, 0);
}
END_TEST

/* A thread that may not wait for the device (a communicator's progress thread: a
 * stream's wait for its collective holds the device) keeps the cache when CUDA is out of
 * memory: no cudaFree, and a message that says why; unmarked, the same request succeeds
 * by giving the cache back. */
START_TEST(test_oom_kept_when_no_sync)
{
    hoop__hx_set_devices(1, 64 * MIB);
    void *a = NULL, *b = NULL;
    ck_assert_int_eq(hoop__cuda_malloc(&a, 40 * MIB), HOOP_OK);
    hoop__cuda_free(a);
    struct hoop__cuda_mem_stats s = stats();
    unsigned long f0 = hoop__hx_count("cudaFree");
    hoop__device_sync_forbid(1);
    ck_assert_int_eq(hoop__cuda_malloc(&b, 30 * MIB), HOOP_ERR_NOMEM);
    assert_error_has("cached 40.0 MiB kept", "may not wait for the device, as cudaFree");
    ck_assert_ptr_null(b);
    ck_assert_uint_eq(hoop__hx_count("cudaFree"), f0);
    struct hoop__cuda_mem_stats t = stats();
    ck_assert_uint_eq(t.cache_flushes, s.cache_flushes);
    ck_assert_uint_eq(t.bytes_cached, s.bytes_cached);
    hoop__device_sync_forbid(-1);
    ck_assert_int_eq(hoop__cuda_malloc(&b, 30 * MIB), HOOP_OK);
    ck_assert_uint_eq(stats().cache_flushes, s.cache_flushes + 1);
    ck_assert_uint_eq(hoop__hx_count("cudaFree"), f0 + 1);
    hoop__cuda_free(b);
    hoop__hx_set_devices(1, 0);
}
END_TEST

/* Another CUDA error than out-of-memory: HOOP_ERR_CUDA naming the call, no retry, and
 * no error left for the next launch. */
START_TEST(test_cuda_error)
{
    void *p = NULL, *q = NULL;
    ck_assert_int_eq(hoop__cuda_malloc(&q, 3 * 512), HOOP_OK);
    hoop__cuda_free(q);
    struct hoop__cuda_mem_stats s = stats();
    hoop__hx_fail_malloc_after(0, HX_ERR_INVALID_VALUE);
    ck_assert_int_eq(hoop__cuda_malloc(&p, 5000), HOOP_ERR_CUDA);
    assert_error_has("cudaMalloc(5120 bytes) failed", "invalid argument");
    ck_assert_uint_eq(stats().cache_flushes, s.cache_flushes);
    ck_assert_uint_eq(stats().bytes_cached, s.bytes_cached);
    /* out of memory with nothing cached to give back */
    ck_assert_int_eq(hoop__cuda_empty_cache(), HOOP_OK);
    hoop__hx_fail_malloc_after(0, HX_ERR_MEMORY_ALLOCATION);
    ck_assert_int_eq(hoop__cuda_malloc(&p, 5000), HOOP_ERR_NOMEM);
    assert_error_has("cannot allocate 5000 bytes on cuda:0 (a 5120-byte block", NULL);
    hoop__hx_fail_malloc_after(-1, 0);
    ck_assert_int_eq(hoop__cuda_malloc(&p, 64), HOOP_OK);
    ck_assert_int_eq(hoop__kern_cuda.fill(p, 16, 1.0f), HOOP_OK);
    hoop__cuda_free(p);
}
END_TEST

/* A block handed out again reads as garbage (0xff), as a fresh one does; under ASan the
 * bytes past the request and a cached block are poisoned. */
START_TEST(test_reused_block_is_garbage)
{
    void *p = NULL, *q = NULL;
    unsigned char zeros[1000] = {0}, got[1000];
    ck_assert_int_eq(hoop__cuda_malloc(&p, sizeof(zeros)), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_copy(p, zeros, sizeof(zeros), 1), HOOP_OK);
#if defined(__SANITIZE_ADDRESS__)
    ck_assert(!__asan_address_is_poisoned((char *)p + 999));
    ck_assert(__asan_address_is_poisoned((char *)p + 1000));
#endif
    hoop__cuda_free(p);
#if defined(__SANITIZE_ADDRESS__)
    ck_assert(__asan_address_is_poisoned(p));
#endif
    ck_assert_int_eq(hoop__cuda_malloc(&q, 900), HOOP_OK);
    ck_assert_ptr_eq(q, p);
    ck_assert_int_eq(hoop__cuda_copy(got, q, 900, 0), HOOP_OK);
    for (int i = 0; i < 900; i++) ck_assert_uint_eq(got[i], 0xff);
    hoop__cuda_free(q);
}
END_TEST
#endif

struct churn {
    int failures;
};

static void *churn_thread(void *arg)
{
    struct churn *c = arg;
    for (int i = 0; i < 2000; i++) {
        void *p = NULL;
        size_t bytes = (size_t)(i % 7) * 700 + 1;
        if (hoop__cuda_malloc(&p, bytes) != HOOP_OK) c->failures++;
        hoop__cuda_free(p);
    }
    /* a thread's own state (its wait's event) goes when it exits: LeakSanitizer checks */
    if (hoop__cuda_sync() != HOOP_OK) c->failures++;
    return NULL;
}

START_TEST(test_threads)
{
    struct hoop__cuda_mem_stats s = stats();
    pthread_t t[4];
    struct churn c[4];
    memset(c, 0, sizeof(c));
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, churn_thread, &c[i]), 0);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(pthread_join(t[i], NULL), 0);
        ck_assert_int_eq(c[i].failures, 0);
    }
    struct hoop__cuda_mem_stats e = stats();
    ck_assert_uint_eq(e.bytes_in_use, s.bytes_in_use);
    ck_assert_uint_eq(e.blocks_in_use, s.blocks_in_use);
    /* at most 4 blocks of each of the 7 classes were ever needed at once */
    ck_assert_uint_le(e.device_mallocs - s.device_mallocs, 4 * 7);
}
END_TEST

// ----------------------------------------------------------------- pinned memory, streams

START_TEST(test_pinned_reuse)
{
    struct hoop__cuda_mem_stats s, t;
    void *p = NULL, *q = NULL;
    ck_assert_int_eq(hoop__cuda_host_alloc(&p, 3 * MIB), HOOP_OK);
    hoop__cuda_host_free(p);
    hoop__cuda_host_mem_stats(&s);
#if HX
    unsigned long m0 = hoop__hx_count("cudaMallocHost");
#endif
    ck_assert_int_eq(hoop__cuda_host_alloc(&q, 4 * MIB), HOOP_OK);
    ck_assert_ptr_eq(q, p);
    hoop__cuda_host_mem_stats(&t);
    ck_assert_uint_eq(t.device_mallocs, s.device_mallocs);
    ck_assert_uint_eq(t.bytes_in_use, s.bytes_in_use + 4 * MIB);
#if HX
    ck_assert_uint_eq(hoop__hx_count("cudaMallocHost"), m0);
#endif
    hoop__cuda_host_free(q);
}
END_TEST

/* Pinned -> device on the copy stream, the compute stream waits for it and scales the
 * data, device -> pinned on the compute stream: the host sees 2 x[i], with no
 * device-wide synchronisation. 16 MiB, so that on a GPU a missing wait lets the kernel
 * run before the upload is done. */
START_TEST(test_copy_round_trip)
{
    const size_t n = 4 * MIB;
    float *src = NULL, *dst = NULL, *d = NULL, *d2 = NULL;
    ck_assert_int_eq(hoop__cuda_host_alloc((void **)&src, n * sizeof(float)), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_host_alloc((void **)&dst, n * sizeof(float)), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_malloc((void **)&d, n * sizeof(float)), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_malloc((void **)&d2, n * sizeof(float)), HOOP_OK);
    for (size_t i = 0; i < n; i++) src[i] = (float)(i % 1000) - 500.0f;
    hoop__cuda_stream_t compute = hoop__cuda_stream(), copy = hoop__cuda_copy_stream();
    ck_assert_ptr_nonnull(compute);
    ck_assert_ptr_nonnull(copy);
    ck_assert_ptr_ne(compute, copy);
#if HX
    unsigned long syncs = hoop__hx_count("cudaDeviceSynchronize");
#endif
    ck_assert_int_eq(
        hoop__cuda_copy_async(d, src, n * sizeof(float), HOOP_CUDA_HOST_TO_DEVICE, copy), HOOP_OK);
#if HX
    ck_assert_int_eq(hoop__hx_stream_ordered(compute, copy), 0);
#endif
    ck_assert_int_eq(hoop__cuda_stream_wait(compute, copy), HOOP_OK);
#if HX
    ck_assert_int_eq(hoop__hx_stream_ordered(compute, copy), 1);
#endif
    ck_assert_int_eq(hoop__kern_cuda.scale(d, n, 2.0f), HOOP_OK);
    ck_assert_int_eq(
        hoop__cuda_copy_async(d2, d, n * sizeof(float), HOOP_CUDA_DEVICE_TO_DEVICE, compute),
        HOOP_OK);
    ck_assert_int_eq(
        hoop__cuda_copy_async(dst, d2, n * sizeof(float), HOOP_CUDA_DEVICE_TO_HOST, compute),
        HOOP_OK);
    ck_assert_int_eq(hoop__cuda_sync(), HOOP_OK);
    size_t wrong = 0, first = n;
    for (size_t i = 0; i < n; i++)
        if (dst[i] != 2.0f * src[i]) wrong++, first = first < i ? first : i;
    ck_assert_msg(wrong == 0, "%zu wrong, the first at %zu: %g, want %g", wrong, first,
                  first < n ? dst[first] : 0.0f, first < n ? 2.0f * src[first] : 0.0f);
#if HX
    ck_assert_uint_eq(hoop__hx_count("cudaDeviceSynchronize"), syncs);
#endif
    /* the synchronous copies (pageable memory) too */
    float back[1000];
    ck_assert_int_eq(hoop__cuda_copy(d, src, sizeof(back), 1), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_copy(back, d, sizeof(back), 0), HOOP_OK);
    ck_assert_int_eq(memcmp(back, src, sizeof(back)), 0);
    ck_assert_int_eq(hoop__cuda_copy_async(d, src, 4, (hoop__cuda_copy_kind)7, copy),
                     HOOP_ERR_INVALID);
    hoop__cuda_free(d);
    hoop__cuda_free(d2);
    hoop__cuda_host_free(src);
    hoop__cuda_host_free(dst);
}
END_TEST

/* The other direction (the copy stream waits for the compute stream, before it
 * overwrites what kernels read), events, and the waits' argument checks. */
START_TEST(test_stream_wait_and_events)
{
    hoop__cuda_stream_t compute = hoop__cuda_stream(), copy = hoop__cuda_copy_stream();
    float *d = NULL;
    ck_assert_int_eq(hoop__cuda_malloc((void **)&d, 4096), HOOP_OK);
    ck_assert_int_eq(hoop__kern_cuda.fill(d, 1024, 5.0f), HOOP_OK);
#if HX
    ck_assert_int_eq(hoop__hx_stream_ordered(copy, compute), 0);
#endif
    ck_assert_int_eq(hoop__cuda_stream_wait(copy, compute), HOOP_OK);
#if HX
    ck_assert_int_eq(hoop__hx_stream_ordered(copy, compute), 1);
#endif
    ck_assert_int_eq(hoop__cuda_stream_wait(copy, copy), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop__cuda_stream_wait(compute, NULL), HOOP_ERR_INVALID);
    assert_error_has("hoop__cuda_stream_wait", NULL);
    hoop__cuda_event_t e = NULL;
    ck_assert_int_eq(hoop__cuda_event_new(&e), HOOP_OK);
    int done = 0;
    ck_assert_int_eq(hoop__cuda_event_done(e, &done), HOOP_OK);
    ck_assert_int_eq(done, 1); /* never recorded */
    ck_assert_int_eq(hoop__kern_cuda.fill(d, 1024, 6.0f), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_event_record(e, compute), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_event_wait(copy, e), HOOP_OK);
#if HX
    ck_assert_int_eq(hoop__hx_stream_ordered(copy, compute), 1);
#endif
    float host[1024];
    ck_assert_int_eq(hoop__cuda_copy_async(host, d, sizeof(host), HOOP_CUDA_DEVICE_TO_HOST, copy),
                     HOOP_OK);
    ck_assert_int_eq(hoop__cuda_stream_sync(copy), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_event_sync(e), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_event_done(e, &done), HOOP_OK);
    ck_assert_int_eq(done, 1);
    for (int i = 0; i < 1024; i++) ck_assert_msg(host[i] == 6.0f, "[%d] = %g", i, host[i]);
    hoop__cuda_event_free(e);
    hoop__cuda_event_free(NULL);
    hoop__cuda_free(d);
}
END_TEST

#ifdef HOOP_KERN_CUDA_GPU
/* The device count, asked in a child, so that this process has not touched CUDA when
 * it forks the device-choice children. */
static int gpu_count(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        int n = gpu_devices();
        _exit(n > 100 ? 100 : n);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 0;
    return WEXITSTATUS(status);
}
#endif

/* The kernel table's asynchronous uploads (kern.h: upload_async, compute_wait, ...), on
 * the host layer's lazy streams (hx.h: queued work runs only when the host waits for it,
 * so a missing wait shows): the compute stream waits for the upload before a kernel reads
 * it (else the kernel doubles the -1 the buffer held), and the upload waits for its after
 * event before it overwrites what an earlier kernel reads (the host waits for the copy
 * first here, so a copy that ran without waiting would overwrite the old values before
 * the kernel copied them). On a GPU the same checks run without the laziness. */
START_TEST(test_table_uploads)
{
#if HX
    hoop__hx_set_lazy(1);
#endif
    const struct hoop__kern *k = &hoop__kern_cuda;
    const size_t n = 64 * 1024, bytes = n * sizeof(float);
    float *src, *out, *d, *e;
    void *up, *fr;
    ck_assert_int_eq(k->host_alloc((void **)&src, bytes), HOOP_OK);
    ck_assert_int_eq(k->host_alloc((void **)&out, bytes), HOOP_OK);
    ck_assert_int_eq(k->mem_alloc((void **)&d, bytes), HOOP_OK);
    ck_assert_int_eq(k->mem_alloc((void **)&e, bytes), HOOP_OK);
    ck_assert_int_eq(k->event_new(&up), HOOP_OK);
    ck_assert_int_eq(k->event_new(&fr), HOOP_OK);
    for (size_t i = 0; i < n; i++) src[i] = (float)i;
    /* read after write: d holds -1 until the upload */
    ck_assert_int_eq(k->fill(d, n, -1.0f), HOOP_OK);
    ck_assert_int_eq(k->compute_record(fr), HOOP_OK);
    ck_assert_int_eq(k->upload_async(d, src, bytes, fr, up), HOOP_OK);
#if HX
    ck_assert_uint_gt(hoop__hx_queued(hoop__cuda_copy_stream()), 0); /* not run yet */
#endif
    ck_assert_int_eq(k->compute_wait(up), HOOP_OK);
    ck_assert_int_eq(k->scale(d, n, 2.0f), HOOP_OK);
    ck_assert_int_eq(k->download_async(out, d, bytes), HOOP_OK);
    ck_assert_int_eq(k->compute_record(fr), HOOP_OK);
    ck_assert_int_eq(k->event_sync(fr), HOOP_OK);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(out[i] == 2.0f * (float)i, "[%zu] = %g, want %g", i, (double)out[i],
                      2.0 * (double)i);
    /* write after read: e = d (2 i), then the upload of 3 i into d after it */
    ck_assert_int_eq(k->axpy_or_copy(e, d, n, 0), HOOP_OK);
    ck_assert_int_eq(k->compute_record(fr), HOOP_OK);
    for (size_t i = 0; i < n; i++) src[i] = 3.0f * (float)i; /* the last copy ran: fr */
    ck_assert_int_eq(k->upload_async(d, src, bytes, fr, up), HOOP_OK);
    ck_assert_int_eq(k->event_sync(up), HOOP_OK);
    ck_assert_int_eq(k->compute_wait(up), HOOP_OK);
    ck_assert_int_eq(k->add(d, d, e, n), HOOP_OK); /* 3 i + 2 i */
    ck_assert_int_eq(k->download_async(out, d, bytes), HOOP_OK);
    ck_assert_int_eq(k->compute_record(fr), HOOP_OK);
    ck_assert_int_eq(k->event_sync(fr), HOOP_OK);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(out[i] == 5.0f * (float)i, "[%zu] = %g, want %g", i, (double)out[i],
                      5.0 * (double)i);
    /* a failed call names itself and CUDA's reason */
    ck_assert_int_eq(k->compute_wait(NULL), HOOP_ERR_CUDA);
    assert_error_has("compute_wait: cudaStreamWaitEvent", NULL);
    k->event_free(up);
    k->event_free(fr);
    k->event_free(NULL);
    k->mem_free(d);
    k->mem_free(e);
    k->host_free(src);
    k->host_free(out);
}
END_TEST

static void sleep_ms(int ms)
{
    struct timespec t = {0, (long)ms * 1000000L};
    nanosleep(&t, NULL);
}

/* The kernel table's side streams and timers (kern.h: stream_new .. event_elapsed). A side
 * stream ordered after the compute stream by stream_wait (on lazy streams: without the wait
 * the copy reads the buffer before the fill ran); timers read the device's time: two
 * records 20 ms apart on an idle stream, and a record held behind a wait for a value (the
 * stream form's wait) stamped when the value was stored, not when the host asked 30 ms
 * later (on the host layer, its model of device time: hx.h); the errors of timers that
 * have not completed or keep no time. */
START_TEST(test_table_streams_and_timers)
{
    const struct hoop__kern *k = &hoop__kern_cuda;
    const struct hoop__cuda_coll *cc = &hoop__cuda_coll_table;
    const size_t n = 1024;
#if HX
    hoop__hx_set_lazy(1);
#endif
    float *d, *host;
    void *s, *a, *t0, *t1, *t2, *plain;
    ck_assert_int_eq(k->mem_alloc((void **)&d, n * sizeof(float)), HOOP_OK);
    ck_assert_int_eq(k->host_alloc((void **)&host, n * sizeof(float)), HOOP_OK);
    ck_assert_int_eq(k->stream_new(&s), HOOP_OK);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(k->timer_new(&a), HOOP_OK);
    ck_assert_int_eq(k->fill(d, n, 7.0f), HOOP_OK);
    ck_assert_int_eq(k->stream_record(NULL, a), HOOP_OK);
    ck_assert_int_eq(k->stream_wait(s, a), HOOP_OK);
#if HX
    ck_assert_int_eq(hoop__hx_stream_ordered(s, hoop__cuda_stream()), 1);
#endif
    ck_assert_int_eq(hoop__cuda_copy_async(host, d, n * sizeof(float), HOOP_CUDA_DEVICE_TO_HOST, s),
                     HOOP_OK);
    ck_assert_int_eq(hoop__cuda_stream_sync(s), HOOP_OK);
    for (size_t i = 0; i < n; i++) ck_assert_msg(host[i] == 7.0f, "[%zu] = %g", i, host[i]);
    k->stream_free(s);
#if HX
    hoop__hx_set_lazy(0);
#endif
    /* timing, on a stream that runs its work when it can */
    ck_assert_int_eq(k->stream_new(&s), HOOP_OK);
    ck_assert_int_eq(k->timer_new(&t0), HOOP_OK);
    ck_assert_int_eq(k->timer_new(&t1), HOOP_OK);
    ck_assert_int_eq(k->timer_new(&t2), HOOP_OK);
    ck_assert_int_eq(k->event_new(&plain), HOOP_OK);
    double ms = -1;
    ck_assert_int_eq(k->event_elapsed(t0, t1, &ms), HOOP_ERR_USAGE); /* never recorded */
    ck_assert_int_eq(k->stream_record(s, t0), HOOP_OK);
    sleep_ms(20);
    ck_assert_int_eq(k->stream_record(s, t1), HOOP_OK);
    ck_assert_int_eq(k->event_sync(t1), HOOP_OK);
    const int64_t at_t1 = hoop__now_ns();
    ck_assert_int_eq(k->event_elapsed(t0, t1, &ms), HOOP_OK);
    ck_assert_msg(ms >= 19.0 && ms < 2000.0, "20 ms apart: %g ms", ms);
    ck_assert_int_eq(k->event_elapsed(t1, t0, &ms), HOOP_OK);
    ck_assert_msg(ms < 0, "backwards: %g ms", ms);
    ck_assert_int_eq(k->stream_record(s, plain), HOOP_OK);
    ck_assert_int_eq(k->event_elapsed(t0, plain, &ms), HOOP_ERR_USAGE); /* keeps no time */
    /* a record behind a wait for a value: not done until the value is stored */
    uint32_t *flag = NULL;
    ck_assert_int_eq(cc->flag_alloc(&flag), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_test_rt_table.wait_value(s, flag, 1), 0);
    ck_assert_int_eq(k->stream_record(s, t2), HOOP_OK);
    int done = 1;
    sleep_ms(30);
    ck_assert_int_eq(k->event_query(t2, &done), HOOP_OK);
    ck_assert_int_eq(done, 0);
    ck_assert_int_eq(k->event_elapsed(t1, t2, &ms), HOOP_ERR_USAGE);
    assert_error_has("event_elapsed", "not completed");
    const int64_t stored = hoop__now_ns();
    cc->flag_write(flag, 1);
    sleep_ms(30);
    ck_assert_int_eq(k->event_sync(t2), HOOP_OK);
    ck_assert_int_eq(k->event_query(t2, &done), HOOP_OK);
    ck_assert_int_eq(done, 1);
    ck_assert_int_eq(k->event_elapsed(t1, t2, &ms), HOOP_OK);
    const double want = (double)(stored - at_t1) / 1e6; /* at least: t1 ran before at_t1 */
    ck_assert_msg(ms >= want - 1.0 && ms < want + 15.0,
                  "the held record: %g ms after t1, the value was stored %g ms after it", ms, want);
    k->stream_free(s);
    cc->flag_free(flag);
    k->event_free(t0);
    k->event_free(t1);
    k->event_free(t2);
    k->event_free(plain);
    k->event_free(a);
    k->mem_free(d);
    k->host_free(host);
}
END_TEST

int main(void)
{
    setenv("HOOP_DEBUG", "INFO", 1);
    setenv("HOOP_DEBUG_SUBSYS", "INIT", 1);
#ifdef HOOP_KERN_CUDA_GPU
    if (gpu_count() == 0) {
        puts("check_cuda_ctx_gpu: no usable GPU here: skipped (check_cuda_ctx runs the same "
             "checks on the host execution layer)");
        return 77;
    }
#endif
    Suite *s = suite_create(HX ? "cuda_ctx (host execution layer)" : "cuda_ctx (GPU)");
    TCase *tc = tcase_create("device");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_default_device);
    tcase_add_test(tc, test_hoop_cuda_device);
    tcase_add_test(tc, test_hoop_cuda_device_bad);
    tcase_add_test(tc, test_local_rank_round_robin);
    tcase_add_test(tc, test_settings_from_libhoop);
    tcase_add_test(tc, test_failed_init_retries);
    tcase_add_test(tc, test_other_thread_bound);
#if HX
    tcase_add_test(tc, test_no_device);
    tcase_add_test(tc, test_no_driver);
#endif
    suite_add_tcase(s, tc);
    tc = tcase_create("alloc");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_classes);
    tcase_add_test(tc, test_reuse);
    tcase_add_test(tc, test_steady_state);
    tcase_add_test(tc, test_alignment);
    tcase_add_test(tc, test_bad_free_ignored);
    tcase_add_test(tc, test_empty_cache);
    tcase_add_test(tc, test_oom_message);
    tcase_add_test(tc, test_threads);
#if HX
    tcase_add_test(tc, test_oom_retry);
    tcase_add_test(tc, test_oom_kept_when_no_sync);
    tcase_add_test(tc, test_cuda_error);
    tcase_add_test(tc, test_reused_block_is_garbage);
#endif
    suite_add_tcase(s, tc);
    tc = tcase_create("streams");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_pinned_reuse);
    tcase_add_test(tc, test_copy_round_trip);
    tcase_add_test(tc, test_stream_wait_and_events);
    tcase_add_test(tc, test_table_uploads);
    tcase_add_test(tc, test_table_streams_and_timers);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
#ifdef HOOP_KERN_CUDA_GPU
    srunner_set_fork_status(sr, CK_NOFORK); /* the device-choice tests fork their own */
#endif
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
