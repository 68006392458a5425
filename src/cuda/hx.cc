/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/hx.cc -- the host execution layer's runtime (see src/cuda/hx.h for what it
 * models and what it does not): launches, the fiber scheduler of synchronising launches,
 * barriers and shuffles, the last error, and the stand-ins for devices, memory, streams
 * and events.
 *
 * A synchronising launch gives each thread of a block a fiber (on a stack from this OS
 * thread's pool, 256 KiB each). The scheduler sweeps the fibers in linear thread order,
 * running each runnable one until it waits at a barrier or returns; after a sweep it
 * releases the block barrier when every live thread waits there, and each warp whose
 * live lanes all wait at a shuffle (doing the exchange); when nothing can run and nothing
 * can be released, the block deadlocked.
 *
 * Fibers persist: one that has run a thread's body to its end parks (switches to the
 * scheduler as at a barrier) and, when entered again, runs the body of whichever thread
 * of this or a later block or launch it is given; it ends only when its OS thread exits
 * (pool_owner). Under ASan the switches are announced (__sanitizer_start_switch_fiber),
 * as its documentation asks of every stack switch, and a fiber that ended on every
 * thread's return made ASan map, clear and unmap a fake stack (where
 * detect_stack_use_after_return puts frames) per thread per block: 96% of
 * check_kern_cuda_a's time under ASan (284 s of CPU, 12 s with persistent fibers). A
 * parked fiber keeps its fake stack.
 *
 * Owns: per OS thread, the fiber pool, the dynamic shared memory buffer, the last error
 * and the current device; per process, the device count and the memory's accounting.
 * Thread-safety: the per-thread state is thread-local; the per-process state is under
 * one mutex (mem_mu), and a stream's work counter is atomic.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "cuda/hx_int.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define HX_ASAN 1
#else
#define HX_ASAN 0
#endif

/* On x86-64 a fiber switch is ours (hoop__hx_switch below): glibc's swapcontext and
 * getcontext save and restore the signal mask with a system call each time, which made
 * half of a kernel test's time (a 1024-block reduction switches millions of times).
 * Elsewhere, and under ThreadSanitizer (which knows swapcontext, not our switch), the
 * ucontext calls stay. */
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define HX_FAST_SWITCH 1
#else
#define HX_FAST_SWITCH 0
#endif

#define HX_STACK_BYTES (256 * 1024) /* a fiber's stack, above one guard page */
#define HX_MAX_THREADS 1024
#define HX_MAX_SMEM (48 * 1024)

thread_local const struct hoop__hx_view *hoop__hx_cur;

#if HX_FAST_SWITCH
/* hoop__hx_switch(save, to): saves the callee-saved registers, MXCSR and the x87 control
 * word on the current stack, stores its pointer in *save, and resumes the stack `to` (one
 * that it saved, or one init_fiber made). The System V x86-64 ABI (section 3.2.1) names
 * what a call must preserve: rbx, rbp, r12-r15, rsp, MXCSR's control bits and the x87
 * control word. hoop__hx_fiber_start is where a new fiber begins: fiber_run (r13) on the
 * fiber (r12); fiber_run never returns (a done fiber switches away for good). */
extern "C" void hoop__hx_switch(void **save, void *to);
extern "C" void hoop__hx_fiber_start(void);
__asm__(".text\n"
        ".globl hoop__hx_switch\n"
        ".hidden hoop__hx_switch\n"
        ".type hoop__hx_switch, @function\n"
        "hoop__hx_switch:\n"
        "  .cfi_startproc\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  subq $8, %rsp\n"
        "  stmxcsr (%rsp)\n"
        "  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n"
        "  fldcw 4(%rsp)\n"
        "  addq $8, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        "  .cfi_endproc\n"
        ".size hoop__hx_switch, .-hoop__hx_switch\n"
        ".globl hoop__hx_fiber_start\n"
        ".hidden hoop__hx_fiber_start\n"
        ".type hoop__hx_fiber_start, @function\n"
        "hoop__hx_fiber_start:\n"
        "  .cfi_startproc\n"
        "  .cfi_undefined rip\n"
        "  movq %r12, %rdi\n"
        "  callq *%r13\n"
        "  ud2\n"
        "  .cfi_endproc\n"
        ".size hoop__hx_fiber_start, .-hoop__hx_fiber_start\n");
#endif

namespace hoop_hx
{

enum fstate { F_RUN, F_BAR, F_SHFL, F_DONE };

struct fiber {
#if HX_FAST_SWITCH
    void *sp; /* its saved stack pointer while it is not running */
#else
    ucontext_t uc;
#endif
    char *stack;
    struct hoop__hx_view view;
    fstate state;         /* F_DONE: parked, ready for another thread */
    int line;             /* F_BAR: the __syncthreads' source line */
    int mode, arg, width; /* F_SHFL: the shuffle */
    unsigned mask;
    unsigned char in[8], out[8];
    size_t bytes;
};

struct launch {
    const char *kernel;
    void (*fn)(void *);
    void *arg;
    int sync;
    fiber *cur; /* the running fiber (sync), or NULL */
    int failed;
};

thread_local cudaError_t last_error = cudaSuccess;
/* An execution failure (cudaErrorLaunchFailure) stays, as CUDA's errors from 700 up do:
 * every later launch, copy and synchronisation returns it until cudaDeviceReset. */
thread_local cudaError_t sticky = cudaSuccess;
thread_local unsigned long launches; /* picks each block's sweep order */
thread_local char detail[256];
thread_local fiber *pool;
thread_local unsigned char *dyn;
thread_local size_t dyn_cap, dyn_bytes;
thread_local launch *running;
thread_local int ending; /* set while pool_owner ends the parked fibers */
#if HX_FAST_SWITCH
thread_local void *sched_sp; /* the scheduler's, while a fiber runs */
#else
thread_local ucontext_t sched_uc;
#endif
#if HX_ASAN
thread_local const void *sched_bottom; /* the scheduler's stack, as ASan reports it */
thread_local size_t sched_size;
#endif

void fail(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fail(cudaError_t e, const char *fmt, ...)
{
    if (running) running->failed = 1;
    if (e == cudaErrorLaunchFailure && sticky == cudaSuccess) sticky = e;
    if (last_error != cudaSuccess) return; /* the first failure is the one reported */
    last_error = e;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
}

/* > 0 while this thread runs a host function or a user object's destructor. */
thread_local int in_host_fn;

int host_fn_blocks(const char *call)
{
    if (!in_host_fn) return 0;
    fail(cudaErrorNotPermitted,
         "%s: called from a host function or a user object's destructor, which may not call "
         "CUDA",
         call);
    return 1;
}

void run_host_fn(cudaHostFn_t fn, void *data)
{
    in_host_fn++;
    fn(data);
    in_host_fn--;
}

/* Switches from the scheduler into f, and back when f waits or returns. */
void enter(fiber *f)
{
#if HX_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(&fake, f->stack, HX_STACK_BYTES);
#endif
    running->cur = f;
    hoop__hx_cur = &f->view;
#if HX_FAST_SWITCH
    hoop__hx_switch(&sched_sp, f->sp);
#else
    swapcontext(&sched_uc, &f->uc);
#endif
#if HX_ASAN
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
    running->cur = NULL;
}

/* Switches from the running fiber back to the scheduler (dying: it never resumes, and
 * under ASan its fake stack is freed). */
void leave(fiber *f, int dying)
{
    (void)dying;
#if HX_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(dying ? NULL : &fake, sched_bottom, sched_size);
#endif
#if HX_FAST_SWITCH
    hoop__hx_switch(&f->sp, sched_sp);
#else
    swapcontext(&f->uc, &sched_uc);
#endif
#if HX_ASAN
    __sanitizer_finish_switch_fiber(fake, &sched_bottom, &sched_size);
#endif
    hoop__hx_cur = &f->view;
}

void fiber_run(fiber *f)
{
#if HX_ASAN
    __sanitizer_finish_switch_fiber(NULL, &sched_bottom, &sched_size);
#endif
    for (;;) {
        running->fn(running->arg);
        f->state = F_DONE;
        leave(f, 0); /* parked; resumes as the next thread it is given */
        if (ending) leave(f, 1);
    }
}

#if !HX_FAST_SWITCH
void fiber_main(unsigned lo, unsigned hi)
{
    fiber_run((fiber *)(((uintptr_t)hi << 32) | (uintptr_t)lo));
}
#endif

int check_config(const char *k, dim3 g, dim3 b, size_t smem)
{
    unsigned long long threads = (unsigned long long)b.x * b.y * b.z;
    if (b.x == 0 || b.y == 0 || b.z == 0 || g.x == 0 || g.y == 0 || g.z == 0)
        fail(cudaErrorInvalidConfiguration,
             "%s: a zero dimension (grid %u x %u x %u, block %u x %u x %u)", k, g.x, g.y, g.z, b.x,
             b.y, b.z);
    else if (threads > HX_MAX_THREADS || b.x > 1024 || b.y > 1024 || b.z > 64)
        fail(cudaErrorInvalidConfiguration,
             "%s: block %u x %u x %u (%llu threads): at most 1024 threads, 1024 x 1024 x 64", k,
             b.x, b.y, b.z, threads);
    else if (g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535)
        fail(cudaErrorInvalidConfiguration, "%s: grid %u x %u x %u: at most 2^31-1 x 65535 x 65535",
             k, g.x, g.y, g.z);
    else if (smem > HX_MAX_SMEM)
        fail(cudaErrorInvalidValue, "%s: %zu bytes of dynamic shared memory, more than %d", k, smem,
             HX_MAX_SMEM);
    else
        return 1;
    return 0;
}

void view_of(struct hoop__hx_view *v, dim3 g, dim3 b, uint3 blk, unsigned t)
{
    v->gdim = g;
    v->bdim = b;
    v->block = blk;
    v->thread = uint3{t % b.x, (t / b.x) % b.y, t / (b.x * b.y)};
}

/* When its OS thread exits, ends the parked fibers (under ASan: so that each frees its
 * fake stack; ASan frees only the running context's) and frees the pool and its stacks.
 * A fiber abandoned at a barrier by a failed block keeps its fake stack (leaked). */
struct pool_owner {
    ~pool_owner()
    {
        if (!pool) return;
#if HX_ASAN
        launch L = {"(thread exit)", NULL, NULL, 1, NULL, 0};
        running = &L;
        ending = 1;
        for (unsigned i = 0; i < HX_MAX_THREADS; i++)
            if (pool[i].stack && pool[i].state == F_DONE) enter(&pool[i]);
        ending = 0;
        running = NULL;
        hoop__hx_cur = NULL;
#endif
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        for (unsigned i = 0; i < HX_MAX_THREADS; i++) {
            if (!pool[i].stack) continue;
#if HX_ASAN
            /* the frames left on it are poisoned; whatever maps this range next is not */
            __asan_unpoison_memory_region(pool[i].stack, HX_STACK_BYTES);
#endif
            munmap(pool[i].stack - page, HX_STACK_BYTES + page);
        }
        free(pool);
        pool = NULL;
    }
};
thread_local pool_owner owner;

int ensure_pool(unsigned n)
{
    if (!pool) {
        (void)&owner; /* registers its destructor for this thread */
        pool = (fiber *)calloc(HX_MAX_THREADS, sizeof(fiber));
    }
    if (!pool) return 0;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (unsigned i = 0; i < n; i++) {
        if (pool[i].stack) continue;
        /* a guard page below the stack: a thread whose locals outgrow it stops at once
         * (SIGSEGV) instead of writing over the heap */
        void *m = mmap(NULL, HX_STACK_BYTES + page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) return 0;
        if (mprotect(m, page, PROT_NONE) != 0) {
            munmap(m, HX_STACK_BYTES + page);
            return 0;
        }
        pool[i].stack = (char *)m + page;
    }
    return 1;
}

/* Releases what can be released after a sweep; returns how many fibers it made runnable. */
int release(unsigned n, const char *k, uint3 blk)
{
    int woke = 0;
    unsigned live = 0, at_bar = 0;
    int line = -1;
    for (unsigned i = 0; i < n; i++) {
        fiber *f = &pool[i];
        if (f->state == F_DONE) continue;
        live++;
        if (f->state != F_BAR) continue;
        at_bar++;
        if (line < 0) line = f->line;
        if (f->line != line) {
            fail(cudaErrorLaunchFailure,
                 "%s: block (%u, %u, %u): threads wait at __syncthreads on different lines (%d "
                 "and %d)",
                 k, blk.x, blk.y, blk.z, line, f->line);
            return -1;
        }
    }
    if (live > 0 && at_bar == live) {
        for (unsigned i = 0; i < n; i++)
            if (pool[i].state == F_BAR) pool[i].state = F_RUN, woke++;
        return woke;
    }
    for (unsigned w = 0; w * 32 < n; w++) { /* warps whose named lanes all wait at a shuffle */
        unsigned lo = w * 32, hi = lo + 32 < n ? lo + 32 : n;
        fiber *first = NULL;
        for (unsigned i = lo; i < hi; i++) {
            if (pool[i].state != F_SHFL) continue;
            if (!first) first = &pool[i];
            if (!(pool[i].mask >> (i - lo) & 1u)) {
                fail(cudaErrorLaunchFailure,
                     "%s: block (%u, %u, %u), warp %u: lane %u shuffles with a mask (0x%08x) "
                     "that leaves it out",
                     k, blk.x, blk.y, blk.z, w, i - lo, pool[i].mask);
                return -1;
            }
            if (pool[i].mode != first->mode || pool[i].width != first->width ||
                pool[i].bytes != first->bytes || pool[i].mask != first->mask) {
                fail(cudaErrorLaunchFailure,
                     "%s: block (%u, %u, %u), warp %u: lanes wait at different shuffles (mode, "
                     "width, size or mask differ)",
                     k, blk.x, blk.y, blk.z, w);
                return -1;
            }
        }
        if (!first) continue;
        /* released when every lane the mask names has arrived or returned */
        int ready = 1;
        for (unsigned i = lo; i < hi && ready; i++)
            if ((first->mask >> (i - lo) & 1u) && pool[i].state != F_SHFL &&
                pool[i].state != F_DONE)
                ready = 0;
        if (!ready) continue;
        for (unsigned i = lo; i < hi; i++) {
            fiber *f = &pool[i];
            if (f->state != F_SHFL) continue;
            int width = f->width, lane = (int)(i - lo), seg = lane / width * width, src;
            switch (f->mode) {
            case HOOP__HX_SHFL_IDX: src = seg + ((f->arg % width) + width) % width; break;
            case HOOP__HX_SHFL_DOWN:
                src = lane + f->arg < seg + width ? lane + f->arg : lane;
                break;
            case HOOP__HX_SHFL_UP: src = lane - f->arg >= seg ? lane - f->arg : lane; break;
            default: src = (lane ^ f->arg) < seg + width ? lane ^ f->arg : lane; break;
            }
            /* a source outside the warp, outside the mask or returned: undefined in CUDA,
             * the lane's own value here */
            const fiber *from = lo + (unsigned)src < hi ? &pool[lo + (unsigned)src] : f;
            if (from->state != F_SHFL || !(f->mask >> src & 1u)) from = f;
            memcpy(f->out, from->in, f->bytes);
        }
        for (unsigned i = lo; i < hi; i++)
            if (pool[i].state == F_SHFL) pool[i].state = F_RUN, woke++;
    }
    return woke;
}

#if HX_FAST_SWITCH
/* A new fiber's stack, as hoop__hx_switch leaves one: the floating-point control words,
 * the six callee-saved registers (r12 = the fiber, r13 = fiber_run, rbp = 0: the end of
 * the frame chain) and hoop__hx_fiber_start as the return address, 16-byte aligned once
 * that has been popped, as a call site must be. */
void init_fiber(fiber *f)
{
    f->state = F_RUN;
    uint64_t *top = (uint64_t *)(f->stack + HX_STACK_BYTES); /* page aligned */
    uint64_t *sp = top - 10;
    uint32_t mxcsr;
    uint16_t fcw;
    __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
    __asm__ volatile("fnstcw %0" : "=m"(fcw));
    sp[0] = (uint64_t)mxcsr | (uint64_t)fcw << 32;
    sp[1] = 0;                               /* r15 */
    sp[2] = 0;                               /* r14 */
    sp[3] = (uint64_t)(uintptr_t)&fiber_run; /* r13 */
    sp[4] = (uint64_t)(uintptr_t)f;          /* r12 */
    sp[5] = 0;                               /* rbx */
    sp[6] = 0;                               /* rbp */
    sp[7] = (uint64_t)(uintptr_t)&hoop__hx_fiber_start;
    sp[8] = sp[9] = 0;
    f->sp = sp;
}
#else
/* Its own function: getcontext returns twice, which no caller's loop should see. */
__attribute__((noinline)) void init_fiber(fiber *f)
{
    f->state = F_RUN;
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = f->stack;
    f->uc.uc_stack.ss_size = HX_STACK_BYTES;
    f->uc.uc_link = NULL;
    uintptr_t p = (uintptr_t)f;
    makecontext(&f->uc, (void (*)(void))fiber_main, 2, (unsigned)(p & 0xffffffffu),
                (unsigned)(p >> 32));
}
#endif

void run_block_sync(launch *L, dim3 g, dim3 b, uint3 blk)
{
    unsigned n = b.x * b.y * b.z;
    for (unsigned i = 0; i < n; i++) {
        view_of(&pool[i].view, g, b, blk, i);
        if (pool[i].state == F_DONE)
            pool[i].state = F_RUN; /* parked: resumed, it runs thread i */
        else
            init_fiber(&pool[i]); /* new, or abandoned by a failed block */
    }
    /* Blocks alternate the sweep's direction (so in any grid of two blocks or more a
     * thread reads, without a barrier, what a later thread writes and what an earlier one
     * does): forward when the launch's number plus the block's is even. */
    unsigned long lin = blk.x + (unsigned long)g.x * (blk.y + (unsigned long)g.y * blk.z);
    int down = (int)((launches + lin) & 1u);
    for (;;) {
        int ran = 0, live = 0;
        for (unsigned j = 0; j < n; j++) {
            unsigned i = down ? n - 1 - j : j;
            if (pool[i].state == F_RUN) {
                enter(&pool[i]);
                ran = 1;
            }
            if (pool[i].state != F_DONE) live = 1;
        }
        if (!live) return;
        int woke = release(n, L->kernel, blk);
        if (woke < 0) return; /* failed; the waiting fibers are abandoned (stacks reused) */
        if (woke == 0 && !ran) {
            fail(cudaErrorLaunchFailure,
                 "%s: block (%u, %u, %u) deadlocked: threads wait at a barrier that others of "
                 "their block or warp never reach",
                 L->kernel, blk.x, blk.y, blk.z);
            return;
        }
    }
}

// ----------------------------------------------------------------- devices, memory

std::mutex mem_mu; /* everything below that is not thread_local or atomic */
int dev_count = 1;
size_t dev_bytes; /* 0: the host's physical memory */
size_t live_bytes;
std::unordered_map<void *, size_t> dev_allocs, host_allocs;
long fail_after = -1;
cudaError_t fail_err = cudaErrorMemoryAllocation;
std::atomic<unsigned long> n_malloc, n_free, n_host_malloc, n_host_free, n_dev_sync, n_stream_sync,
    n_wait;
thread_local int cur_dev;

size_t total_bytes(void)
{
    if (dev_bytes) return dev_bytes;
    return (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
}

size_t left_bytes(void)
{
    size_t total = total_bytes();
    return total > live_bytes ? total - live_bytes : 0;
}

} // namespace hoop_hx

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

hoop__hx_stream legacy = {-1, 0, {0}, {}, {}, 0, false, {}, {false}, {0}, {}};

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

/* Whether work issued to s queues (a lazy stream, or one held behind a wait). */
int is_lazy(cudaStream_t s)
{
    const hoop__hx_stream *st = stream_of(s);
    return st->lazy || st->held.load();
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

void hoop__hx_launch(const char *kernel, dim3 g, dim3 b, size_t smem, cudaStream_t s, int sync,
                     void (*fn)(void *), void *arg)
{
    if (host_fn_blocks(kernel)) return;
    (void)s;
    if (running) {
        fail(cudaErrorLaunchFailure, "%s: launched from inside kernel %s (not supported)", kernel,
             running->kernel);
        return;
    }
    if (sticky != cudaSuccess) {
        fail(sticky,
             "%s: not run: an earlier kernel failed (an execution failure stays until "
             "cudaDeviceReset, as on a GPU)",
             kernel);
        return;
    }
    if (!check_config(kernel, g, b, smem)) return;
    /* queued work was checked when it was issued; it runs on whichever thread needs it */
    if (!draining && !stream_on_current_device(kernel, s)) return;
    unsigned n = b.x * b.y * b.z;
    if (sync && !ensure_pool(n)) {
        fail(cudaErrorMemoryAllocation, "%s: no memory for %u fibers", kernel, n);
        return;
    }
    if (smem > dyn_cap) {
        unsigned char *d = (unsigned char *)realloc(dyn, smem);
        if (!d) {
            fail(cudaErrorMemoryAllocation, "%s: no memory for %zu bytes of shared memory", kernel,
                 smem);
            return;
        }
        dyn = d;
        dyn_cap = smem;
    }
    dyn_bytes = smem;
    launch L = {kernel, fn, arg, sync, NULL, 0};
    running = &L;
    const struct hoop__hx_view *saved = hoop__hx_cur;
    struct hoop__hx_view v;
    for (unsigned z = 0; z < g.z && !L.failed; z++)
        for (unsigned y = 0; y < g.y && !L.failed; y++)
            for (unsigned x = 0; x < g.x && !L.failed; x++) {
                uint3 blk = {x, y, z};
                if (smem) memset(dyn, 0xff, smem);
                if (sync) {
                    run_block_sync(&L, g, b, blk);
                    continue;
                }
                for (unsigned t = 0; t < n && !L.failed; t++) {
                    view_of(&v, g, b, blk, t);
                    hoop__hx_cur = &v;
                    fn(arg);
                }
            }
    hoop__hx_cur = saved;
    running = NULL;
    launches++;
    issue(s);
}

int hoop__hx_check_launch(const char *kernel, dim3 g, dim3 b, size_t smem, cudaStream_t s)
{
    if (sticky != cudaSuccess) {
        fail(sticky, "%s: not captured: an earlier kernel failed", kernel);
        return 0;
    }
    return check_config(kernel, g, b, smem) && stream_on_current_device(kernel, s);
}

int hoop__hx_pinned(const void *p, size_t bytes)
{
    std::lock_guard<std::mutex> g(mem_mu);
    const unsigned char *q = (const unsigned char *)p;
    for (const auto &a : host_allocs) {
        const unsigned char *base = (const unsigned char *)a.first;
        if (q >= base && q + bytes <= base + a.second) return 1;
    }
    return 0;
}

void hoop__hx_syncthreads(int line)
{
    launch *L = running;
    if (!L) {
        fail(cudaErrorLaunchFailure, "__syncthreads (line %d) called outside a kernel", line);
        return;
    }
    if (!L->sync) {
        fail(cudaErrorLaunchFailure,
             "%s: __syncthreads (line %d) in a plain launch: launch it with HOOP_KLAUNCH_SYNC",
             L->kernel, line);
        return;
    }
    fiber *f = L->cur;
    f->state = F_BAR;
    f->line = line;
    leave(f, 0);
}

void hoop__hx_shfl(int mode, unsigned mask, const void *v, void *out, size_t bytes, int arg,
                   int width)
{
    launch *L = running;
    memcpy(out, v, bytes);
    if (!L || !L->sync) {
        fail(cudaErrorLaunchFailure,
             "%s: a warp shuffle in a plain launch: launch it with "
             "HOOP_KLAUNCH_SYNC",
             L ? L->kernel : "(no kernel)");
        return;
    }
    if (width < 1 || width > 32 || (width & (width - 1))) {
        fail(cudaErrorLaunchFailure, "%s: shuffle width %d is not a power of 2 up to 32", L->kernel,
             width);
        return;
    }
    fiber *f = L->cur;
    f->state = F_SHFL;
    f->mode = mode;
    f->arg = arg;
    f->width = width;
    f->bytes = bytes;
    f->mask = mask;
    memcpy(f->in, v, bytes);
    leave(f, 0);
    memcpy(out, f->out, bytes);
}

void *hoop__hx_dyn_shared(void)
{
    return dyn_bytes ? dyn : NULL;
}

const char *hoop__hx_detail(void)
{
    return detail;
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error != cudaSuccess ? last_error : sticky;
    last_error = cudaSuccess;
    if (e == cudaSuccess) detail[0] = '\0';
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    return last_error != cudaSuccess ? last_error : sticky;
}

cudaError_t cudaDeviceReset(void)
{
    sticky = last_error = cudaSuccess;
    detail[0] = '\0';
    return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInsufficientDriver:
        return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorDeviceUninitialized: return "invalid device context";
    case cudaErrorMapBufferObjectFailed: return "mapping of buffer object failed";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorHostMemoryAlreadyRegistered:
        return "part or all of the requested memory range is already mapped";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotPermitted: return "operation not permitted";
    case cudaErrorStreamCaptureUnsupported:
        return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
        return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnmatched: return "the capture was not initiated in this stream";
    }
    return "unrecognized error code";
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    if (host_fn_blocks("cudaMalloc")) return cudaErrorNotPermitted;
    *p = NULL;
    if (hoop__hx_capture_blocks_unsafe("cudaMalloc")) return cudaErrorStreamCaptureUnsupported;
    std::lock_guard<std::mutex> g(mem_mu);
    if (fail_after == 0) {
        fail(fail_err, "cudaMalloc: %zu bytes: failing on purpose (hoop__hx_fail_malloc_after)",
             bytes);
        return fail_err;
    }
    void *m = NULL;
    size_t len = hoop__hx_dev_len(bytes), page = (size_t)sysconf(_SC_PAGESIZE);
    if (bytes > left_bytes() || posix_memalign(&m, len >= page ? page : 256, len) != 0) {
        fail(cudaErrorMemoryAllocation, "cudaMalloc: %zu bytes, %zu of %zu left", bytes,
             left_bytes(), total_bytes());
        return cudaErrorMemoryAllocation;
    }
    try {
        dev_allocs.emplace(m, bytes);
    } catch (...) {
        free(m);
        fail(cudaErrorMemoryAllocation, "cudaMalloc: no host memory to track %zu bytes", bytes);
        return cudaErrorMemoryAllocation;
    }
    live_bytes += bytes;
    if (fail_after > 0) fail_after--;
    n_malloc++;
    memset(m, 0xff, bytes); /* device memory starts as garbage: NaN here */
#if HX_ASAN
    if (len > bytes) ASAN_POISON_MEMORY_REGION((char *)m + bytes, len - bytes);
#endif
    *p = m;
    return cudaSuccess;
}

size_t hoop__hx_dev_len(size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (bytes < page) return bytes ? bytes : 1;
    return bytes > SIZE_MAX - page ? bytes : (bytes + page - 1) / page * page;
}

int hoop__hx_dev_find(const void *p, void **base, size_t *bytes)
{
    std::lock_guard<std::mutex> g(mem_mu);
    for (const auto &kv : dev_allocs)
        if ((const char *)p >= (const char *)kv.first &&
            (const char *)p < (const char *)kv.first + (kv.second ? kv.second : 1)) {
            *base = kv.first;
            *bytes = kv.second;
            return 1;
        }
    return 0;
}

void hoop__hx_set_error(cudaError_t e, const char *msg)
{
    fail(e, "%s", msg);
}

cudaError_t cudaFree(void *p)
{
    if (host_fn_blocks("cudaFree")) return cudaErrorNotPermitted;
    if (hoop__hx_capture_blocks("cudaFree")) return cudaErrorStreamCaptureUnsupported;
    if (!p) return cudaSuccess;
    lazy_run_all(); /* cudaFree synchronises the device */
    std::unique_lock<std::mutex> g(mem_mu);
    auto it = dev_allocs.find(p);
    if (it == dev_allocs.end()) {
        fail(cudaErrorInvalidValue, "cudaFree: %p is not from cudaMalloc, or was freed already", p);
        return cudaErrorInvalidValue;
    }
    size_t bytes = it->second;
    live_bytes -= bytes;
    dev_allocs.erase(it);
    n_free++;
    g.unlock(); /* p is no allocation any more: nobody else finds it */
    cudaError_t e = hoop__hx_ipc_release(p, bytes);
    free(p);
    return e;
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    if (host_fn_blocks("cudaMallocHost")) return cudaErrorNotPermitted;
    *p = NULL;
    if (hoop__hx_capture_blocks_unsafe("cudaMallocHost")) return cudaErrorStreamCaptureUnsupported;
    std::lock_guard<std::mutex> g(mem_mu);
    void *m = NULL;
    size_t phys = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
    if (bytes > phys || posix_memalign(&m, (size_t)sysconf(_SC_PAGESIZE), bytes ? bytes : 1)) {
        fail(cudaErrorMemoryAllocation, "cudaMallocHost: %zu bytes", bytes);
        return cudaErrorMemoryAllocation;
    }
    try {
        host_allocs.emplace(m, bytes);
    } catch (...) {
        free(m);
        fail(cudaErrorMemoryAllocation, "cudaMallocHost: no memory to track %zu bytes", bytes);
        return cudaErrorMemoryAllocation;
    }
    n_host_malloc++;
    memset(m, 0xff, bytes);
    *p = m;
    return cudaSuccess;
}

std::unordered_map<void *, size_t> registered; /* cudaHostRegister's ranges */

static int in_range(const std::unordered_map<void *, size_t> &m, const void *p)
{
    for (const auto &kv : m)
        if ((const char *)p >= (const char *)kv.first &&
            (const char *)p < (const char *)kv.first + (kv.second ? kv.second : 1))
            return 1;
    return 0;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *attr, const void *p)
{
    if (host_fn_blocks("cudaPointerGetAttributes")) return cudaErrorNotPermitted;
    if (!attr) return cudaErrorInvalidValue;
    std::lock_guard<std::mutex> g(mem_mu);
    attr->device = 0;
    attr->type = in_range(dev_allocs, p) || hoop__hx_ipc_imported(p)   ? cudaMemoryTypeDevice
                 : in_range(host_allocs, p) || in_range(registered, p) ? cudaMemoryTypeHost
                                                                       : cudaMemoryTypeUnregistered;
    return cudaSuccess;
}

cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned flags)
{
    if (host_fn_blocks("cudaHostRegister")) return cudaErrorNotPermitted;
    if (hoop__hx_capture_blocks_unsafe("cudaHostRegister"))
        return cudaErrorStreamCaptureUnsupported;
    (void)flags;
    std::lock_guard<std::mutex> g(mem_mu);
    if (!p || bytes == 0) return cudaErrorInvalidValue;
    if (registered.count(p)) return cudaErrorHostMemoryAlreadyRegistered;
    registered.emplace(p, bytes);
    return cudaSuccess;
}

cudaError_t cudaHostUnregister(void *p)
{
    if (host_fn_blocks("cudaHostUnregister")) return cudaErrorNotPermitted;
    std::lock_guard<std::mutex> g(mem_mu);
    if (!registered.erase(p)) return cudaErrorInvalidValue;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p)
{
    if (host_fn_blocks("cudaFreeHost")) return cudaErrorNotPermitted;
    if (hoop__hx_capture_blocks("cudaFreeHost")) return cudaErrorStreamCaptureUnsupported;
    if (!p) return cudaSuccess;
    lazy_run_all(); /* as cudaFree */
    std::lock_guard<std::mutex> g(mem_mu);
    auto it = host_allocs.find(p);
    if (it == host_allocs.end()) {
        fail(cudaErrorInvalidValue, "cudaFreeHost: %p is not from cudaMallocHost, or was freed", p);
        return cudaErrorInvalidValue;
    }
    host_allocs.erase(it);
    free(p);
    n_host_free++;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes_out)
{
    std::lock_guard<std::mutex> g(mem_mu);
    *free_bytes = left_bytes();
    *total_bytes_out = total_bytes();
    return cudaSuccess;
}

static cudaError_t do_memcpy(void *dst, const void *src, size_t bytes)
{
    if (sticky != cudaSuccess) return sticky;
    if (bytes && (!dst || !src)) {
        fail(cudaErrorInvalidValue, "cudaMemcpy: NULL pointer");
        return cudaErrorInvalidValue;
    }
    if (bytes) memmove(dst, src, bytes);
    return cudaSuccess;
}

/* cudaMemcpyAsync on a lazy stream: queued; from pageable memory the bytes are taken now
 * (CUDA stages them before it returns), to pageable memory the stream runs first and the
 * copy is done at return. */
static cudaError_t lazy_memcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                               cudaStream_t s)
{
    if (sticky != cudaSuccess) return sticky;
    if (bytes && (!dst || !src)) {
        fail(cudaErrorInvalidValue, "cudaMemcpyAsync: NULL pointer");
        return cudaErrorInvalidValue;
    }
    if (!bytes) {
        lazy_push(
            s, [] {}, true);
        return cudaSuccess;
    }
    if (kind == cudaMemcpyDeviceToHost && !hoop__hx_pinned(dst, bytes)) {
        lazy_wait(s, ~0ul);
        cudaError_t e = do_memcpy(dst, src, bytes);
        if (e == cudaSuccess) issue(s);
        return e;
    }
    if (kind == cudaMemcpyHostToDevice && !hoop__hx_pinned(src, bytes)) {
        std::shared_ptr<std::vector<unsigned char>> copy;
        try {
            copy = std::make_shared<std::vector<unsigned char>>((const unsigned char *)src,
                                                                (const unsigned char *)src + bytes);
        } catch (...) {
            fail(cudaErrorMemoryAllocation, "cudaMemcpyAsync: no memory to stage %zu bytes", bytes);
            return cudaErrorMemoryAllocation;
        }
        lazy_push(
            s, [=]() { memmove(dst, copy->data(), bytes); }, true);
        return cudaSuccess;
    }
    lazy_push(
        s, [=]() { memmove(dst, src, bytes); }, true);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    if (host_fn_blocks("cudaMemcpy")) return cudaErrorNotPermitted;
    (void)kind;
    if (hoop__hx_capture_blocks("cudaMemcpy")) return cudaErrorStreamCaptureUnsupported;
    return do_memcpy(dst, src, bytes);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s)
{
    if (host_fn_blocks("cudaMemcpyAsync")) return cudaErrorNotPermitted;
    if (hoop__hx_capturing(s)) {
        if (sticky != cudaSuccess) return sticky;
        if (bytes && (!dst || !src)) {
            fail(cudaErrorInvalidValue, "cudaMemcpyAsync: NULL pointer");
            return cudaErrorInvalidValue;
        }
        const void *host = kind == cudaMemcpyHostToDevice   ? src
                           : kind == cudaMemcpyDeviceToHost ? (const void *)dst
                                                            : NULL;
        if (host && bytes && !hoop__hx_pinned(host, bytes) &&
            hoop__hx_capture_blocks("cudaMemcpyAsync of pageable host memory"))
            return cudaErrorStreamCaptureUnsupported;
        hoop__hx_record(s, [=]() {
            if (bytes) memmove(dst, src, bytes);
        });
        return cudaSuccess;
    }
    if (is_lazy(s)) return lazy_memcpy(dst, src, bytes, kind, s);
    cudaError_t e = do_memcpy(dst, src, bytes);
    if (e == cudaSuccess) issue(s);
    return e;
}

static cudaError_t do_memset(void *p, int value, size_t bytes)
{
    if (bytes && !p) {
        fail(cudaErrorInvalidValue, "cudaMemset: NULL pointer");
        return cudaErrorInvalidValue;
    }
    if (bytes) memset(p, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int value, size_t bytes)
{
    if (host_fn_blocks("cudaMemset")) return cudaErrorNotPermitted;
    if (hoop__hx_capture_blocks("cudaMemset")) return cudaErrorStreamCaptureUnsupported;
    return do_memset(p, value, bytes);
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s)
{
    if (host_fn_blocks("cudaMemsetAsync")) return cudaErrorNotPermitted;
    if (hoop__hx_capturing(s)) {
        if (bytes && !p) {
            fail(cudaErrorInvalidValue, "cudaMemsetAsync: NULL pointer");
            return cudaErrorInvalidValue;
        }
        hoop__hx_record(s, [=]() {
            if (bytes) memset(p, value, bytes);
        });
        return cudaSuccess;
    }
    if (is_lazy(s)) {
        if (bytes && !p) {
            fail(cudaErrorInvalidValue, "cudaMemsetAsync: NULL pointer");
            return cudaErrorInvalidValue;
        }
        lazy_push(
            s, [=]() { do_memset(p, value, bytes); }, true);
        return cudaSuccess;
    }
    cudaError_t e = do_memset(p, value, bytes);
    if (e == cudaSuccess) issue(s);
    return e;
}

/* Work ran when it was issued; what a synchronisation reports is an execution failure. */
cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    if (host_fn_blocks("cudaStreamSynchronize")) return cudaErrorNotPermitted;
    if (hoop__hx_capture_blocks("cudaStreamSynchronize")) return cudaErrorStreamCaptureUnsupported;
    lazy_wait(stream_of(s), ~0ul);
    if (sticky == cudaSuccess) n_stream_sync++;
    return sticky;
}

cudaError_t cudaDeviceSynchronize(void)
{
    if (host_fn_blocks("cudaDeviceSynchronize")) return cudaErrorNotPermitted;
    if (hoop__hx_capture_blocks("cudaDeviceSynchronize")) return cudaErrorStreamCaptureUnsupported;
    lazy_run_all();
    if (sticky == cudaSuccess) n_dev_sync++;
    return sticky;
}

// ----------------------------------------------------------------- devices, streams, events

cudaError_t cudaGetDeviceCount(int *count)
{
    std::lock_guard<std::mutex> g(mem_mu);
    *count = dev_count;
    if (dev_count > 0) return cudaSuccess;
    fail(cudaErrorNoDevice, "cudaGetDeviceCount: the test pretends no device");
    return cudaErrorNoDevice;
}

/* Whether device names one of the pretended devices; sets the error when not. */
static int valid_device(const char *call, int device)
{
    std::lock_guard<std::mutex> g(mem_mu);
    if (dev_count == 0) {
        fail(cudaErrorNoDevice, "%s: no device", call);
        return 0;
    }
    if (device >= 0 && device < dev_count) return 1;
    fail(cudaErrorInvalidDevice, "%s: device %d of %d", call, device, dev_count);
    return 0;
}

cudaError_t cudaSetDevice(int device)
{
    if (!valid_device("cudaSetDevice", device)) return cudaPeekAtLastError();
    cur_dev = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    if (!valid_device("cudaGetDevice", cur_dev)) return cudaPeekAtLastError();
    *device = cur_dev;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device)
{
    if (!valid_device("cudaGetDeviceProperties", device)) return cudaPeekAtLastError();
    memset(prop, 0, sizeof(*prop));
    snprintf(prop->name, sizeof(prop->name), "host execution layer");
    std::lock_guard<std::mutex> g(mem_mu);
    prop->totalGlobalMem = total_bytes();
    prop->major = 9;
    prop->multiProcessorCount = (int)sysconf(_SC_NPROCESSORS_ONLN);
    return cudaSuccess;
}

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
    if (host_fn_blocks("a stream wait for a value")) return cudaErrorNotPermitted;
    if (sticky != cudaSuccess) return sticky;
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

// ----------------------------------------------------------------- test hooks

extern "C" void hoop__hx_set_devices(int count, size_t bytes)
{
    std::lock_guard<std::mutex> g(mem_mu);
    dev_count = count;
    dev_bytes = bytes;
}

extern "C" void hoop__hx_fail_malloc_after(long n, int e)
{
    std::lock_guard<std::mutex> g(mem_mu);
    fail_after = n;
    fail_err = (cudaError_t)e;
}

extern "C" unsigned long hoop__hx_count(const char *call)
{
    static const struct {
        const char *name;
        const std::atomic<unsigned long> *n;
    } counts[] = {
        {"cudaMalloc", &n_malloc},
        {"cudaFree", &n_free},
        {"cudaMallocHost", &n_host_malloc},
        {"cudaFreeHost", &n_host_free},
        {"cudaDeviceSynchronize", &n_dev_sync},
        {"cudaStreamSynchronize", &n_stream_sync},
        {"cudaStreamWaitEvent", &n_wait},
    };
    for (const auto &c : counts)
        if (strcmp(c.name, call) == 0) return c.n->load();
    return 0;
}

extern "C" void hoop__hx_set_lazy(int on)
{
    lazy_mode.store(on != 0);
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
