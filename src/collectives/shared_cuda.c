/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/shared_cuda.c -- device memory the ranks of one node map into each
 * other's address spaces (hoop_comm_alloc_shared_cuda), the home of the device direct
 * algorithm's buffers: shared.c's scheme for GPU memory.
 *
 * Allocation is collective. Each rank takes its copy from cudaMalloc itself (the backend's
 * shared_alloc: not the caching allocator, whose blocks outlive their users) on its GPU,
 * exports a CUDA IPC handle of it, and the ranks swap {size, pointer, process, handle}
 * records with a blocking all-gather. Each rank then maps every peer's copy: a peer in
 * another process through cudaIpcOpenMemHandle (CUDA refuses a handle in the process that
 * made it), a peer in this process (thread-ranks: one CUDA context, one device) by its
 * pointer itself; and the ranks agree with an all-reduce (min) whether everybody mapped
 * everything. Where they did not (ranks on several nodes, HOOP_TRANSPORT=tcp, more than
 * HOOP__CUDA_DIRECT_MAX_RANKS ranks, IPC refused: devices without peer access, a
 * container that hides the other processes), each rank keeps its own copy only: plain
 * device memory, on which collectives take the staged path, as shared.c's memory falls
 * back to private memory.
 *
 * Why CUDA IPC and not the VMM API (cuMemCreate with a POSIX file descriptor handle,
 * passed over a Unix socket): IPC needs nothing but the handle's 64 bytes in the record
 * every rank already all-gathers, where VMM fds need a socket per pair of processes
 * (SCM_RIGHTS) beside the comm's links, and the driver API (libcuda, which the module
 * does not link); IPC's one limit that matters here, a handle naming a whole cudaMalloc
 * allocation, is met by allocating these buffers directly.
 *
 * Ordering of a direct call on it (direct.c's schedule, unchanged): the vote proves
 * arrival (every rank has started the call, so its copy holds its data: the host forms'
 * callers finished writing before calling, the stream forms' start event passed before
 * the vote); a rank's share is done when its kernel's event has completed, which the
 * progress thread polls through the memory table (exec.c), never blocking; the token
 * barrier then proves departure. CUDA IPC events (cudaIpcGetEventHandle) would let a
 * peer's stream wait for this rank's kernel on the device, saving a host poll and a
 * token's latency per call, but they buy no message (the vote is needed anyway to catch
 * mismatched calls, and a host message to know which recording of a reused event is this
 * call's), and a device-side wait has no deadline: a peer that dies would leave the
 * waiting stream stuck, where every wait here ends at HOOP_TIMEOUT and a closed link
 * fails the call within milliseconds. So none are used.
 *
 * Freeing: CUDA leaves a copy freed while a peer still has it open undefined, so a
 * mapped allocation (direct) is freed collectively: each rank closes its mappings of the
 * peers' copies, a barrier proves every rank has, then each frees its own copy.
 *
 * Owns: the CUDA entries of the comm's segment list (comm->segs, cuda = 1), their device
 * memory and IPC mappings. Thread-safety: as shared.c (the issuing thread).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "collectives/comm.h"
#include "core/backend.h"
#include "core/check.h"
#include "cuda/coll.h"

/* What each rank tells the others about its copy. */
typedef struct dseg_rec {
    uint64_t bytes;   /* as asked for */
    uint64_t ptr;     /* its address in its process */
    uint64_t process; /* this process's token (hoop__process_token) */
    int32_t pid;
    int32_t exported; /* handle is valid */
    unsigned char handle[HOOP__CUDA_IPC_HANDLE_BYTES];
} dseg_rec;

uint64_t hoop__process_token(void)
{
    static _Atomic uint64_t token;
    uint64_t t = atomic_load(&token);
    if (t) return t;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t mine = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^
                    ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)(uintptr_t)&ts;
    mine |= 1; /* never 0 */
    uint64_t none = 0;
    return atomic_compare_exchange_strong(&token, &none, mine) ? mine : none;
}

/* The backend's collectives' table, with the entries this file needs. */
static hoop_status backend(const char *fn, const struct hoop__cuda_coll **cc)
{
    hoop_status st = hoop__cuda_backend(NULL, cc);
    if (st != HOOP_OK)
        return HOOP_ERROR(st, "%s needs the CUDA backend: %s", fn, hoop_last_error());
    if (!*cc || !HOOP__CUDA_COLL_HAS(*cc, ipc_close))
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED,
                          "%s: the CUDA backend module is older than this library (it has no "
                          "shared device memory); reinstall it with this hoop",
                          fn);
    return HOOP_OK;
}

/* Closes this rank's mappings of the peers' copies (and forgets the peers' pointers). */
static void unmap_peers(const hoop_comm *comm, hoop__seg *g, const struct hoop__cuda_coll *cc)
{
    for (int q = 0; g->base && q < comm->world_size; q++) {
        if (q == comm->rank) continue;
        if (g->opened && g->opened[q]) cc->ipc_close(g->base[q]);
        if (g->opened) g->opened[q] = 0;
        g->base[q] = NULL;
    }
}

/* Frees what seg_alloc made (the peers' mappings first, then this rank's copy); the
 * free's error (everything is released all the same). */
static hoop_status seg_release(const hoop_comm *comm, hoop__seg *g,
                               const struct hoop__cuda_coll *cc)
{
    hoop_status st = HOOP_OK;
    unmap_peers(comm, g, cc);
    if (g->base) st = cc->shared_free(g->base[comm->rank]);
    free(g->base);
    free(g->opened);
    free(g);
    return st;
}

/* Maps rank q's copy described by r: its own pointer in this process, else its handle. */
static int map_peer(const hoop__seg *g, const dseg_rec *r, const struct hoop__cuda_coll *cc,
                    char **at, uint8_t *opened)
{
    void *p = NULL;
    (void)g;
    if (r->process == hoop__process_token() && r->pid == (int32_t)getpid()) {
        *at = (char *)(uintptr_t)r->ptr;
        return 1;
    }
    if (!r->exported || cc->ipc_open(r->handle, &p) != HOOP_OK) return 0;
    *at = p;
    *opened = 1;
    return 1;
}

/* Maps every peer's copy; 1 when all of them are mapped. */
static int map_peers(hoop_comm *comm, hoop__seg *g, const dseg_rec *all,
                     const struct hoop__cuda_coll *cc)
{
    int ok = 1;
    for (int q = 0; q < comm->world_size && ok; q++)
        if (q != comm->rank && !map_peer(g, &all[q], cc, &g->base[q], &g->opened[q])) {
            HOOP_INFO(COLL, "rank %d: cannot map rank %d's device memory (CUDA IPC: %s); no direct",
                      comm->rank, q, all[q].exported ? hoop_last_error() : "not exported");
            ok = 0;
        }
    return ok;
}

static hoop_status check_sizes(const hoop_comm *comm, const dseg_rec *all)
{
    for (int q = 1; q < comm->world_size; q++)
        if (all[q].bytes != all[0].bytes)
            return HOOP_ERROR(HOOP_ERR_MISMATCH,
                              "hoop_comm_alloc_shared_cuda: rank 0 asked for %llu bytes but rank "
                              "%d for %llu",
                              (unsigned long long)all[0].bytes, q,
                              (unsigned long long)all[q].bytes);
    return HOOP_OK;
}

/* Swaps records, maps the peers' copies and agrees whether direct is possible. */
static hoop_status share(hoop_comm *comm, hoop__seg *g, dseg_rec *me,
                         const struct hoop__cuda_coll *cc)
{
    dseg_rec *all;
    hoop_status st;
    int32_t ok;
    HOOP_CHECK(hoop__calloc(&all, (size_t)comm->world_size));
    HOOP_CHECK_GOTO(hoop_allgather(comm, me, all, sizeof(*me), HOOP_DTYPE_U8, NULL), st, out);
    HOOP_CHECK_GOTO(check_sizes(comm, all), st, out);
    ok = me->exported && map_peers(comm, g, all, cc);
    /* After this every rank has opened (or given up on) every peer's copy. */
    HOOP_CHECK_GOTO(hoop_allreduce(comm, &ok, &ok, 1, HOOP_DTYPE_I32, HOOP_OP_MIN, NULL), st, out);
    g->direct = ok == 1;
out:
    free(all);
    return st;
}

/* This rank's copy, and its handle where the ranks may map it (all on this node). */
static hoop_status create_own(hoop_comm *comm, hoop__seg *g, dseg_rec *me,
                              const struct hoop__cuda_coll *cc)
{
    void *p = NULL;
    HOOP_CHECK(cc->shared_alloc(&p, g->len));
    g->base[comm->rank] = p;
    *me = (dseg_rec){.bytes = me->bytes,
                     .ptr = (uint64_t)(uintptr_t)p,
                     .process = hoop__process_token(),
                     .pid = (int32_t)getpid()};
    if (!comm->all_local || comm->world_size < 2 || comm->world_size > HOOP__CUDA_DIRECT_MAX_RANKS)
        return HOOP_OK;
    if (cc->ipc_export(p, me->handle) == HOOP_OK)
        me->exported = 1;
    else
        HOOP_INFO(COLL, "rank %d: hoop_comm_alloc_shared_cuda: no IPC handle (%s); private",
                  comm->rank, hoop_last_error());
    return HOOP_OK;
}

hoop_status hoop_comm_alloc_shared_cuda(hoop_comm *comm, size_t bytes, void **ptr)
{
    const struct hoop__cuda_coll *cc;
    if (!comm || !ptr)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "hoop_comm_alloc_shared_cuda: comm and ptr must be set");
    *ptr = NULL;
    if (bytes == 0 || bytes > SIZE_MAX / 2)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "hoop_comm_alloc_shared_cuda: bytes=%zu is not in [1, %zu]", bytes,
                          SIZE_MAX / 2);
    HOOP_CHECK(backend("hoop_comm_alloc_shared_cuda", &cc));
    long page = sysconf(_SC_PAGESIZE);
    hoop__seg *g;
    dseg_rec me = {.bytes = bytes};
    hoop_status st = HOOP_OK;
    HOOP_CHECK(hoop__calloc(&g, 1));
    g->cuda = 1;
    g->len = (bytes + (size_t)page - 1) / (size_t)page * (size_t)page;
    HOOP_CHECK_GOTO(hoop__calloc(&g->base, (size_t)comm->world_size), st, fail);
    HOOP_CHECK_GOTO(hoop__calloc(&g->opened, (size_t)comm->world_size), st, fail);
    HOOP_CHECK_GOTO(create_own(comm, g, &me, cc), st, fail);
    if (comm->world_size > 1) HOOP_CHECK_GOTO(share(comm, g, &me, cc), st, fail);
    if (!g->direct) unmap_peers(comm, g, cc); /* keep our copy only */
    g->id = comm->nsegs_made++;
    g->next = comm->segs;
    comm->segs = g;
    HOOP_DEBUGF(COLL, "rank %d: shared device buffer %u of %zu bytes (%s)", comm->rank, g->id,
                bytes, g->direct ? "mapped by every rank" : "private");
    *ptr = g->base[comm->rank];
    return HOOP_OK;
fail:
    seg_release(comm, g, cc); /* st says why; a free's error after it adds nothing */
    return st;
}

/* The release of a segment found at free: a mapped one after every rank closed its
 * mappings (the barrier); the barrier's error, else the free's, is returned, the memory
 * freed anyway (the comm has failed: a peer still alive that keeps reading it reads
 * garbage). */
static hoop_status release_direct(hoop_comm *comm, hoop__seg *g, const struct hoop__cuda_coll *cc)
{
    hoop_status st = HOOP_OK;
    int mapped = g->direct && comm->world_size > 1;
    unmap_peers(comm, g, cc);
    if (mapped) st = hoop_barrier(comm, NULL);
    hoop_status fst = seg_release(comm, g, cc);
    return st != HOOP_OK ? st : fst;
}

hoop_status hoop_comm_free_shared_cuda(hoop_comm *comm, void *ptr)
{
    const struct hoop__cuda_coll *cc;
    if (!ptr) return HOOP_OK;
    if (!comm) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_comm_free_shared_cuda: comm is NULL");
    for (hoop__seg **at = &comm->segs; *at; at = &(*at)->next) {
        hoop__seg *g = *at;
        if (g->base[comm->rank] != ptr) continue;
        if (!g->cuda)
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "hoop_comm_free_shared_cuda: %p is host memory from "
                              "hoop_comm_alloc_shared: free it with hoop_comm_free_shared",
                              ptr);
        int n = atomic_load(&g->inflight);
        if (n > 0)
            return HOOP_ERROR(HOOP_ERR_USAGE,
                              "hoop_comm_free_shared_cuda: %d collective(s) on %p are still in "
                              "flight; wait for them first",
                              n, ptr);
        HOOP_CHECK(backend("hoop_comm_free_shared_cuda", &cc));
        *at = g->next;
        return release_direct(comm, g, cc);
    }
    return HOOP_ERROR(HOOP_ERR_INVALID,
                      "hoop_comm_free_shared_cuda: %p is not memory from "
                      "hoop_comm_alloc_shared_cuda on this comm",
                      ptr);
}

hoop_status hoop__comm_free_segs_cuda(hoop_comm *comm)
{
    const struct hoop__cuda_coll *cc = NULL;
    hoop_status st = HOOP_OK;
    int mapped = 0;
    for (hoop__seg *g = comm->segs; g; g = g->next) mapped |= g->cuda && g->direct;
    for (hoop__seg **at = &comm->segs; *at;) {
        hoop__seg *g = *at;
        if (!g->cuda) {
            at = &g->next;
            continue;
        }
        if (!cc && backend("hoop_comm_destroy", &cc) != HOOP_OK) return HOOP_OK; /* none made */
        unmap_peers(comm, g, cc);
        at = &g->next;
    }
    /* Every rank has closed its mappings of this rank's copies once the barrier passed;
     * a failed comm frees them anyway (see release_direct). */
    if (mapped && comm->world_size > 1 && atomic_load(&comm->state) == HOOP__CS_RUNNING)
        st = hoop_barrier(comm, NULL);
    for (hoop__seg **at = &comm->segs; *at;) {
        hoop__seg *g = *at;
        if (!g->cuda) {
            at = &g->next;
            continue;
        }
        *at = g->next;
        hoop_status fst = seg_release(comm, g, cc);
        if (st == HOOP_OK) st = fst;
    }
    return st;
}
