// Fused softmax + cross-entropy + gradient (cuda/kernels.h): one block per
// row (the row cached in shared memory where it fits: one read of the
// logits); max and sum of exponentials by the fixed block tree, the CPU's exp
// (its order of summation differs: within a few ulp). A target outside
// [0, V) other than -1 gives a NaN loss (the CPU op stops the run; the
// device cannot, so the NaN reaches the loss the host reads).
#include "cuda/kernels.h"
#include "cuda/device_math.h"
#include "cuda/launch_util.h"
#include <float.h>

// NT threads per row; CACHED: the row is read from global memory once, into dynamic shared memory
// (Vp floats), and the three passes (max, sum, gradient) read it there -- one read of the logits
// instead of three, for vocabularies whose row fits (MT_XENT_CACHE_BYTES)
#define MT_XENT_CACHE_BYTES (200 * 1024)
template <int NT, bool CACHED>
__global__ static void softmax_xent_rows(float *logits, uint16_t *d16, float *losses, const int32_t *targets, int V,
                                         int Vp, float scale) {
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
    if (CACHED) {
        for (int j = threadIdx.x; j < V; j += NT) cache[j] = x[j];
        __syncthreads();
        xs = cache;
    }
    float xt = xs[tgt]; // read by every thread before any writes (the reductions below are barriers)
    float mx = -FLT_MAX;
    for (int j = threadIdx.x; j < V; j += NT) mx = xs[j] > mx ? xs[j] : mx;
    mx = mt_block_max_n<NT>(mx, red);
    float s = 0.0f;
    for (int j = threadIdx.x; j < V; j += NT) s += mt_dev_expf(xs[j] - mx);
    s = mt_block_sum_n<NT>(s, red);
    float lse = mx + logf(s);
    if (threadIdx.x == 0 && losses) losses[row] = lse - xt;
    if (!write_grad) return;
    for (int j = threadIdx.x; j < Vp; j += NT) {
        float g = j < V ? scale * mt_dev_expf(xs[j] - lse) : 0.0f;
        if (j == tgt) g -= scale;
        if (d) d[j] = mt_dev_fp32_to_bf16(g);
        else x[j] = g;
    }
}

static int launch_rows(const mt_cuda_ctx *c, float *logits, uint16_t *d16, float *losses, const int32_t *targets, int N,
                       int V, int Vp, float scale) {
    if (N <= 0) return mt_launch_status();
    size_t bytes = (size_t)Vp * sizeof(float);
    if (bytes <= MT_XENT_CACHE_BYTES) {
        cudaError_t e = cudaFuncSetAttribute(softmax_xent_rows<1024, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)bytes);
        if (e != cudaSuccess) return (int)e;
        MT_LAUNCH((softmax_xent_rows<1024, true>), N, 1024, bytes, mt_stream(c), logits, d16, losses, targets, V, Vp, scale);
    } else {
        MT_LAUNCH((softmax_xent_rows<MT_ROW_THREADS, false>), N, MT_ROW_THREADS, 0, mt_stream(c), logits, d16, losses,
                  targets, V, Vp, scale);
    }
    return mt_launch_status();
}

extern "C" int mt_cuda_softmax_xent(const mt_cuda_ctx *c, float *logits, float *losses, const int32_t *targets, int N,
                                    int V, int Vp, float dlogits_scale) {
    return launch_rows(c, logits, NULL, losses, targets, N, V, Vp, dlogits_scale);
}

extern "C" int mt_cuda_softmax_xent_bf16(const mt_cuda_ctx *c, const float *logits, uint16_t *dlogits, float *losses,
                                         const int32_t *targets, int N, int V, int Vp, float dlogits_scale) {
    return launch_rows(c, (float *)logits, dlogits, losses, targets, N, V, Vp, dlogits_scale);
}
