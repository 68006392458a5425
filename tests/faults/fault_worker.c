/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/faults/fault_worker.c -- one rank of a fault-injection cell (tests/faults/matrix.sh),
 * and the checkpoint check the cells use.
 *
 *   fault_worker coll COUNT CALLS [FIRST]
 *                                   joins the job of the env:// contract and runs CALLS
 *                                   all-reduces (sum, f32) of COUNT elements (the first of
 *                                   FIRST elements when given), each result checked exactly
 *   fault_worker ckpt PATH          inspects a checkpoint: its envelope, checksum and
 *                                   layout (hoop_checkpoint_inspect), and hoop-train's
 *                                   step in it
 *
 * coll prints "fw: rank R ready" once the communicator is up and "fw: rank R call K"
 * before call K (markers an outside fault can wait for). A failure prints one line,
 *   "fw: rank R error at SECONDS.NANOS in PHASE: STATUS: MESSAGE",
 * with the wall-clock time the call returned (the matrix measures the reaction from the
 * fault's own time), then destroys what it made and exits 1; a wrong result exits 3.
 * ckpt prints "ckpt ok: step S, N parameter tensors, B bytes" or "ckpt bad: MESSAGE"
 * (exit 1).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "hoop/optim.h"
#include "hoop/collectives.h"
#include "hoop/comm.h"

static int rank = -1;

static int failed(const char *phase, hoop_status st)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char msg[1024];
    snprintf(msg, sizeof(msg), "%s", hoop_last_error());
    for (char *p = msg; *p; p++)
        if (*p == '\n') *p = ' ';
    printf("fw: rank %d error at %lld.%09ld in %s: %s: %s\n", rank, (long long)ts.tv_sec,
           ts.tv_nsec, phase, hoop_status_name(st), msg);
    fflush(stdout);
    return 1;
}

/* Element i of rank r's input to call k: a small integer, so every sum is exact. */
static float input(int r, int k, size_t i)
{
    return (float)((r + 1) * (k + 1) + (int)(i % 7));
}

static int coll(size_t count, int calls, size_t first)
{
    hoop_comm *comm = NULL;
    const char *r = getenv("RANK");
    rank = r ? atoi(r) : 0;
    struct timespec t0;
    clock_gettime(CLOCK_REALTIME, &t0);
    printf("fw: rank %d init at %lld.%09ld\n", rank, (long long)t0.tv_sec, t0.tv_nsec);
    fflush(stdout);
    hoop_status st = hoop_comm_init_env(&comm);
    if (st != HOOP_OK) return failed("init", st);
    int ws = hoop_comm_world_size(comm);
    printf("fw: rank %d ready\n", rank);
    fflush(stdout);
    float *buf = malloc((count ? count : 1) * sizeof(float));
    int rc = buf ? 0 : 2;
    for (int k = 0; k < calls && rc == 0; k++) {
        size_t n = k == 0 && first < count ? first : count;
        for (size_t i = 0; i < n; i++) buf[i] = input(rank, k, i);
        printf("fw: rank %d call %d\n", rank, k);
        fflush(stdout);
        st = hoop_allreduce(comm, buf, buf, n, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
        if (st != HOOP_OK) {
            rc = failed("allreduce", st);
            break;
        }
        for (size_t i = 0; i < n; i++) {
            float want = 0;
            for (int q = 0; q < ws; q++) want += input(q, k, i);
            if (buf[i] != want) {
                printf("fw: rank %d WRONG: call %d element %zu is %g, not %g\n", rank, k, i,
                       (double)buf[i], (double)want);
                rc = 3;
                break;
            }
        }
    }
    free(buf);
    st = hoop_comm_destroy(comm);
    if (rc == 0 && st != HOOP_OK) rc = failed("destroy", st);
    printf("fw: rank %d %s\n", rank, rc == 0 ? "done" : "destroyed");
    return rc;
}

static int ckpt(const char *path)
{
    hoop_checkpoint_info info;
    int64_t extra[16] = {0}; /* hoop-train's: magic, epochs_done, step, ... */
    struct stat sb;
    hoop_status st = hoop_checkpoint_inspect(path, &info, extra, sizeof(extra));
    if (st != HOOP_OK) {
        printf("ckpt bad: %s\n", hoop_last_error());
        return 1;
    }
    if (stat(path, &sb) != 0) sb.st_size = -1;
    printf("ckpt ok: step %lld, %zu parameter tensors, %lld bytes\n", (long long)extra[2],
           info.param_count, (long long)sb.st_size);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if ((argc == 4 || argc == 5) && strcmp(argv[1], "coll") == 0)
        return coll(strtoull(argv[2], NULL, 10), atoi(argv[3]),
                    argc == 5 ? strtoull(argv[4], NULL, 10) : SIZE_MAX);
    if (argc == 3 && strcmp(argv[1], "ckpt") == 0) return ckpt(argv[2]);
    fprintf(stderr, "usage: fault_worker coll COUNT CALLS [FIRST] | fault_worker ckpt PATH\n");
    return 2;
}
