/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/fuzz/fuzz_store.c -- the store protocol as the server reads it
 * (src/bootstrap/store_server.c, the wire format of store_proto.h): one server, started
 * at the first input on loopback with the token "fuzz", takes each input as the bytes
 * of one client connection (preface, HELLO, requests), sent at once and followed by
 * end-of-file; the replies are read until the server closes (at most 1 s: a WAIT may
 * stay parked for its timeout). The server's state (its key table) carries over from
 * input to input, as it would from client to client. A finding is a crash, a sanitizer
 * report or a leak in the server thread.
 */
#include "fuzz.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "core/clock.h"
#include "hoop/store.h"

static int port;

static void server(void)
{
    static hoop_store_server *srv;
    hoop_store_config cfg = HOOP_STORE_CONFIG_INIT;
    cfg.host = "127.0.0.1";
    cfg.token = "fuzz";
    cfg.timeout_ms = 2000;
    if (hoop_store_server_init(&srv, &cfg) != HOOP_OK) abort();
    port = hoop_store_server_port(srv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    char buf[65536];
    fuzz_quiet();
    if (port == 0) server();
    a.sin_port = htons((uint16_t)port);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return 0;
    }
    for (size_t off = 0; off < size;) { /* the server closes on bad bytes: stop there */
        ssize_t k = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (k <= 0) break;
        off += (size_t)k;
    }
    shutdown(fd, SHUT_WR);
    int64_t deadline = hoop__now_ns() + 1000 * 1000000LL;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int64_t left = (deadline - hoop__now_ns()) / 1000000;
        if (left <= 0) break;
        if (poll(&p, 1, (int)left) < 0 && errno != EINTR) break;
        ssize_t k = recv(fd, buf, sizeof(buf), 0);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) break;
    }
    close(fd);
    return 0;
}
