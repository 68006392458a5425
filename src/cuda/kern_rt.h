/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/kern_rt.h -- what every kernel source (.cu) includes first: CUDA itself under
 * nvcc, the host execution layer (src/cuda/hx.h) under the host's C++ compiler, and the
 * few macros through which a kernel source stays the same for both:
 *
 *   HOOP_KLAUNCH(kernel, grid, block, smem, stream, args...)
 *       kernel<<<grid, block, smem, stream>>>(args...) for a kernel without barriers;
 *   HOOP_KLAUNCH_SYNC(kernel, grid, block, smem, stream, args...)
 *       the same for a kernel that uses __syncthreads or warp shuffles (the host layer
 *       runs its threads as fibers; a plain launch that reaches a barrier fails);
 *   HOOP_DYN_SHARED(type, name)
 *       extern __shared__ type name[]: the launch's dynamic shared memory;
 *   HOOP_KCHECK(kernel_name)
 *       after a launch: HOOP_ERR_CUDA naming the kernel and CUDA's message when the
 *       launch failed (as cudaGetLastError reports it), with the host layer's detail.
 *
 * A launcher looks like this (one per kernel, C-callable, as STYLE.md says):
 *
 *     extern "C" hoop_status hoop__cuda_scale(float *y, float a, size_t n, cudaStream_t s)
 *     {
 *         if (n == 0) return HOOP_OK;
 *         unsigned block = 256, grid = (unsigned)((n + block - 1) / block);
 *         HOOP_KLAUNCH(scale_kernel, grid, block, 0, s, y, a, n);
 *         return HOOP_KCHECK("scale_kernel");
 *     }
 */
#ifndef HOOP_CUDA_KERN_RT_H
#define HOOP_CUDA_KERN_RT_H

#include "core/check.h"
#include "hoop/status.h"

#ifdef __CUDACC__
#include <cuda_runtime.h>
#define HOOP_KLAUNCH(k, grid, block, smem, stream, ...) \
    k<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#define HOOP_KLAUNCH_SYNC(k, grid, block, smem, stream, ...) \
    k<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#define HOOP_DYN_SHARED(type, name) extern __shared__ type name[]
static inline const char *hoop__hx_detail(void)
{
    return "";
}
#else
#include <tuple>

#include "cuda/hx.h"
/* The arguments are evaluated and converted to the kernel's parameter types at the launch,
 * as CUDA does (a kernel kept by a capture runs later: an argument such as a->lr must not
 * be read then, when a may be gone). */
template <class... P, class... A>
static inline void hoop__hx_klaunch(const char *name, dim3 grid, dim3 block, size_t smem,
                                    cudaStream_t s, int sync, void (*k)(P...), A &&...args)
{
    std::tuple<typename std::decay<P>::type...> t(static_cast<P>(args)...);
    hoop__hx_run(name, grid, block, smem, s, sync, [=]() { std::apply(k, t); });
}
#define HOOP_KLAUNCH(k, grid, block, smem, stream, ...) \
    hoop__hx_klaunch(#k, (grid), (block), (smem), (stream), 0, k, __VA_ARGS__)
#define HOOP_KLAUNCH_SYNC(k, grid, block, smem, stream, ...) \
    hoop__hx_klaunch(#k, (grid), (block), (smem), (stream), 1, k, __VA_ARGS__)
#define HOOP_DYN_SHARED(type, name) type *name = (type *)hoop__hx_dyn_shared()
#endif

static inline hoop_status hoop__kcheck(const char *kernel)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return HOOP_OK;
    const char *d = hoop__hx_detail();
    return HOOP_ERROR(HOOP_ERR_CUDA, "%s: launch failed: %s%s%s%s", kernel, cudaGetErrorString(e),
                      *d ? " (" : "", d, *d ? ")" : "");
}
#define HOOP_KCHECK(kernel_name) hoop__kcheck(kernel_name)

#endif /* HOOP_CUDA_KERN_RT_H */
