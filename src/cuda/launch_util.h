/* What the kernel sources share (private to src/cuda): grid sizing, the
 * launch status, and the fixed-order block reduction. */
#ifndef MT_CUDA_LAUNCH_UTIL_H
#define MT_CUDA_LAUNCH_UTIL_H
#include "cuda/compat.h"
#include "cuda/context.h"
#include <stddef.h>

#define MT_EW_THREADS 256  /* element-wise kernels: one thread per element */
#define MT_ROW_THREADS 256 /* row kernels: one block per row; a power of two */
#define MT_COL_THREADS 128 /* column kernels: one thread per column */
/* Column sums (bias and norm-weight gradients): a block of MT_COL_GROUP
 * columns x MT_COL_LANES row lanes; lane y sums rows y, y + MT_COL_LANES, ...
 * of its column in order, then mt_col_lanes_sum adds the lanes in lane
 * order. Deterministic (the same order every run); not the CPU's row order,
 * so within rounding of it rather than its bits. */
#define MT_COL_GROUP 32
#define MT_COL_LANES 32

static inline unsigned mt_blocks_for(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }
static inline cudaStream_t mt_stream(const mt_cuda_ctx *c) { return (cudaStream_t)c->stream; }
/* The launch's error (a bad configuration), as the launchers return it. */
static inline int mt_launch_status(void) { return (int)cudaGetLastError(); }

/* Sum of v over the MT_ROW_THREADS threads of the block, by a fixed tree in
 * shared memory red[MT_ROW_THREADS]: the same order every run. Every thread
 * of the block must call it; all get the total. */
template <typename T> __device__ static inline T mt_block_sum(T v, T *red) {
    int t = threadIdx.x;
    red[t] = v;
    __syncthreads();
    for (int s = MT_ROW_THREADS / 2; s > 0; s >>= 1) {
        if (t < s) red[t] += red[t + s];
        __syncthreads();
    }
    T r = red[0];
    __syncthreads(); // red is reused by the next call
    return r;
}

/* The column's total (lane 0 gets it; other lanes 0) of the lanes' partial
 * sums v, in lane order, through red[MT_COL_LANES][MT_COL_GROUP + 1]. Every
 * thread of the block must call it. */
template <typename T> __device__ static inline T mt_col_lanes_sum(T v, T (*red)[MT_COL_GROUP + 1]) {
    red[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
    T s = 0;
    if (threadIdx.y == 0)
        for (int l = 0; l < MT_COL_LANES; l++) s += red[l][threadIdx.x];
    __syncthreads(); // red is reused by the next call
    return s;
}

/* Sum and max over the 32 lanes of a warp by an xor butterfly (every lane
 * gets the result; the same order every run). */
#define MT_ROW_WARPS 4 /* warp-per-row kernels: rows (warps) per block of 32 x MT_ROW_WARPS threads */
template <typename T> __device__ static inline T mt_warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <typename T> __device__ static inline T mt_warp_max(T v) {
    for (int o = 16; o > 0; o >>= 1) {
        T u = __shfl_xor_sync(0xffffffffu, v, o);
        v = u > v ? u : v;
    }
    return v;
}

template <typename T> __device__ static inline T mt_block_max(T v, T *red) {
    int t = threadIdx.x;
    red[t] = v;
    __syncthreads();
    for (int s = MT_ROW_THREADS / 2; s > 0; s >>= 1) {
        if (t < s) red[t] = red[t] > red[t + s] ? red[t] : red[t + s];
        __syncthreads();
    }
    T r = red[0];
    __syncthreads();
    return r;
}

#endif
