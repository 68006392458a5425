/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/hx_ipc.cc -- the host execution layer's CUDA IPC (see src/cuda/hx.h,
 * "interprocess memory", for what it models and what it does not).
 *
 * An export moves a cudaMalloc allocation's pages into a memfd without moving the
 * allocation: the current bytes are written to the file, then the file is mapped over
 * the same addresses (MAP_FIXED replaces the private pages at once), so every pointer
 * into the allocation stays valid and now reads and writes the file. cudaMalloc gives
 * every allocation of a page or more whole pages of its own (hx.cc), which is what makes
 * this safe: no other allocation shares them. A peer process opens the file through
 * /proc/<pid>/fd/<fd> (allowed between processes of one user, as hoop's shared host
 * memory does: src/collectives/shared.c) and maps it; the identity check (st_dev,
 * st_ino, size) refuses a reused fd number or a same-numbered process elsewhere.
 *
 * Owns: the exports (base -> the open memfd) and the imports (the mappings of peers'
 * files, counted), under one mutex, taken after hx.cc's memory mutex is released (never
 * inside it: cudaPointerGetAttributes takes them in the other order).
 * Thread-safety: every call is thread-safe.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <map>
#include <mutex>

#include "cuda/hx.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define HX_IPC_ASAN 1
#else
#define HX_IPC_ASAN 0
#endif

namespace
{

const uint32_t IPC_MAGIC = 0x50495848u; /* "HXIP" */

/* What a handle carries (CUDA's are 64 opaque bytes as well). */
struct wire {
    uint32_t magic;
    int32_t pid, fd, pad;
    uint64_t dev, ino, len;
};
static_assert(sizeof(wire) <= CUDA_IPC_HANDLE_SIZE, "an IPC handle is 64 bytes");

struct export_rec {
    int fd;
    uint64_t dev, ino;
    size_t len;
};

struct import_rec {
    uint64_t dev, ino;
    size_t len;
    long refs;
};

std::mutex ipc_mu;
std::map<char *, export_rec> exports; /* by the allocation's base */
std::map<char *, import_rec> imports; /* by the mapping's base */

/* strerror without its shared buffer (g++ has the GNU strerror_r, returning the text). */
struct errtext {
    char buf[128];
    const char *of(int e)
    {
        return strerror_r(e, buf, sizeof(buf));
    }
};

cudaError_t refuse(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cudaError_t refuse(cudaError_t e, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    hoop__hx_set_error(e, msg);
    return e;
}

/* Moves [base, base + len) into a new memfd mapped at the same place. */
cudaError_t export_pages(char *base, size_t len, size_t bytes, export_rec *out)
{
    struct stat sb;
    (void)bytes; /* for ASan's poisoning of the tail */
    int fd = memfd_create("hx-cuda-ipc", MFD_CLOEXEC);
    if (fd < 0)
        return refuse(cudaErrorMemoryAllocation, "cudaIpcGetMemHandle: memfd_create: %s",
                      errtext().of(errno));
    int ok = ftruncate(fd, (off_t)len) == 0 && fstat(fd, &sb) == 0;
#if HX_IPC_ASAN
    ASAN_UNPOISON_MEMORY_REGION(base + bytes, len - bytes); /* the tail is copied too */
#endif
    for (size_t done = 0; ok && done < len;) {
        ssize_t k = pwrite(fd, base + done, len - done, (off_t)done);
        if (k <= 0 && errno != EINTR) ok = 0;
        if (k > 0) done += (size_t)k;
    }
    if (!ok || mmap(base, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) != base) {
        int e = errno;
        close(fd);
#if HX_IPC_ASAN
        if (len > bytes) ASAN_POISON_MEMORY_REGION(base + bytes, len - bytes);
#endif
        return refuse(cudaErrorMemoryAllocation,
                      "cudaIpcGetMemHandle: moving %zu bytes to a memfd: %s", len, errtext().of(e));
    }
#if HX_IPC_ASAN
    if (len > bytes) ASAN_POISON_MEMORY_REGION(base + bytes, len - bytes);
#endif
    *out = export_rec{fd, (uint64_t)sb.st_dev, (uint64_t)sb.st_ino, len};
    return cudaSuccess;
}

/* The import holding p, or imports.end(); under ipc_mu. */
std::map<char *, import_rec>::iterator import_of(const void *p)
{
    auto it = imports.upper_bound((char *)p);
    if (it == imports.begin()) return imports.end();
    --it;
    return (const char *)p < it->first + it->second.len ? it : imports.end();
}

} // namespace

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *p)
{
    void *b = NULL;
    size_t bytes = 0;
    if (!handle || !p) return refuse(cudaErrorInvalidValue, "cudaIpcGetMemHandle: NULL argument");
    if (!hoop__hx_dev_find(p, &b, &bytes))
        return refuse(cudaErrorInvalidValue,
                      "cudaIpcGetMemHandle: %p is not in an allocation of cudaMalloc", p);
    size_t len = hoop__hx_dev_len(bytes), page = (size_t)sysconf(_SC_PAGESIZE);
    if (len < page)
        return refuse(cudaErrorInvalidValue,
                      "cudaIpcGetMemHandle: an allocation of %zu bytes (the host execution layer "
                      "exports allocations of a page or more)",
                      bytes);
    char *base = (char *)b;
    std::lock_guard<std::mutex> g(ipc_mu);
    auto it = exports.find(base);
    if (it == exports.end()) {
        export_rec r;
        cudaError_t e = export_pages(base, len, bytes, &r);
        if (e != cudaSuccess) return e;
        it = exports.emplace(base, r).first;
    }
    wire w = {IPC_MAGIC, (int32_t)getpid(), it->second.fd, 0, it->second.dev, it->second.ino, len};
    memset(handle, 0, sizeof(*handle));
    memcpy(handle->reserved, &w, sizeof(w));
    return cudaSuccess;
}

cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t handle, unsigned flags)
{
    wire w;
    struct stat sb;
    char path[64];
    if (!p) return refuse(cudaErrorInvalidValue, "cudaIpcOpenMemHandle: p is NULL");
    *p = NULL;
    if (flags != cudaIpcMemLazyEnablePeerAccess)
        return refuse(cudaErrorInvalidValue,
                      "cudaIpcOpenMemHandle: flags %u (CUDA wants cudaIpcMemLazyEnablePeerAccess)",
                      flags);
    memcpy(&w, handle.reserved, sizeof(w));
    if (w.magic != IPC_MAGIC)
        return refuse(cudaErrorMapBufferObjectFailed, "cudaIpcOpenMemHandle: not a memory handle");
    if (w.pid == (int32_t)getpid())
        return refuse(cudaErrorDeviceUninitialized,
                      "cudaIpcOpenMemHandle: the handle was exported by this process (CUDA "
                      "refuses to open it here: use the pointer itself)");
    std::lock_guard<std::mutex> g(ipc_mu);
    for (auto &kv : imports)
        if (kv.second.dev == w.dev && kv.second.ino == w.ino) {
            kv.second.refs++;
            *p = kv.first;
            return cudaSuccess;
        }
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)w.pid, (int)w.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return refuse(cudaErrorMapBufferObjectFailed, "cudaIpcOpenMemHandle: %s: %s", path,
                      errtext().of(errno));
    void *m = MAP_FAILED;
    if (fstat(fd, &sb) == 0 && (uint64_t)sb.st_dev == w.dev && (uint64_t)sb.st_ino == w.ino &&
        (uint64_t)sb.st_size == w.len)
        m = mmap(NULL, (size_t)w.len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return refuse(cudaErrorMapBufferObjectFailed,
                      "cudaIpcOpenMemHandle: %s is not the exported memory (freed, or its process "
                      "is gone)",
                      path);
    imports.emplace((char *)m, import_rec{w.dev, w.ino, (size_t)w.len, 1});
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void *p)
{
    std::lock_guard<std::mutex> g(ipc_mu);
    auto it = imports.find((char *)p);
    if (it == imports.end())
        return refuse(cudaErrorInvalidValue,
                      "cudaIpcCloseMemHandle: %p is not memory from cudaIpcOpenMemHandle", p);
    if (--it->second.refs > 0) return cudaSuccess;
    munmap(it->first, it->second.len);
    imports.erase(it);
    return cudaSuccess;
}

int hoop__hx_ipc_imported(const void *p)
{
    std::lock_guard<std::mutex> g(ipc_mu);
    return import_of(p) != imports.end();
}

/* A process other than this one that maps the file (dev, ino), or 0. */
static int mapped_elsewhere(uint64_t dev, uint64_t ino)
{
    DIR *d = opendir("/proc");
    int found = 0;
    if (!d) return 0;
    for (struct dirent *e; !found && (e = readdir(d));) {
        char path[300], line[512];
        int pid = atoi(e->d_name);
        if (pid <= 0 || pid == (int)getpid()) continue;
        snprintf(path, sizeof(path), "/proc/%d/maps", pid);
        FILE *f = fopen(path, "r");
        if (!f) continue; /* gone, or not ours */
        while (!found && fgets(line, sizeof(line), f)) {
            unsigned maj, mnr;
            unsigned long long node;
            if (!strstr(line, "hx-cuda-ipc") ||
                sscanf(line, "%*s %*s %*s %x:%x %llu", &maj, &mnr, &node) != 3)
                continue;
            found = node == ino && makedev(maj, mnr) == (dev_t)dev ? pid : 0;
        }
        fclose(f);
    }
    closedir(d);
    return found;
}

cudaError_t hoop__hx_ipc_release(void *b, size_t bytes)
{
    char *base = (char *)b;
    std::lock_guard<std::mutex> g(ipc_mu);
    auto it = exports.find(base);
    if (it == exports.end()) return cudaSuccess;
    size_t len = it->second.len;
    int other = mapped_elsewhere(it->second.dev, it->second.ino);
    /* A peer that still maps the file reads garbage from now on (CUDA: undefined). */
    memset(base, 0xff, bytes);
    /* The heap gets private pages back, at the same place. */
    mmap(base, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    close(it->second.fd);
    exports.erase(it);
    if (!other) return cudaSuccess;
    return refuse(cudaErrorInvalidValue,
                  "cudaFree: the allocation at %p is still open in process %d (its "
                  "cudaIpcOpenMemHandle was not closed): CUDA leaves that undefined; the memory "
                  "is freed and reads as garbage there",
                  b, other);
}
