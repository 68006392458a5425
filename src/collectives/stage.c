/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/stage.c -- staging: the wrapper that lets any schedule move memory the
 * transports cannot read or write (a GPU's), through host memory.
 *
 * The wrapper marks each SEND and RECV on such a buffer as staged; the executor (exec.c)
 * moves them through a fixed pool of stage slots: nstage (HOOP_STAGE_SLOTS) slots of
 * slot_bytes (the chunk size) of host memory per communicator, page-locked for a GPU and
 * registered once with every transport that takes registrations (progress.c,
 * stage_prepare), so staging memory is slots x chunk whatever the buffer's size. A
 * staged SEND takes a slot once its dependencies are done, its bytes are copied in
 * (device -> host, through the memory table) while earlier chunks are on the wire, it is
 * sent from the slot, and the slot comes back when the send completed. A staged RECV
 * without dependencies takes a slot when its lane posts it, and the slot comes back once
 * its bytes were copied out (host -> device). A staged RECV with dependencies lands in
 * a receive slot instead (like an unstaged one that waits for its dependencies), as do
 * the RECV_REDUCEs, whose reduction kernel reads the slot where the bytes landed. With
 * 8 slots up to 7 chunks of one direction are in flight, copies included.
 *
 * Why no rank waits forever for a slot. A holder of a stage slot waits for one thing on
 * another rank and for nothing on its own: a SEND (its dependencies were done before it
 * took the slot, its copy finishes by itself) for the matching receive to be posted, a
 * RECV without dependencies for the matching send's bytes, then its own copy out. Slots
 * go to each class (sends, receives) in schedule order, and a class never holds more
 * than nstage - 1, so the oldest waiting receive of a rank waits only for the receives
 * before it and the oldest waiting send only for the sends before it, never for the
 * other class. Each class therefore runs at least as a one-deep pipeline in schedule
 * order, which is what the executor already does with one step in flight per lane: a
 * send's slot frees once its receiver takes the bytes, and that receiver's oldest
 * receive is the match (per link, sends and receives pair up in order). Every schedule
 * here (ring, rd, rhd, the chains, reduce-scatter, all-gather) runs so with two slots;
 * tests/check_stage.c runs each with buffers many times slots x chunk, over tcp and
 * over shm rings smaller than a chunk (where a send completes only as its receiver
 * drains it).
 *
 * Owns nothing. Thread-safety: schedules belong to the progress thread.
 */
#include "collectives/coll.h"
#include "core/check.h"

hoop_status hoop__sched_stage(hoop__sched *s, unsigned bufmask, size_t slot_bytes)
{
    for (size_t i = 0; i < s->n; i++) {
        hoop__step *st = &s->steps[i];
        if (st->kind != HOOP__STEP_SEND && st->kind != HOOP__STEP_RECV) continue;
        if (st->buf >= 32 || !(bufmask & (1u << st->buf))) continue;
        if (st->bytes > slot_bytes) /* the schedules cut their ranges into chunks */
            return HOOP_INTERNAL_ERROR("step %zu moves %zu bytes, more than a stage slot (%zu)", i,
                                       st->bytes, slot_bytes);
        st->stage = 1;
    }
    return HOOP_OK;
}
