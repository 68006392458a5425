/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/stage.c -- staging: the wrapper that lets any schedule move memory the
 * transports cannot read or write (a GPU's), through host memory.
 *
 * The wrapper marks each SEND and RECV on such a buffer and gives it a region of its own
 * in the staging buffer (HOOP__BUF_STAGE, host memory; pinned on a GPU). The executor
 * then copies the bytes into the region before a staged SEND is posted (device -> host,
 * through the memory table: exec.c) and out of it after a staged RECV has arrived and its
 * dependencies are done (host -> device). A RECV_REDUCE needs nothing: it lands in a slot
 * (host memory) and its reduction job reads the slot and writes the buffer, which the
 * memory table's implementation reaches (a kernel reads pinned host memory directly).
 *
 * One region per step, never shared: a region is written once (by its copy) and read once
 * (by the transport, or by the copy out), so no two steps' staging can race, whatever
 * the schedule overlaps, and no step waits for another's staging (no new dependency, so
 * no new way to deadlock). It costs host memory: the bytes this rank sends plus those it
 * receives into staged buffers in the call (for a ring all-reduce about 3(n-1)/n of the
 * buffer: its sends, 2(n-1)/n, and the all-gather's receives; the reduce-scatter's
 * land in slots). The copies are states of the step, not steps of their own: local steps
 * run one at a time in schedule order (exec.c), and a copy queued behind a local step
 * that waits for a peer would stall the sends that peer waits for.
 *
 * Owns nothing. Thread-safety: schedules belong to the progress thread.
 */
#include "collectives/coll.h"

#define STAGE_ALIGN                                                      \
    64 /* region offsets: multiples of any element's size and of a cache \
        * line (from the buffer's start) */

void hoop__sched_stage(hoop__sched *s, unsigned bufmask, size_t *stage_bytes)
{
    size_t total = 0;
    for (size_t i = 0; i < s->n; i++) {
        hoop__step *st = &s->steps[i];
        if (st->kind != HOOP__STEP_SEND && st->kind != HOOP__STEP_RECV) continue;
        if (st->buf >= 32 || !(bufmask & (1u << st->buf))) continue;
        st->stage = 1;
        st->src_off = total;
        total += (st->bytes + STAGE_ALIGN - 1) & ~(size_t)(STAGE_ALIGN - 1);
    }
    *stage_bytes = total;
}
