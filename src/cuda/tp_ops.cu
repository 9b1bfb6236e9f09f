// Kernels of the tensor-parallel layers and of mixed-precision gradient
// accumulation (cuda/kernels.h): the vocabulary-parallel cross-entropy's
// pieces, Falcon's q/k/v re-layouts, a shard's padding columns cleared, a
// bias added to rows, and the 16-bit accumulations. Each mirrors its CPU op
// (ops/softmax_xent.c, ops/rows.c, ops/qkv_groups.c, ops/tensor.c,
// ops/tensor16.c):
//  - element-wise and copies: the CPU's operations, bitwise the same;
//  - the shard statistics: a block per row, each thread an online max and
//    rescaled sum of exponentials over its strided columns (one read of the
//    row), the threads' pairs combined by the fixed block tree:
//    deterministic; mx and xt bitwise the CPU's; se within 1e-6 of the exact
//    sum, and of the CPU's within that sum's own drift (16 lane sums in
//    order: 1.6e-6 relative at 25,133 columns, tests/gpu/test_kernels.cu);
//  - the combination over shards and the losses: a thread per row, the
//    shards in the CPU's order (bitwise but for logf, whose device form may
//    differ from the C library's in the last bit).
// Row kernels take a 2-D grid: x over the row's columns (coalesced), y over
// rows (striding by gridDim.y past the grid's 65535 limit).
#include "cuda/kernels.h"
#include "cuda/device_math.h"
#include "cuda/launch_util.h"
#include <float.h>

#define MT_GRID_ROWS 65535u

static dim3 rows_grid(size_t width, int N) {
    unsigned ry = (unsigned)N < MT_GRID_ROWS ? (unsigned)N : MT_GRID_ROWS;
    return dim3(mt_blocks_for(width, MT_EW_THREADS), ry);
}
#define ROWS_LOOP(i, N) for (size_t i = blockIdx.y; i < (size_t)(N); i += gridDim.y)
#define COL_INDEX(j, width)                                     \
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; \
    if (j >= (width)) return

// ---- vocabulary-parallel cross-entropy

__global__ static void xent_shard_stats_rows(const float *logits, float *mx, float *se, float *xt,
                                             const int32_t *targets, int Vl, int ld, int v0) {
    __shared__ float red[MT_ROW_THREADS];
    size_t row = blockIdx.x;
    const float *x = logits + row * ld;
    float m = -FLT_MAX, s = 0.0f;
    for (int j = threadIdx.x; j < Vl; j += blockDim.x) {
        float v = x[j];
        if (v > m) { // the running sum to the new maximum (rare past the first columns)
            s *= mt_dev_expf(m - v);
            m = v;
        }
        s += mt_dev_expf(v - m);
    }
    float M = mt_block_max(m, red);
    s = s > 0.0f ? s * mt_dev_expf(m - M) : 0.0f;
    s = mt_block_sum(s, red);
    if (threadIdx.x == 0) {
        mx[row] = M;
        se[row] = s;
        int tg = targets[row], t = tg - v0;
        xt[row] = tg >= 0 && t >= 0 && t < Vl ? x[t] : 0.0f;
    }
}

__global__ static void xent_combine_lse_rows(float *lse, const float *mx, const float *se, int S, int N, int ld) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    float M = -FLT_MAX;
    for (int s = 0; s < S; s++) M = mx[(size_t)s * ld + n] > M ? mx[(size_t)s * ld + n] : M;
    float sum = 0.0f;
    for (int s = 0; s < S; s++)
        if (se[(size_t)s * ld + n] > 0.0f) sum += se[(size_t)s * ld + n] * mt_dev_expf(mx[(size_t)s * ld + n] - M);
    lse[n] = M + logf(sum);
}

template <bool FUSED>
__global__ static void xent_shard_grad_rows(float *logits, const float *lse, const int32_t *targets, int N, int Vl,
                                            int ld, int v0, float scale) {
    COL_INDEX(j, (size_t)Vl);
    ROWS_LOOP(i, N) {
        float *x = logits + i * ld;
        int tg = targets[i];
        if (tg < 0) {
            x[j] = 0.0f;
            continue;
        }
        float d = x[j] - lse[i];
        float g = scale * (FUSED ? mt_dev_expf_fused(d) : mt_dev_expf(d));
        if ((long)tg - v0 == (long)j) g -= scale;
        x[j] = g;
    }
}

__global__ static void xent_losses_rows(float *losses, const float *lse, const float *stats, int S, int N,
                                        const int32_t *targets, int V) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float xt = 0.0f;
    for (int s = 0; s < S; s++) xt += stats[(size_t)s * 3 * N + 2 * (size_t)N + i];
    int t = targets[i];
    // the CPU op stops the run on a target past the vocabulary; the device cannot: a NaN reaches the loss
    losses[i] = t < 0 ? 0.0f : t >= V ? mt_dev_f32_from_bits(0x7fc00000u) : lse[i] - xt;
}

extern "C" int mt_cuda_xent_shard_stats(const mt_cuda_ctx *c, const float *logits, float *mx, float *se, float *xt,
                                        const int32_t *targets, int N, int Vl, int ld, int v0) {
    if (N > 0) MT_LAUNCH(xent_shard_stats_rows, N, MT_ROW_THREADS, 0, mt_stream(c), logits, mx, se, xt, targets, Vl,
                         ld, v0);
    return mt_launch_status();
}

extern "C" int mt_cuda_xent_combine_lse(const mt_cuda_ctx *c, float *lse, const float *mx, const float *se, int S,
                                        int N, int ld) {
    if (N > 0) MT_LAUNCH(xent_combine_lse_rows, mt_blocks_for(N, MT_EW_THREADS), MT_EW_THREADS, 0, mt_stream(c), lse,
                         mx, se, S, N, ld);
    return mt_launch_status();
}

extern "C" int mt_cuda_xent_shard_grad(const mt_cuda_ctx *c, float *logits, const float *lse, const int32_t *targets,
                                       int N, int Vl, int ld, int v0, float scale, int exp_fused) {
    if (N <= 0 || Vl <= 0) return mt_launch_status();
    if (exp_fused)
        MT_LAUNCH(xent_shard_grad_rows<true>, rows_grid(Vl, N), MT_EW_THREADS, 0, mt_stream(c), logits, lse, targets,
                  N, Vl, ld, v0, scale);
    else
        MT_LAUNCH(xent_shard_grad_rows<false>, rows_grid(Vl, N), MT_EW_THREADS, 0, mt_stream(c), logits, lse, targets,
                  N, Vl, ld, v0, scale);
    return mt_launch_status();
}

extern "C" int mt_cuda_xent_losses_from_stats(const mt_cuda_ctx *c, float *losses, const float *lse,
                                              const float *stats, int S, int N, const int32_t *targets, int V) {
    if (N > 0) MT_LAUNCH(xent_losses_rows, mt_blocks_for(N, MT_EW_THREADS), MT_EW_THREADS, 0, mt_stream(c), losses,
                         lse, stats, S, N, targets, V);
    return mt_launch_status();
}

// ---- Falcon's q/k/v: grouped rows [n_groups (G + 2) hd] <-> planar rows [n_groups (nq + 2) hd]

struct qkv_shape {
    int n_groups, G, q0, nq, hd;
};

// planar column j of a row from its grouped column
__global__ static void qkv_to_planar(float *planar, const float *grouped, int N, qkv_shape s) {
    size_t pw = (size_t)s.n_groups * (s.nq + 2) * s.hd, gw = (size_t)(s.G + 2) * s.hd, w = (size_t)s.n_groups * gw;
    size_t qw = (size_t)s.n_groups * s.nq * s.hd, kvw = (size_t)s.n_groups * s.hd;
    COL_INDEX(j, pw);
    size_t src;
    if (j < qw) { // query heads [q0, q0 + nq) of group j / (nq hd)
        size_t gq = (size_t)s.nq * s.hd, g = j / gq;
        src = g * gw + (size_t)s.q0 * s.hd + (j - g * gq);
    } else { // the key (k = 0) or value (k = 1) head of group g
        size_t r = j - qw, k = r / kvw, g = (r - k * kvw) / s.hd;
        src = g * gw + (size_t)(s.G + k) * s.hd + (r - k * kvw - g * s.hd);
    }
    ROWS_LOOP(i, N) planar[i * pw + j] = grouped[i * w + src];
}

// grouped column j of a row from its planar column; query heads outside [q0, q0 + nq) are 0
__global__ static void qkv_to_grouped(float *grouped, const float *planar, int N, qkv_shape s) {
    size_t pw = (size_t)s.n_groups * (s.nq + 2) * s.hd, gw = (size_t)(s.G + 2) * s.hd, w = (size_t)s.n_groups * gw;
    size_t qw = (size_t)s.n_groups * s.nq * s.hd, kvw = (size_t)s.n_groups * s.hd;
    COL_INDEX(j, w);
    size_t g = j / gw, r = j - g * gw, h = r / s.hd, e = r - h * s.hd;
    long src = -1;
    if (h < (size_t)s.G) {
        if (h >= (size_t)s.q0 && h < (size_t)(s.q0 + s.nq)) src = (long)(g * s.nq * s.hd + (h - s.q0) * s.hd + e);
    } else {
        src = (long)(qw + (h - s.G) * kvw + g * s.hd + e);
    }
    ROWS_LOOP(i, N) grouped[i * w + j] = src < 0 ? 0.0f : planar[i * pw + (size_t)src];
}

extern "C" int mt_cuda_qkv_grouped_to_planar(const mt_cuda_ctx *c, float *planar, const float *grouped, int N,
                                             int n_groups, int G, int q0, int nq, int hd) {
    size_t pw = (size_t)n_groups * (nq + 2) * hd;
    if (N > 0 && pw > 0)
        MT_LAUNCH(qkv_to_planar, rows_grid(pw, N), MT_EW_THREADS, 0, mt_stream(c), planar, grouped, N,
                  qkv_shape{n_groups, G, q0, nq, hd});
    return mt_launch_status();
}

extern "C" int mt_cuda_qkv_planar_to_grouped(const mt_cuda_ctx *c, float *grouped, const float *planar, int N,
                                             int n_groups, int G, int q0, int nq, int hd) {
    size_t w = (size_t)n_groups * (G + 2) * hd;
    if (N > 0 && w > 0)
        MT_LAUNCH(qkv_to_grouped, rows_grid(w, N), MT_EW_THREADS, 0, mt_stream(c), grouped, planar, N,
                  qkv_shape{n_groups, G, q0, nq, hd});
    return mt_launch_status();
}

// ---- rows and columns

__global__ static void zero_cols_rows(float *x, int N, size_t ld, int c0, int nc) {
    COL_INDEX(j, (size_t)nc);
    ROWS_LOOP(i, N) x[i * ld + c0 + j] = 0.0f;
}

__global__ static void add_bias_rows_k(float *x, const float *bias, int N, int C) {
    COL_INDEX(j, (size_t)C);
    float b = bias[j];
    ROWS_LOOP(i, N) x[i * C + j] += b;
}

extern "C" int mt_cuda_zero_cols(const mt_cuda_ctx *c, float *x, int N, size_t ld, int c0, int nc) {
    if (N > 0 && nc > 0) MT_LAUNCH(zero_cols_rows, rows_grid(nc, N), MT_EW_THREADS, 0, mt_stream(c), x, N, ld, c0, nc);
    return mt_launch_status();
}

extern "C" int mt_cuda_add_bias_rows(const mt_cuda_ctx *c, float *x, const float *bias, int N, int C) {
    if (N > 0 && C > 0) MT_LAUNCH(add_bias_rows_k, rows_grid(C, N), MT_EW_THREADS, 0, mt_stream(c), x, bias, N, C);
    return mt_launch_status();
}

// ---- 16-bit accumulation (core/dtype.c's mt_accumulate_16 / mt_add_from_16)

__global__ static void accumulate_16_k(int dt, uint16_t *acc, const float *x, size_t n) {
    COL_INDEX(i, n);
    acc[i] = mt_dev_narrow16(dt, mt_dev_widen16(dt, acc[i]) + x[i]);
}

__global__ static void add_from_16_k(int dt, float *dst, const uint16_t *src, size_t n) {
    COL_INDEX(i, n);
    dst[i] += mt_dev_widen16(dt, src[i]);
}

extern "C" int mt_cuda_accumulate_16(const mt_cuda_ctx *c, int dt, uint16_t *acc, const float *x, size_t n) {
    if (dt != 1 && dt != 2) return (int)cudaErrorInvalidValue;
    if (n > 0) MT_LAUNCH(accumulate_16_k, mt_blocks_for(n, MT_EW_THREADS), MT_EW_THREADS, 0, mt_stream(c), dt, acc, x, n);
    return mt_launch_status();
}

extern "C" int mt_cuda_add_from_16(const mt_cuda_ctx *c, int dt, float *dst, const uint16_t *src, size_t n) {
    if (dt != 1 && dt != 2) return (int)cudaErrorInvalidValue;
    if (n > 0) MT_LAUNCH(add_from_16_k, mt_blocks_for(n, MT_EW_THREADS), MT_EW_THREADS, 0, mt_stream(c), dt, dst, src, n);
    return mt_launch_status();
}
