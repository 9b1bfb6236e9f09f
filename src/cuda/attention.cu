// Causal attention with grouped-query heads, the simple version
// (cuda/kernels.h): per query head h (kv head h / (NH/NKV)), GEMMs batched
// over the batch through the GEMM wrapper and row kernels for the softmax,
// with the scores of one head, B x T x T floats, in the scratch.
//   forward:  S = scale K Q^T;  P = exp(S - lse) on j <= i (lse saved);
//             Pd = P * dropout scale;  out_h = Pd V
//   backward: S, P, Pd recomputed;  dPd = dout_h V^T;  dP = dPd * dropout scale;
//             D_i = sum_j P_ij dP_ij;  dS = P (dP - D);
//             dV += Pd^T dout_h;  dQ_h = scale dS K;  dK += scale dS^T Q_h
// dK and dV of a kv head sum its query heads in head order (the first
// overwrites): deterministic. Dropout coordinates: (sample, query i, head0 + h, key j).
// Causal blocks: the queries are cut into blocks of TB rows (TB = 256 when it
// divides T, else one block); the GEMMs of query block k use keys 0 .. its
// end only, and those of key block k (dK, dV) queries from its start only,
// so the masked upper triangle beyond the diagonal blocks is never computed
// (T = 1024: 10 of 16 block products). Entries past a row's block end are
// never read; within the diagonal block the softmax writes the zeros.
#include "cuda/kernels.h"
#include "cuda/device_math.h"
#include "cuda/launch_util.h"
#include "cuda/philox_device.h"
#include <float.h>
#include <math.h>

struct drop_args {
    mt_dev_dropout d;
    const uint64_t *sample_ids;
    uint32_t group;
};

// One query row (b, i) of one head per warp (MT_ROW_WARPS rows a block): S row -> P row (in place, or
// Pd where dropout is on); lse saved. A warp per row: its reductions are shuffles, no block barriers.
__global__ static void softmax_fwd(float *S, float *lse, int T, int TB, int NH, int h, drop_args dr, int rows) {
    int row = blockIdx.x * MT_ROW_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return; // the whole warp
    int b = row / T, i = row % T;
    float *s = S + (size_t)row * T;
    float mx = -FLT_MAX;
    for (int j = lane; j <= i; j += 32) mx = s[j] > mx ? s[j] : mx;
    mx = mt_warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j <= i; j += 32) sum += mt_dev_expf(s[j] - mx);
    sum = mt_warp_sum(sum);
    float l = mx + logf(sum);
    int end = (i / TB + 1) * TB; // the row's block end: the GEMMs read no further
    for (int j = lane; j < end; j += 32) {
        float p = j <= i ? mt_dev_expf(s[j] - l) : 0.0f;
        if (dr.d.on && j <= i) p *= mt_dev_dropout_scale(&dr.d, dr.sample_ids[b], (uint32_t)i, dr.group, (uint32_t)j);
        s[j] = p;
    }
    if (lane == 0) lse[((size_t)b * NH + h) * T + i] = l;
}

// Backward row (b, i), a warp per row: S holds the scores, dP holds dPd; leaves Pd in S and dS in dP.
__global__ static void softmax_bwd(float *S, float *dP, const float *lse, int T, int TB, int NH, int h, drop_args dr,
                                   int rows) {
    int row = blockIdx.x * MT_ROW_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    int b = row / T, i = row % T;
    float *s = S + (size_t)row * T, *dp = dP + (size_t)row * T;
    float l = lse[((size_t)b * NH + h) * T + i], D = 0.0f;
    for (int j = lane; j <= i; j += 32) {
        float ds = dr.d.on ? mt_dev_dropout_scale(&dr.d, dr.sample_ids[b], (uint32_t)i, dr.group, (uint32_t)j) : 1.0f;
        float p = mt_dev_expf(s[j] - l), g = dp[j] * ds;
        D += p * g;
    }
    D = mt_warp_sum(D);
    int end = (i / TB + 1) * TB;
    for (int j = lane; j < end; j += 32) {
        if (j > i) {
            s[j] = 0.0f;
            dp[j] = 0.0f;
            continue;
        }
        float ds = dr.d.on ? mt_dev_dropout_scale(&dr.d, dr.sample_ids[b], (uint32_t)i, dr.group, (uint32_t)j) : 1.0f;
        float p = mt_dev_expf(s[j] - l);
        dp[j] = p * (dp[j] * ds - D);
        s[j] = p * ds;
    }
}

static drop_args make_drop(const mt_cuda_attn_dropout *drop, int h) {
    drop_args a;
    const mt_dropout *d = drop ? &drop->d : NULL;
    a.d = mt_dev_dropout_make(d ? d->p : 0.0f, d ? d->seed : 0, d ? d->step : 0, d ? d->layer : 0, d ? d->site : 0);
    a.sample_ids = drop ? drop->sample_ids : NULL;
    a.group = (uint32_t)((drop ? drop->head0 : 0) + h);
    return a;
}

extern "C" size_t mt_cuda_attention_scratch_floats(int B, int T, int NH, int NKV, int HS) {
    (void)NH;
    (void)NKV;
    (void)HS;
    return 2 * (size_t)B * T * T;
}

// the causal block size (see the top)
static int causal_block(int T) { return T > 256 && T % 256 == 0 ? 256 : T; }

// S (B x [T x T] row-major) = scale Q_h K^T: column-major S^T = K Q^T; query block [r0, r1) against keys [0, r1)
static int scores(const mt_cuda_ctx *c, float *S, const float *qkv, int B, int T, int ld, int HS, int h, int kv, int NH,
                  float scale) {
    const float *Q = qkv + (size_t)h * HS, *K = qkv + (size_t)(NH + kv) * HS;
    long long sx = (long long)T * ld, sS = (long long)T * T;
    int TB = causal_block(T), e = 0;
    for (int r0 = 0; r0 < T && !e; r0 += TB) {
        int r1 = r0 + TB;
        e = mt_cuda_gemm(c, 'T', 'N', r1, TB, HS, scale, K, MT_CUDA_F32, ld, sx, Q + (size_t)r0 * ld, MT_CUDA_F32, ld,
                         sx, 0.0f, S + (size_t)r0 * T, MT_CUDA_F32, T, sS, B);
    }
    return e;
}

extern "C" int mt_cuda_attention_forward_gqa(const mt_cuda_ctx *c, float *out, float *lse, const float *qkv, int B,
                                             int T, int NH, int NKV, int HS, const mt_cuda_attn_dropout *drop,
                                             float *scratch) {
    if (B <= 0 || T <= 0) return 0;
    if (NKV <= 0 || NH % NKV) return (int)cudaErrorInvalidValue;
    int G = NH / NKV, ld = (NH + 2 * NKV) * HS, ldo = NH * HS;
    float scale = 1.0f / sqrtf((float)HS), *S = scratch;
    long long sx = (long long)T * ld, sS = (long long)T * T, so = (long long)T * ldo;
    for (int h = 0; h < NH; h++) {
        int kv = h / G;
        int e = scores(c, S, qkv, B, T, ld, HS, h, kv, NH, scale);
        if (e) return e;
        MT_LAUNCH(softmax_fwd, mt_blocks_for((size_t)B * T, MT_ROW_WARPS), 32 * MT_ROW_WARPS, 0, mt_stream(c), S, lse,
                  T, causal_block(T), NH, h, make_drop(drop, h), B * T);
        if ((e = mt_launch_status())) return e;
        // out_h^T (HS x T) = V^T (HS x T) Pd^T: Pd row-major is the column-major Pd^T; query block [r0, r1), keys [0, r1)
        const float *V = qkv + (size_t)(NH + NKV + kv) * HS;
        for (int r0 = 0, TB = causal_block(T); r0 < T && !e; r0 += TB)
            e = mt_cuda_gemm(c, 'N', 'N', HS, TB, r0 + TB, 1.0f, V, MT_CUDA_F32, ld, sx, S + (size_t)r0 * T, MT_CUDA_F32, T,
                             sS, 0.0f, out + (size_t)h * HS + (size_t)r0 * ldo, MT_CUDA_F32, ldo, so, B);
        if (e) return e;
    }
    return 0;
}

extern "C" int mt_cuda_attention_backward_gqa(const mt_cuda_ctx *c, float *dqkv, const float *dout, const float *qkv,
                                              const float *out, const float *lse, int B, int T, int NH, int NKV,
                                              int HS, const mt_cuda_attn_dropout *drop, float *scratch) {
    (void)out;
    if (B <= 0 || T <= 0) return 0;
    if (NKV <= 0 || NH % NKV) return (int)cudaErrorInvalidValue;
    int G = NH / NKV, ld = (NH + 2 * NKV) * HS, ldo = NH * HS;
    float scale = 1.0f / sqrtf((float)HS), *S = scratch, *dP = scratch + (size_t)B * T * T;
    long long sx = (long long)T * ld, sS = (long long)T * T, so = (long long)T * ldo;
    for (int h = 0; h < NH; h++) {
        int kv = h / G;
        float beta_kv = h % G == 0 ? 0.0f : 1.0f; // the group's first query head overwrites dK, dV
        const float *Q = qkv + (size_t)h * HS, *K = qkv + (size_t)(NH + kv) * HS,
                    *V = qkv + (size_t)(NH + NKV + kv) * HS, *dO = dout + (size_t)h * HS;
        float *dQ = dqkv + (size_t)h * HS, *dK = dqkv + (size_t)(NH + kv) * HS, *dV = dqkv + (size_t)(NH + NKV + kv) * HS;
        int e = scores(c, S, qkv, B, T, ld, HS, h, kv, NH, scale), TB = causal_block(T);
        // dPd (row-major) = dO V^T: column-major dPd^T = V dO^T; query block [r0, r1), keys [0, r1)
        for (int r0 = 0; r0 < T && !e; r0 += TB)
            e = mt_cuda_gemm(c, 'T', 'N', r0 + TB, TB, HS, 1.0f, V, MT_CUDA_F32, ld, sx, dO + (size_t)r0 * ldo, MT_CUDA_F32,
                             ldo, so, 0.0f, dP + (size_t)r0 * T, MT_CUDA_F32, T, sS, B);
        if (e) return e;
        MT_LAUNCH(softmax_bwd, mt_blocks_for((size_t)B * T, MT_ROW_WARPS), 32 * MT_ROW_WARPS, 0, mt_stream(c), S, dP,
                  lse, T, TB, NH, h, make_drop(drop, h), B * T);
        if ((e = mt_launch_status())) return e;
        for (int c0 = 0; c0 < T && !e; c0 += TB) {
            // key block [c0, c1) meets queries [c0, T) only (Pd and dS are 0 above the diagonal)
            size_t at = (size_t)c0 * T + (size_t)c0; // S / dP at query c0, key c0
            // dV^T (HS x keys) += dO^T (HS x queries) Pd
            e = mt_cuda_gemm(c, 'N', 'T', HS, TB, T - c0, 1.0f, dO + (size_t)c0 * ldo, MT_CUDA_F32, ldo, so, S + at,
                             MT_CUDA_F32, T, sS, beta_kv, dV + (size_t)c0 * ld, MT_CUDA_F32, ld, sx, B);
            // dK^T (HS x keys) += scale Q^T dS
            if (!e)
                e = mt_cuda_gemm(c, 'N', 'T', HS, TB, T - c0, scale, Q + (size_t)c0 * ld, MT_CUDA_F32, ld, sx, dP + at,
                                 MT_CUDA_F32, T, sS, beta_kv, dK + (size_t)c0 * ld, MT_CUDA_F32, ld, sx, B);
        }
        // dQ^T (HS x T) = scale K^T dS^T; query block [r0, r1), keys [0, r1)
        for (int r0 = 0; r0 < T && !e; r0 += TB)
            e = mt_cuda_gemm(c, 'N', 'N', HS, TB, r0 + TB, scale, K, MT_CUDA_F32, ld, sx, dP + (size_t)r0 * T, MT_CUDA_F32,
                             T, sS, 0.0f, dQ + (size_t)r0 * ld, MT_CUDA_F32, ld, sx, B);
        if (e) return e;
    }
    return 0;
}
