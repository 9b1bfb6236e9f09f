// Causal attention with grouped-query heads on tensor cores, register
// form: the forward (cuda/kernels.h). The flash algorithm (64 queries of
// one head a block, 4 warps of 16 rows, key tiles of 64 up to the
// diagonal, the online softmax in fp32), every product the m16n8k16
// register-fragment one of cuda/tensor_core.h, so the scores, the
// softmax and the output accumulator never leave the registers: a lane
// holds rows g and g + 8 of its warp's 16 (g = lane / 4) and, of each
// 8-key block, the columns 2t and 2t + 1 (t = lane % 4); the row's max and
// sum are reduced over the four lanes of its quad by two shuffles; and the
// probabilities, packed to bf16, are the left operand of P V as they are
// (the accumulator layout of two adjacent 8-key blocks is the operand
// layout of one 16-key step). Shared memory holds only the bf16 Q, K and V
// tiles (row-major, prepared by attention_mma_operands.cu, copied in with
// cp.async a key tile ahead), read into fragments by ldmatrix (V with
// .trans). Per row (q, k, v and p d rounded to bf16 before a product):
//   s_j = scale q_i.k_j (j <= i);  m' = max(m, max_j s_j);  alpha = exp(m - m');
//   p_j = exp(s_j - m');  l = alpha l + sum_j p_j;  O_i = alpha O_i + sum_j bf16(p_j d_ij) v_j
//   end: out_i = O_i / l;  lse_i = m + log l
#include "cuda/kernels.h"
#include "cuda/device_math.h"
#include "cuda/launch_util.h"
#include "cuda/philox_device.h"
#include "cuda/tensor_core.h"
#include "cuda/attention_tc_tiles.h"
#include "cuda/attention_mma_operands.h"
#include "cuda/async_copy.h"
#include <math.h>

#define MMA_ROWS MT_TC_ROWS

struct mma_fwd_args {
    int T, Tp, NH, NKV, ldo;
    const uint16_t *q, *k, *v; // the prepared operands (attention_mma_operands.h)
    float scale;
    mt_dev_dropout d;
    const uint64_t *sample_ids;
    int head0;
};

// shared memory: Q, then K and V twice (the next key tile's copy runs while the warps work on this one),
// 64 rows of HS + 8 bf16 each (the pad puts the 8 rows an ldmatrix reads in different banks)
template <int HS> struct mma_fwd_smem {
    static constexpr int LDQ = HS + 8;
    static constexpr size_t TILE = 2 * (size_t)MMA_ROWS * LDQ; // K and V, bf16
    static constexpr size_t BYTES = ((size_t)MMA_ROWS * LDQ + 2 * TILE) * 2;
};

// max and sum over the four lanes of a quad (the lanes holding one row)
__device__ static inline float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ static inline float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// DROP: a compile-time form with attention dropout (its Philox draws, inlined per element, would cost the
// form without it some 60 registers)
template <int HS, bool DROP> __global__ static void mma_fwd(float *out, float *lse, mma_fwd_args a) {
    MT_DYNAMIC_SHARED(uint16_t, smem);
    typedef mma_fwd_smem<HS> L;
    constexpr int ldq = L::LDQ, NF = HS / 16, ND = HS / 8;
    const int n_qt = (a.T + MMA_ROWS - 1) / MMA_ROWS;
    const int qt = n_qt - 1 - (int)blockIdx.x; // the longest rows (most key tiles) first
    const int h = (int)blockIdx.y, b = (int)blockIdx.z, kv = h / (a.NH / a.NKV);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    uint16_t *Qs = smem;
    const int q0 = qt * MMA_ROWS, r0 = q0 + 16 * warp, i0 = r0 + g, i1 = i0 + 8; // this lane's two rows
    const int last = (q0 + MMA_ROWS < a.T ? q0 + MMA_ROWS : a.T) - 1; // the block's last query row
    const int n_kt = last / MMA_ROWS + 1;
    const uint16_t *Kg = a.k + mma_rows_at(b, kv, a.NKV, a.Tp, HS, 0), *Vg = a.v + mma_rows_at(b, kv, a.NKV, a.Tp, HS, 0);
    // key tile kt's K and V into buffer kt % 2
    auto fetch = [&](int kt) {
        uint16_t *Ks = Qs + MMA_ROWS * ldq + (kt % 2) * L::TILE, *Vs = Ks + MMA_ROWS * ldq;
        mt_cp_async_tile<MMA_ROWS, HS, MT_TC_THREADS>(Ks, ldq, Kg + (size_t)kt * MMA_ROWS * HS, HS);
        mt_cp_async_tile<MMA_ROWS, HS, MT_TC_THREADS>(Vs, ldq, Vg + (size_t)kt * MMA_ROWS * HS, HS);
    };
    mt_cp_async_tile<MMA_ROWS, HS, MT_TC_THREADS>(Qs, ldq, a.q + mma_rows_at(b, h, a.NH, a.Tp, HS, q0), HS);
    fetch(0);
    mt_cp_async_commit();
    uint32_t qa[NF][4]; // the warp's 16 query rows as left operands, for every key tile
    float o[ND][4];
MT_UNROLL
    for (int n = 0; n < ND; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    for (int kt = 0; kt < n_kt; kt++) {
        const int k0 = kt * MMA_ROWS;
        mt_cp_async_wait<0>();
        __syncthreads(); // tile kt is in, and every warp is done with tile kt - 1's buffer
        if (kt + 1 < n_kt) { // the next tile's copy runs while this one is multiplied
            fetch(kt + 1);
            mt_cp_async_commit();
        }
        if (kt == 0)
MT_UNROLL
            for (int kc = 0; kc < NF; kc++) mt_tc_ldsm_a(qa[kc], Qs, ldq, 16 * warp, 16 * kc, lane);
        const uint16_t *Ks = Qs + MMA_ROWS * ldq + (kt % 2) * L::TILE, *Vs = Ks + MMA_ROWS * ldq;
        if (r0 >= a.T || k0 > r0 + 15) continue; // the warp's rows are past T or all above this tile (causal)
        float s[8][4]; // S = Q_w K^T, 16 x 64: 8 blocks of 8 keys, loaded by pairs
MT_UNROLL
        for (int nb = 0; nb < 8; nb++) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
MT_UNROLL
        for (int np = 0; np < 4; np++) {
            if (k0 + 16 * np > r0 + 15) continue; // above the diagonal for all 16 rows (the same in the warp)
            const bool second = k0 + 16 * np + 8 <= r0 + 15;
MT_UNROLL
            for (int kc = 0; kc < NF; kc++) {
                uint32_t kb[4];
                mt_tc_ldsm_b_nk(kb, Ks, ldq, 16 * np, 16 * kc, lane);
                mt_mma_16816(s[2 * np], qa[kc], kb);
                if (second) mt_mma_16816(s[2 * np + 1], qa[kc], kb + 2);
            }
        }
        // the online softmax: element e of block nb is row e < 2 ? i0 : i1, key k0 + 8 nb + 2t + e % 2
        float mx0 = -INFINITY, mx1 = -INFINITY;
MT_UNROLL
        for (int nb = 0; nb < 8; nb++)
MT_UNROLL
            for (int e = 0; e < 4; e++) {
                const int i = e < 2 ? i0 : i1, j = k0 + 8 * nb + 2 * t + e % 2;
                float x = i < a.T && j <= i ? a.scale * s[nb][e] : -INFINITY;
                s[nb][e] = x;
                if (e < 2) mx0 = fmaxf(mx0, x);
                else mx1 = fmaxf(mx1, x);
            }
        const float mn0 = fmaxf(m0, quad_max(mx0)), mn1 = fmaxf(m1, quad_max(mx1));
        // l and O are 0 while m is -inf; a row without a key yet keeps p = 0
        const float al0 = m0 == -INFINITY ? 0.0f : mt_tc_exp(m0 - mn0), al1 = m1 == -INFINITY ? 0.0f : mt_tc_exp(m1 - mn1);
        float sum0 = 0.0f, sum1 = 0.0f;
MT_UNROLL
        for (int nb = 0; nb < 8; nb++)
MT_UNROLL
            for (int e = 0; e < 4; e++) {
                const int i = e < 2 ? i0 : i1, j = k0 + 8 * nb + 2 * t + e % 2;
                const float x = s[nb][e];
                float p = x == -INFINITY ? 0.0f : mt_tc_exp(x - (e < 2 ? mn0 : mn1));
                if (e < 2) sum0 += p;
                else sum1 += p;
                if (DROP && p != 0.0f)
                    p *= mt_dev_dropout_scale(&a.d, a.sample_ids[b], (uint32_t)i, (uint32_t)(a.head0 + h), (uint32_t)j);
                s[nb][e] = p; // p d, the product's operand
            }
        l0 = al0 * l0 + quad_sum(sum0), l1 = al1 * l1 + quad_sum(sum1);
        m0 = mn0, m1 = mn1;
MT_UNROLL
        for (int n = 0; n < ND; n++) o[n][0] *= al0, o[n][1] *= al0, o[n][2] *= al1, o[n][3] *= al1;
MT_UNROLL
        for (int kc = 0; kc < 4; kc++) { // O_w += (P d) V, 16 keys a step
            if (k0 + 16 * kc > r0 + 15) continue;
            const uint32_t pa[4] = {mt_tc_pack_bf16x2(s[2 * kc][0], s[2 * kc][1]), mt_tc_pack_bf16x2(s[2 * kc][2], s[2 * kc][3]),
                                    mt_tc_pack_bf16x2(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                                    mt_tc_pack_bf16x2(s[2 * kc + 1][2], s[2 * kc + 1][3])};
MT_UNROLL
            for (int np = 0; np < ND / 2; np++) {
                uint32_t vb[4];
                mt_tc_ldsm_b_kn(vb, Vs, ldq, 16 * kc, 16 * np, lane);
                mt_mma_16816(o[2 * np], pa, vb);
                mt_mma_16816(o[2 * np + 1], pa, vb + 2);
            }
        }
    }
    if (r0 >= a.T) return;
MT_UNROLL
    for (int rh = 0; rh < 2; rh++) {
        const int i = rh ? i1 : i0;
        if (i >= a.T) continue;
        const float inv = 1.0f / (rh ? l1 : l0);
        float *orow = out + ((size_t)b * a.T + i) * a.ldo + (size_t)h * HS + 2 * t;
MT_UNROLL
        for (int n = 0; n < ND; n++) orow[8 * n] = o[n][2 * rh] * inv, orow[8 * n + 1] = o[n][2 * rh + 1] * inv;
        if (t == 0) lse[((size_t)b * a.NH + h) * a.T + i] = (rh ? m1 : m0) + logf(rh ? l1 : l0);
    }
}

template <int HS, bool DROP> static int launch_form(const mt_cuda_ctx *c, float *out, float *lse, int B,
                                                    const mma_fwd_args &a) {
    size_t shared = mma_fwd_smem<HS>::BYTES;
    void (*kernel)(float *, float *, mma_fwd_args) = mma_fwd<HS, DROP>;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared);
    if (e != cudaSuccess) return (int)e;
    dim3 grid((unsigned)((a.T + MMA_ROWS - 1) / MMA_ROWS), (unsigned)a.NH, (unsigned)B);
    MT_LAUNCH(kernel, grid, MT_TC_THREADS, shared, mt_stream(c), out, lse, a);
    return mt_launch_status();
}
template <int HS> static int launch_fwd(const mt_cuda_ctx *c, float *out, float *lse, int B, const mma_fwd_args &a) {
    return a.d.on ? launch_form<HS, true>(c, out, lse, B, a) : launch_form<HS, false>(c, out, lse, B, a);
}

extern "C" int mt_cuda_attention_tc_supported(int HS) { return HS > 0 && HS % 16 == 0 && HS <= MT_CUDA_TC_MAX_HS; }

extern "C" int mt_cuda_attention_mma_forward_gqa(const mt_cuda_ctx *c, float *out, float *lse, const float *qkv, int B,
                                                 int T, int NH, int NKV, int HS, const mt_cuda_attn_dropout *drop,
                                                 void *workspace) {
    if (NKV <= 0 || NH % NKV || !mt_cuda_attention_tc_supported(HS) || !workspace || (uintptr_t)workspace % 16)
        return (int)cudaErrorInvalidValue;
    if (B <= 0 || T <= 0) return 0;
    const mma_operands op = mma_operands_layout(workspace, B, T, NH, NKV, HS, false, NULL);
    int e = mma_operands_prepare(c, op, qkv, NULL, NULL, NULL);
    if (e) return e;
    const mt_dropout *d = drop ? &drop->d : NULL;
    mma_fwd_args a;
    a.T = T, a.Tp = op.Tp, a.NH = NH, a.NKV = NKV, a.ldo = NH * HS;
    a.q = op.q, a.k = op.k, a.v = op.v;
    a.scale = 1.0f / sqrtf((float)HS);
    a.d = mt_dev_dropout_make(d ? d->p : 0.0f, d ? d->seed : 0, d ? d->step : 0, d ? d->layer : 0, d ? d->site : 0);
    a.sample_ids = drop ? drop->sample_ids : NULL;
    a.head0 = drop ? drop->head0 : 0;
    return mt_tc_with_head_size<MT_CUDA_TC_MAX_HS>(
        HS, [&](auto hs) { return launch_fwd<decltype(hs)::value>(c, out, lse, B, a); });
}
