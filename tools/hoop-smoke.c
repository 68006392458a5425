/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/hoop-smoke.c -- a rendezvous smoke test: every worker meets the others through the
 * rendezvous store and checks that barrier, add and all-gather work.
 *
 * Run as `hooprun --nproc-per-node 4 tools/hoop-smoke`. Each worker joins the store
 * (hoop_store_init_env: rank 0 hosts it), passes a barrier, adds 1 to a shared counter,
 * all-gathers its rank and checks both results against what world_size implies; rank 0
 * prints one summary line. Exit 0 on success; 2 on a bad environment: a malformed
 * variable, or ranks whose environments disagree (another WORLD_SIZE or HOOP_TOKEN, a
 * RANK claimed twice: rank 0's store refuses the rank and gives up, as hooprun's
 * meeting and hoop-train map it); 1 on any other failure. Single-threaded.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/store_proto.h"
#include "core/check.h"
#include "hoop/status.h"
#include "hoop/store.h"
#include "hoop/version.h"

/* The exit code of a failure with status st: 2 when the environment is to blame (a
 * malformed variable; this rank refused by rank 0's store, or rank 0's store having given
 * up on a rank it refused: the ranks were started with environments that disagree). */
static int exit_code(hoop_status st)
{
    return hoop__store_exit_code(st);
}

/* Prints the failure of step (with hoop's message) and returns the exit code. */
static int failed(int rank, const char *step, hoop_status st)
{
    fprintf(stderr, "hoop-smoke: rank %d: %s failed: %s (%s)\n", rank, step, hoop_last_error(),
            hoop_status_name(st));
    return exit_code(st);
}

/* Every rank adds 1; after a barrier the counter must read world_size. */
static int check_counter(hoop_store *st, int rank, int world_size)
{
    int64_t after_add = 0, total = 0;
    hoop_status s = hoop_store_add(st, "smoke/counter", 1, &after_add);
    if (s != HOOP_OK) return failed(rank, "add", s);
    if (after_add < 1 || after_add > world_size) {
        fprintf(stderr, "hoop-smoke: rank %d: add returned %lld, not in 1..%d\n", rank,
                (long long)after_add, world_size);
        return 1;
    }
    if ((s = hoop_store_barrier(st, "smoke/added", -1)) != HOOP_OK)
        return failed(rank, "barrier after add", s);
    if ((s = hoop_store_add(st, "smoke/counter", 0, &total)) != HOOP_OK)
        return failed(rank, "add 0", s);
    if (total != world_size) {
        fprintf(stderr, "hoop-smoke: rank %d: counter is %lld after %d adds\n", rank,
                (long long)total, world_size);
        return 1;
    }
    return 0;
}

/* Every rank contributes its rank as an int32; slot r must hold r. */
static int check_allgather(hoop_store *st, int rank, int world_size)
{
    int32_t mine = rank;
    int32_t *all = calloc((size_t)world_size, sizeof(*all));
    if (all == NULL) return failed(rank, "calloc", HOOP_ERR_NOMEM);
    hoop_status s = hoop_store_allgather(st, "smoke/ranks", &mine, sizeof(mine), all, -1);
    int rc = s == HOOP_OK ? 0 : failed(rank, "allgather", s);
    for (int r = 0; rc == 0 && r < world_size; r++) {
        if (all[r] == r) continue;
        fprintf(stderr, "hoop-smoke: rank %d: allgather slot %d holds %d\n", rank, r, (int)all[r]);
        rc = 1;
    }
    free(all);
    return rc;
}

/* Rank 0 hosts the store, so it must outlive every other rank's last request: each
 * rank > 0 sets "smoke/done/<rank>" as its last call, and rank 0 waits for all of them. */
static int wait_for_others(hoop_store *st, int rank, int world_size)
{
    char key[64];
    hoop_status s;
    if (rank > 0) {
        snprintf(key, sizeof(key), "smoke/done/%d", rank);
        s = hoop_store_set(st, key, "1", 1);
        return s == HOOP_OK ? 0 : failed(rank, "set done", s);
    }
    for (int r = 1; r < world_size; r++) {
        snprintf(key, sizeof(key), "smoke/done/%d", r);
        const char *keys[1] = {key};
        if ((s = hoop_store_wait(st, keys, 1, -1)) != HOOP_OK) return failed(rank, "wait done", s);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        printf("hoop-smoke (hoop) %s\n", hoop_version_string());
        return fflush(stdout) != 0 || ferror(stdout); /* > /dev/full: 1 */
    }
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("Usage: hooprun --nproc-per-node N hoop-smoke\n\n"
               "Every worker joins rank 0's store (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE)\n"
               "and checks a barrier, an add to a shared counter (it must reach WORLD_SIZE)\n"
               "and an all-gather of the ranks; rank 0 then prints\n"
               "  smoke: N ranks joined, barrier ok, add ok, allgather ok\n"
               "\n"
               "  -h, --help, --version  print this text, or the version, and exit\n"
               "Exit status: 0 success, 2 bad arguments or environment (a malformed variable,\n"
               "or ranks started with environments that disagree: another WORLD_SIZE or\n"
               "HOOP_TOKEN, a RANK claimed twice, MASTER_PORT already in use), 1 other\n"
               "failures.\n");
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "hoop-smoke: unexpected argument '%s' (see hoop-smoke --help)\n", argv[1]);
        (void)hoop__store_env_refuse_said(
            HOOP_ERROR(HOOP_ERR_INVALID, "hoop-smoke: unexpected argument '%s'", argv[1]),
            NULL); /* the job too */
        return 2;
    }
    hoop_store *st = NULL;
    hoop_status s = hoop_store_init_env(&st);
    if (s != HOOP_OK) {
        fprintf(stderr, "hoop-smoke: %s\n", hoop_last_error());
        return exit_code(s);
    }
    int rank = hoop_store_rank(st), world_size = hoop_store_world_size(st);
    int rc = 0;
    if ((s = hoop_store_barrier(st, "smoke/start", -1)) != HOOP_OK) rc = failed(rank, "barrier", s);
    if (rc == 0) rc = check_counter(st, rank, world_size);
    if (rc == 0) rc = check_allgather(st, rank, world_size);
    if (rc == 0) rc = wait_for_others(st, rank, world_size);
    if (rc == 0 && rank == 0)
        printf("smoke: %d rank%s joined, barrier ok, add ok, allgather ok\n", world_size,
               world_size == 1 ? "" : "s");
    if ((s = hoop_store_destroy(st)) != HOOP_OK && rc == 0) rc = failed(rank, "destroy", s);
    return rc;
}
