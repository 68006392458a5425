/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/coll_reduce.cu -- the collectives' elementwise reduction on the device
 * (see coll.h). One grid-stride kernel per element type; the op is a kernel argument
 * (the same for every thread: the branch costs nothing beside the memory traffic this
 * kernel is bound by). Each element is computed by reduce_elem.h's rules, the host's.
 */
#include "cuda/kern_rt.h"

#include "collectives/reduce_elem.h"
#include "cuda/coll.h"

#define COLL_BLOCK 256
#define COLL_MAX_GRID 4096 /* grid-stride beyond: enough blocks to fill any GPU */

/* Floating and integer types whose sums do not need wrapping (u8 wraps by its cast). */
template <class T>
__global__ void coll_reduce_kernel(int op, T *dst, const T *a, const T *b, size_t n, int divisor)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        T r = (T)HOOP__COMBINE(op, a[i], b[i]);
        if (divisor > 0) r = (T)(r / (T)divisor);
        dst[i] = r;
    }
}

/* Signed integers: sums and products in the unsigned type of the width (they wrap). */
template <class T, class U>
__device__ void coll_reduce_wrap(int op, T *dst, const T *a, const T *b, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        T x = a[i], y = b[i];
        if (op == HOOP_OP_PROD)
            dst[i] = (T)((U)x * (U)y);
        else if (op == HOOP_OP_MIN || op == HOOP_OP_MAX)
            dst[i] = HOOP__COMBINE(op, x, y);
        else
            dst[i] = (T)((U)x + (U)y);
    }
}

__global__ void coll_reduce_i32_kernel(int op, int32_t *dst, const int32_t *a, const int32_t *b,
                                       size_t n)
{
    coll_reduce_wrap<int32_t, uint32_t>(op, dst, a, b, n);
}

__global__ void coll_reduce_i64_kernel(int op, int64_t *dst, const int64_t *a, const int64_t *b,
                                       size_t n)
{
    coll_reduce_wrap<int64_t, uint64_t>(op, dst, a, b, n);
}

__global__ void coll_reduce_half_kernel(int bf, int op, int sat, uint16_t *dst, const uint16_t *a,
                                        const uint16_t *b, size_t n, int divisor)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = hoop__half_combine(bf, op, sat, a[i], b[i], divisor);
}

/* hoop_dtype_size's values (the module cannot call into libhoop: it gets only the
 * error and log functions from it, src/cuda/module.cu). */
static size_t coll_elem_size(hoop_dtype t)
{
    switch (t) {
    case HOOP_DTYPE_F32:
    case HOOP_DTYPE_I32: return 4;
    case HOOP_DTYPE_F64:
    case HOOP_DTYPE_I64: return 8;
    case HOOP_DTYPE_F16:
    case HOOP_DTYPE_BF16: return 2;
    case HOOP_DTYPE_U8: return 1;
    default: return 0;
    }
}

extern "C" hoop_status hoop__cuda_coll_reduce(hoop_dtype dtype, hoop_op op, void *dst,
                                              const void *a, const void *b, size_t count,
                                              int divisor, hoop__cuda_stream_t s)
{
    size_t elem = coll_elem_size(dtype);
    int sat = op == (hoop_op)HOOP_OP_COUNT_;
    if (elem == 0 || (unsigned)op > (unsigned)HOOP_OP_COUNT_ ||
        (sat && dtype != HOOP_DTYPE_F16 && dtype != HOOP_DTYPE_BF16))
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop__cuda_coll_reduce: dtype %d with op %d",
                          (int)dtype, (int)op);
    if (count > SIZE_MAX / elem)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop__cuda_coll_reduce: %zu elements of %zu bytes",
                          count, elem);
    if (count == 0) return HOOP_OK;
    if (op != HOOP_OP_AVG) divisor = 0;
    size_t blocks = (count + COLL_BLOCK - 1) / COLL_BLOCK;
    unsigned grid = (unsigned)(blocks < COLL_MAX_GRID ? blocks : COLL_MAX_GRID);
    int o = (int)op;
    switch (dtype) {
    case HOOP_DTYPE_F32:
        HOOP_KLAUNCH(coll_reduce_kernel<float>, grid, COLL_BLOCK, 0, s, o, (float *)dst,
                     (const float *)a, (const float *)b, count, divisor);
        break;
    case HOOP_DTYPE_F64:
        HOOP_KLAUNCH(coll_reduce_kernel<double>, grid, COLL_BLOCK, 0, s, o, (double *)dst,
                     (const double *)a, (const double *)b, count, divisor);
        break;
    case HOOP_DTYPE_U8: /* sums and products wrap by the cast back to uint8_t */
        HOOP_KLAUNCH(coll_reduce_kernel<uint8_t>, grid, COLL_BLOCK, 0, s, o, (uint8_t *)dst,
                     (const uint8_t *)a, (const uint8_t *)b, count, 0);
        break;
    case HOOP_DTYPE_I32:
        HOOP_KLAUNCH(coll_reduce_i32_kernel, grid, COLL_BLOCK, 0, s, o, (int32_t *)dst,
                     (const int32_t *)a, (const int32_t *)b, count);
        break;
    case HOOP_DTYPE_I64:
        HOOP_KLAUNCH(coll_reduce_i64_kernel, grid, COLL_BLOCK, 0, s, o, (int64_t *)dst,
                     (const int64_t *)a, (const int64_t *)b, count);
        break;
    default: /* F16, BF16 */
        HOOP_KLAUNCH(coll_reduce_half_kernel, grid, COLL_BLOCK, 0, s, dtype == HOOP_DTYPE_BF16, o,
                     sat, (uint16_t *)dst, (const uint16_t *)a, (const uint16_t *)b, count,
                     divisor);
        break;
    }
    return HOOP_KCHECK("coll_reduce_kernel");
}

__global__ void coll_prescale_kernel(int bf, uint16_t *dst, const uint16_t *src, size_t n,
                                     int divisor)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = bf ? hoop__bf16_to_f32_inl(src[i]) : hoop__f16_to_f32_inl(src[i]);
        float r = x / (float)divisor;
        dst[i] = bf ? hoop__f32_to_bf16_inl(r) : hoop__f32_to_f16_inl(r);
    }
}

extern "C" hoop_status hoop__cuda_coll_prescale(hoop_dtype dtype, void *dst, const void *src,
                                                size_t count, int divisor, hoop__cuda_stream_t s)
{
    if ((dtype != HOOP_DTYPE_F16 && dtype != HOOP_DTYPE_BF16) || divisor <= 0)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop__cuda_coll_prescale: dtype %d, divisor %d",
                          (int)dtype, divisor);
    if (count == 0) return HOOP_OK;
    size_t blocks = (count + COLL_BLOCK - 1) / COLL_BLOCK;
    unsigned grid = (unsigned)(blocks < COLL_MAX_GRID ? blocks : COLL_MAX_GRID);
    HOOP_KLAUNCH(coll_prescale_kernel, grid, COLL_BLOCK, 0, s, dtype == HOOP_DTYPE_BF16,
                 (uint16_t *)dst, (const uint16_t *)src, count, divisor);
    return HOOP_KCHECK("coll_prescale_kernel");
}
