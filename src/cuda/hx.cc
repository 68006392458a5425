/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/hx.cc -- the host execution layer's runtime (see src/cuda/hx.h for what it
 * models and what it does not): launches, the fiber scheduler of synchronising launches,
 * barriers and shuffles, the last error, and the memory and stream stand-ins.
 *
 * A synchronising launch gives each thread of a block a fiber (makecontext on a stack
 * from this OS thread's pool, 64 KiB each, kept for later launches). The scheduler
 * sweeps the fibers in linear thread order, running each runnable one until it waits
 * at a barrier or returns; after a sweep it releases the block barrier when every live
 * thread waits there, and each warp whose live lanes all wait at a shuffle (doing the
 * exchange); when nothing can run and nothing can be released, the block deadlocked.
 * Under ASan the switches are announced (__sanitizer_start_switch_fiber), as its
 * documentation asks of every stack switch.
 *
 * Owns: per OS thread, the fiber pool, the dynamic shared memory buffer and the last
 * error. Thread-safety: all state is thread-local.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "cuda/hx.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define HX_ASAN 1
#else
#define HX_ASAN 0
#endif

#define HX_STACK_BYTES (256 * 1024) /* a fiber's stack, above one guard page */
#define HX_MAX_THREADS 1024
#define HX_MAX_SMEM (48 * 1024)

thread_local const struct hoop__hx_view *hoop__hx_cur;

namespace
{

enum fstate { F_RUN, F_BAR, F_SHFL, F_DONE };

struct fiber {
    ucontext_t uc;
    char *stack;
    struct hoop__hx_view view;
    fstate state;
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
thread_local ucontext_t sched_uc;
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

/* Switches from the scheduler into f, and back when f waits or returns. */
void enter(fiber *f)
{
#if HX_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(&fake, f->stack, HX_STACK_BYTES);
#endif
    running->cur = f;
    hoop__hx_cur = &f->view;
    swapcontext(&sched_uc, &f->uc);
#if HX_ASAN
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
    running->cur = NULL;
}

/* Switches from the running fiber back to the scheduler (dying: it never resumes). */
void leave(fiber *f, int dying)
{
    (void)dying;
#if HX_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(dying ? NULL : &fake, sched_bottom, sched_size);
#endif
    swapcontext(&f->uc, &sched_uc);
#if HX_ASAN
    __sanitizer_finish_switch_fiber(fake, &sched_bottom, &sched_size);
#endif
    hoop__hx_cur = &f->view;
}

void fiber_main(unsigned lo, unsigned hi)
{
    fiber *f = (fiber *)(((uintptr_t)hi << 32) | (uintptr_t)lo);
#if HX_ASAN
    __sanitizer_finish_switch_fiber(NULL, &sched_bottom, &sched_size);
#endif
    running->fn(running->arg);
    f->state = F_DONE;
    leave(f, 1);
}

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

int ensure_pool(unsigned n)
{
    if (!pool) pool = (fiber *)calloc(HX_MAX_THREADS, sizeof(fiber));
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

void run_block_sync(launch *L, dim3 g, dim3 b, uint3 blk)
{
    unsigned n = b.x * b.y * b.z;
    for (unsigned i = 0; i < n; i++) {
        view_of(&pool[i].view, g, b, blk, i);
        init_fiber(&pool[i]);
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
        if (woke < 0) return; /* failed; the fibers are abandoned (their stacks reused) */
        if (woke == 0 && !ran) {
            fail(cudaErrorLaunchFailure,
                 "%s: block (%u, %u, %u) deadlocked: threads wait at a barrier that others of "
                 "their block or warp never reach",
                 L->kernel, blk.x, blk.y, blk.z);
            return;
        }
    }
}

} // namespace

void hoop__hx_launch(const char *kernel, dim3 g, dim3 b, size_t smem, cudaStream_t s, int sync,
                     void (*fn)(void *), void *arg)
{
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
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    }
    return "unrecognized error code";
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    *p = malloc(bytes ? bytes : 1);
    if (!*p) {
        fail(cudaErrorMemoryAllocation, "cudaMalloc: %zu bytes", bytes);
        return cudaErrorMemoryAllocation;
    }
    memset(*p, 0xff, bytes); /* device memory starts as garbage: NaN here */
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    (void)kind;
    if (sticky != cudaSuccess) return sticky;
    if (bytes && (!dst || !src)) {
        fail(cudaErrorInvalidValue, "cudaMemcpy: NULL pointer");
        return cudaErrorInvalidValue;
    }
    if (bytes) memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s)
{
    (void)s;
    return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaMemset(void *p, int value, size_t bytes)
{
    if (bytes && !p) {
        fail(cudaErrorInvalidValue, "cudaMemset: NULL pointer");
        return cudaErrorInvalidValue;
    }
    if (bytes) memset(p, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s)
{
    (void)s;
    return cudaMemset(p, value, bytes);
}

/* Work ran when it was issued; what a synchronisation reports is an execution failure. */
cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    (void)s;
    return sticky;
}

cudaError_t cudaDeviceSynchronize(void)
{
    return sticky;
}
