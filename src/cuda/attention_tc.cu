// Causal attention with grouped-query heads on tensor cores, the forward
// (cuda/kernels.h; the backward is attention_tc_bwd.cu). The flash
// algorithm in tiles: a block of 4 warps takes 64 queries of one head
// (warp w the 16 rows q0 + 16w ..), stages them in shared memory as bf16,
// and walks the key tiles of 64 up to its diagonal, each staged as bf16 K
// and V; per tile a warp computes its 16 x 64 scores S = Q K^T on 16 x 16
// bf16 tiles with fp32 accumulation (cuda/tensor_core.h), the online
// softmax in fp32 (two lanes per row), and O = alpha O + Pd V with its
// accumulator rows in shared memory (rescaled by alpha there, where every
// lane knows which row an element is: a tensor-core accumulator's element
// order is the hardware's).
//   per row i, key tile t:  s_j = scale q_i.k_j (j <= i);  m' = max(m, max_j s_j);
//                           alpha = exp(m - m');  p_j = exp(s_j - m');  l = alpha l + sum_j p_j;
//                           O_i = alpha O_i + sum_j bf16(p_j d_ij) v_j
//   end:                    out_i = O_i / l;  lse_i = m + log l  (the undropped softmax, as the CPU's)
// Rounded to bf16 (the CPU's rounding) before a product: q, k, v and p d.
#include "cuda/kernels.h"
#include "cuda/device_math.h"
#include "cuda/launch_util.h"
#include "cuda/philox_device.h"
#include "cuda/tensor_core.h"
#include "cuda/attention_tc_tiles.h"
#include <math.h>

#define TC_ROWS MT_TC_ROWS
#define TC_WARPS MT_TC_WARPS

struct tc_fwd_args {
    int B, T, NH, NKV, ld, ldo;
    float scale;
    mt_dev_dropout d;
    const uint64_t *sample_ids;
    int head0;
    bool vec; // qkv rows 16-byte aligned: float4 staging
};

// shared memory, in this order: Q, K, V (64 rows of HS + 8 bf16 each: the pad keeps rows apart in the
// banks and leaves every 16-row tile 32-byte aligned); per warp S (16 x 68 fp32), P (16 x 72 bf16) and
// O (16 x (HS + 4) fp32)
MT_HD static inline size_t tc_fwd_warp_bytes(int HS) { return 16 * 68 * 4 + 16 * 72 * 2 + 16 * (size_t)(HS + 4) * 4; }
static size_t tc_fwd_shared_bytes(int HS) { return 3 * (size_t)TC_ROWS * (HS + 8) * 2 + TC_WARPS * tc_fwd_warp_bytes(HS); }

template <int HS> __global__ static void tc_fwd(float *out, float *lse, const float *qkv, tc_fwd_args a) {
    MT_DYNAMIC_SHARED(unsigned char, smem);
    constexpr int ldq = HS + 8, ldo_s = HS + 4, NF = HS / 16;
    const int n_qt = (a.T + TC_ROWS - 1) / TC_ROWS;
    const int qt = n_qt - 1 - (int)blockIdx.x; // the longest rows (most key tiles) first
    const int h = (int)blockIdx.y, b = (int)blockIdx.z, kv = h / (a.NH / a.NKV);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    uint16_t *Qs = (uint16_t *)smem, *Ks = Qs + TC_ROWS * ldq, *Vs = Ks + TC_ROWS * ldq;
    unsigned char *wp = (unsigned char *)(Vs + TC_ROWS * ldq) + (size_t)warp * tc_fwd_warp_bytes(HS);
    float *Sw = (float *)wp;
    uint16_t *Pw = (uint16_t *)(Sw + 16 * 68);
    float *Ow = (float *)(Pw + 16 * 72);
    const int q0 = qt * TC_ROWS, r0 = q0 + 16 * warp;
    const float *base = qkv + (size_t)b * a.T * a.ld;
    mt_tc_stage_rows<HS>(Qs, ldq, base + (size_t)h * HS, a.ld, q0, a.T, a.vec);
    // this lane's row of the warp's 16, and its columns: every other one from `half` (2-way bank conflicts
    // at most with the row strides 68 and HS + 4)
    const int rr = lane / 2, half = lane % 2, i = r0 + rr;
    for (int k = half; k < HS; k += 2) Ow[rr * ldo_s + k] = 0.0f;
    __syncthreads();
    mt_tc_a_row qf[NF]; // the warp's 16 query rows, for every key tile
MT_UNROLL
    for (int k = 0; k < NF; k++) mt_tc_load(qf[k], Qs + 16 * warp * ldq + 16 * k, ldq);
    float m = -INFINITY, l = 0.0f;
    const int last = (q0 + TC_ROWS < a.T ? q0 + TC_ROWS : a.T) - 1; // the block's last query row
    const float *Kg = base + (size_t)(a.NH + kv) * HS, *Vg = base + (size_t)(a.NH + a.NKV + kv) * HS;
    for (int kt = 0; kt * TC_ROWS <= last; kt++) {
        const int k0 = kt * TC_ROWS;
        __syncthreads(); // the previous tile's K and V are no longer read
        mt_tc_stage_rows<HS>(Ks, ldq, Kg, a.ld, k0, a.T, a.vec);
        mt_tc_stage_rows<HS>(Vs, ldq, Vg, a.ld, k0, a.T, a.vec);
        __syncthreads();
        if (r0 >= a.T || k0 > r0 + 15) continue; // the warp's rows are past T or all above this tile (causal)
MT_UNROLL
        for (int n = 0; n < TC_ROWS / 16; n++) { // S = Q_w K^T, 16 x 64
            mt_tc_acc s;
            mt_tc_zero(s);
MT_UNROLL
            for (int k = 0; k < NF; k++) {
                mt_tc_b_col kb;
                mt_tc_load(kb, Ks + 16 * n * ldq + 16 * k, ldq);
                mt_tc_mma(s, qf[k], kb);
            }
            mt_tc_store(Sw + 16 * n, s, 68);
        }
        __syncwarp();
        // the online softmax: lanes 2 rr and 2 rr + 1 share row rr
        float mx = -INFINITY;
        for (int c = half; c < TC_ROWS; c += 2) {
            int j = k0 + c;
            if (i < a.T && j <= i) mx = fmaxf(mx, a.scale * Sw[rr * 68 + c]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        float mn = fmaxf(m, mx);
        float alpha = m == -INFINITY ? 0.0f : mt_tc_exp(m - mn), sum = 0.0f; // l, O are 0 while m is -inf
        for (int c = half; c < TC_ROWS; c += 2) {
            int j = k0 + c;
            float p = 0.0f, pd = 0.0f;
            if (i < a.T && j <= i) {
                p = mt_tc_exp(a.scale * Sw[rr * 68 + c] - mn);
                pd = a.d.on ? p * mt_dev_dropout_scale(&a.d, a.sample_ids[b], (uint32_t)i, (uint32_t)(a.head0 + h),
                                                       (uint32_t)j)
                            : p;
            }
            sum += p;
            Pw[rr * 72 + c] = mt_tc_to_bf16(pd);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l = alpha * l + sum;
        m = mn;
        for (int k = half; k < HS; k += 2) Ow[rr * ldo_s + k] *= alpha;
        __syncwarp();
MT_UNROLL
        for (int n = 0; n < NF; n++) { // O_w += P_w V, 16 x HS
            mt_tc_acc o;
            mt_tc_load_acc(o, Ow + 16 * n, ldo_s);
MT_UNROLL
            for (int k = 0; k < TC_ROWS / 16; k++) {
                mt_tc_a_row pa;
                mt_tc_b_row vb;
                mt_tc_load(pa, Pw + 16 * k, 72);
                mt_tc_load(vb, Vs + 16 * k * ldq + 16 * n, ldq);
                mt_tc_mma(o, pa, vb);
            }
            mt_tc_store(Ow + 16 * n, o, ldo_s);
        }
        __syncwarp();
    }
    if (i >= a.T) return;
    float *o = out + ((size_t)b * a.T + i) * a.ldo + (size_t)h * HS;
    for (int k = half; k < HS; k += 2) o[k] = Ow[rr * ldo_s + k] / l;
    if (half == 0) lse[((size_t)b * a.NH + h) * a.T + i] = m + logf(l);
}

template <int HS> static int launch_fwd(const mt_cuda_ctx *c, float *out, float *lse, const float *qkv, int B,
                                        const tc_fwd_args &a) {
    size_t shared = tc_fwd_shared_bytes(HS);
    cudaError_t e = cudaFuncSetAttribute(tc_fwd<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared);
    if (e != cudaSuccess) return (int)e;
    dim3 grid((unsigned)((a.T + TC_ROWS - 1) / TC_ROWS), (unsigned)a.NH, (unsigned)B);
    MT_LAUNCH(tc_fwd<HS>, grid, MT_TC_THREADS, shared, mt_stream(c), out, lse, qkv, a);
    return mt_launch_status();
}

extern "C" int mt_cuda_attention_tc_supported(int HS) { return HS > 0 && HS % 16 == 0 && HS <= MT_CUDA_TC_MAX_HS; }

extern "C" int mt_cuda_attention_tc_forward_gqa(const mt_cuda_ctx *c, float *out, float *lse, const float *qkv, int B,
                                                int T, int NH, int NKV, int HS, const mt_cuda_attn_dropout *drop) {
    if (NKV <= 0 || NH % NKV || !mt_cuda_attention_tc_supported(HS)) return (int)cudaErrorInvalidValue;
    if (B <= 0 || T <= 0) return 0;
    const mt_dropout *d = drop ? &drop->d : NULL;
    tc_fwd_args a;
    a.B = B, a.T = T, a.NH = NH, a.NKV = NKV;
    a.ld = (NH + 2 * NKV) * HS, a.ldo = NH * HS;
    a.scale = 1.0f / sqrtf((float)HS);
    a.d = mt_dev_dropout_make(d ? d->p : 0.0f, d ? d->seed : 0, d ? d->step : 0, d ? d->layer : 0, d ? d->site : 0);
    a.sample_ids = drop ? drop->sample_ids : NULL;
    a.head0 = drop ? drop->head0 : 0;
    a.vec = (uintptr_t)qkv % 16 == 0; // every row and head then starts 16-byte aligned (ld, HS multiples of 4)
    return mt_tc_with_head_size<MT_CUDA_TC_MAX_HS>(
        HS, [&](auto hs) { return launch_fwd<decltype(hs)::value>(c, out, lse, qkv, B, a); });
}
