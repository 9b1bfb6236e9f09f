// The bf16 tile operands of the register-form attention (attention_mma_operands.h): a block per
// (64-row tile, head slot, sample) stages the tile with attention_tc_tiles.h's staging (the bits the
// kernels staged themselves before), then writes it out in 16-byte chunks; D and lse by
// mt_tc_stage_lse_d.
#include "cuda/attention_mma_operands.h"
#include "cuda/kernels.h"
#include "cuda/launch_util.h"
#include "cuda/attention_tc_tiles.h"

namespace {

// one fp32 source of up to three sections of heads side by side in a row of ld floats (qkv: q, k, v)
struct prep_args {
    int T, Tp, ld;
    int first[4];     // the sections' first head slots (first[3]: the slot count)
    uint16_t *rows[3]; // per section: the destination
    bool vec;
};

template <int HS> __global__ void prep_tiles(const float *src, prep_args a) {
    MT_DYNAMIC_SHARED(uint16_t, sm);
    constexpr int ldr = HS + 8;
    uint16_t *rs = sm;
    const int tile = (int)blockIdx.x, slot = (int)blockIdx.y, b = (int)blockIdx.z, r0 = tile * MT_TC_ROWS;
    const int sec = slot < a.first[1] ? 0 : slot < a.first[2] ? 1 : 2, h = slot - a.first[sec];
    const int heads = a.first[sec + 1] - a.first[sec];
    const float *s = src + (size_t)b * a.T * a.ld + (size_t)slot * HS;
    mt_tc_stage_rows<HS>(rs, ldr, s, a.ld, r0, a.T, a.vec);
    __syncthreads();
    uint16_t *d = a.rows[sec] + mma_rows_at(b, h, heads, a.Tp, HS, r0);
    for (int e = (int)threadIdx.x; e < MT_TC_ROWS * HS / 8; e += MT_TC_THREADS) {
        const int r = e / (HS / 8), c = 8 * (e % (HS / 8));
        *(uint4 *)(d + (size_t)r * HS + c) = *(const uint4 *)(rs + r * ldr + c);
    }
}

__global__ void prep_lse_d(float *D, float *L, const float *dout, const float *out, const float *lse, int T, int Tp,
                           int NH, int HS, int ldo, bool vec) {
    __shared__ float lsh[MT_TC_ROWS], Dsh[MT_TC_ROWS];
    const int tile = (int)blockIdx.x, h = (int)blockIdx.y, b = (int)blockIdx.z, r0 = tile * MT_TC_ROWS;
    mt_tc_stage_lse_d(lsh, Dsh, dout, out, lse, b, h, r0, T, NH, HS, ldo, vec);
    __syncthreads();
    if (threadIdx.x < MT_TC_ROWS) {
        size_t at = ((size_t)b * NH + h) * Tp + r0 + threadIdx.x;
        D[at] = Dsh[threadIdx.x];
        L[at] = lsh[threadIdx.x];
    }
}

template <int HS> int launch_tiles(const mt_cuda_ctx *c, const float *src, const prep_args &a, int B) {
    const size_t shared = (size_t)MT_TC_ROWS * (HS + 8) * sizeof(uint16_t);
    void (*kernel)(const float *, prep_args) = prep_tiles<HS>;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared);
    if (e != cudaSuccess) return (int)e;
    dim3 grid((unsigned)(a.Tp / MT_TC_ROWS), (unsigned)a.first[3], (unsigned)B);
    MT_LAUNCH(kernel, grid, MT_TC_THREADS, shared, mt_stream(c), src, a);
    return mt_launch_status();
}
int tiles(const mt_cuda_ctx *c, const float *src, const prep_args &a, int B, int HS) {
    return mt_tc_with_head_size<MT_CUDA_TC_MAX_HS>(HS, [&](auto hs) { return launch_tiles<decltype(hs)::value>(c, src, a, B); });
}

} // namespace

mma_operands mma_operands_layout(void *ws, int B, int T, int NH, int NKV, int HS, bool backward, size_t *bytes) {
    mma_operands op = {};
    op.B = B, op.T = T, op.Tp = (T + MT_TC_ROWS - 1) / MT_TC_ROWS * MT_TC_ROWS, op.NH = NH, op.NKV = NKV, op.HS = HS;
    const size_t per_head = (size_t)B * op.Tp * HS; // bf16 values of one head's tiles over the batch
    uint16_t *p = (uint16_t *)ws;
    size_t used = 0;
    auto take = [&](int heads) {
        uint16_t *at = p ? p + used : NULL;
        used += (size_t)heads * per_head;
        return at;
    };
    op.q = take(NH), op.k = take(NKV), op.v = take(NKV);
    if (backward) {
        op.out_grad = take(NH);
        const size_t rows = (size_t)B * NH * op.Tp; // D and L: fp32, after the bf16 tiles (16-byte aligned)
        op.D = p ? (float *)(p + used) : NULL;
        op.L = p ? op.D + rows : NULL;
        used += 2 * rows * 2; // in bf16 units
    }
    if (bytes) *bytes = used * sizeof(uint16_t);
    return op;
}

int mma_operands_prepare(const mt_cuda_ctx *c, const mma_operands &op, const float *qkv, const float *dout,
                         const float *out, const float *lse) {
    const int B = op.B, HS = op.HS;
    prep_args a = {};
    a.T = op.T, a.Tp = op.Tp, a.ld = (op.NH + 2 * op.NKV) * HS;
    a.first[0] = 0, a.first[1] = op.NH, a.first[2] = op.NH + op.NKV, a.first[3] = op.NH + 2 * op.NKV;
    a.rows[0] = op.q, a.rows[1] = op.k, a.rows[2] = op.v;
    a.vec = (uintptr_t)qkv % 16 == 0; // rows and heads then 16-byte aligned too (ld and HS multiples of 4)
    int e = tiles(c, qkv, a, B, HS);
    if (e || !op.out_grad) return e;
    prep_args d = {};
    d.T = op.T, d.Tp = op.Tp, d.ld = op.NH * HS;
    d.first[0] = 0, d.first[1] = d.first[2] = d.first[3] = op.NH;
    d.rows[0] = op.out_grad;
    d.vec = (uintptr_t)dout % 16 == 0;
    if ((e = tiles(c, dout, d, B, HS))) return e;
    dim3 grid((unsigned)(op.Tp / MT_TC_ROWS), (unsigned)op.NH, (unsigned)B);
    MT_LAUNCH(prep_lse_d, grid, MT_TC_THREADS, 0, mt_stream(c), op.D, op.L, dout, out, lse, op.T, op.Tp, op.NH, HS,
              d.ld, ((uintptr_t)dout | (uintptr_t)out) % 16 == 0);
    return mt_launch_status();
}

extern "C" size_t mt_cuda_attention_mma_workspace_bytes(int B, int T, int NH, int NKV, int HS) {
    size_t fwd = 0, bwd = 0;
    if (B <= 0 || T <= 0) return 0;
    mma_operands_layout(NULL, B, T, NH, NKV, HS, false, &fwd);
    if (HS <= 96) mma_operands_layout(NULL, B, T, NH, NKV, HS, true, &bwd);
    return fwd > bwd ? fwd : bwd;
}
