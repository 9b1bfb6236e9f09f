// Fused softmax + cross-entropy + gradient (cuda/kernels.h): one block per
// row (the row cached in shared memory where it fits: one read of the
// logits, its max taken on the way in); max and sum of exponentials by the
// fixed block tree, the CPU's exp (its order of summation differs: within a
// few ulp). The bf16-gradient form (bf16 mixed precision) takes the
// hardware's exponential and rounding instead (cuda/tensor_core.h's
// mt_tc_exp, ~2 ulp; its gradient is rounded to 8 bits anyway): the CPU's
// exp costs some 20 instructions, and with two per logit the kernel was
// bound by them. A target outside [0, V) other than -1 gives a NaN loss (the
// CPU op stops the run; the device cannot, so the NaN reaches the loss the
// host reads).
#include "cuda/kernels.h"
#include "cuda/device_math.h"
#include "cuda/launch_util.h"
#include "cuda/tensor_core.h"
#include <float.h>

// NT threads per row; CACHED: the row is read from global memory once, into dynamic shared memory
// (Vp floats), and the passes (sum, gradient) read it there -- one read of the logits instead of three,
// for vocabularies whose row fits (MT_XENT_CACHE_BYTES); FAST: the bf16 gradient's form (above)
#define MT_XENT_CACHE_BYTES (200 * 1024)
template <bool FAST> __device__ static inline float xent_exp(float x) { return FAST ? mt_tc_exp(x) : mt_dev_expf(x); }
template <int NT, bool CACHED, bool FAST>
__global__ static void softmax_xent_rows(float *logits, uint16_t *d16, float *losses, const int32_t *targets, int V,
                                         int Vp, float scale, bool vec) {
    __shared__ float red[NT];
    MT_DYNAMIC_SHARED(float, cache);
    size_t row = blockIdx.x;
    float *x = logits + row * Vp;
    uint16_t *d = d16 ? d16 + row * Vp : NULL;
    int tgt = targets[row];
    const int write_grad = scale != 0.0f;
    if (tgt < 0 || tgt >= V) {
        if (threadIdx.x == 0 && losses) losses[row] = tgt < 0 ? 0.0f : mt_dev_f32_from_bits(0x7fc00000u);
        if (write_grad)
            for (int j = threadIdx.x; j < Vp; j += NT) {
                if (d) d[j] = 0;
                else x[j] = 0.0f;
            }
        return;
    }
    const float *xs = x;
    float mx = -FLT_MAX;
    if (CACHED) { // the max on the way in (float4 where the rows are 16-byte aligned)
        int j0 = 0;
        if (vec) {
            j0 = V / 4 * 4;
            for (int q = threadIdx.x; q < V / 4; q += NT) {
                const float4 v = ((const float4 *)x)[q];
                ((float4 *)cache)[q] = v;
                mx = fmaxf(fmaxf(mx, fmaxf(v.x, v.y)), fmaxf(v.z, v.w));
            }
        }
        for (int j = j0 + threadIdx.x; j < V; j += NT) {
            const float v = x[j];
            cache[j] = v;
            mx = v > mx ? v : mx;
        }
        xs = cache;
    } else {
        for (int j = threadIdx.x; j < V; j += NT) mx = xs[j] > mx ? xs[j] : mx;
    }
    mx = mt_block_max_n<NT>(mx, red); // (its barriers also make the cached row visible to every thread)
    const float xt = xs[tgt];
    float s = 0.0f;
    for (int j = threadIdx.x; j < V; j += NT) s += xent_exp<FAST>(xs[j] - mx);
    s = mt_block_sum_n<NT>(s, red);
    float lse = mx + logf(s);
    if (threadIdx.x == 0 && losses) losses[row] = lse - xt;
    if (!write_grad) return;
    for (int j = threadIdx.x; j < Vp; j += NT) {
        float g = j < V ? scale * xent_exp<FAST>(xs[j] - lse) : 0.0f;
        if (j == tgt) g -= scale;
        if (d) d[j] = FAST ? mt_tc_to_bf16(g) : mt_dev_fp32_to_bf16(g);
        else x[j] = g;
    }
}

template <bool FAST>
static int launch_form(const mt_cuda_ctx *c, float *logits, uint16_t *d16, float *losses, const int32_t *targets, int N,
                       int V, int Vp, float scale) {
    size_t bytes = (size_t)Vp * sizeof(float);
    const bool vec = (uintptr_t)logits % 16 == 0 && Vp % 4 == 0;
    if (bytes <= MT_XENT_CACHE_BYTES) {
        cudaError_t e = cudaFuncSetAttribute(softmax_xent_rows<1024, true, FAST>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
        if (e != cudaSuccess) return (int)e;
        MT_LAUNCH((softmax_xent_rows<1024, true, FAST>), N, 1024, bytes, mt_stream(c), logits, d16, losses, targets, V,
                  Vp, scale, vec);
    } else {
        MT_LAUNCH((softmax_xent_rows<MT_ROW_THREADS, false, FAST>), N, MT_ROW_THREADS, 0, mt_stream(c), logits, d16,
                  losses, targets, V, Vp, scale, vec);
    }
    return mt_launch_status();
}

static int launch_rows(const mt_cuda_ctx *c, float *logits, uint16_t *d16, float *losses, const int32_t *targets, int N,
                       int V, int Vp, float scale) {
    if (N <= 0) return mt_launch_status();
    return d16 ? launch_form<true>(c, logits, d16, losses, targets, N, V, Vp, scale)
               : launch_form<false>(c, logits, d16, losses, targets, N, V, Vp, scale);
}

extern "C" int mt_cuda_softmax_xent(const mt_cuda_ctx *c, float *logits, float *losses, const int32_t *targets, int N,
                                    int V, int Vp, float dlogits_scale) {
    return launch_rows(c, logits, NULL, losses, targets, N, V, Vp, dlogits_scale);
}

extern "C" int mt_cuda_softmax_xent_bf16(const mt_cuda_ctx *c, const float *logits, uint16_t *dlogits, float *losses,
                                         const int32_t *targets, int N, int V, int Vp, float dlogits_scale) {
    return launch_rows(c, (float *)logits, dlogits, losses, targets, N, V, Vp, dlogits_scale);
}
