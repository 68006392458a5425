/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/fuzz/fuzz_tcp.c -- the TCP transport's hello as the listener reads it
 * (hoop__tcp_hello_check, src/transport/tcp.c; the layout of struct tcp_hello): the input
 * is the bytes a connecting stranger sent, judged against the token "fuzz-token". A
 * finding is a crash, a sanitizer report, or an accepted hello that breaks what the
 * listener then relies on: the exact size, 1 <= nsocks <= 16, 0 <= idx < nsocks (idx
 * indexes the link's streams), the right magic, version and token; or a refusal without
 * a reason.
 */
#include "fuzz.h"

#include "transport/hello.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char token[HOOP_TP_TOKEN_MAX] = "fuzz-token", why[96];
    uint32_t magic;
    uint16_t version, nsocks;
    int32_t idx;
    memset(why, 0x55, sizeof(why));
    int ok = hoop__tcp_hello_check(data, size, token, why, sizeof(why));
    if (!ok) {
        if (memchr(why, '\0', sizeof(why)) == NULL || why[0] == '\0') abort();
        return 0;
    }
    /* Offsets of the wire format, written out: magic 0, version 4, nsocks 6, rank 8,
     * channel 12, idx 16, nonce 20, token 24. */
    if (size != HOOP__TCP_HELLO_BYTES) abort();
    memcpy(&magic, data, 4);
    memcpy(&version, data + 4, 2);
    memcpy(&nsocks, data + 6, 2);
    memcpy(&idx, data + 16, 4);
    if (magic != 0x686f6f70u || version != 2 || nsocks < 1 || nsocks > 16 || idx < 0 ||
        idx >= nsocks || memcmp(data + 24, token, HOOP_TP_TOKEN_MAX) != 0)
        abort();
    return 0;
}
