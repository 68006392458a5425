/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/transport/frame.h -- the frame word that opens every message on the byte-stream
 * transports (tcp.c, shm.c; internal).
 *
 * The k-th isend on a link is received by the k-th irecv, and both must name the same
 * number of bytes (transport.h). Two ranks whose schedules disagree on a message's size
 * (a schedule bug: coll.h's pairing rule broken) would otherwise leave the receiver
 * reading the next message's bytes as the rest of this one: calls that succeed with
 * wrong data, then a misleading failure several calls later. So each message is sent
 * behind an 8-byte word, its length under a tag, and the receiver compares it with what
 * it posted before it takes the message: one store per message on the sending side, one
 * comparison on the receiving side, no round trip. The tag catches a stream that is out
 * of step for any other reason (a word that is not a frame at all).
 *
 * ib.c needs none: each of its eager messages is one slot write, whose completion
 * carries its length (byte_len), which the receiver compares with what it posted; a
 * rendezvous message's length travels in the receiver's grant, which the sender checks
 * (ib.c, and transport.h for what that leaves unchecked). tcp and shm went to protocol
 * version 2 with this word, so a rank of an older build is refused at the hello.
 */
#ifndef HOOP_TRANSPORT_FRAME_H
#define HOOP_TRANSPORT_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define HOOP__FRAME_BYTES 8
#define HOOP__FRAME_TAG 0x4846u                   /* "HF", the top 16 bits */
#define HOOP__FRAME_MAX ((UINT64_C(1) << 48) - 1) /* the longest message a frame can say */

static inline uint64_t hoop__frame(size_t bytes)
{
    return ((uint64_t)HOOP__FRAME_TAG << 48) | (uint64_t)bytes;
}

/* 1 when frame word got opens a message of posted bytes; else 0 with why (cap bytes)
 * saying what arrived from peer ("shm", "tcp": the transport): both lengths, or that the
 * word is not a frame. */
static inline int hoop__frame_ok(uint64_t got, size_t posted, const char *tp, int peer, char *why,
                                 size_t cap)
{
    if (got == hoop__frame(posted)) return 1;
    if ((got >> 48) != HOOP__FRAME_TAG)
        snprintf(why, cap,
                 "%s link from rank %d: a message does not start with a frame word (0x%016llx) "
                 "where a receive of %zu bytes was posted: the stream is out of step",
                 tp, peer, (unsigned long long)got, posted);
    else
        snprintf(why, cap,
                 "%s link from rank %d: the message that arrived is %llu bytes but the receive "
                 "posted for it is %zu bytes: the two ranks' schedules disagree on its size",
                 tp, peer, (unsigned long long)(got & HOOP__FRAME_MAX), posted);
    return 0;
}

#endif /* HOOP_TRANSPORT_FRAME_H */
