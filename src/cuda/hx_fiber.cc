/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/hx_fiber.cc -- the host execution layer's launches (see src/cuda/hx.h for what
 * it models): the fiber scheduler of synchronising launches, its context switch,
 * barriers and shuffles.
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
 * Owns: per OS thread, the fiber pool, the launch it runs and the dynamic shared memory
 * buffer. Thread-safety: all of it is thread-local.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "cuda/hx_int.h"

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

thread_local unsigned long launches; /* picks each block's sweep order */
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

} // namespace hoop_hx

using namespace hoop_hx;

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
