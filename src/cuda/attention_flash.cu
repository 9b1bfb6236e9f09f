// Causal attention with grouped-query heads without a T x T matrix
// (cuda/kernels.h): the online softmax, one thread per query row for the
// forward and the dQ pass, one thread per key row of a kv head for the
// dK/dV pass (which walks its query heads in order, then the queries in
// order: no atomics, deterministic). Scalar fp32, rows read from global
// memory (the caches serve the threads of a block, which read the same key
// rows together); the tensor-core tiled form is the next step.
//   forward per row i:   s_j = scale q_i.k_j (j <= i), running max m and sum l
//                        of exp(s_j - m), acc = sum_j exp(s_j - m) d_ij v_j;
//                        out_i = acc / l, lse_i = m + log l (undropped softmax)
//   backward:            p_ij = exp(s_ij - lse_i), D_i = dout_i.out_i,
//                        dS_ij = p_ij (d_ij dout_i.v_j - D_i);
//                        dQ_i = scale sum_j dS_ij k_j;
//                        dK_j = scale sum_{h,i} dS_ij q_i;  dV_j = sum_{h,i} p_ij d_ij dout_i
// (d_ij: the dropout scale of (sample, i, head0 + h, j), 1 without dropout.)
#include "cuda/kernels.h"
#include "cuda/device_math.h"
#include "cuda/launch_util.h"
#include "cuda/philox_device.h"
#include <math.h>

#define FLASH_THREADS 64

struct flash_args {
    int B, T, NH, NKV, HS, ld, ldo;
    float scale;
    mt_dev_dropout d;
    const uint64_t *sample_ids;
    int head0;
};

__device__ static inline float drop_scale(const flash_args &a, int b, int i, int h, int j) {
    return a.d.on ? mt_dev_dropout_scale(&a.d, a.sample_ids[b], (uint32_t)i, (uint32_t)(a.head0 + h), (uint32_t)j)
                  : 1.0f;
}

__device__ static inline float dot(const float *x, const float *y, int n) {
    float s = 0.0f;
    for (int k = 0; k < n; k++) s += x[k] * y[k];
    return s;
}

__global__ static void flash_fwd(float *out, float *lse, const float *qkv, flash_args a) {
    size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x; // (b, h, i)
    if (r >= (size_t)a.B * a.NH * a.T) return;
    int i = (int)(r % a.T), h = (int)(r / a.T % a.NH), b = (int)(r / ((size_t)a.T * a.NH));
    int kv = h / (a.NH / a.NKV);
    const float *q = qkv + ((size_t)b * a.T + i) * a.ld + (size_t)h * a.HS;
    float acc[MT_CUDA_FLASH_MAX_HS];
    for (int k = 0; k < a.HS; k++) acc[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j <= i; j++) {
        const float *kr = qkv + ((size_t)b * a.T + j) * a.ld + (size_t)(a.NH + kv) * a.HS;
        const float *vr = kr + (size_t)a.NKV * a.HS;
        float s = a.scale * dot(q, kr, a.HS);
        float mn = s > m ? s : m, c = mt_dev_expf(m - mn), p = mt_dev_expf(s - mn);
        l = l * c + p;
        float pd = p * drop_scale(a, b, i, h, j);
        for (int k = 0; k < a.HS; k++) acc[k] = acc[k] * c + pd * vr[k];
        m = mn;
    }
    float *o = out + ((size_t)b * a.T + i) * a.ldo + (size_t)h * a.HS;
    for (int k = 0; k < a.HS; k++) o[k] = acc[k] / l;
    lse[((size_t)b * a.NH + h) * a.T + i] = m + logf(l);
}

__global__ static void flash_bwd_dq(float *dqkv, const float *dout, const float *qkv, const float *out,
                                    const float *lse, flash_args a) {
    size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= (size_t)a.B * a.NH * a.T) return;
    int i = (int)(r % a.T), h = (int)(r / a.T % a.NH), b = (int)(r / ((size_t)a.T * a.NH));
    int kv = h / (a.NH / a.NKV);
    size_t row = (size_t)b * a.T + i;
    const float *q = qkv + row * a.ld + (size_t)h * a.HS, *dO = dout + row * a.ldo + (size_t)h * a.HS;
    float L = lse[((size_t)b * a.NH + h) * a.T + i], D = dot(dO, out + row * a.ldo + (size_t)h * a.HS, a.HS);
    float dq[MT_CUDA_FLASH_MAX_HS];
    for (int k = 0; k < a.HS; k++) dq[k] = 0.0f;
    for (int j = 0; j <= i; j++) {
        const float *kr = qkv + ((size_t)b * a.T + j) * a.ld + (size_t)(a.NH + kv) * a.HS;
        const float *vr = kr + (size_t)a.NKV * a.HS;
        float p = mt_dev_expf(a.scale * dot(q, kr, a.HS) - L);
        float ds = p * (drop_scale(a, b, i, h, j) * dot(dO, vr, a.HS) - D);
        for (int k = 0; k < a.HS; k++) dq[k] += ds * kr[k];
    }
    float *g = dqkv + row * a.ld + (size_t)h * a.HS;
    for (int k = 0; k < a.HS; k++) g[k] = a.scale * dq[k];
}

__global__ static void flash_bwd_dkv(float *dqkv, const float *dout, const float *qkv, const float *out,
                                     const float *lse, flash_args a) {
    size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x; // (b, kv, j)
    if (r >= (size_t)a.B * a.NKV * a.T) return;
    int j = (int)(r % a.T), kv = (int)(r / a.T % a.NKV), b = (int)(r / ((size_t)a.T * a.NKV));
    int G = a.NH / a.NKV;
    const float *kr = qkv + ((size_t)b * a.T + j) * a.ld + (size_t)(a.NH + kv) * a.HS;
    const float *vr = kr + (size_t)a.NKV * a.HS;
    float dk[MT_CUDA_FLASH_MAX_HS], dv[MT_CUDA_FLASH_MAX_HS];
    for (int k = 0; k < a.HS; k++) dk[k] = dv[k] = 0.0f;
    for (int h = kv * G; h < (kv + 1) * G; h++)
        for (int i = j; i < a.T; i++) {
            size_t row = (size_t)b * a.T + i;
            const float *q = qkv + row * a.ld + (size_t)h * a.HS, *dO = dout + row * a.ldo + (size_t)h * a.HS;
            float L = lse[((size_t)b * a.NH + h) * a.T + i];
            float D = dot(dO, out + row * a.ldo + (size_t)h * a.HS, a.HS);
            float p = mt_dev_expf(a.scale * dot(q, kr, a.HS) - L), dsc = drop_scale(a, b, i, h, j);
            float pd = p * dsc, ds = p * (dsc * dot(dO, vr, a.HS) - D);
            for (int k = 0; k < a.HS; k++) {
                dv[k] += pd * dO[k];
                dk[k] += ds * q[k];
            }
        }
    float *gk = dqkv + ((size_t)b * a.T + j) * a.ld + (size_t)(a.NH + kv) * a.HS, *gv = gk + (size_t)a.NKV * a.HS;
    for (int k = 0; k < a.HS; k++) {
        gk[k] = a.scale * dk[k];
        gv[k] = dv[k];
    }
}

static int make_args(flash_args *a, int B, int T, int NH, int NKV, int HS, const mt_cuda_attn_dropout *drop) {
    if (NKV <= 0 || NH % NKV || HS <= 0 || HS > MT_CUDA_FLASH_MAX_HS) return (int)cudaErrorInvalidValue;
    const mt_dropout *d = drop ? &drop->d : NULL;
    a->B = B, a->T = T, a->NH = NH, a->NKV = NKV, a->HS = HS;
    a->ld = (NH + 2 * NKV) * HS, a->ldo = NH * HS;
    a->scale = 1.0f / sqrtf((float)HS);
    a->d = mt_dev_dropout_make(d ? d->p : 0.0f, d ? d->seed : 0, d ? d->step : 0, d ? d->layer : 0, d ? d->site : 0);
    a->sample_ids = drop ? drop->sample_ids : NULL;
    a->head0 = drop ? drop->head0 : 0;
    return 0;
}

extern "C" int mt_cuda_attention_flash_forward_gqa(const mt_cuda_ctx *c, float *out, float *lse, const float *qkv,
                                                   int B, int T, int NH, int NKV, int HS,
                                                   const mt_cuda_attn_dropout *drop) {
    flash_args a;
    int e = make_args(&a, B, T, NH, NKV, HS, drop);
    if (e || B <= 0 || T <= 0) return e;
    size_t n = (size_t)B * NH * T;
    MT_LAUNCH(flash_fwd, mt_blocks_for(n, FLASH_THREADS), FLASH_THREADS, 0, mt_stream(c), out, lse, qkv, a);
    return mt_launch_status();
}

extern "C" int mt_cuda_attention_flash_backward_gqa(const mt_cuda_ctx *c, float *dqkv, const float *dout,
                                                    const float *qkv, const float *out, const float *lse, int B, int T,
                                                    int NH, int NKV, int HS, const mt_cuda_attn_dropout *drop) {
    flash_args a;
    int e = make_args(&a, B, T, NH, NKV, HS, drop);
    if (e || B <= 0 || T <= 0) return e;
    size_t nq = (size_t)B * NH * T, nk = (size_t)B * NKV * T;
    MT_LAUNCH(flash_bwd_dq, mt_blocks_for(nq, FLASH_THREADS), FLASH_THREADS, 0, mt_stream(c), dqkv, dout, qkv, out,
              lse, a);
    if ((e = mt_launch_status())) return e;
    MT_LAUNCH(flash_bwd_dkv, mt_blocks_for(nk, FLASH_THREADS), FLASH_THREADS, 0, mt_stream(c), dqkv, dout, qkv, out,
              lse, a);
    return mt_launch_status();
}
