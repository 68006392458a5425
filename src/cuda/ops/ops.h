/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/ops/ops.h -- the CUDA backend's launchers, one per entry of the kernel table
 * (src/autograd/kern.h says what each computes; the CPU table, kern_cpu.c, is every
 * launcher's reference). Each takes the table's arguments, checks what it needs, launches
 * on the context's stream (src/cuda/ctx.h) and returns HOOP_ERR_CUDA naming the kernel
 * when the launch fails. One file per op under src/cuda/ops/, each compiled by nvcc and,
 * for make check, by the host's C++ compiler under the host execution layer (hx.h).
 * Entries without a kernel yet return HOOP_ERR_UNSUPPORTED naming the entry.
 */
#ifndef HOOP_CUDA_OPS_OPS_H
#define HOOP_CUDA_OPS_OPS_H

#include "cuda/ctx.h"

extern "C" {
#include "autograd/kern.h"
}

/* A grid of ceil(n / block) blocks, capped at CUDA's 2^31 - 1 (kernels loop beyond it). */
static inline unsigned hoop__cuda_grid(size_t n, unsigned block)
{
    size_t g = (n + block - 1) / block;
    return g > 0x7fffffffu ? 0x7fffffffu : (unsigned)(g ? g : 1);
}

// ----- deterministic reductions across blocks (reduce.cu)
/*
 * A sum over many blocks, the same bits on every run: pass 1, block b of grid G sums the
 * fixed contiguous slice [b * chunk, min(n, (b + 1) * chunk)) of the n terms (each thread
 * a strided share in double, then hoop__cuda_block_sum's fixed tree) into partial[b];
 * pass 2, hoop__cuda_partials_finish, one block, adds the G partials in a fixed tree. No
 * float atomics, and G and chunk depend on n alone (hoop__cuda_partials_shape), never on
 * the device or the scheduling. The partials live in the calling thread's scratch
 * (hoop__cuda_partials): both passes go to the compute stream back to back, so one
 * reduction's pass 2 has read them before the next one's pass 1 writes them, and a graph
 * captured with them replays the same two kernels.
 */
#define HOOP_CUDA_PARTIALS 1024   /* pass 1's largest grid: the scratch's doubles */
#define HOOP_CUDA_SUM_THREADS 256 /* threads of every block of both passes; a power of two */

/* The sum over the block of each thread's v, in a fixed tree over shm (blockDim.x doubles
 * of shared memory, blockDim.x a power of two), returned to thread 0 (the others get 0:
 * only thread 0 reads shm[0], so a second call may follow at once). Every thread of the
 * block must call it (it has barriers). */
static __device__ __forceinline__ double hoop__cuda_block_sum(double v, double *shm)
{
    shm[threadIdx.x] = v;
    __syncthreads();
    for (unsigned h = blockDim.x / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h) shm[threadIdx.x] += shm[threadIdx.x + h];
        __syncthreads();
    }
    return threadIdx.x == 0 ? shm[0] : 0.0;
}

/* Pass 1's shape for n terms of which a block should get at least min_chunk: *grid blocks
 * (1 ..= HOOP_CUDA_PARTIALS) of *chunk terms each (the last one's may be shorter, none
 * empty); n 0 gives one block of nothing. */
static inline void hoop__cuda_partials_shape(size_t n, size_t min_chunk, unsigned *grid,
                                             size_t *chunk)
{
    size_t c = (n + HOOP_CUDA_PARTIALS - 1) / HOOP_CUDA_PARTIALS;
    c = c < min_chunk ? min_chunk : c;
    c = c ? c : 1;
    *chunk = c;
    *grid = n ? (unsigned)((n + c - 1) / c) : 1u;
}

/* The calling thread's HOOP_CUDA_PARTIALS doubles of device memory, made on its first
 * call (hoop__cuda_malloc's errors; so the first reduction of a thread must not be inside
 * a capture, which a warm-up step ensures) and kept for the thread's life, as a captured
 * graph refers to them. */
hoop_status hoop__cuda_partials(double **part);

/* Pass 2 on the compute stream: total = the sum of part[0 .. nparts) (a fixed tree, one
 * block); then *yf = (float)(total / div) when yf is set, else *yd += total. */
hoop_status hoop__cuda_partials_finish(const double *part, unsigned nparts, float *yf, double div,
                                       double *yd);

extern "C" {
// elementwise.cu
hoop_status hoop__cuda_fill(float *dst, size_t count, float value);
hoop_status hoop__cuda_axpy_or_copy(float *dst, const float *src, size_t count, int acc);
hoop_status hoop__cuda_add(float *y, const float *a, const float *b, size_t count);
hoop_status hoop__cuda_scale(float *g, size_t count, float coef);
hoop_status hoop__cuda_reduce_bwd(float *dx, const float *dy, float scale, size_t count, int acc);
hoop_status hoop__cuda_dropout_bwd(float *dx, const float *dy, const float *mask, size_t count,
                                   int acc);
// bias.cu
hoop_status hoop__cuda_bias_fill(float *y, const float *bias, size_t N, size_t C, size_t inner);
hoop_status hoop__cuda_bias_add(float *y, const float *x, const float *bias, size_t N, size_t C,
                                size_t inner);
// gemm.cu
hoop_status hoop__cuda_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha,
                            const float *A, int lda, const float *B, int ldb, float beta, float *C,
                            int ldc);
// group B: optim.cu, im2col.cu, pool.cu
hoop_status hoop__cuda_sgd(const struct hoop__sgd_args *a, const struct hoop__step_scalars *s,
                           float *p, const float *g, float *buf, size_t count);
hoop_status hoop__cuda_adamw(const struct hoop__adamw_args *a, const struct hoop__step_scalars *s,
                             float *p, const float *g, float *m, float *v, size_t count);
hoop_status hoop__cuda_sqnorm(double *sq, const float *g, size_t count);
hoop_status hoop__cuda_clip_scale(float *g, size_t count, const double *sq, float max_norm);
// src/cuda/graph.cu: staging and graphs
hoop_status hoop__cuda_upload(void *dst, const void *src, size_t bytes);
hoop_status hoop__cuda_describe(char *buf, size_t len);
hoop_status hoop__cuda_table_mem_stats(struct hoop__mem_stats *st);
hoop_status hoop__cuda_graph_begin(void);
hoop_status hoop__cuda_graph_end(void **graph);
hoop_status hoop__cuda_graph_launch(void *graph);
hoop_status hoop__cuda_graph_sync(void *graph);
void hoop__cuda_graph_free(void *graph);
hoop_status hoop__cuda_im2col(float *col, const float *x, const struct hoop__conv_geom *g);
hoop_status hoop__cuda_col2im(float *dx, const float *col, const struct hoop__conv_geom *g);
hoop_status hoop__cuda_conv_scratch(const struct hoop__conv_geom *g, size_t *floats);
hoop_status hoop__cuda_conv_fwd(float *y, const float *x, const float *w, float *scratch,
                                const struct hoop__conv_geom *g);
hoop_status hoop__cuda_conv_bwd(float *dx, float *dw, const float *dy, const float *x,
                                const float *w, float *scratch, const struct hoop__conv_geom *g,
                                int acc_x, int acc_w);
hoop_status hoop__cuda_pool_fwd(float *y, int32_t *arg, const float *x, size_t planes, int64_t H,
                                int64_t W, int64_t OH, int64_t OW, int kernel, int stride);
hoop_status hoop__cuda_pool_bwd(float *dx, const float *dy, const int32_t *arg, size_t planes,
                                int64_t H, int64_t W, int64_t OH, int64_t OW, int kernel,
                                int stride, int acc);
// dropout.cu
hoop_status hoop__cuda_dropout_fwd(float *y, float *mask, const float *x, size_t count, float p,
                                   const uint64_t *seed, uint64_t offset);
// group A: unary.cu, softmax.cu, reduce.cu
hoop_status hoop__cuda_unary_fwd(enum hoop__unary kind, float *y, const float *x, size_t count);
hoop_status hoop__cuda_unary_bwd(enum hoop__unary kind, float *dx, const float *dy, const float *x,
                                 const float *y, size_t count, int acc);
hoop_status hoop__cuda_softmax_fwd(float *y, const float *x, size_t rows, size_t C);
hoop_status hoop__cuda_softmax_bwd(float *dx, const float *y, const float *dy, size_t rows,
                                   size_t C, int acc);
hoop_status hoop__cuda_ce_fwd(float *loss, float *probs, const float *x, const int32_t *labels,
                              size_t N, size_t C, float eps);
hoop_status hoop__cuda_ce_bwd(float *dx, const float *probs, const int32_t *labels,
                              const float *dloss, size_t N, size_t C, float eps, int acc);
hoop_status hoop__cuda_reduce_fwd(float *y, const float *x, size_t count, int mean);
hoop_status hoop__cuda_bias_grad(float *db, const float *dy, size_t N, size_t C, size_t inner,
                                 int acc);
}

#endif /* HOOP_CUDA_OPS_OPS_H */
