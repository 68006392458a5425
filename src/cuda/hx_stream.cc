/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/hx_stream.cc -- the host execution layer's streams and events (see
 * src/cuda/hx.h for what it models): lazy queues, streams, events and their timing,
 * stream memory operations.
 *
 * Owns: per process, the lazy streams and the log of stream memory writes.
 * Thread-safety: the queues are under one recursive lock (lazy_mu), a stream's waits and
 * an event's record under mem_mu, and a stream's work counter is atomic.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "cuda/hx_int.h"

using namespace hoop_hx;

/* A lazy stream's queued work: op runs once the stream has run seq pieces of work
 * (hoop__hx_stream_op's and waits: the next piece's number, so they run before it). */
struct hx_queued {
    unsigned long seq;
    std::function<void()> op;
    std::function<bool()> ready; /* empty, or true once op may run (a wait's condition) */
    /* event timing (hx.h): when the host issued it, and (a wait) the device time its
     * condition became true (empty: none) */
    int64_t issued_ns;
    std::function<int64_t()> since;
};

/* An event record's device time (ns, CLOCK_MONOTONIC), shared by the event and the waits
 * on that record; 0 while the work before the record has not run. */
typedef std::shared_ptr<std::atomic<int64_t>> hx_stamp;

/* A record behind queued work: stamped once the stream has run its first at pieces. */
struct hx_pending_stamp {
    unsigned long at;
    int64_t issued_ns;
    hx_stamp cell;
};

struct hoop__hx_stream {
    int device; /* -1: the legacy stream, which is every device's */
    unsigned flags;
    std::atomic<unsigned long> issued; /* work issued to it so far */
    /* the producers it waited for and how much of their work (under mem_mu) */
    const hoop__hx_stream *dep[8];
    unsigned long dep_at[8];
    int ndeps;
    bool lazy;               /* made while lazy streams were on (never changes) */
    int conn;                /* its hardware queue (hx.h), -1 when they are not modeled */
    std::deque<hx_queued> q; /* lazy or held: what has not run yet (under lazy_mu) */
    /* A stream that is not lazy but holds queued work behind a wait whose condition was
     * not met when it was issued (hoop__hx_stream_wait_value32, or a wait for an event of
     * such a stream): what is issued to it queues, as on a lazy stream, until the queue
     * has run (set and cleared under lazy_mu). */
    std::atomic<bool> held;
    /* event timing (hx.h): the device time at which the work run so far finished, and
     * the records waiting for queued work to run (under lazy_mu) */
    std::atomic<int64_t> vt;
    std::vector<hx_pending_stamp> stamps;
};

struct hoop__hx_event {
    int device;
    const hoop__hx_stream *stream; /* where it was last recorded, or NULL */
    unsigned long at;              /* how much of that stream's work it covers */
    unsigned flags;                /* cudaEventDisableTiming: no stamp is kept */
    hx_stamp stamp;                /* the last record's device time (NULL before the first) */
};

namespace hoop_hx
{

hoop__hx_stream legacy = {-1, 0, {0}, {}, {}, 0, false, -1, {}, {false}, {0}, {}};

hoop__hx_stream *stream_of(cudaStream_t s)
{
    return s ? s : &legacy;
}

// ----------------------------------------------------------------- lazy streams (hx.h)

/* Held while work is queued or run: running a queued wait runs another stream's queue,
 * so it is recursive. Taken before mem_mu, never while holding it. */
std::recursive_mutex lazy_mu;
std::vector<hoop__hx_stream *> lazy_streams; /* under lazy_mu */
std::atomic<int> lazy_mode{-1};              /* -1: TEST_HX_LAZY not read yet */
thread_local int draining;                   /* > 0: running queued work (issue() counts none) */

int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The stream's device time is at least t (work that ran when it was issued). */
void vt_raise(hoop__hx_stream *s, int64_t t)
{
    int64_t v = s->vt.load();
    while (v < t && !s->vt.compare_exchange_weak(v, t)) continue;
}

void issue(cudaStream_t s)
{
    if (draining) return;
    stream_of(s)->issued++;
    vt_raise(stream_of(s), now_ns());
}

int lazy_now(void)
{
    int m = lazy_mode.load();
    if (m < 0) {
        const char *e = getenv("TEST_HX_LAZY");
        int want = e && strcmp(e, "1") == 0;
        lazy_mode.compare_exchange_strong(m, want);
        m = lazy_mode.load();
    }
    return m;
}

bool lazy_run(hoop__hx_stream *s, unsigned long at);

/* Hardware queues (hx.h): CUDA_DEVICE_MAX_CONNECTIONS, read when the first stream is
 * made, or hoop__hx_set_queues's; 0 when unset or out of CUDA's range 1..32 (not
 * modeled). */
std::atomic<int> nqueues{-1}; /* -1: not read yet */

int queues(void)
{
    int n = nqueues.load();
    if (n < 0) {
        const char *e = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
        long v = e ? strtol(e, NULL, 10) : 0;
        int want = v >= 1 && v <= 32 ? (int)v : 0;
        nqueues.compare_exchange_strong(n, want);
        n = nqueues.load();
    }
    return n;
}

/* Another stream on s's hardware queue that holds it: one that is not lazy and is held
 * behind a wait (under lazy_mu; held streams are in lazy_streams), or NULL. */
hoop__hx_stream *queue_holder(const hoop__hx_stream *s)
{
    if (s->conn < 0) return NULL;
    for (size_t i = 0; i < lazy_streams.size(); i++) {
        hoop__hx_stream *t = lazy_streams[i];
        if (t != s && t->conn == s->conn && !t->lazy && t->held.load()) return t;
    }
    return NULL;
}

/* Whether work issued to s queues (a lazy stream, or one held behind a wait, its own or
 * another's on its hardware queue). */
int is_lazy(cudaStream_t s)
{
    const hoop__hx_stream *st = stream_of(s);
    if (st->lazy || st->held.load()) return 1;
    if (st->conn < 0) return 0;
    std::lock_guard<std::recursive_mutex> g(lazy_mu);
    return queue_holder(st) != NULL;
}

/* Queues op on stream s (lazy, or held; NULL is the legacy stream): as one more piece of
 * work (counted), or before the next one. With ready, op runs only once ready() is true
 * (a wait): on a stream that is neither lazy nor held, op runs at once when it may, else
 * it is queued and holds the stream (what is issued after it queues behind it). */
void lazy_push(hoop__hx_stream *s, std::function<void()> op, bool counted,
               std::function<bool()> ready, std::function<int64_t()> since)
{
    s = stream_of(s);
    std::lock_guard<std::recursive_mutex> g(lazy_mu);
    hoop__hx_stream *t = s->lazy || s->held.load() ? NULL : queue_holder(s);
    if (t) { /* behind what t has issued so far, as its hardware queue runs them in order */
        unsigned long upto = t->issued.load();
        std::function<bool()> own = std::move(ready);
        ready = [t, upto, own]() {
            static thread_local int depth; /* queues that hold each other's: give up */
            if (depth > 4) return false;
            depth++;
            lazy_run(t, upto);
            depth--;
            return (t->q.empty() || t->q.front().seq > upto) && (!own || own());
        };
    }
    if (!s->lazy && !s->held.load() && (!ready || ready())) { /* nothing queued: run it */
        draining++;
        op();
        draining--;
        if (counted) s->issued++;
        vt_raise(s, now_ns());
        return;
    }
    unsigned long seq = counted ? ++s->issued : s->issued.load() + 1;
    try {
        s->q.push_back(hx_queued{seq, std::move(op), std::move(ready), now_ns(), std::move(since)});
        if (!s->lazy && !s->held.load()) {
            s->held.store(true);
            bool known = false;
            for (size_t i = 0; i < lazy_streams.size(); i++) known = known || lazy_streams[i] == s;
            if (!known) lazy_streams.push_back(s); /* so device-wide waits run it */
        }
    } catch (...) {
        fail(cudaErrorMemoryAllocation, "lazy stream: no memory to queue an operation");
    }
}

/* Stamps the records behind queued work that covers fewer than upto pieces of s's work,
 * which have all run: with the stream's device time, or the record's own issue (under
 * lazy_mu). */
void stamp_before(hoop__hx_stream *s, unsigned long upto)
{
    for (size_t i = 0; i < s->stamps.size();) {
        if (s->stamps[i].at >= upto) {
            i++;
            continue;
        }
        int64_t v = s->vt.load();
        s->stamps[i].cell->store(v > s->stamps[i].issued_ns ? v : s->stamps[i].issued_ns);
        s->stamps.erase(s->stamps.begin() + (long)i);
    }
}

/* Runs s's queue up to its at-th piece of work (all of it for at == ~0ul). Returns true
 * when it got there, false when a wait at the front of the queue cannot pass yet (its
 * condition is false: the rest stays queued). Each piece's device time (hx.h, event
 * timing) starts when the stream finished the one before, it was issued, and its
 * condition became true, whichever is last, and lasts as long as it runs here. */
bool lazy_run(hoop__hx_stream *s, unsigned long at)
{
    s = stream_of(s);
    if (!s->lazy && !s->held.load()) return true;
    std::lock_guard<std::recursive_mutex> g(lazy_mu);
    draining++;
    bool reached = true;
    while (!s->q.empty() && (at == ~0ul || s->q.front().seq <= at)) {
        if (s->q.front().ready && !s->q.front().ready()) {
            reached = false;
            break;
        }
        hx_queued q = std::move(s->q.front());
        s->q.pop_front();
        stamp_before(s, q.seq);
        int64_t start = s->vt.load(), since = q.since ? q.since() : 0;
        start = start > q.issued_ns ? start : q.issued_ns;
        start = start > since ? start : since;
        int64_t t0 = now_ns();
        q.op();
        s->vt.store(start + (now_ns() - t0));
    }
    stamp_before(s, s->q.empty() ? ~0ul : s->q.front().seq);
    if (!s->lazy && s->q.empty()) s->held.store(false);
    draining--;
    return reached;
}

void nap(void)
{
    struct timespec ts = {0, 50 * 1000};
    nanosleep(&ts, NULL);
}

/* lazy_run until it gets there: the host waits (outside lazy_mu between tries, so the
 * thread that will meet a wait's condition can run). As CUDA's, this wait has no
 * deadline: a condition nobody meets hangs it. */
void lazy_wait(hoop__hx_stream *s, unsigned long at)
{
    while (!lazy_run(s, at)) nap();
}

/* Runs every lazy or held stream's queue (a device-wide synchronisation), waiting as
 * lazy_wait does for the waits that cannot pass yet. */
void lazy_run_all(void)
{
    for (;;) {
        bool stuck = false;
        {
            std::lock_guard<std::recursive_mutex> g(lazy_mu);
            for (bool more = true; more;) { /* again while any ran: a wait may pass now */
                more = false;
                stuck = false;
                for (size_t i = 0; i < lazy_streams.size(); i++) {
                    size_t before = lazy_streams[i]->q.size();
                    if (!lazy_run(lazy_streams[i], ~0ul)) stuck = true;
                    if (lazy_streams[i]->q.size() != before) more = true;
                }
            }
        }
        if (!stuck) return;
        nap();
    }
}

/* Runs what event e covers: its stream's work up to the record; false when a wait in
 * that work cannot pass yet. */
bool lazy_run_event(cudaEvent_t e)
{
    hoop__hx_stream *st;
    unsigned long at;
    {
        std::lock_guard<std::mutex> g(mem_mu);
        st = (hoop__hx_stream *)e->stream;
        at = e->at;
    }
    return st ? lazy_run(st, at) : true;
}

/* CUDA: "a kernel launch will fail if it is issued to a stream that is not associated
 * to the current device". */
int stream_on_current_device(const char *kernel, cudaStream_t s)
{
    if (!s || s->device == cur_dev) return 1;
    fail(cudaErrorInvalidResourceHandle,
         "%s: launched on a stream of device %d from a thread whose current device is %d", kernel,
         s->device, cur_dev);
    return 0;
}

} // namespace hoop_hx

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    if (host_fn_blocks("cudaStreamCreateWithFlags")) return cudaErrorNotPermitted;
    *s = NULL;
    if (!valid_device("cudaStreamCreateWithFlags", cur_dev)) return cudaPeekAtLastError();
    hoop__hx_stream *st = new (std::nothrow) hoop__hx_stream();
    if (!st) {
        fail(cudaErrorMemoryAllocation, "cudaStreamCreateWithFlags: no memory");
        return cudaErrorMemoryAllocation;
    }
    st->device = cur_dev;
    st->flags = flags;
    st->lazy = lazy_now() != 0;
    static std::atomic<unsigned> made{0}; /* round robin over the hardware queues */
    st->conn = queues() ? (int)(made++ % (unsigned)queues()) : -1;
    if (st->lazy) {
        std::lock_guard<std::recursive_mutex> g(lazy_mu);
        try {
            lazy_streams.push_back(st);
        } catch (...) {
            delete st;
            fail(cudaErrorMemoryAllocation, "cudaStreamCreateWithFlags: no memory");
            return cudaErrorMemoryAllocation;
        }
    }
    *s = st;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (host_fn_blocks("cudaStreamDestroy")) return cudaErrorNotPermitted;
    if (!s) {
        fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: the legacy stream");
        return cudaErrorInvalidResourceHandle;
    }
    if (is_lazy(s)) lazy_run_all(); /* its work completes (and others' waits for it first) */
    {
        std::lock_guard<std::recursive_mutex> g(lazy_mu);
        for (size_t i = 0; i < lazy_streams.size(); i++)
            if (lazy_streams[i] == s) lazy_streams.erase(lazy_streams.begin() + (long)i);
    }
    delete s;
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    if (host_fn_blocks("cudaEventCreateWithFlags")) return cudaErrorNotPermitted;
    *e = NULL;
    if (!valid_device("cudaEventCreateWithFlags", cur_dev)) return cudaPeekAtLastError();
    hoop__hx_event *ev = new (std::nothrow) hoop__hx_event();
    if (!ev) {
        fail(cudaErrorMemoryAllocation, "cudaEventCreateWithFlags: no memory");
        return cudaErrorMemoryAllocation;
    }
    ev->device = cur_dev;
    ev->flags = flags;
    *e = ev;
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    if (host_fn_blocks("cudaEventDestroy")) return cudaErrorNotPermitted;
    if (!e) {
        fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy: NULL event");
        return cudaErrorInvalidResourceHandle;
    }
    delete e;
    return cudaSuccess;
}

/* CUDA: "cudaEventRecord() will fail if the input event and input stream are associated
 * to different devices" (the legacy stream is the current device's). */
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    if (host_fn_blocks("cudaEventRecord")) return cudaErrorNotPermitted;
    if (sticky != cudaSuccess) return sticky;
    const hoop__hx_stream *st = stream_of(s);
    int sdev = st->device < 0 ? cur_dev : st->device;
    if (!e || e->device != sdev) {
        fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: %s",
             e ? "event and stream of different devices" : "NULL event");
        return cudaErrorInvalidResourceHandle;
    }
    hx_stamp cell;
    try {
        cell = std::make_shared<std::atomic<int64_t>>(0);
    } catch (...) {
        fail(cudaErrorMemoryAllocation, "cudaEventRecord: no memory");
        return cudaErrorMemoryAllocation;
    }
    unsigned long at;
    {
        std::lock_guard<std::recursive_mutex> g(lazy_mu);
        hoop__hx_stream *w = stream_of(s);
        /* A record covers what was queued before it: a wait queued last (not counted as
         * work) is made part of one more piece, which the record then covers. */
        if (is_lazy(s) && !w->q.empty() && w->q.back().seq > w->issued.load())
            lazy_push(
                w, [] {}, true);
        at = w->issued.load();
        if (!is_lazy(s) || w->q.empty()) {
            cell->store(now_ns()); /* everything before it has run */
        } else {
            try {
                w->stamps.push_back(hx_pending_stamp{at, now_ns(), cell});
            } catch (...) {
                fail(cudaErrorMemoryAllocation, "cudaEventRecord: no memory");
                return cudaErrorMemoryAllocation;
            }
        }
    }
    std::lock_guard<std::mutex> g(mem_mu);
    e->stream = st;
    e->at = at;
    e->stamp = cell;
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    if (host_fn_blocks("cudaEventQuery")) return cudaErrorNotPermitted;
    if (!e) {
        fail(cudaErrorInvalidResourceHandle, "cudaEventQuery: NULL event");
        return cudaErrorInvalidResourceHandle;
    }
    /* the host asks: the work it covers runs now, up to a wait that cannot pass yet */
    if (!lazy_run_event(e)) return cudaErrorNotReady;
    return sticky;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    if (host_fn_blocks("cudaEventSynchronize")) return cudaErrorNotPermitted;
    if (hoop__hx_capture_blocks("cudaEventSynchronize")) return cudaErrorStreamCaptureUnsupported;
    cudaError_t r;
    while ((r = cudaEventQuery(e)) == cudaErrorNotReady) nap();
    return r;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    if (host_fn_blocks("cudaStreamWaitEvent")) return cudaErrorNotPermitted;
    (void)flags;
    if (sticky != cudaSuccess) return sticky;
    if (!e) {
        fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: NULL event");
        return cudaErrorInvalidResourceHandle;
    }
    hoop__hx_stream *w = stream_of(s);
    hoop__hx_stream *p;
    unsigned long at;
    hx_stamp cell;
    {
        std::lock_guard<std::mutex> g(mem_mu);
        p = (hoop__hx_stream *)e->stream;
        at = e->at;
        cell = e->stamp;
    }
    /* A lazy waiter runs the producer up to the event when it reaches the wait; one that
     * is not lazy does at once, and is held behind the wait when the producer cannot get
     * there yet (a wait of its own that has not passed). A queued wait passes, in device
     * time, when the record it waits for was stamped. */
    auto since = [cell]() -> int64_t { return cell ? cell->load() : 0; };
    if (p && is_lazy(p) && is_lazy(w) && !hoop__hx_capturing(s))
        lazy_push(
            w, [] {}, false, [p, at]() { return lazy_run(p, at); }, since);
    else if (p && is_lazy(p) && !lazy_run(p, at) && !hoop__hx_capturing(s))
        lazy_push(
            w, [] {}, false, [p, at]() { return lazy_run(p, at); }, since);
    std::lock_guard<std::mutex> g(mem_mu);
    n_wait++;
    if (!e->stream) return cudaSuccess; /* never recorded: nothing to wait for */
    int i = 0;
    while (i < w->ndeps && w->dep[i] != e->stream) i++;
    if (i == w->ndeps) {
        if (i == 8) return cudaSuccess; /* more producers than the model keeps: not tracked */
        w->dep[i] = e->stream;
        w->dep_at[i] = 0;
        w->ndeps++;
    }
    if (e->at > w->dep_at[i]) w->dep_at[i] = e->at;
    return cudaSuccess;
}

// ----------------------------------------------------------------- stream memory operations

namespace
{
/* The last HX_WRITES stores of hoop__hx_write_value32 (address, value, when), for the
 * device time at which a wait for a value passed. */
#define HX_WRITES 256
struct hx_write {
    const uint32_t *addr;
    uint32_t value;
    int64_t ns;
};
std::mutex write_mu;
hx_write writes[HX_WRITES]; /* under write_mu */
unsigned long nwrites;

/* When *addr first reached value (GEQ: cyclic comparison; EQ: equal) by a logged store;
 * now when no logged store did (a plain store, or one that fell out of the log). */
int64_t written_at(const uint32_t *addr, uint32_t value, unsigned flags)
{
    int64_t best = 0;
    std::lock_guard<std::mutex> g(write_mu);
    unsigned long n = nwrites < HX_WRITES ? nwrites : HX_WRITES;
    for (unsigned long i = 0; i < n; i++) {
        const hx_write &w = writes[i];
        bool met = flags == HOOP__HX_WAIT_EQ ? w.value == value : (int32_t)(w.value - value) >= 0;
        if (w.addr == addr && met && (best == 0 || w.ns < best)) best = w.ns;
    }
    return best ? best : now_ns();
}
} // namespace

cudaError_t hoop__hx_stream_wait_value32(cudaStream_t s, const uint32_t *addr, uint32_t value,
                                         unsigned flags)
{
    static const int no_memops = [] {
        const char *e = getenv("TEST_HX_NO_STREAM_MEMOPS");
        return e && strcmp(e, "1") == 0;
    }();
    if (host_fn_blocks("a stream wait for a value")) return cudaErrorNotPermitted;
    if (sticky != cudaSuccess) return sticky;
    if (no_memops) return cudaErrorNotSupported; /* a driver without them (hx.h) */
    if (!addr || (flags != HOOP__HX_WAIT_GEQ && flags != HOOP__HX_WAIT_EQ)) {
        fail(cudaErrorInvalidValue, "hoop__hx_stream_wait_value32: %s",
             addr ? "flags other than GEQ or EQ" : "NULL address");
        return cudaErrorInvalidValue;
    }
    std::function<bool()> ready = [addr, value, flags]() {
        uint32_t v = __atomic_load_n(addr, __ATOMIC_ACQUIRE);
        return flags == HOOP__HX_WAIT_EQ ? v == value : (int32_t)(v - value) >= 0;
    };
    if (hoop__hx_capturing(s)) {
        hoop__hx_record_wait(s, std::move(ready));
        return cudaSuccess;
    }
    lazy_push(
        s, [] {}, true, std::move(ready),
        [addr, value, flags]() { return written_at(addr, value, flags); });
    return cudaSuccess;
}

void hoop__hx_write_value32(uint32_t *addr, uint32_t value)
{
    {
        std::lock_guard<std::mutex> g(write_mu);
        writes[nwrites++ % HX_WRITES] = hx_write{addr, value, now_ns()};
    }
    __atomic_store_n(addr, value, __ATOMIC_RELEASE);
}

// ----------------------------------------------------------------- event timing

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    if (!ms || !start || !end) {
        fail(cudaErrorInvalidValue, "cudaEventElapsedTime: NULL argument");
        return cudaErrorInvalidValue;
    }
    if ((start->flags | end->flags) & cudaEventDisableTiming) {
        fail(cudaErrorInvalidResourceHandle,
             "cudaEventElapsedTime: an event made with cudaEventDisableTiming");
        return cudaErrorInvalidResourceHandle;
    }
    hx_stamp a, b;
    {
        std::lock_guard<std::mutex> g(mem_mu);
        a = start->stamp;
        b = end->stamp;
    }
    if (!a || !b) {
        fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event never recorded");
        return cudaErrorInvalidResourceHandle;
    }
    /* as CUDA: not ready (and no error kept) while either has not completed */
    cudaError_t r = cudaEventQuery(start);
    if (r == cudaSuccess) r = cudaEventQuery(end);
    if (r != cudaSuccess) return r;
    if (a->load() == 0 || b->load() == 0) return cudaErrorNotReady;
    *ms = (float)((double)(b->load() - a->load()) / 1e6);
    return cudaSuccess;
}

extern "C" void hoop__hx_set_lazy(int on)
{
    lazy_mode.store(on != 0);
}

extern "C" void hoop__hx_set_queues(int n)
{
    nqueues.store(n >= 1 && n <= 32 ? n : 0);
}

extern "C" unsigned long hoop__hx_queued(cudaStream_t s)
{
    if (!is_lazy(s)) return 0;
    std::lock_guard<std::recursive_mutex> g(lazy_mu);
    return (unsigned long)stream_of(s)->q.size();
}

extern "C" int hoop__hx_stream_ordered(cudaStream_t waiter, cudaStream_t producer)
{
    const hoop__hx_stream *w = stream_of(waiter), *p = stream_of(producer);
    std::lock_guard<std::mutex> g(mem_mu);
    unsigned long at = 0;
    for (int i = 0; i < w->ndeps; i++)
        if (w->dep[i] == p) at = w->dep_at[i];
    return at >= p->issued;
}
