/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/fuzz/fuzz_shm.c -- the shared-memory transport's hello as the listener reads it
 * (hoop__shm_hello_check, src/transport/shm.c; the layout of struct shm_hello). Byte 0
 * of the input says what came with the message: bits 0-1 the number of descriptors
 * (SCM_RIGHTS), bit 2 truncated control data, bit 3 a peer of another user; the rest
 * is the message's bytes, judged against the token "fuzz-token". A finding is a crash,
 * a sanitizer report, a refusal without a reason, or an acceptance of what the listener
 * must not map: a wrong size, magic, version or token, missing descriptors, another user,
 * or a ring that is not a power of two of at least 4096 bytes.
 */
#include "fuzz.h"

#include "transport/hello.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char token[HOOP_TP_TOKEN_MAX] = "fuzz-token";
    const char *why = "unset";
    uint32_t magic;
    uint16_t version;
    uint64_t ring;
    if (size < 1) return 0;
    int nfds = data[0] & 3, truncated = (data[0] >> 2) & 1, same_user = !((data[0] >> 3) & 1);
    const uint8_t *msg = data + 1;
    size_t n = size - 1;
    int ok = hoop__shm_hello_check(msg, n, nfds, truncated, same_user, token, &why);
    if (!ok) {
        if (why == NULL || why[0] == '\0') abort();
        return 0;
    }
    /* Offsets of the wire format, written out: magic 0, version 4, pad 6, rank 8,
     * channel 12, ring_bytes 16, token 24. */
    if (why != NULL || n != HOOP__SHM_HELLO_BYTES || nfds != 3 || truncated || !same_user) abort();
    memcpy(&magic, msg, 4);
    memcpy(&version, msg + 4, 2);
    memcpy(&ring, msg + 16, 8);
    if (magic != 0x6873686du || version != 2 || ring < 4096 || (ring & (ring - 1)) != 0 ||
        memcmp(msg + 24, token, HOOP_TP_TOKEN_MAX) != 0)
        abort();
    return 0;
}
