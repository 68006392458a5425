/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/ddp/ddp_internal.h -- the hoop_ddp object shared by ddp.c and trace.c (internal).
 */
#ifndef HOOP_DDP_INTERNAL_H
#define HOOP_DDP_INTERNAL_H

#include "hoop/ddp.h"

HOOP_EXTERN_C_BEGIN

/* One bucket: a contiguous f32 buffer holding the gradients of nparams parameters. */
typedef struct ddp_bucket {
    float *buf;         /* count floats from hoop_comm_alloc_shared; gradients are views */
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

typedef struct ddp_event {
    char name[40];
    int64_t begin_us, end_us;
    int32_t lane; /* 0 = compute, 1 = communication */
    int32_t pad_;
} ddp_event;

struct hoop_ddp {
    hoop_comm *comm;
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
    float *control;         /* the last bucket's last float: ranks with data in this round */
    int64_t t_last_hook_us; /* when the last grad-ready hook of this step fired */
    hoop_status hook_st;    /* first error raised inside a hook (hooks return void) */
    char hook_msg[512];
    hoop_ddp_stats stats;
    /* trace */
    int tracing;
    char *trace_path;
    ddp_event *events;
    size_t nevents, cap_events;
};

/* Adds one event (tracing on only). */
void hoop__ddp_trace_add(struct hoop_ddp *ddp, const char *name, int64_t b, int64_t e, int lane);

HOOP_EXTERN_C_END

#endif /* HOOP_DDP_INTERNAL_H */
