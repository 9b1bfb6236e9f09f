// The backward of the tensor-core causal attention with grouped-query heads
// (cuda/kernels.h), FlashAttention-2's two-pass form without atomics: one
// kernel makes dK and dV, a block per (sample, kv head, tile of 64 keys)
// whose 4 warps own 16 keys each and walk the group's query heads in order,
// then the query tiles from the diagonal on (the sums are the same every run,
// and the group's heads are added in order); another makes dQ, a block per
// (sample, head, tile of 64 queries), 4 warps of 16 queries walking the key
// tiles up to the diagonal. Each iteration stages the tiles it multiplies
// (K, V, Q, dO) once in shared memory as bf16 (rows past T zero), the
// products are 16 x 16 bf16 tiles with fp32 accumulation (cuda/tensor_core.h),
// and the elementwise part (the softmax from lse, the dropout scale, dS) is
// fp32 on the stored score tiles. D_i = dout_i.out_i is recomputed in fp32
// by each block for the query rows it uses (cheap next to the products; no
// scratch). Blocks are ordered so that the longest tiles (far from the
// diagonal) start first; a warp skips the 16-wide sub-tiles wholly masked (causal
// diagonal, past T). dK/dV accumulate in fragments, written once.
//   per query tile (keys j of the warp, queries i; j <= i < T):
//     S^T = K_w Q^T,  p_ij = exp(scale s_ij - lse_i),  dP^T = V_w dO^T,
//     dS_ij = p_ij (d_ij dP_ij - D_i);
//     dV_w += (p d)^T dO,  dK_w += dS^T Q;   dK = scale dK at the end
//   per key tile (queries i of the warp):
//     S = Q_w K^T, dP = dO_w V^T, dS as above;  dQ_w += dS K;  dQ = scale dQ
// (d_ij: the dropout scale of (sample, i, head0 + h, j), 1 without dropout;
// p d and dS are rounded to bf16 before their products.)
#include "cuda/kernels.h"
#include "cuda/device_math.h"
#include "cuda/launch_util.h"
#include "cuda/philox_device.h"
#include "cuda/tensor_core.h"
#include "cuda/attention_tc_tiles.h"
#include <math.h>
#include <stdint.h>

#define TCB_TILE 64     /* queries or keys per block tile */
#define TCB_THREADS MT_TC_THREADS /* 4 warps of 16 rows (attention_tc_tiles.h stages with as many) */
#define TCB_LDF 68      /* fp32 score tiles of a warp: 16 x 64, padded */
#define TCB_FW (16 * TCB_LDF)
#define TCB_LDP 72      /* bf16 16 x 64 operand tiles of a warp, padded */
#define TCB_PW (16 * TCB_LDP)
/* a loop kept rolled under nvcc: the dK/dV kernel holds 2 HS/16 accumulator fragments throughout, and
 * unrolled operand loads beside them would spill */
#ifdef MT_CUDA_EMU
#define TCB_ROLLED
#else
#define TCB_ROLLED _Pragma("unroll 1")
#endif
/* (and the fragment loops unrolled, MT_UNROLL: a fragment array stays in registers only when indexed by
 * constants) */

struct tcb_args {
    int B, T, NH, NKV, HS, ld, ldo, nt, vec;
    float scale;
    mt_dev_dropout d;
    const uint64_t *sample_ids;
    int head0;
};

/* The shared memory of both kernels: per warp two fp32 16 x 64 tiles (S and dP; the epilogue's 16 x HS
 * rows after), four bf16 64 x HS tiles (K, V, Q, dO; ld HS + 8), per warp two bf16 16 x 64 tiles, and
 * lse, D of the 64 query rows. Every part starts at a 32-byte multiple (the tile loads' alignment). */
static size_t tcb_shared_bytes(int HS) {
    return (size_t)4 * 2 * TCB_FW * sizeof(float) + (size_t)4 * TCB_TILE * (HS + 8) * sizeof(uint16_t) +
           (size_t)4 * 2 * TCB_PW * sizeof(uint16_t) + 2 * TCB_TILE * sizeof(float);
}

__device__ static inline float drop_scale(const tcb_args &a, int b, int i, int h, int j) {
    return a.d.on ? mt_dev_dropout_scale(&a.d, a.sample_ids[b], (uint32_t)i, (uint32_t)(a.head0 + h), (uint32_t)j)
                  : 1.0f;
}

/* rows row0 .. row0 + 63 (row r at src + r * stride, HS = 16 NF floats) as bf16 into dst (ld HS + 8), rows
 * past T zero; all threads of the block (attention_tc_tiles.h: every load of a thread in flight before
 * its stores; float4 when the rows are 16-byte aligned, a.vec) */
template <int NF>
__device__ static inline void load_tile(uint16_t *dst, const float *src, size_t stride, int row0, const tcb_args &a) {
    mt_tc_stage_rows<16 * NF>(dst, 16 * NF + 8, src, (int)stride, row0, a.T, a.vec);
}

/* lse and D of query rows row0 .. row0 + 63 of (b, h) (attention_tc_tiles.h) */
__device__ static inline void load_lse_d(float *lsh, float *Dsh, const float *dout, const float *out,
                                         const float *lse, int b, int h, int row0, const tcb_args &a) {
    mt_tc_stage_lse_d(lsh, Dsh, dout, out, lse, b, h, row0, a.T, a.NH, a.HS, a.ldo, a.vec);
}

/* C (16 x 64, fp32 at dst, ld TCB_LDF) = A_w B^T: A_w the warp's 16 rows of the bf16 tile A, B a bf16
 * 64 x HS tile (its transpose read column-major); only the column tiles n0 <= n < n1 (the others wholly
 * masked: left unwritten, never read) */
template <int NF>
__device__ static inline void scores(float *dst, const uint16_t *A, const uint16_t *Bt, int n0, int n1) {
    const int ldb = NF * 16 + 8;
    mt_tc_acc c[4];
    MT_UNROLL for (int n = 0; n < 4; n++) mt_tc_zero(c[n]);
    TCB_ROLLED for (int kk = 0; kk < NF; kk++) {
        mt_tc_a_row fa;
        mt_tc_load(fa, A + 16 * kk, ldb);
        MT_UNROLL for (int n = 0; n < 4; n++) {
            if (n < n0 || n >= n1) continue;
            mt_tc_b_col fb;
            mt_tc_load(fb, Bt + (size_t)16 * n * ldb + 16 * kk, ldb);
            mt_tc_mma(c[n], fa, fb);
        }
    }
    MT_UNROLL for (int n = 0; n < 4; n++)
        if (n >= n0 && n < n1) mt_tc_store(dst + 16 * n, c[n], TCB_LDF);
}

/* acc[f] += P B: P the warp's bf16 16 x 64 tile (ld TCB_LDP), B a bf16 64 x HS tile; P's column tiles
 * outside [q0, q1) are zero (masked) and skipped */
template <int NF>
__device__ static inline void accumulate(mt_tc_acc *acc, const uint16_t *P, const uint16_t *B, int q0, int q1) {
    const int ldb = NF * 16 + 8;
    TCB_ROLLED for (int q = q0; q < q1; q++) {
        mt_tc_a_row fa;
        mt_tc_load(fa, P + 16 * q, TCB_LDP);
        MT_UNROLL for (int f = 0; f < NF; f++) {
            mt_tc_b_row fb;
            mt_tc_load(fb, B + (size_t)16 * q * ldb + 16 * f, ldb);
            mt_tc_mma(acc[f], fa, fb);
        }
    }
}

/* the warp's 16 rows of acc (times s) to global rows row0 .. row0 + 15 below T (row r at g + r * stride),
 * through the warp's fp32 area F */
template <int NF>
__device__ static inline void write_rows(float *g, size_t stride, int row0, float s, const mt_tc_acc *acc, float *F,
                                         const tcb_args &a) {
    const int HS = NF * 16, lde = HS + 4;
    int lane = threadIdx.x % 32;
    for (int f = 0; f < NF; f++) mt_tc_store(F + 16 * f, acc[f], lde);
    __syncwarp();
    for (int r = 0; r < 16 && row0 + r < a.T; r++)
        for (int k = lane; k < HS; k += 32) g[(size_t)(row0 + r) * stride + k] = s * F[r * lde + k];
    __syncwarp(); // F is stored to next
}

/* (min. 1 block an SM: without it ptxas held the HS 48 form to 128 registers, and it spilled) */
template <int NF>
static __global__ void __launch_bounds__(TCB_THREADS, 1) tc_bwd_dkv(float *dqkv, const float *dout, const float *qkv,
                                                                 const float *out, const float *lse, tcb_args a) {
    const int HS = NF * 16, ldb = HS + 8;
    MT_DYNAMIC_SHARED(float, sm);
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *S = sm + (size_t)w * 2 * TCB_FW, *dP = S + TCB_FW;
    uint16_t *Ks = (uint16_t *)(sm + 4 * 2 * TCB_FW), *Vs = Ks + TCB_TILE * ldb, *Qs = Vs + TCB_TILE * ldb,
             *Os = Qs + TCB_TILE * ldb;
    uint16_t *Pd = Os + TCB_TILE * ldb + (size_t)w * 2 * TCB_PW, *dS = Pd + TCB_PW;
    float *lsh = (float *)(Os + TCB_TILE * ldb + 4 * 2 * TCB_PW), *Dsh = lsh + TCB_TILE;
    int b = (int)blockIdx.x / a.NKV, kv = (int)blockIdx.x % a.NKV, kt = (int)blockIdx.y, G = a.NH / a.NKV;
    int j0 = kt * TCB_TILE, jw = j0 + 16 * w;
    const float *base = qkv + (size_t)b * a.T * a.ld;
    load_tile<NF>(Ks, base + (size_t)(a.NH + kv) * HS, a.ld, j0, a);
    load_tile<NF>(Vs, base + (size_t)(a.NH + a.NKV + kv) * HS, a.ld, j0, a);
    mt_tc_acc dk[NF], dv[NF];
    for (int f = 0; f < NF; f++) mt_tc_zero(dk[f]), mt_tc_zero(dv[f]);
    for (int h = kv * G; h < (kv + 1) * G; h++)
        for (int qt = kt; qt < a.nt; qt++) {
            int i0 = qt * TCB_TILE;
            __syncthreads(); // the previous tiles are used up
            load_tile<NF>(Qs, base + (size_t)h * HS, a.ld, i0, a);
            load_tile<NF>(Os, dout + (size_t)b * a.T * a.ldo + (size_t)h * HS, a.ldo, i0, a);
            load_lse_d(lsh, Dsh, dout, out, lse, b, h, i0, a);
            __syncthreads();
            // the query column tiles with a valid (i < T, j <= i) element for the warp's keys
            int n0 = qt == kt ? w : 0, nv = (a.T - i0 + 15) / 16, n1 = jw >= a.T ? n0 : nv < 4 ? nv : 4;
            scores<NF>(S, Ks + (size_t)16 * w * ldb, Qs, n0, n1);  // S^T: keys x queries
            scores<NF>(dP, Vs + (size_t)16 * w * ldb, Os, n0, n1); // dP^T
            __syncwarp();
            for (int e = lane; e < 16 * TCB_TILE; e += 32) {
                int r = e / TCB_TILE, c = e % TCB_TILE, j = jw + r, i = i0 + c;
                float pd = 0.0f, ds = 0.0f;
                if (i < a.T && j <= i) {
                    float p = mt_tc_exp(a.scale * S[r * TCB_LDF + c] - lsh[c]), d = drop_scale(a, b, i, h, j);
                    pd = p * d;
                    ds = p * (d * dP[r * TCB_LDF + c] - Dsh[c]);
                }
                Pd[r * TCB_LDP + c] = mt_tc_to_bf16(pd);
                dS[r * TCB_LDP + c] = mt_tc_to_bf16(ds);
            }
            __syncwarp();
            accumulate<NF>(dv, Pd, Os, n0, n1);
            accumulate<NF>(dk, dS, Qs, n0, n1);
        }
    float *gk = dqkv + (size_t)b * a.T * a.ld + (size_t)(a.NH + kv) * HS;
    write_rows<NF>(gk, a.ld, jw, a.scale, dk, S, a);
    write_rows<NF>(gk + (size_t)a.NKV * HS, a.ld, jw, 1.0f, dv, S, a);
}

template <int NF>
static __global__ void __launch_bounds__(TCB_THREADS, 1) tc_bwd_dq(float *dqkv, const float *dout, const float *qkv,
                                                                const float *out, const float *lse, tcb_args a) {
    const int HS = NF * 16, ldb = HS + 8;
    MT_DYNAMIC_SHARED(float, sm);
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *S = sm + (size_t)w * 2 * TCB_FW, *dP = S + TCB_FW;
    uint16_t *Ks = (uint16_t *)(sm + 4 * 2 * TCB_FW), *Vs = Ks + TCB_TILE * ldb, *Qs = Vs + TCB_TILE * ldb,
             *Os = Qs + TCB_TILE * ldb;
    uint16_t *dS = Os + TCB_TILE * ldb + (size_t)w * 2 * TCB_PW;
    float *lsh = (float *)(Os + TCB_TILE * ldb + 4 * 2 * TCB_PW), *Dsh = lsh + TCB_TILE;
    int b = (int)blockIdx.x / a.NH, h = (int)blockIdx.x % a.NH, kv = h / (a.NH / a.NKV);
    int qt = a.nt - 1 - (int)blockIdx.y, i0 = qt * TCB_TILE, iw = i0 + 16 * w;
    const float *base = qkv + (size_t)b * a.T * a.ld;
    load_tile<NF>(Qs, base + (size_t)h * HS, a.ld, i0, a);
    load_tile<NF>(Os, dout + (size_t)b * a.T * a.ldo + (size_t)h * HS, a.ldo, i0, a);
    load_lse_d(lsh, Dsh, dout, out, lse, b, h, i0, a);
    mt_tc_acc dq[NF];
    for (int f = 0; f < NF; f++) mt_tc_zero(dq[f]);
    for (int kt = 0; kt <= qt; kt++) {
        int j0 = kt * TCB_TILE;
        __syncthreads(); // the previous tiles are used up
        load_tile<NF>(Ks, base + (size_t)(a.NH + kv) * HS, a.ld, j0, a);
        load_tile<NF>(Vs, base + (size_t)(a.NH + a.NKV + kv) * HS, a.ld, j0, a);
        __syncthreads();
        // the key column tiles with a valid (j <= i < T) element for the warp's queries
        int n1 = iw < a.T ? (kt == qt ? w + 1 : 4) : 0;
        scores<NF>(S, Qs + (size_t)16 * w * ldb, Ks, 0, n1);  // S: queries x keys
        scores<NF>(dP, Os + (size_t)16 * w * ldb, Vs, 0, n1); // dP
        __syncwarp();
        for (int e = lane; e < 16 * TCB_TILE; e += 32) {
            int r = e / TCB_TILE, c = e % TCB_TILE, i = iw + r, j = j0 + c;
            float ds = 0.0f;
            if (i < a.T && j <= i) {
                float p = mt_tc_exp(a.scale * S[r * TCB_LDF + c] - lsh[16 * w + r]);
                ds = p * (drop_scale(a, b, i, h, j) * dP[r * TCB_LDF + c] - Dsh[16 * w + r]);
            }
            dS[r * TCB_LDP + c] = mt_tc_to_bf16(ds);
        }
        __syncwarp();
        accumulate<NF>(dq, dS, Ks, 0, n1);
    }
    write_rows<NF>(dqkv + (size_t)b * a.T * a.ld + (size_t)h * HS, a.ld, iw, a.scale, dq, S, a);
}

/* both kernels for HS = 16 NF: raise the dynamic shared memory limit, launch dQ then dK/dV */
template <int NF>
static int launch(const mt_cuda_ctx *c, float *dqkv, const float *dout, const float *qkv, const float *out,
                  const float *lse, const tcb_args &a) {
    size_t bytes = tcb_shared_bytes(NF * 16);
    int e;
    if ((e = (int)cudaFuncSetAttribute(tc_bwd_dq<NF>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes)))
        return e;
    if ((e = (int)cudaFuncSetAttribute(tc_bwd_dkv<NF>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes)))
        return e;
    MT_LAUNCH(tc_bwd_dq<NF>, dim3((unsigned)(a.B * a.NH), (unsigned)a.nt, 1), TCB_THREADS, bytes, mt_stream(c), dqkv,
              dout, qkv, out, lse, a);
    if ((e = mt_launch_status())) return e;
    MT_LAUNCH(tc_bwd_dkv<NF>, dim3((unsigned)(a.B * a.NKV), (unsigned)a.nt, 1), TCB_THREADS, bytes, mt_stream(c),
              dqkv, dout, qkv, out, lse, a);
    return mt_launch_status();
}

extern "C" int mt_cuda_attention_tc_backward_gqa(const mt_cuda_ctx *c, float *dqkv, const float *dout,
                                                 const float *qkv, const float *out, const float *lse, int B, int T,
                                                 int NH, int NKV, int HS, const mt_cuda_attn_dropout *drop) {
    if (NKV <= 0 || NH % NKV || !mt_cuda_attention_tc_supported(HS)) return (int)cudaErrorInvalidValue;
    if (B <= 0 || T <= 0) return 0;
    const mt_dropout *d = drop ? &drop->d : NULL;
    tcb_args a;
    a.B = B, a.T = T, a.NH = NH, a.NKV = NKV, a.HS = HS;
    a.ld = (NH + 2 * NKV) * HS, a.ldo = NH * HS;
    a.nt = (T + TCB_TILE - 1) / TCB_TILE;
    a.vec = ((uintptr_t)qkv | (uintptr_t)dout | (uintptr_t)out) % 16 == 0;
    a.scale = 1.0f / sqrtf((float)HS);
    a.d = mt_dev_dropout_make(d ? d->p : 0.0f, d ? d->seed : 0, d ? d->step : 0, d ? d->layer : 0, d ? d->site : 0);
    a.sample_ids = drop ? drop->sample_ids : NULL;
    a.head0 = drop ? drop->head0 : 0;
    return mt_tc_with_head_size<MT_CUDA_TC_MAX_HS>(
        HS, [&](auto hs) { return launch<decltype(hs)::value / 16>(c, dqkv, dout, qkv, out, lse, a); });
}
