/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/fuzz/fuzz_header.c -- the collective records peers exchange
 * (src/collectives/vote.c, progress.c; hoop__hdr and hoop__vote of comm.h). Bytes 0-127
 * of the input (zero-padded) are the 128-byte vote record rank 1 sent to rank 0, which
 * merges it (hoop__vote_merge) into its own state for the call allreduce(count=1024,
 * f32, sum, ring) #7; every 32 bytes after that are a header as the control link carries
 * them (an ABORT record and the calls behind it), described for a message
 * (hoop__hdr_describe). A finding is a crash, a sanitizer report, a description that is
 * not a terminated string in its buffer, or a merge whose verdict is not: HOOP_OK exactly
 * when the record has the magic, comes from rank 1, is not marked bad and carries the
 * same header bytes (the 2 pad bytes aside; the refused mark counts); HOOP_ERR_MISMATCH
 * otherwise.
 */
#include "fuzz.h"

#include "collectives/comm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static hoop__vote votes[2 * HOOP__VOTE_ROUNDS + 1];
    hoop__hdr mine = {.kind = HOOP__REC_HDR,
                      .seq = 7,
                      .count = 1024,
                      .coll = HOOP__COLL_ALLREDUCE,
                      .dtype = HOOP_DTYPE_F32,
                      .op = HOOP_OP_SUM,
                      .algo = HOOP_ALGO_RING};
    uint8_t in[128] = {0}, me[32];
    char buf[160];
    fuzz_quiet();
    memcpy(in, data, size < sizeof(in) ? size : sizeof(in));
    memset(votes, 0, sizeof(votes));
    hoop__vote_init(votes, &mine, 0);
    memcpy(&votes[HOOP__VOTE_ROUNDS + 1], in, sizeof(in)); /* the inbox I[0] */
    hoop__step st = {.kind = HOOP__STEP_VOTE,
                     .buf = HOOP__BUF_VOTE,
                     .peer = 1,
                     .off = (HOOP__VOTE_ROUNDS + 1) * sizeof(hoop__vote),
                     .src_off = 0,
                     .bytes = sizeof(hoop__vote)};
    hoop_status got = hoop__vote_merge(votes, &st, 0, 2);
    /* The record's layout, written out: magic 0, from 4, bad 8, the header at 32. */
    uint32_t magic;
    int32_t from, bad;
    memcpy(&magic, in, 4);
    memcpy(&from, in + 4, 4);
    memcpy(&bad, in + 8, 4);
    memcpy(me, &mine, sizeof(me));
    int same = memcmp(in + 32, me, 22) == 0 && memcmp(in + 56, me + 24, 8) == 0;
    hoop_status want =
        magic == 0x564f5445u && from == 1 && bad == 0 && same ? HOOP_OK : HOOP_ERR_MISMATCH;
    if (got != want) abort();
    const hoop__vote *after = hoop__vote_after(votes, &st);
    if ((got == HOOP_OK) != (after->bad == 0)) abort();
    for (size_t off = 128; off + 32 <= size; off += 32) {
        hoop__hdr h;
        memcpy(&h, data + off, sizeof(h));
        memset(buf, 0x55, sizeof(buf));
        hoop__hdr_describe(&h, buf, sizeof(buf));
        if (memchr(buf, '\0', sizeof(buf)) == NULL) abort();
    }
    return 0;
}
