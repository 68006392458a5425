/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/exec.h -- the schedule executor (internal; see exec.c).
 */
#ifndef HOOP_COLLECTIVES_EXEC_H
#define HOOP_COLLECTIVES_EXEC_H

#include "collectives/coll.h"
#include "collectives/links.h"
#include "transport/transport.h"

typedef struct hoop__exec hoop__exec;

/* What the executor borrows from the communicator for one collective. */
typedef struct hoop__exec_env {
    int world_size, rank;
    struct hoop_tp_comm **send, **recv; /* per peer; NULL where not connected */
    void *bufs[HOOP__NBUF];             /* indexed by HOOP__BUF_* */
    char *slots;                        /* nslots x slot_bytes staging buffers */
    size_t slot_bytes;
    const hoop__tp_open *tps; /* the comm's transports, with the slots' registration with
                               * each (slot_mr); receives into a slot pass the link's */
    int ntps;
    struct hoop__memops *mem; /* copies and reductions (memops.h); NULL = the host's, sync */
    int nslots, depth;        /* slots, and steps in flight per peer and direction */
    int nstage;               /* stage slots (slot_bytes each) at bufs[HOOP__BUF_STAGE] for
                               * staged SENDs and RECVs (stage.c); >= 2 when any is staged */
    int *stage_peak;          /* (optional) raised to the most stage slots held at once */
    hoop_dtype dtype;
    hoop_op op;
    size_t elem;
    char *const *seg_base;   /* DIRECT steps: each rank's copy of the segment, mapped here */
    size_t seg_off;          /* DIRECT steps: the call's buffer's offset in the segment */
    void **cache;            /* (optional) a block the comm keeps across calls: exec_start
                              * uses it when large enough, else replaces it; NULL = own one */
    size_t *cache_bytes;     /* its size */
    int32_t fault_step;      /* test hook (HOOP_TEST_FAULT, core/fault.h): raise its signal
                              * once step fault_step - 1 is done; 0 = never */
    const char *fault_where; /* what the hook's line calls that moment */
    /* (optional) what messages call the schedule: "allreduce", "rd" (static strings) */
    const char *coll_name, *algo_name;
    uint64_t bytes_sent; /* payload bytes of completed sends (output) */
    int failed_peer;     /* the peer whose link failed (output; -1 = none) */
} hoop__exec_env;

hoop_status hoop__exec_start(hoop__exec **out, const hoop__sched *s, const hoop__exec_env *env);

/* Starts and completes as many steps as possible without blocking. Until the vote's
 * first merge has matched, receives into user buffers and reductions are held back
 * (receives into slots may already be posted). *done = 1 when every step is done.
 * Errors come from the transport (HOOP_ERR_REMOTE naming a peer), or from a vote
 * (HOOP_ERR_MISMATCH: hoop__exec_failed_step names the VOTE step). */
hoop_status hoop__exec_progress(hoop__exec *x, int *progressed, int *done);

/* Steps whose memory operation is in flight (the progress thread then naps briefly
 * instead of sleeping on the links: a device's completion does not wake a poll). */
int hoop__exec_memops_pending(const hoop__exec *x);

/* Bytes sent so far by this execution. */
uint64_t hoop__exec_bytes_sent(const hoop__exec *x);
/* The first step (in schedule order) that is not done, or -1 (for timeout messages). */
int32_t hoop__exec_first_pending(const hoop__exec *x);
/* The VOTE step whose merge failed the last progress call, or -1. */
int32_t hoop__exec_failed_step(const hoop__exec *x);
/* The peer whose link failed the last progress call, or -1. */
int hoop__exec_failed_peer(const hoop__exec *x);

/* Frees x after waiting (bounded: 10 s for each; a WARN line otherwise) for the memory
 * operations still in flight, so a failed call hands back no memory being written. */
void hoop__exec_free(hoop__exec *x);

#endif /* HOOP_COLLECTIVES_EXEC_H */
