/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_cuda.c -- the CUDA backend through the public API: it loads (from
 * HOOP_CUDA_BACKEND, or where libhoop looks for it), finds a GPU, and a tensor's values
 * make the round trip host -> device -> host exactly, through an op on the device; and the
 * module takes its settings from libhoop (src/core/backend.h): it refuses what libhoop's
 * env.c refuses, with that message, at the first CUDA call, each case in a child forked
 * before this process touches CUDA.
 *
 * In make check the backend is the host execution layer's build (TEST_CUDA_HX_BACKEND, see
 * Makefile.am), unless HOOP_CUDA_BACKEND is set: on the GPU machine, tests/gpu/run.sh
 * points it at the real libhoop-cuda.so. Plain C with no test framework. It skips (77)
 * with the loader's message where no backend or no GPU can be had. Exit: 0 pass, 1
 * fail, 77 skip (the automake convention).
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/backend.h"
#include "core/env.h"
#include "hoop/autograd.h"
#include "hoop/tensor.h"
#include "run_suite.h"

static int failures;

#define EXPECT(cond, ...)                                          \
    do {                                                           \
        if (!(cond)) {                                             \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            printf(__VA_ARGS__);                                   \
            printf("\n");                                          \
            failures++;                                            \
        }                                                          \
    } while (0)

/* x (1000 floats) goes to the GPU, y = x + x runs there, both come back. */
static void test_round_trip(void)
{
    enum { N = 1000 };
    static float x[N], back[N], sum[N];
    for (int i = 0; i < N; i++) x[i] = (float)i * 0.25f - 7.0f;
    const int64_t shape[1] = {N};
    hoop_tensor *t = NULL, *y = NULL;
    hoop_tape *tape = NULL;
    hoop_status st = hoop_tensor_new(&t, 1, shape, HOOP_DEVICE_CUDA, 0);
    EXPECT(st == HOOP_OK, "%s", hoop_last_error());
    if (st != HOOP_OK) return;
    EXPECT(hoop_tensor_device(t) == HOOP_DEVICE_CUDA, "device %d", (int)hoop_tensor_device(t));
    st = hoop_tensor_copy_from(t, x, N);
    EXPECT(st == HOOP_OK, "%s", hoop_last_error());
    st = hoop_tensor_copy_to_host(t, back, N);
    EXPECT(st == HOOP_OK, "%s", hoop_last_error());
    int wrong = 0;
    for (int i = 0; i < N; i++) wrong += back[i] != x[i];
    EXPECT(wrong == 0, "%d of %d elements changed in the round trip", wrong, N);
    EXPECT(hoop_tape_init(&tape) == HOOP_OK, "%s", hoop_last_error());
    st = hoop_add(tape, t, t, &y);
    EXPECT(st == HOOP_OK, "%s", hoop_last_error());
    if (st == HOOP_OK) {
        EXPECT(hoop_tensor_device(y) == HOOP_DEVICE_CUDA, "the sum is not on cuda");
        st = hoop_tensor_copy_to_host(y, sum, N);
        EXPECT(st == HOOP_OK, "%s", hoop_last_error());
        wrong = 0;
        for (int i = 0; i < N; i++) wrong += sum[i] != 2.0f * x[i];
        EXPECT(wrong == 0, "%d of %d sums wrong (sum[3] = %g)", wrong, N, (double)sum[3]);
    }
    hoop_tape_destroy(tape);
    hoop_tensor_free(t);
}

/* What a child saw: the status of hoop_device_check and its message. */
struct seen {
    int st;
    char msg[1024];
};

/* In a child with name=value set (name NULL: nothing), asks for the CUDA device. */
static struct seen child_check(const char *name, const char *value)
{
    struct seen r = {-1, "the child said nothing"};
    int fds[2];
    if (pipe(fds) != 0) return r;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        if (name) setenv(name, value, 1);
        struct seen c = {hoop_device_check(HOOP_DEVICE_CUDA), ""};
        if (c.st != HOOP_OK) snprintf(c.msg, sizeof(c.msg), "%s", hoop_last_error());
        _exit(write(fds[1], &c, sizeof(c)) == (ssize_t)sizeof(c) ? 0 : 3);
    }
    close(fds[1]);
    size_t got = 0;
    while (pid > 0 && got < sizeof(r)) {
        ssize_t n = read(fds[0], (char *)&r + got, sizeof(r) - got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fds[0]);
    if (pid > 0) waitpid(pid, NULL, 0);
    if (got != sizeof(r)) r.st = -1;
    return r;
}

/* libhoop's own verdict on name=value (env.c), in this process, whose environment is
 * left as it was: its status, and its message in msg. */
static hoop_status libhoop_verdict(const char *name, const char *value, char *msg, size_t len)
{
    int64_t v;
    int dev;
    setenv(name, value, 1);
    hoop_status st = strcmp(name, "HOOP_TIMEOUT") == 0       ? hoop__env_ms(name, &v)
                     : strcmp(name, "HOOP_CUDA_DEVICE") == 0 ? hoop__env_cuda_device(&dev)
                                                             : hoop__env_int(name, &v);
    snprintf(msg, len, "%s", st == HOOP_OK ? "" : hoop_last_error());
    unsetenv(name);
    return st;
}

/* The module refuses a setting exactly when libhoop does, with libhoop's message, and
 * takes what libhoop takes (".5": a parser of the module's own refused it); a device
 * index past the devices is the module's to refuse, naming the count. */
static void test_settings_from_libhoop(void)
{
    static const char *const cases[][2] = {
        {"HOOP_TIMEOUT", "abc"},    {"HOOP_TIMEOUT", "0"},      {"HOOP_TIMEOUT", "+5"},
        {"HOOP_TIMEOUT", ".5"},     {"HOOP_TIMEOUT", "1e-400"}, {"HOOP_CUDA_DEVICE", "abc"},
        {"HOOP_CUDA_DEVICE", "+1"}, {"HOOP_CUDA_DEVICE", "0"},  {"HOOP_CUDA_TF32", "2"},
        {"HOOP_CUDA_TF32", "1"},
    };
    char want[1024];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *name = cases[i][0], *value = cases[i][1];
        if (getenv(name)) continue; /* set by whoever runs the test: not this case's to clear */
        hoop_status st = libhoop_verdict(name, value, want, sizeof(want));
        struct seen c = child_check(name, value);
        EXPECT(c.st == (int)st && strstr(c.msg, want) != NULL,
               "%s='%s': the module said %d '%s'; libhoop %d '%s'", name, value, c.st, c.msg,
               (int)st, want);
    }
    if (getenv("HOOP_CUDA_DEVICE")) return;
    struct seen c = child_check("HOOP_CUDA_DEVICE", "100000");
    EXPECT(c.st == HOOP_ERR_INVALID &&
               strstr(c.msg, "HOOP_CUDA_DEVICE=100000 is not a device of this process: it sees"),
           "%d %s", c.st, c.msg);
}

static char refusal[512]; /* what the module said through note_error */

static hoop_status note_error(hoop_status st, const char *file, int line, const char *fmt, ...)
{
    (void)file, (void)line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(refusal, sizeof(refusal), fmt, ap);
    va_end(ap);
    return st;
}

/* The module refuses a host table of another build's size (a libhoop from before or after a
 * field such as settings was added), naming both sizes, before it touches the device. */
static void test_host_table_size(void)
{
    const char *path = getenv("HOOP_CUDA_BACKEND");
    if (!path) {
        printf("note: HOOP_CUDA_BACKEND is unset: the host table's size check is not run\n");
        return;
    }
    void *so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    hoop__backend_open_fn open_fn = NULL;
    if (so) *(void **)&open_fn = dlsym(so, HOOP__BACKEND_OPEN);
    EXPECT(open_fn != NULL, "no %s in %s: %s", HOOP__BACKEND_OPEN, path, dlerror());
    if (!open_fn) return;
    const size_t sizes[2] = {sizeof(struct hoop__backend_host) - sizeof(void *),
                             sizeof(struct hoop__backend_host) + sizeof(void *)};
    for (int i = 0; i < 2; i++) {
        struct hoop__backend_host h = {.size = sizes[i], .set_error = note_error};
        const struct hoop__kern *k = NULL;
        char want[96];
        snprintf(want, sizeof(want), "host table of %zu bytes, expected %zu", sizes[i],
                 sizeof(struct hoop__backend_host));
        refusal[0] = '\0';
        hoop_status st = open_fn(&h, &k);
        EXPECT(st == HOOP_ERR_INVALID && k == NULL && strstr(refusal, "another version") &&
                   strstr(refusal, want),
               "size %zu: status %d, '%s'", sizes[i], (int)st, refusal);
    }
    dlclose(so); /* libhoop's own dlopen holds it too, or will load it again */
}

int main(void)
{
    use_test_cuda_backend();
    /* children first: this process must not have touched CUDA when it forks */
    if (child_check(NULL, NULL).st == HOOP_OK) test_settings_from_libhoop();
    if (hoop_device_check(HOOP_DEVICE_CUDA) != HOOP_OK) {
        printf("SKIP: no CUDA device for hoop: %s\n", hoop_last_error());
        return 77;
    }
    test_host_table_size();
    test_round_trip();
    printf("%s: check_cuda\n", failures ? "FAIL" : "PASS");
    return failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
