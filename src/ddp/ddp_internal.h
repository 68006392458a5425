/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/ddp/ddp_internal.h -- the hoop_ddp object shared by ddp.c and trace.c (internal).
 */
#ifndef HOOP_DDP_INTERNAL_H
#define HOOP_DDP_INTERNAL_H

#include "hoop/ddp.h"
#include "hoop/tensor.h"

HOOP_EXTERN_C_BEGIN

struct hoop__kern;

/* One bucket: a contiguous f32 buffer holding the gradients of nparams parameters. */
typedef struct ddp_bucket {
    float *buf;         /* count floats of the parameters' device (bucket_alloc in ddp.c);
                           gradients are views */
    size_t count;       /* floats, including alignment padding between parameters */
    int first, nparams; /* bucket's parameters: order[first .. first + nparams) */
    int pending;        /* parameters not yet ready in this step */
    hoop_request *req;  /* in-flight all-reduce, NULL when none */
    int64_t t_launch_us, t_done_us;
} ddp_bucket;

typedef struct ddp_hook_ctx {
    struct hoop_ddp *ddp;
    int param; /* index into params */
} ddp_hook_ctx;

/* The trace's rows (tid) of a rank. On the cpu: compute (the backward thread) and the
 * bucket all-reduces (host times). On cuda: the host (what the driving thread did), the
 * compute stream and the bucket stream (device times, src/ddp/ddp_dev.c). */
enum ddp_lane {
    DDP_LANE_HOST = 0,
    DDP_LANE_ALLREDUCE = 1,
    DDP_LANE_COMPUTE_STREAM = 2,
    DDP_LANE_BUCKET_STREAM = 3,
    DDP_LANES
};

typedef struct ddp_event {
    char name[40];
    int64_t begin_us, end_us;
    int32_t lane; /* enum ddp_lane */
    int32_t pad_;
} ddp_event;

/* cuda: one round of bucket all-reduces (a synchronising backward pass, or a join round):
 * its events, kept until its device times are read (ddp_dev.c). */
typedef struct ddp_round {
    void *begin, *end;    /* timers on the compute stream: the backward pass's start, end */
    void *finish;         /* timer on the compute stream after it waited for the buckets */
    void **start, **done; /* timers on the bucket stream, per bucket: its all-reduce */
    float *control;       /* pinned: the round's reduced control float, once finish ran */
    int launched;         /* buckets launched (start and done recorded) in the round */
    int recorded;         /* 1: finish recorded, times not read yet */
    int join;             /* 1: a join round (no backward pass of this rank) */
} ddp_round;

#define DDP_ROUNDS 3 /* rounds whose times may still be on the device */

/* cuda: what DDP keeps on the device besides the buckets (ddp_dev.c). */
typedef struct ddp_dev {
    const struct hoop__kern *k; /* the device's table */
    void *stream;               /* the bucket stream: every bucket all-reduce runs on it */
    void **ready;               /* per bucket: compute stream, after its gradients' kernels */
    ddp_round rounds[DDP_ROUNDS];
    int64_t nrounds; /* rounds begun; round r uses rounds[r % DDP_ROUNDS] */
    void *anchor;    /* timer recorded on the idle compute stream at anchor_us (the trace's
                        device times are anchor_us + the time since it) */
    int64_t anchor_us;
} ddp_dev;

struct hoop_ddp {
    hoop_comm *comm;
    int holds_comm;             /* counted in comm->users (hoop_ddp_init), until hoop_ddp_destroy */
    hoop_device device;         /* the parameters' */
    const struct hoop__kern *k; /* that device's table */
    ddp_dev *dev;               /* cuda only; NULL on the cpu */
    hoop_ddp_config cfg;
    hoop_tensor **params;
    size_t nparams;
    int *order;     /* parameter indices in bucket order (reverse registration) */
    int *bucket_of; /* parameter -> bucket */
    size_t *offset; /* parameter -> float offset inside its bucket */
    char *ready;    /* parameter -> ready in this step */
    ddp_hook_ctx *hooks;
    ddp_bucket *buckets;
    int nbuckets;
    int next_launch; /* buckets launch strictly in index order */
    int sync;
    float *control;         /* the last bucket's last float but one: ranks with data in
                               this round (device memory on cuda) */
    float *fault;           /* the last bucket's last float: ranks whose pass failed before
                               the bucket went (read on the cpu only) */
    int64_t t_last_hook_us; /* when the last grad-ready hook of this step fired */
    hoop_status hook_st;    /* first error raised inside a hook (hooks return void) */
    char hook_msg[512];
    int in_backward; /* inside hoop_ddp_backward: its hooks may launch buckets */
    int in_call;     /* inside hoop_ddp_backward or hoop_ddp_join (any mode): not destroyed */
    /* A grad-ready hook fired outside hoop_ddp_backward (a plain hoop_backward on these
     * parameters): its gradients were not averaged. The name of the first such parameter,
     * reported as HOOP_ERR_USAGE by the next hoop_ddp_backward, _join, _wait or _destroy. */
    char stray[HOOP_TENSOR_NAME_MAX + 2];
    hoop_ddp_stats stats;
    /* trace */
    int tracing;
    char *trace_path;
    ddp_event *events;
    size_t nevents, cap_events;
};

/* Adds one event (tracing on only). */
void hoop__ddp_trace_add(struct hoop_ddp *ddp, const char *name, int64_t b, int64_t e, int lane);

/* Length of the union of n intervals [b[i], e[i]] sorted by start, and of its part inside
 * [lo, hi] (any unit). */
void hoop__ddp_overlap(const double *b, const double *e, int n, double lo, double hi, double *total,
                       double *inside);

// ----- cuda (ddp_dev.c): the buckets' all-reduces ordered on the device
/*
 * A round on cuda: dev_begin records the backward pass's start on the compute stream;
 * each bucket's launch records an event after its gradients' kernels, which the bucket
 * stream waits for on the device before the bucket's stream-form all-reduce (the calling
 * thread never waits); dev_backward_end marks the pass's end; dev_end makes the compute
 * stream wait for the last bucket, downloads the control float and records finish. The
 * device times of a round are read (dev_harvest) when its finish has run: at the start
 * of the round that reuses its events, or whenever the host waits for all of them.
 */
hoop_status hoop__ddp_dev_init(struct hoop_ddp *ddp);
/* Waits for what is on the device (keeping the first error in *st) and frees it. */
void hoop__ddp_dev_destroy(struct hoop_ddp *ddp, hoop_status *st);
/* Starts a round (join: a join round), reading older rounds' times first. */
hoop_status hoop__ddp_dev_begin(struct hoop_ddp *ddp, int join);
hoop_status hoop__ddp_dev_launch(struct hoop_ddp *ddp, int b);
hoop_status hoop__ddp_dev_backward_end(struct hoop_ddp *ddp);
hoop_status hoop__ddp_dev_end(struct hoop_ddp *ddp);
/* The host waits for the round just ended and reads its control float. */
hoop_status hoop__ddp_dev_control(struct hoop_ddp *ddp, float *v);
/* The host waits for every round and reads their times (HOOP_TIMEOUT each). */
hoop_status hoop__ddp_dev_harvest_all(struct hoop_ddp *ddp);

HOOP_EXTERN_C_END

#endif /* HOOP_DDP_INTERNAL_H */
