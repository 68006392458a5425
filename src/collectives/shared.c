/*
 * src/collectives/shared.c -- memory the ranks of one host map into each other's address
 * spaces (hoop_comm_alloc_shared), the home of the direct all-reduce's buffers.
 *
 * Allocation is collective. Each rank creates a POSIX shared-memory object under a name
 * no one can guess ("/hoop-<pid>-<rank>-<64 random bits>", mode 0600), sizes and maps
 * it, and the ranks swap {size, name} records with a blocking all-gather on the comm.
 * Each rank then opens and maps every peer's object, the ranks agree with an all-reduce
 * (min) whether everybody mapped everything, and each rank unlinks its own name: from
 * then on the memory lives only as long as the mappings, so nothing is left in /dev/shm
 * once the call returns, whatever happens to the processes later.
 * Where the ranks are not all on this host (or HOOP_TRANSPORT=tcp) the memory is an
 * anonymous private mapping: the same call, the same result for the caller, no direct.
 *
 * Owns: the comm's segment list (comm->segs) and its mappings. Thread-safety: the
 * issuing thread allocates, frees and looks up; the progress thread only reads the
 * base arrays of segments with calls in flight (which may not be freed meanwhile).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "collectives/comm.h"
#include "core/check.h"

#define NAME_MAX_ 64

/* What each rank tells the others about its copy. */
typedef struct seg_rec {
    uint64_t bytes; /* as asked for */
    uint64_t len;   /* as mapped (page multiple) */
    int32_t named;  /* 1 when name is a shared-memory object the peers may open */
    int32_t pad_;
    char name[NAME_MAX_];
} seg_rec;

static void seg_unmap(hoop__seg *g, int world_size)
{
    for (int q = 0; g->base && q < world_size; q++)
        if (g->base[q]) munmap(g->base[q], g->len);
    free(g->base);
    free(g);
}

/* Creates and maps this rank's copy: a named object when the peers may map it, else
 * anonymous memory. */
static hoop_status create_own(hoop_comm *comm, hoop__seg *g, seg_rec *me)
{
    uint64_t nonce = 0;
    int fd = -1;
    if (comm->all_local && getrandom(&nonce, sizeof(nonce), 0) == (ssize_t)sizeof(nonce)) {
        snprintf(me->name, sizeof(me->name), "/hoop-%ld-%d-%016llx", (long)getpid(), comm->rank,
                 (unsigned long long)nonce);
        fd = shm_open(me->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0 && ftruncate(fd, (off_t)g->len) != 0) {
            close(fd);
            shm_unlink(me->name);
            fd = -1;
        }
        if (fd < 0)
            HOOP_INFO(COLL, "rank %d: no shared-memory object for hoop_comm_alloc_shared (%s)",
                      comm->rank, strerror(errno));
    }
    void *p = mmap(NULL, g->len, PROT_READ | PROT_WRITE,
                   fd >= 0 ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS, fd, 0);
    if (fd >= 0) close(fd);
    if (p == MAP_FAILED) {
        if (fd >= 0) shm_unlink(me->name);
        return HOOP_ERROR(HOOP_ERR_NOMEM, "hoop_comm_alloc_shared: cannot map %zu bytes: %s",
                          g->len, strerror(errno));
    }
    g->base[comm->rank] = p;
    me->named = fd >= 0;
    if (!me->named) me->name[0] = '\0';
    return HOOP_OK;
}

/* Maps every peer's copy; 1 when all of them are mapped. */
static int map_peers(hoop_comm *comm, hoop__seg *g, const seg_rec *all)
{
    int ok = 1;
    for (int q = 0; q < comm->world_size; q++) {
        if (q == comm->rank) continue;
        const seg_rec *r = &all[q];
        struct stat sb;
        int fd = r->named ? shm_open(r->name, O_RDWR | O_CLOEXEC, 0) : -1;
        if (fd < 0 || fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != g->len) {
            if (fd >= 0) close(fd);
            ok = 0;
            continue;
        }
        void *p = mmap(NULL, g->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED) {
            ok = 0;
            continue;
        }
        g->base[q] = p;
    }
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
    ok = me->named && map_peers(comm, g, all);
    /* After this every peer has opened (or given up on) our name. */
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
    seg_rec me = {.bytes = bytes};
    hoop_status st = HOOP_OK;
    HOOP_CHECK(hoop__calloc(&g, 1));
    g->len = (bytes + (size_t)page - 1) / (size_t)page * (size_t)page;
    me.len = g->len;
    HOOP_CHECK_GOTO(hoop__calloc(&g->base, (size_t)comm->world_size), st, fail);
    HOOP_CHECK_GOTO(create_own(comm, g, &me), st, fail);
    if (comm->world_size > 1) st = share(comm, g, &me);
    if (me.named) shm_unlink(me.name);
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
        *at = g->next;
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

const hoop__seg *hoop__seg_find(const hoop_comm *comm, const void *ptr, size_t bytes)
{
    const char *p = ptr;
    for (const hoop__seg *g = comm->segs; g && p; g = g->next) {
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
