// The backward of the register-form tensor-core attention (cuda/kernels.h,
// attention_mma.cu's forward): the two passes of attention_tc_bwd.cu (no
// atomics, deterministic), every product an m16n8k16 register-fragment
// one (cuda/tensor_core.h), so the score and dP tiles, the softmax and dS
// stay in the lanes' registers and feed the next products as left operands
// directly (an accumulator pair of 8-column blocks is a 16-wide operand).
// The bf16 tiles (row-major, prepared by attention_mma_operands.cu with D
// and lse) are copied to shared memory with cp.async one tile ahead and read
// into fragments by ldmatrix, with .trans where a tile is the right operand
// of a product summing over its rows:
//   dK/dV pass, a block per (sample, kv head, 64 keys), warp w keys jw = j0 + 16w ..:
//     per query head of the group (in order), per query tile from the diagonal on (Q, dO, lse, D):
//       S^T = K_w Q^T, dP^T = V_w dO^T (16 keys x 64 queries, 8 blocks of 8 queries)
//       p = exp(scale s - lse_i), dS = p (d dP - D_i)
//       dV_w += (p d)^T dO,  dK_w += dS^T Q;          dK = scale dK at the end
//   dQ pass, a block per (sample, head, 64 queries), warp w queries iw = i0 + 16w ..:
//     per key tile up to the diagonal (K, V):
//       S = Q_w K^T, dP = dO_w V^T, dS as above;  dQ_w += dS K;   dQ = scale dQ
// (d: the dropout scale of (sample, i, head0 + h, j); p d and dS rounded to bf16 before their products;
// D_i = dout_i.out_i in fp32.) A lane holds rows g and g + 8 of its warp's 16 (g = lane / 4) and, of
// each 8-column block, columns 2t and 2t + 1 (t = lane % 4).
#include "cuda/kernels.h"
#include "cuda/device_math.h"
#include "cuda/launch_util.h"
#include "cuda/philox_device.h"
#include "cuda/tensor_core.h"
#include "cuda/attention_tc_tiles.h"
#include "cuda/attention_mma_operands.h"
#include "cuda/async_copy.h"
#include <math.h>
#include <stdint.h>

#define MB_TILE MT_TC_ROWS /* queries or keys per block tile */
/* a loop kept rolled under nvcc (the dK/dV pass's query passes: unrolled, ptxas overlaps them and runs out
 * of registers beside the dK and dV accumulators) */
#ifdef MT_CUDA_EMU
#define MB_ROLLED
#else
#define MB_ROLLED _Pragma("unroll 1")
#endif

struct mb_args {
    int T, Tp, NH, NKV, ld, nt;
    float scale;
    mma_operands op; // the prepared bf16 tiles, D and lse (attention_mma_operands.h)
    mt_dev_dropout d;
    const uint64_t *sample_ids;
    int head0;
};

// shared memory, tiles of 64 rows of HS + 8 bf16 (the pad puts the 8 rows an ldmatrix reads in different
// banks): the dK/dV pass holds K and V, then twice (the next item's copy while the warps work on this
// one) a query tile's Q and dO with its lse and D (64 floats each)
template <int HS> struct dkv_smem {
    static constexpr int LDQ = HS + 8;
    static constexpr size_t ROWS = (size_t)MB_TILE * LDQ; // bf16 elements
    static constexpr size_t TILE = 2 * ROWS + 2 * MB_TILE * 2; // (the floats as 2 each)
    static constexpr size_t BYTES = (2 * ROWS + 2 * TILE) * 2;
};
// the dQ pass: Q and dO, then twice a key tile's K and V
template <int HS> struct dq_smem {
    static constexpr int LDQ = HS + 8;
    static constexpr size_t ROWS = (size_t)MB_TILE * LDQ;
    static constexpr size_t TILE = 2 * ROWS;
    static constexpr size_t BYTES = (2 * ROWS + 2 * TILE) * 2;
};

// two 8-column accumulator blocks (columns 16 kc ..) packed to bf16: the left operand of a 16-wide k step
__device__ static inline void pack_a(uint32_t a[4], const float (*c)[4], int kc) {
    a[0] = mt_tc_pack_bf16x2(c[2 * kc][0], c[2 * kc][1]), a[1] = mt_tc_pack_bf16x2(c[2 * kc][2], c[2 * kc][3]);
    a[2] = mt_tc_pack_bf16x2(c[2 * kc + 1][0], c[2 * kc + 1][1]), a[3] = mt_tc_pack_bf16x2(c[2 * kc + 1][2], c[2 * kc + 1][3]);
}
// the warp's 16 rows of an accumulator (times s) to global rows row0 + g, row0 + g + 8 below T
template <int ND>
__device__ static inline void store_rows(float *dst, size_t stride, int row0, int T, float s, const float (*acc)[4],
                                         int g, int t) {
MT_UNROLL
    for (int rh = 0; rh < 2; rh++) {
        const int i = row0 + g + 8 * rh;
        if (i >= T) continue;
        float *row = dst + (size_t)i * stride + 2 * t;
MT_UNROLL
        for (int n = 0; n < ND; n++) row[8 * n] = s * acc[n][2 * rh], row[8 * n + 1] = s * acc[n][2 * rh + 1];
    }
}

// DROP: the compile-time form with attention dropout (its Philox draws inlined per element would cost the
// form without it registers)
template <int HS, bool DROP> __global__ static void mma_bwd_dkv(float *dqkv, mb_args a) {
    // QB: query blocks of 8 a pass, so that the pass's S^T and dP^T (2 QB x 4 registers) fit beside dK and
    // dV (HS registers): all 8 for the small heads, 4 (two passes) from HS 48 on
    typedef dkv_smem<HS> L;
    constexpr int ldq = L::LDQ, NF = HS / 16, ND = HS / 8, QB = HS <= 32 ? 8 : 4;
    MT_DYNAMIC_SHARED(uint16_t, sm);
    uint16_t *Ks = sm, *Vs = Ks + L::ROWS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int b = (int)blockIdx.x / a.NKV, kv = (int)blockIdx.x % a.NKV, kt = (int)blockIdx.y, G = a.NH / a.NKV;
    const int j0 = kt * MB_TILE, jw = j0 + 16 * warp, per_head = a.nt - kt, n_items = G * per_head;
    const mma_operands &op = a.op;
    // item it: query head kv G + it / per_head, query tile kt + it % per_head, into buffer it % 2
    auto fetch = [&](int it) {
        const int h = kv * G + it / per_head, q0 = (kt + it % per_head) * MB_TILE;
        uint16_t *Qs = Vs + L::ROWS + (it % 2) * L::TILE, *Os = Qs + L::ROWS;
        float *lsh = (float *)(Os + L::ROWS);
        mt_cp_async_tile<MB_TILE, HS, MT_TC_THREADS>(Qs, ldq, op.q + mma_rows_at(b, h, a.NH, a.Tp, HS, q0), HS);
        mt_cp_async_tile<MB_TILE, HS, MT_TC_THREADS>(Os, ldq, op.out_grad + mma_rows_at(b, h, a.NH, a.Tp, HS, q0), HS);
        const size_t at = ((size_t)b * a.NH + h) * a.Tp + q0; // lse and D: 16 chunks of 4 floats each
        if (threadIdx.x < 32)
            mt_cp_async16(lsh + 4 * (threadIdx.x % 16) + (threadIdx.x / 16) * MB_TILE,
                          (threadIdx.x < 16 ? op.L : op.D) + at + 4 * (threadIdx.x % 16));
    };
    mt_cp_async_tile<MB_TILE, HS, MT_TC_THREADS>(Ks, ldq, op.k + mma_rows_at(b, kv, a.NKV, a.Tp, HS, j0), HS);
    mt_cp_async_tile<MB_TILE, HS, MT_TC_THREADS>(Vs, ldq, op.v + mma_rows_at(b, kv, a.NKV, a.Tp, HS, j0), HS);
    fetch(0);
    mt_cp_async_commit();
    float dk[ND][4], dv[ND][4];
MT_UNROLL
    for (int n = 0; n < ND; n++)
MT_UNROLL
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;
    for (int it = 0; it < n_items; it++) {
        const int h = kv * G + it / per_head, q0 = (kt + it % per_head) * MB_TILE;
        mt_cp_async_wait<0>();
        __syncthreads(); // item it is in, and every warp is done with item it - 1's buffer
        if (it + 1 < n_items) {
            fetch(it + 1);
            mt_cp_async_commit();
        }
        const uint16_t *Qs = Vs + L::ROWS + (it % 2) * L::TILE, *Os = Qs + L::ROWS;
        const float *lsh = (const float *)(Os + L::ROWS), *Dsh = lsh + MB_TILE;
        if (jw >= a.T) continue; // the warp's keys are all past T (the same in the warp)
        // the 64 queries in passes of QB blocks of 8 (the score and dP tiles of a pass beside dK and dV
        // in registers); query block nb has a valid element for the warp's keys when some i >= jw, i < T
MB_ROLLED
        for (int pass = 0; pass < 8 / QB; pass++) {
            float s[QB][4], dp[QB][4];
MT_UNROLL
            for (int nb = 0; nb < QB; nb++)
MT_UNROLL
                for (int e = 0; e < 4; e++) s[nb][e] = dp[nb][e] = 0.0f;
            const int p0 = q0 + 8 * QB * pass; // the pass's first query
            if (p0 + 8 * QB - 1 < jw || p0 >= a.T) continue;
MT_UNROLL
            for (int kc = 0; kc < NF; kc++) { // S^T = K_w Q^T, dP^T = V_w dO^T, query blocks by pairs
                uint32_t ka[4], va[4];
                mt_tc_ldsm_a(ka, Ks, ldq, 16 * warp, 16 * kc, lane);
                mt_tc_ldsm_a(va, Vs, ldq, 16 * warp, 16 * kc, lane);
MT_UNROLL
                for (int np = 0; np < QB / 2; np++) {
                    const int n0 = p0 + 16 * np; // blocks n0 .. n0 + 7 and n0 + 8 .. n0 + 15
                    if (n0 + 15 < jw || n0 >= a.T) continue;
                    uint32_t qb[4], ob[4];
                    mt_tc_ldsm_b_nk(qb, Qs, ldq, n0 - q0, 16 * kc, lane);
                    mt_tc_ldsm_b_nk(ob, Os, ldq, n0 - q0, 16 * kc, lane);
                    if (n0 + 7 >= jw) {
                        mt_mma_16816(s[2 * np], ka, qb);
                        mt_mma_16816(dp[2 * np], va, ob);
                    }
                    if (n0 + 8 < a.T) {
                        mt_mma_16816(s[2 * np + 1], ka, qb + 2);
                        mt_mma_16816(dp[2 * np + 1], va, ob + 2);
                    }
                }
            }
            // element e of block nb: key jw + g + 8 (e / 2), query p0 + 8 nb + 2t + e % 2
MT_UNROLL
            for (int nb = 0; nb < QB; nb++)
MT_UNROLL
                for (int e = 0; e < 4; e++) {
                    const int j = jw + g + 8 * (e / 2), c = p0 - q0 + 8 * nb + 2 * t + e % 2, i = q0 + c;
                    float pd = 0.0f, ds = 0.0f;
                    if (i < a.T && j <= i) {
                        const float p = mt_tc_exp(a.scale * s[nb][e] - lsh[c]);
                        const float d = DROP ? mt_dev_dropout_scale(&a.d, a.sample_ids[b], (uint32_t)i,
                                                                    (uint32_t)(a.head0 + h), (uint32_t)j)
                                             : 1.0f;
                        pd = p * d;
                        ds = p * (d * dp[nb][e] - Dsh[c]);
                    }
                    s[nb][e] = pd, dp[nb][e] = ds;
                }
MT_UNROLL
            for (int kc = 0; kc < QB / 2; kc++) { // dV_w += (P d)^T dO, dK_w += dS^T Q, 16 queries a step
                const int k0 = p0 + 16 * kc;
                if (k0 + 15 < jw || k0 >= a.T) continue;
                uint32_t pa[4], da[4];
                pack_a(pa, s, kc);
                pack_a(da, dp, kc);
MT_UNROLL
                for (int np = 0; np < ND / 2; np++) {
                    uint32_t ob[4], qb[4];
                    mt_tc_ldsm_b_kn(ob, Os, ldq, k0 - q0, 16 * np, lane);
                    mt_tc_ldsm_b_kn(qb, Qs, ldq, k0 - q0, 16 * np, lane);
                    mt_mma_16816(dv[2 * np], pa, ob);
                    mt_mma_16816(dv[2 * np + 1], pa, ob + 2);
                    mt_mma_16816(dk[2 * np], da, qb);
                    mt_mma_16816(dk[2 * np + 1], da, qb + 2);
                }
            }
        }
    }
    if (jw >= a.T) return;
    float *gk = dqkv + (size_t)b * a.T * a.ld + (size_t)(a.NH + kv) * HS;
    store_rows<ND>(gk, a.ld, jw, a.T, a.scale, dk, g, t);
    store_rows<ND>(gk + (size_t)a.NKV * HS, a.ld, jw, a.T, 1.0f, dv, g, t);
}

template <int HS, bool DROP> __global__ static void mma_bwd_dq(float *dqkv, mb_args a) {
    typedef dq_smem<HS> L;
    constexpr int ldq = L::LDQ, NF = HS / 16, ND = HS / 8;
    MT_DYNAMIC_SHARED(uint16_t, sm);
    uint16_t *Qs = sm, *Os = Qs + L::ROWS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int b = (int)blockIdx.x / a.NH, h = (int)blockIdx.x % a.NH, kv = h / (a.NH / a.NKV);
    const int qt = a.nt - 1 - (int)blockIdx.y, i0 = qt * MB_TILE, iw = i0 + 16 * warp; // longest rows first
    const mma_operands &op = a.op;
    // key tile kt's K and V into buffer kt % 2
    auto fetch = [&](int kt) {
        const int j0 = kt * MB_TILE;
        uint16_t *Ks = Os + L::ROWS + (kt % 2) * L::TILE, *Vs = Ks + L::ROWS;
        mt_cp_async_tile<MB_TILE, HS, MT_TC_THREADS>(Ks, ldq, op.k + mma_rows_at(b, kv, a.NKV, a.Tp, HS, j0), HS);
        mt_cp_async_tile<MB_TILE, HS, MT_TC_THREADS>(Vs, ldq, op.v + mma_rows_at(b, kv, a.NKV, a.Tp, HS, j0), HS);
    };
    mt_cp_async_tile<MB_TILE, HS, MT_TC_THREADS>(Qs, ldq, op.q + mma_rows_at(b, h, a.NH, a.Tp, HS, i0), HS);
    mt_cp_async_tile<MB_TILE, HS, MT_TC_THREADS>(Os, ldq, op.out_grad + mma_rows_at(b, h, a.NH, a.Tp, HS, i0), HS);
    fetch(0);
    mt_cp_async_commit();
    // this lane's rows r = 0 (iw + g) and 1 (iw + g + 8): lse and D (0 past T)
    const size_t at = ((size_t)b * a.NH + h) * a.Tp + iw + g;
    const float ls0 = op.L[at], ls1 = op.L[at + 8], D0 = op.D[at], D1 = op.D[at + 8];
    float dq[ND][4];
MT_UNROLL
    for (int n = 0; n < ND; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
    for (int kt = 0; kt <= qt; kt++) {
        const int j0 = kt * MB_TILE;
        mt_cp_async_wait<0>();
        __syncthreads(); // tile kt is in, and every warp is done with tile kt - 1's buffer
        if (kt + 1 <= qt) {
            fetch(kt + 1);
            mt_cp_async_commit();
        }
        const uint16_t *Ks = Os + L::ROWS + (kt % 2) * L::TILE, *Vs = Ks + L::ROWS;
        if (iw >= a.T) continue; // the warp's queries are all past T
        float s[8][4], dp[8][4];
MT_UNROLL
        for (int nb = 0; nb < 8; nb++)
MT_UNROLL
            for (int e = 0; e < 4; e++) s[nb][e] = dp[nb][e] = 0.0f;
MT_UNROLL
        for (int kc = 0; kc < NF; kc++) { // S = Q_w K^T, dP = dO_w V^T, key blocks by pairs
            uint32_t qa[4], oa[4];
            mt_tc_ldsm_a(qa, Qs, ldq, 16 * warp, 16 * kc, lane);
            mt_tc_ldsm_a(oa, Os, ldq, 16 * warp, 16 * kc, lane);
MT_UNROLL
            for (int np = 0; np < 4; np++) {
                if (j0 + 16 * np > iw + 15) continue; // above the diagonal for all 16 rows
                uint32_t kb[4], vb[4];
                mt_tc_ldsm_b_nk(kb, Ks, ldq, 16 * np, 16 * kc, lane);
                mt_tc_ldsm_b_nk(vb, Vs, ldq, 16 * np, 16 * kc, lane);
                mt_mma_16816(s[2 * np], qa, kb);
                mt_mma_16816(dp[2 * np], oa, vb);
                if (j0 + 16 * np + 8 <= iw + 15) {
                    mt_mma_16816(s[2 * np + 1], qa, kb + 2);
                    mt_mma_16816(dp[2 * np + 1], oa, vb + 2);
                }
            }
        }
        // element e of block nb: query iw + g + 8 (e / 2), key j0 + 8 nb + 2t + e % 2
MT_UNROLL
        for (int nb = 0; nb < 8; nb++)
MT_UNROLL
            for (int e = 0; e < 4; e++) {
                const int i = iw + g + 8 * (e / 2), j = j0 + 8 * nb + 2 * t + e % 2;
                float ds = 0.0f;
                if (i < a.T && j <= i) {
                    const float p = mt_tc_exp(a.scale * s[nb][e] - (e < 2 ? ls0 : ls1));
                    const float d = DROP ? mt_dev_dropout_scale(&a.d, a.sample_ids[b], (uint32_t)i, (uint32_t)(a.head0 + h),
                                                                (uint32_t)j)
                                         : 1.0f;
                    ds = p * (d * dp[nb][e] - (e < 2 ? D0 : D1));
                }
                dp[nb][e] = ds;
            }
MT_UNROLL
        for (int kc = 0; kc < 4; kc++) { // dQ_w += dS K, 16 keys a step
            if (j0 + 16 * kc > iw + 15) continue;
            uint32_t da[4];
            pack_a(da, dp, kc);
MT_UNROLL
            for (int np = 0; np < ND / 2; np++) {
                uint32_t kb[4];
                mt_tc_ldsm_b_kn(kb, Ks, ldq, 16 * kc, 16 * np, lane);
                mt_mma_16816(dq[2 * np], da, kb);
                mt_mma_16816(dq[2 * np + 1], da, kb + 2);
            }
        }
    }
    if (iw >= a.T) return;
    store_rows<ND>(dqkv + (size_t)b * a.T * a.ld + (size_t)h * HS, a.ld, iw, a.T, a.scale, dq, g, t);
}

/* both passes for one head size: raise the dynamic shared memory limits, launch dQ then dK/dV */
template <int HS, bool DROP> static int launch_form(const mt_cuda_ctx *c, float *dqkv, int B, const mb_args &a) {
    typedef void (*kernel_t)(float *, mb_args);
    kernel_t dq = mma_bwd_dq<HS, DROP>, dkv = mma_bwd_dkv<HS, DROP>;
    int e;
    if ((e = (int)cudaFuncSetAttribute(dq, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dq_smem<HS>::BYTES))) return e;
    if ((e = (int)cudaFuncSetAttribute(dkv, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dkv_smem<HS>::BYTES)))
        return e;
    MT_LAUNCH(dq, dim3((unsigned)(B * a.NH), (unsigned)a.nt, 1), MT_TC_THREADS, dq_smem<HS>::BYTES, mt_stream(c), dqkv, a);
    if ((e = mt_launch_status())) return e;
    MT_LAUNCH(dkv, dim3((unsigned)(B * a.NKV), (unsigned)a.nt, 1), MT_TC_THREADS, dkv_smem<HS>::BYTES, mt_stream(c), dqkv,
              a);
    return mt_launch_status();
}
template <int HS> static int launch(const mt_cuda_ctx *c, float *dqkv, int B, const mb_args &a) {
    return a.d.on ? launch_form<HS, true>(c, dqkv, B, a) : launch_form<HS, false>(c, dqkv, B, a);
}

extern "C" int mt_cuda_attention_mma_backward_gqa(const mt_cuda_ctx *c, float *dqkv, const float *dout,
                                                  const float *qkv, const float *out, const float *lse, int B, int T,
                                                  int NH, int NKV, int HS, const mt_cuda_attn_dropout *drop,
                                                  void *workspace) {
    if (NKV <= 0 || NH % NKV || !mt_cuda_attention_tc_supported(HS) || (HS <= 96 && (!workspace || (uintptr_t)workspace % 16)))
        return (int)cudaErrorInvalidValue;
    if (B <= 0 || T <= 0) return 0;
    const mt_dropout *d = drop ? &drop->d : NULL;
    mb_args a;
    a.T = T, a.NH = NH, a.NKV = NKV;
    a.ld = (NH + 2 * NKV) * HS;
    a.nt = (T + MB_TILE - 1) / MB_TILE;
    a.scale = 1.0f / sqrtf((float)HS);
    a.d = mt_dev_dropout_make(d ? d->p : 0.0f, d ? d->seed : 0, d ? d->step : 0, d ? d->layer : 0, d ? d->site : 0);
    a.sample_ids = drop ? drop->sample_ids : NULL;
    a.head0 = drop ? drop->head0 : 0;
    // above 96 a warp's dK and dV accumulators (HS registers a lane) leave too few registers for the
    // score tiles (ptxas spills even with passes of 16 queries): the WMMA form, whose accumulators are
    // fragments it stores through shared memory
    if (HS > 96) return mt_cuda_attention_tc_backward_gqa(c, dqkv, dout, qkv, out, lse, B, T, NH, NKV, HS, drop);
    a.op = mma_operands_layout(workspace, B, T, NH, NKV, HS, true, NULL);
    a.Tp = a.op.Tp;
    int e = mma_operands_prepare(c, a.op, qkv, dout, out, lse);
    if (e) return e;
    return mt_tc_with_head_size<96>(HS, [&](auto hs) { return launch<decltype(hs)::value>(c, dqkv, B, a); });
}
