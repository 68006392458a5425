/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/shared.c -- memory the ranks of one host map into each other's address
 * spaces (hoop_comm_alloc_shared), the home of the direct all-reduce's buffers.
 *
 * Allocation is collective. Each rank creates a memfd (an anonymous shared-memory file:
 * no name in /dev/shm, so nothing can outlive the processes, whatever kills them),
 * reserves its pages and maps it, and the ranks swap {size, pid, fd, inode} records with
 * a blocking all-gather on the comm. Each rank then opens every peer's memfd through
 * /proc/<pid>/fd/<fd> (allowed between processes of one user; the inode must match, so
 * a same-numbered process of another PID namespace is never mapped) and maps it, and the
 * ranks agree with an all-reduce (min) whether everybody mapped everything. Then each
 * rank closes its memfd: the mappings keep the memory alive.
 * Where the ranks are not all on this host (or HOOP_TRANSPORT=tcp), or /proc cannot be
 * used, the memory is an anonymous private mapping: the same call, the same result for
 * the caller, no direct.
 *
 * Owns: the comm's segment list (comm->segs) and its mappings. Thread-safety: the
 * issuing thread allocates, frees and looks up; the progress thread only reads the
 * base arrays of segments with calls in flight (which may not be freed meanwhile).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "collectives/comm.h"
#include "core/check.h"
#include "core/memroom.h"

/* What each rank tells the others about its copy. */
typedef struct seg_rec {
    uint64_t bytes;    /* as asked for */
    uint64_t len;      /* as mapped (page multiple) */
    uint64_t dev, ino; /* the memfd's identity, checked by whoever opens it */
    int32_t pid, fd;   /* where the peers find it: /proc/<pid>/fd/<fd>; fd -1 = private */
} seg_rec;

static void seg_unmap(hoop__seg *g, int world_size)
{
    for (int q = 0; !g->cuda && g->base && q < world_size; q++) /* device: shared_cuda.c's */
        if (g->base[q]) munmap(g->base[q], g->len);
    free(g->opened);
    free(g->base);
    free(g);
}

/* Creates and maps this rank's copy: a memfd the peers may open while *fd stays open,
 * else anonymous memory (*fd = -1). */
static hoop_status create_own(hoop_comm *comm, hoop__seg *g, seg_rec *me, int *fd)
{
    struct stat sb;
    /* A memfd has no size limit: reserving more than the machine has woke the OOM killer
     * (it took other processes too) instead of failing here. */
    int64_t room = hoop__mem_room_kib();
    if (room >= 0 && g->len / 1024 > (uint64_t)room)
        return HOOP_ERROR(HOOP_ERR_NOMEM,
                          "hoop_comm_alloc_shared: %zu bytes asked, %lld KiB left to this "
                          "process (" HOOP__MEM_ROOM_WHAT ")",
                          (size_t)g->len, (long long)room);
    *fd = comm->all_local ? memfd_create("hoop-shared", MFD_CLOEXEC) : -1;
    /* Reserve the pages now: running out of memory must fail here, not at the first
     * touch of a page (SIGBUS or the OOM killer). */
    if (*fd >= 0 &&
        (ftruncate(*fd, (off_t)g->len) != 0 ||
         (errno = posix_fallocate(*fd, 0, (off_t)g->len)) != 0 || fstat(*fd, &sb) != 0)) {
        HOOP_INFO(COLL, "rank %d: hoop_comm_alloc_shared: %zu bytes stay private (%s)", comm->rank,
                  g->len, hoop__strerror(errno));
        close(*fd);
        *fd = -1;
    }
    void *p = mmap(NULL, g->len, PROT_READ | PROT_WRITE,
                   *fd >= 0 ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS, *fd, 0);
    if (p == MAP_FAILED) {
        if (*fd >= 0) close(*fd), *fd = -1;
        return HOOP_ERROR(HOOP_ERR_NOMEM, "hoop_comm_alloc_shared: cannot map %zu bytes: %s",
                          g->len, hoop__strerror(errno));
    }
    g->base[comm->rank] = p;
    me->pid = (int32_t)getpid();
    me->fd = *fd;
    if (*fd >= 0) me->dev = (uint64_t)sb.st_dev, me->ino = (uint64_t)sb.st_ino;
    return HOOP_OK;
}

/* Opens and maps rank q's copy through /proc; NULL when that is not possible (another
 * PID namespace, a /proc that hides other processes). The identity check makes sure a
 * process that happens to have the same pid elsewhere is never mapped by mistake. */
static void *map_peer(const seg_rec *r, size_t len)
{
    char path[64];
    struct stat sb;
    if (r->fd < 0) return NULL;
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)r->pid, (int)r->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return NULL;
    void *p = MAP_FAILED;
    if (fstat(fd, &sb) == 0 && (uint64_t)sb.st_dev == r->dev && (uint64_t)sb.st_ino == r->ino &&
        (uint64_t)sb.st_size == len)
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

/* Maps every peer's copy; 1 when all of them are mapped. */
static int map_peers(hoop_comm *comm, hoop__seg *g, const seg_rec *all)
{
    int ok = 1;
    for (int q = 0; q < comm->world_size; q++)
        if (q != comm->rank && !(g->base[q] = map_peer(&all[q], g->len))) ok = 0;
    if (!ok)
        HOOP_INFO(COLL, "rank %d: cannot map every peer's copy through /proc; no direct",
                  comm->rank);
    return ok;
}

/* Every rank asked for the same size, or HOOP_ERR_MISMATCH naming the first that did
 * not (the same verdict on every rank: all see the same records). */
static hoop_status check_sizes(const hoop_comm *comm, const seg_rec *all)
{
    for (int q = 1; q < comm->world_size; q++)
        if (all[q].bytes != all[0].bytes)
            return HOOP_ERROR(HOOP_ERR_MISMATCH,
                              "hoop_comm_alloc_shared: rank 0 asked for %llu bytes but rank %d "
                              "for %llu",
                              (unsigned long long)all[0].bytes, q,
                              (unsigned long long)all[q].bytes);
    return HOOP_OK;
}

/* Swaps records, maps the peers' copies and agrees whether direct is possible. */
static hoop_status share(hoop_comm *comm, hoop__seg *g, seg_rec *me)
{
    seg_rec *all;
    hoop_status st;
    int32_t ok;
    HOOP_CHECK(hoop__calloc(&all, (size_t)comm->world_size));
    HOOP_CHECK_GOTO(hoop_allgather(comm, me, all, sizeof(*me), HOOP_DTYPE_U8, NULL), st, out);
    HOOP_CHECK_GOTO(check_sizes(comm, all), st, out);
    ok = me->fd >= 0 && map_peers(comm, g, all);
    /* After this every peer has opened (or given up on) our memfd. */
    HOOP_CHECK_GOTO(hoop_allreduce(comm, &ok, &ok, 1, HOOP_DTYPE_I32, HOOP_OP_MIN, NULL), st, out);
    g->direct = ok == 1;
out:
    free(all);
    return st;
}

hoop_status hoop_comm_alloc_shared(hoop_comm *comm, size_t bytes, void **ptr)
{
    if (!comm || !ptr)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_comm_alloc_shared: comm and ptr must be set");
    *ptr = NULL;
    long page = sysconf(_SC_PAGESIZE);
    if (bytes == 0 || bytes > SIZE_MAX / 2)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_comm_alloc_shared: bytes=%zu is not in [1, %zu]",
                          bytes, SIZE_MAX / 2);
    hoop__seg *g;
    seg_rec me = {.bytes = bytes, .fd = -1};
    int fd = -1;
    hoop_status st = HOOP_OK;
    HOOP_CHECK(hoop__calloc(&g, 1));
    g->len = (bytes + (size_t)page - 1) / (size_t)page * (size_t)page;
    me.len = g->len;
    HOOP_CHECK_GOTO(hoop__calloc(&g->base, (size_t)comm->world_size), st, fail);
    HOOP_CHECK_GOTO(create_own(comm, g, &me, &fd), st, fail);
    if (comm->world_size > 1) st = share(comm, g, &me);
    if (fd >= 0) close(fd); /* the mappings keep the memory */
    /* A registration the program left at this address (HOOP_IB_REG_CACHE=2 keeps a freed
     * buffer's) must not serve hoop's new memory: dropped before the next call starts. */
    if (st == HOOP_OK) st = hoop__comm_forget_later(comm, g->base[comm->rank], g->len);
    if (st != HOOP_OK) goto fail;
    if (!g->direct) /* keep our copy only */
        for (int q = 0; q < comm->world_size; q++)
            if (q != comm->rank && g->base[q]) munmap(g->base[q], g->len), g->base[q] = NULL;
    g->id = comm->nsegs_made++;
    g->next = comm->segs;
    comm->segs = g;
    HOOP_DEBUGF(COLL, "rank %d: shared buffer %u of %zu bytes (%s)", comm->rank, g->id, bytes,
                g->direct ? "mapped by every rank" : "private");
    *ptr = g->base[comm->rank];
    return HOOP_OK;
fail:
    seg_unmap(g, comm->world_size);
    return st;
}

hoop_status hoop_comm_free_shared(hoop_comm *comm, void *ptr)
{
    if (!ptr) return HOOP_OK;
    if (!comm) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_comm_free_shared: comm is NULL");
    for (hoop__seg **at = &comm->segs; *at; at = &(*at)->next) {
        hoop__seg *g = *at;
        if (g->base[comm->rank] != ptr) continue;
        if (g->cuda)
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "hoop_comm_free_shared: %p is device memory from "
                              "hoop_comm_alloc_shared_cuda: free it with "
                              "hoop_comm_free_shared_cuda",
                              ptr);
        int n = atomic_load(&g->inflight);
        if (n > 0)
            return HOOP_ERROR(HOOP_ERR_USAGE,
                              "hoop_comm_free_shared: %d collective(s) on %p are still in flight; "
                              "wait for them first",
                              n, ptr);
        *at = g->next;
        /* A transport's registration of it (ib: kept across calls) must not outlive it:
         * dropped before the next call starts. Nothing can use the memory: no call on it
         * is in flight. */
        hoop_status st = hoop__comm_forget_later(comm, ptr, g->len);
        if (st != HOOP_OK) {
            *at = g; /* not freed: a new allocation at its address would get its pages */
            return st;
        }
        seg_unmap(g, comm->world_size);
        return HOOP_OK;
    }
    return HOOP_ERROR(HOOP_ERR_INVALID,
                      "hoop_comm_free_shared: %p is not memory from hoop_comm_alloc_shared on "
                      "this comm",
                      ptr);
}

void hoop__comm_free_segs(hoop_comm *comm)
{
    while (comm->segs) {
        hoop__seg *g = comm->segs;
        comm->segs = g->next;
        seg_unmap(g, comm->world_size);
    }
}

hoop__seg *hoop__seg_find(const hoop_comm *comm, const void *ptr, size_t bytes)
{
    const char *p = ptr;
    for (hoop__seg *g = comm->segs; g && p; g = g->next) {
        const char *b = g->base[comm->rank];
        if (p >= b && p < b + g->len) return (size_t)(b + g->len - p) >= bytes ? g : NULL;
    }
    return NULL;
}

int hoop_comm_is_shared(const hoop_comm *comm, const void *ptr, size_t bytes)
{
    if (!comm) return 0;
    const hoop__seg *g = hoop__seg_find(comm, ptr, bytes);
    return g && g->direct;
}
