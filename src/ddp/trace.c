/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/ddp/trace.c -- per-rank DDP events, merged by rank 0 into one Chrome trace.
 *
 * Owns the event buffer of a hoop_ddp. Events are fixed-size records, so flushing is
 * two all-gathers (counts, then records padded to the largest count). The output is the
 * Trace Event Format's JSON object form ("traceEvents", complete events "ph":"X" with
 * microsecond "ts"/"dur"), read by chrome://tracing and Perfetto; pid = rank, tid = a
 * row (enum ddp_lane, each named by a thread_name record): on the cpu the training
 * thread (0) and the bucket all-reduces (1), host times; on cuda the training thread
 * (0, host times), the compute stream (2) and the bucket stream (3), device times placed
 * on the host's clock (ddp_dev.c). Single-threaded, like the hoop_ddp that owns it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomic_file.h"
#include "core/check.h"
#include "core/fault.h"
#include "ddp/ddp_internal.h"
#include "hoop/collectives.h"

#define TRACE_MAX_EVENTS (1u << 16)

void hoop__ddp_trace_add(struct hoop_ddp *ddp, const char *name, int64_t b, int64_t e, int lane)
{
    if (!ddp->tracing) return;
    if (ddp->nevents == ddp->cap_events) {
        size_t cap = ddp->cap_events ? ddp->cap_events * 2 : 256;
        if (cap > TRACE_MAX_EVENTS) return; /* full: drop */
        ddp_event *ev = realloc(ddp->events, cap * sizeof(*ev));
        if (!ev) return;
        ddp->events = ev;
        ddp->cap_events = cap;
    }
    ddp_event *ev = &ddp->events[ddp->nevents++];
    memset(ev, 0, sizeof(*ev));
    snprintf(ev->name, sizeof(ev->name), "%s", name);
    ev->begin_us = b;
    ev->end_us = e > b ? e : b;
    ev->lane = lane;
}

HOOP_API void hoop_ddp_trace_event(hoop_ddp *ddp, const char *name, int64_t begin_us,
                                   int64_t end_us)
{
    if (ddp && name) hoop__ddp_trace_add(ddp, name, begin_us, end_us, 0);
}

HOOP_API hoop_status hoop_ddp_trace_enable(hoop_ddp *ddp, const char *path)
{
    if (!ddp) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_ddp_trace_enable: ddp is NULL");
    free(ddp->trace_path);
    ddp->trace_path = NULL;
    ddp->tracing = path != NULL;
    if (path && !(ddp->trace_path = strdup(path)))
        return HOOP_ERROR(HOOP_ERR_NOMEM, "trace path of %zu bytes", strlen(path));
    return HOOP_OK;
}

/* JSON-escapes the few characters event names could contain. */
static void put_name(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if ((unsigned char)*s >= 0x20) fputc(*s, f);
    }
}

/* The rows rank r's events use, each named once. */
static void put_lanes(FILE *f, int r, const ddp_event *ev, int64_t n)
{
    static const char *const names[DDP_LANES] = {
        [DDP_LANE_HOST] = "training thread (host)",
        [DDP_LANE_ALLREDUCE] = "bucket all-reduces (host)",
        [DDP_LANE_COMPUTE_STREAM] = "compute stream (device)",
        [DDP_LANE_BUCKET_STREAM] = "bucket stream (device)"};
    int used[DDP_LANES] = {0};
    for (int64_t i = 0; i < n; i++)
        if (ev[i].lane >= 0 && ev[i].lane < DDP_LANES) used[ev[i].lane] = 1;
    for (int l = 0; l < DDP_LANES; l++)
        if (used[l])
            fprintf(f,
                    ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                    "\"args\":{\"name\":\"%s\"}}",
                    r, l, names[l]);
}

/* The Chrome trace of ws ranks' events (rank r's counts[r] events at all + r * stride),
 * built in memory and written to path whole (hoop__atomic_write: a device or FIFO at
 * path is refused, not replaced; a kill while writing leaves the old trace). */
static hoop_status write_json(const char *path, const ddp_event *all, const int64_t *counts, int ws,
                              size_t stride)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return HOOP_ERROR(HOOP_ERR_NOMEM, "HOOP_TRACE_FILE '%s': open_memstream failed", path);
    fputs("{\"traceEvents\":[\n", f);
    int first = 1;
    for (int r = 0; r < ws; r++) {
        fprintf(
            f,
            "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}",
            first ? "" : ",\n", r, r);
        first = 0;
        put_lanes(f, r, &all[(size_t)r * stride], counts[r]);
        for (int64_t i = 0; i < counts[r]; i++) {
            const ddp_event *ev = &all[(size_t)r * stride + (size_t)i];
            fputs(",\n{\"name\":\"", f);
            put_name(f, ev->name);
            fprintf(f, "\",\"ph\":\"X\",\"ts\":%lld,\"dur\":%lld,\"pid\":%d,\"tid\":%d}",
                    (long long)ev->begin_us, (long long)(ev->end_us - ev->begin_us), r, ev->lane);
        }
    }
    fputs("\n],\"displayTimeUnit\":\"ms\"}\n", f);
    int bad = ferror(f);
    hoop_status st = HOOP_OK;
    if (fclose(f) != 0 || bad)
        st = HOOP_ERROR(HOOP_ERR_NOMEM, "HOOP_TRACE_FILE '%s': building the trace in memory failed",
                        path);
    else
        st = hoop__atomic_write("HOOP_TRACE_FILE", path, buf, len, HOOP__FAULT_NONE);
    free(buf);
    return st;
}

HOOP_API hoop_status hoop_ddp_trace_flush(hoop_ddp *ddp)
{
    if (!ddp) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_ddp_trace_flush: ddp is NULL");
    int ws = hoop_comm_world_size(ddp->comm), rank = hoop_comm_rank(ddp->comm);
    int64_t *counts = NULL, maxc = 0;
    ddp_event *pad = NULL, *all = NULL;
    hoop_status st;
    /* cuda: the rounds still on the device first (their events are its times) */
    if (hoop__ddp_dev_harvest_all(ddp) != HOOP_OK)
        HOOP_WARN("hoop_ddp_trace_flush: the last rounds' device times are left out: %s",
                  hoop_last_error());
    int64_t mine = (int64_t)ddp->nevents;
    HOOP_CHECK(hoop__calloc(&counts, (size_t)ws));
    HOOP_CHECK_GOTO(hoop_allgather(ddp->comm, &mine, counts, 1, HOOP_DTYPE_I64, NULL), st, out);
    for (int r = 0; r < ws; r++) maxc = counts[r] > maxc ? counts[r] : maxc;
    st = HOOP_OK;
    if (maxc == 0) goto out; /* nobody traced: nothing to write */
    size_t stride = (size_t)maxc;
    HOOP_CHECK_GOTO(hoop__calloc(&pad, stride), st, out);
    HOOP_CHECK_GOTO(hoop__calloc(&all, stride * (size_t)ws), st, out);
    if (ddp->nevents) memcpy(pad, ddp->events, ddp->nevents * sizeof(*pad));
    HOOP_CHECK_GOTO(hoop_allgather(ddp->comm, pad, all, stride * sizeof(*pad), HOOP_DTYPE_U8, NULL),
                    st, out);
    if (rank == 0 && ddp->trace_path && *ddp->trace_path)
        st = write_json(ddp->trace_path, all, counts, ws, stride);
    ddp->nevents = 0;
out:
    free(counts);
    free(pad);
    free(all);
    return st;
}
