/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/fault.h -- a test hook: a rank sends itself a signal at a named point
 * (HOOP_TEST_FAULT; internal, see fault.c).
 *
 * tests/faults/ uses it to kill or stop one rank exactly in a phase that an outside
 * kill could only hit by luck (a reduce-scatter phase, the middle of a backward pass).
 * Off unless HOOP_TEST_FAULT is set; while it is unset every check below is one load of
 * a value parsed once, and the executor's per-step check compares two integers.
 */
#ifndef HOOP_CORE_FAULT_H
#define HOOP_CORE_FAULT_H

#include <stdint.h>

#include "hoop/status.h"

HOOP_EXTERN_C_BEGIN

/* Where a fault may be raised. The spec's index counts, per point:
 *   RENDEZVOUS   communicators this process set up (0 = its first), just before its card
 *                is published (hoop_comm_init's store or in-process exchange);
 *   CONNECT      the same, once the first round of link connects and accepts has run;
 *   REDUCE_SCATTER, ALL_GATHER
 *                a call's sequence number on its communicator (the "#N" of messages):
 *                once the middle one of its receive-and-reduce steps (the
 *                reduce-scatter phase of ring, rhd and reduce_scatter) or of its plain
 *                receive steps (the all-gather phase of ring, rhd, allgather) is done;
 *   BACKWARD     backward passes of this process (hoop_backward), once half of the
 *                tape's nodes are walked;
 *   CHECKPOINT   checkpoint saves of this process (hoop_checkpoint_save), once half of
 *                the file's bytes are written, before it is renamed into place;
 *   VERDICT      communicators this process set up, once its links are all up, just
 *                before the start-up's verdict (comm.c, agree_verdict);
 *   STORE_SYNC   store all-gathers and barriers of this process (hoop_store_allgather,
 *                hoop_store_barrier; a communicator's start-up makes some), once its
 *                own arrival is set, before it waits for the others' (RANK: the
 *                store's rank). */
typedef enum hoop__fault_point {
    HOOP__FAULT_NONE = 0,
    HOOP__FAULT_RENDEZVOUS,
    HOOP__FAULT_CONNECT,
    HOOP__FAULT_REDUCE_SCATTER,
    HOOP__FAULT_ALL_GATHER,
    HOOP__FAULT_BACKWARD,
    HOOP__FAULT_CHECKPOINT,
    HOOP__FAULT_VERDICT,
    HOOP__FAULT_STORE_SYNC,
} hoop__fault_point;

/* A parsed HOOP_TEST_FAULT value: "RANK:POINT:INDEX:SIGNAL", e.g. "2:all_gather:3:KILL"
 * (rank 2 raises SIGKILL in the all-gather phase of call #3). POINT is one of
 * rendezvous, connect, reduce_scatter, all_gather, backward, checkpoint, verdict,
 * store_sync; SIGNAL
 * one of KILL, STOP, TERM, SEGV, or FAIL: no signal, the step fails with an error
 * instead (the rank stays alive; only the points whose caller says so take FAIL:
 * verdict), or CORRUPT: no signal, the call goes on with wrong data (reduce_scatter and
 * all_gather only: every byte of the piece that step received or reduced into is
 * flipped, where it lies in host memory, not through a stage slot, and is data, not a
 * barrier token (elsewhere a line says nothing was corrupted); the result is wrong
 * on this rank and on the ranks it forwards the piece to; for checkers' tests, such as
 * hoop-bench's). RANK is the communicator's rank at the collective points, the process's
 * RANK variable (0 when unset) at backward and checkpoint, the store's at store_sync. sig is -1 for
 * FAIL, -2 for CORRUPT. */
#define HOOP__FAULT_FAIL (-1)
#define HOOP__FAULT_CORRUPT (-2)
typedef struct hoop__fault_spec {
    int rank;
    hoop__fault_point point;
    int64_t index;
    int sig;
} hoop__fault_spec;

/* Parses text into *out. HOOP_ERR_INVALID names the field that is wrong and gives the
 * form; every field is required, so no ordinary value can arm the hook. Pure. */
hoop_status hoop__fault_parse(const char *text, hoop__fault_spec *out);

/* 1 when HOOP_TEST_FAULT names this point and rank (-1: the RANK variable's) and index
 * is its index. Parsed once (the first call of any of these); a malformed value arms
 * nothing (hoop_comm_init_env and hooprun refuse it first). Thread-safe. */
int hoop__fault_at(hoop__fault_point point, int rank, int64_t index);

/* For the points whose index counts occurrences (rendezvous, connect, backward,
 * checkpoint, verdict, store_sync): counts this one and returns 1 when it is the armed one.
 * Thread-safe. */
int hoop__fault_tick(hoop__fault_point point, int rank);

/* Raises the armed signal in this process, after one stderr line saying so with the
 * wall-clock time (the tests measure the others' reactions from it):
 *   "hoop: HOOP_TEST_FAULT: rank 2 raises SIGKILL in <where> at 1700000000.123456789".
 * Returns only after a SIGSTOP is continued (or for a signal that is caught), and at
 * once for FAIL ("raises FAIL"): the caller then fails its step. */
void hoop__fault_raise(int rank, const char *where);

/* 1 when the armed action is CORRUPT (the caller, having called hoop__fault_raise at
 * its point, then spoils its data); 0 otherwise. Thread-safe. */
int hoop__fault_corrupts(void);

/* For CORRUPT at a point whose data cannot be spoiled (why: "its data came through a
 * stage slot"), instead of hoop__fault_raise: one stderr line saying that nothing was
 * corrupted there, so that a test does not take a clean result for a missed one:
 *   "hoop: HOOP_TEST_FAULT: rank 1 corrupts nothing in <where>: <why>". */
void hoop__fault_skip(int rank, const char *where, const char *why);

/* Test-only: arms value (as HOOP_TEST_FAULT would; NULL disarms) and restarts the
 * occurrence counts, whatever the environment said. For unit tests, in a process (a
 * forked child) that runs no other thread yet. HOOP_ERR_INVALID for a malformed value. */
hoop_status hoop__fault_arm(const char *value);

HOOP_EXTERN_C_END

#endif /* HOOP_CORE_FAULT_H */
