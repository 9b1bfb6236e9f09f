// Fused softmax + cross-entropy + gradient (cuda/kernels.h): one block per
// row; max and sum of exponentials by the fixed block tree, the CPU's exp
// (its order of summation differs: within a few ulp). A target outside
// [0, V) other than -1 gives a NaN loss (the CPU op stops the run; the
// device cannot, so the NaN reaches the loss the host reads).
#include "cuda/kernels.h"
#include "cuda/device_math.h"
#include "cuda/launch_util.h"
#include <float.h>

__global__ static void softmax_xent_rows(float *logits, uint16_t *d16, float *losses, const int32_t *targets, int V,
                                         int Vp, float scale) {
    __shared__ float red[MT_ROW_THREADS];
    size_t row = blockIdx.x;
    float *x = logits + row * Vp;
    uint16_t *d = d16 ? d16 + row * Vp : NULL;
    int tgt = targets[row];
    const int write_grad = scale != 0.0f;
    if (tgt < 0 || tgt >= V) {
        if (threadIdx.x == 0 && losses) losses[row] = tgt < 0 ? 0.0f : mt_dev_f32_from_bits(0x7fc00000u);
        if (write_grad)
            for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
                if (d) d[j] = 0;
                else x[j] = 0.0f;
            }
        return;
    }
    float xt = x[tgt]; // read by every thread before any writes (the reductions below are barriers)
    float mx = -FLT_MAX;
    for (int j = threadIdx.x; j < V; j += blockDim.x) mx = x[j] > mx ? x[j] : mx;
    mx = mt_block_max(mx, red);
    float s = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) s += mt_dev_expf(x[j] - mx);
    s = mt_block_sum(s, red);
    float lse = mx + logf(s);
    if (threadIdx.x == 0 && losses) losses[row] = lse - xt;
    if (!write_grad) return;
    for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
        float g = j < V ? scale * mt_dev_expf(x[j] - lse) : 0.0f;
        if (j == tgt) g -= scale;
        if (d) d[j] = mt_dev_fp32_to_bf16(g);
        else x[j] = g;
    }
}

extern "C" int mt_cuda_softmax_xent(const mt_cuda_ctx *c, float *logits, float *losses, const int32_t *targets, int N,
                                    int V, int Vp, float dlogits_scale) {
    if (N > 0) MT_LAUNCH(softmax_xent_rows, N, MT_ROW_THREADS, 0, mt_stream(c), logits, (uint16_t *)NULL, losses,
                         targets, V, Vp, dlogits_scale);
    return mt_launch_status();
}

extern "C" int mt_cuda_softmax_xent_bf16(const mt_cuda_ctx *c, const float *logits, uint16_t *dlogits, float *losses,
                                         const int32_t *targets, int N, int V, int Vp, float dlogits_scale) {
    if (N > 0) MT_LAUNCH(softmax_xent_rows, N, MT_ROW_THREADS, 0, mt_stream(c), (float *)logits, dlogits, losses,
                         targets, V, Vp, dlogits_scale);
    return mt_launch_status();
}
