/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/hx.cc -- the host execution layer's runtime (see src/cuda/hx.h for what it
 * models and what it does not): the last error, and the stand-ins for devices and
 * memory (hx_fiber.cc: launches and their fiber scheduler; hx_stream.cc: streams and
 * events).
 *
 * Owns: per OS thread, the last error and the current device; per process, the device
 * count and the memory's accounting. Thread-safety: the per-thread state is
 * thread-local; the per-process state is under one mutex (mem_mu).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "cuda/hx_int.h"

namespace hoop_hx
{

thread_local cudaError_t last_error = cudaSuccess;
/* An execution failure (cudaErrorLaunchFailure) stays, as CUDA's errors from 700 up do:
 * every later launch, copy and synchronisation returns it until cudaDeviceReset. */
thread_local cudaError_t sticky = cudaSuccess;
thread_local char detail[256];

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
    case cudaErrorNotSupported: return "operation not supported";
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
    *count = dev_count > 0 ? dev_count : 0;
    if (dev_count > 0) return cudaSuccess;
    if (dev_count < 0) { /* what the runtime says with no driver, or one too old */
        fail(cudaErrorInsufficientDriver, "cudaGetDeviceCount: the test pretends no driver");
        return cudaErrorInsufficientDriver;
    }
    fail(cudaErrorNoDevice, "cudaGetDeviceCount: the test pretends no device");
    return cudaErrorNoDevice;
}

/* Whether device names one of the pretended devices; sets the error when not. */
int hoop_hx::valid_device(const char *call, int device)
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
