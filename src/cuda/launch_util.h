/* What the kernel sources share (private to src/cuda): grid sizing, the
 * launch status, and the fixed-order block reduction. */
#ifndef MT_CUDA_LAUNCH_UTIL_H
#define MT_CUDA_LAUNCH_UTIL_H
#include "cuda/compat.h"
#include "cuda/context.h"
#include <stddef.h>

#define MT_EW_THREADS 256  /* element-wise kernels: one thread per element */
#define MT_ROW_THREADS 256 /* row kernels: one block per row; a power of two */
/* Column sums (bias and norm-weight gradients over many rows), in two
 * fixed-order stages: the rows are cut into mt_col_split's row groups; a
 * block of MT_COL_GROUP columns x MT_COL_LANES row lanes takes one row group
 * (lane y sums its rows y, y + MT_COL_LANES, ... in order, mt_col_lanes_sum
 * adds the lanes in lane order) and writes one partial per (row group,
 * column) into the context's scratch; mt_col_partials_add then adds a
 * column's partials in row-group order onto the output. One row group (few
 * rows, or too many columns for the scratch) adds onto the output directly.
 * Deterministic (the same order every run); not the CPU's row order, so
 * within rounding of it rather than its bits. */
#define MT_COL_GROUP 32
#define MT_COL_LANES 8
#define MT_COL_MAX_SPLIT 64

static inline unsigned mt_blocks_for(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }
static inline cudaStream_t mt_stream(const mt_cuda_ctx *c) { return (cudaStream_t)c->stream; }
/* The launch's error (a bad configuration), as the launchers return it. */
static inline int mt_launch_status(void) { return (int)cudaGetLastError(); }

/* Sum of v over the NT threads of the block (NT a power of two, MT_ROW_THREADS
 * by default), by a fixed tree in shared memory red[NT]: the same order every
 * run. Every thread of the block must call it; all get the total. */
template <int NT, typename T> __device__ static inline T mt_block_sum_n(T v, T *red) {
    int t = threadIdx.x;
    red[t] = v;
    __syncthreads();
    for (int s = NT / 2; s > 0; s >>= 1) {
        if (t < s) red[t] += red[t + s];
        __syncthreads();
    }
    T r = red[0];
    __syncthreads(); // red is reused by the next call
    return r;
}
template <typename T> __device__ static inline T mt_block_sum(T v, T *red) { return mt_block_sum_n<MT_ROW_THREADS>(v, red); }

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

template <int NT, typename T> __device__ static inline T mt_block_max_n(T v, T *red) {
    int t = threadIdx.x;
    red[t] = v;
    __syncthreads();
    for (int s = NT / 2; s > 0; s >>= 1) {
        if (t < s) red[t] = red[t] > red[t + s] ? red[t] : red[t + s];
        __syncthreads();
    }
    T r = red[0];
    __syncthreads();
    return r;
}
template <typename T> __device__ static inline T mt_block_max(T v, T *red) { return mt_block_max_n<MT_ROW_THREADS>(v, red); }

typedef struct {
    int groups, rows; /* row groups, rows per group (the last may have fewer) */
} mt_col_split;
/* sums: the column sums a kernel makes at once (each needs groups x C partials) */
static inline mt_col_split mt_col_split_for(int N, int C, int sums) {
    mt_col_split s;
    long g = N / 256; /* at least 256 rows a group: 32 per lane */
    long cap = (long)(MT_CUDA_COL_SCRATCH / ((size_t)(C > 0 ? C : 1) * (size_t)sums));
    if (g > MT_COL_MAX_SPLIT) g = MT_COL_MAX_SPLIT;
    if (g > cap) g = cap;
    s.groups = g > 1 ? (int)g : 1;
    s.rows = (N + s.groups - 1) / s.groups;
    return s;
}

/* out[j] (+)= the sum over groups of part[g * C + j], in group order; a thread per column */
__global__ static void mt_col_partials_add(float *out, const float *part, int groups, int C) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= C) return;
    float a = 0.0f;
    for (int g = 0; g < groups; g++) a += part[(size_t)g * C + j];
    out[j] += a;
}
/* a stage-1 partial: onto the output (one group) or into the scratch */
__device__ static inline void mt_col_put(float *out, float *part, int groups, int C, int j, float v) {
    if (groups == 1) out[j] += v;
    else part[(size_t)blockIdx.y * C + j] = v;
}
static inline void mt_col_finish(const mt_cuda_ctx *c, float *out, const float *part, int groups, int C) {
    if (groups > 1 && out)
        MT_LAUNCH(mt_col_partials_add, mt_blocks_for((size_t)C, 256), 256, 0, (cudaStream_t)c->stream, out, part,
                  groups, C);
}

#endif
