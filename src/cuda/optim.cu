// Optimizer updates on flat ranges (cuda/kernels.h): ops/optim_update.c's
// element update operation for operation, its constants made on the host
// the same way (double, then rounded), so the results are the CPU's bits.
#include "cuda/kernels.h"
#include "cuda/device_math.h"
#include "cuda/launch_util.h"
#include <math.h>

struct adam_consts {
    float beta1, beta2, omb1, omb2, eps, step_size, bc2_sqrt, pdecay, l2_wd, grad_scale;
};

static adam_consts adam_setup(float lr, float beta1, float beta2, float eps, float decoupled_wd, float l2_wd,
                              int64_t step, float grad_scale) {
    double bc1 = 1.0 - pow((double)beta1, (double)step), bc2 = 1.0 - pow((double)beta2, (double)step);
    adam_consts c = {beta1, beta2, (float)(1.0 - (double)beta1), (float)(1.0 - (double)beta2), eps,
                     (float)((double)lr / bc1), (float)sqrt(bc2), (float)(1.0 - (double)lr * (double)decoupled_wd),
                     l2_wd, grad_scale};
    return c;
}

__device__ static inline float adam_element(const adam_consts &c, float pi, float gi, float *m, float *v) {
    gi = gi * c.grad_scale + c.l2_wd * pi;
    pi *= c.pdecay;
    float mi = *m * c.beta1 + c.omb1 * gi;
    float vi = *v * c.beta2 + c.omb2 * gi * gi;
    *m = mi;
    *v = vi;
    float denom = sqrtf(vi) / c.bc2_sqrt + c.eps;
    return pi - c.step_size * (mi / denom);
}

__global__ static void adam(float *p, const float *g, float *m, float *v, size_t n, adam_consts c) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    p[i] = adam_element(c, p[i], g[i], &m[i], &v[i]);
}

__global__ static void adam_16(float *p, const uint16_t *g16, uint16_t *p16, int dt, float *m, float *v, size_t n,
                               adam_consts c) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float pi = adam_element(c, p[i], mt_dev_widen16(dt, g16[i]), &m[i], &v[i]);
    p[i] = pi;
    p16[i] = mt_dev_narrow16(dt, pi);
}

__global__ static void sgd(float *p, const float *g, float *buf, size_t n, float lr, float momentum, float wd,
                           int first, float grad_scale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (!buf) {
        p[i] -= lr * (g[i] * grad_scale + wd * p[i]);
        return;
    }
    float gi = g[i] * grad_scale + wd * p[i];
    float b = first ? gi : momentum * buf[i] + gi;
    buf[i] = b;
    p[i] -= lr * b;
}

static int run_adam(const mt_cuda_ctx *c, float *p, const float *g, float *m, float *v, size_t n, adam_consts k) {
    if (n) MT_LAUNCH(adam, mt_blocks_for(n, MT_EW_THREADS), MT_EW_THREADS, 0, mt_stream(c), p, g, m, v, n, k);
    return mt_launch_status();
}

static int run_adam_16(const mt_cuda_ctx *c, float *p, const uint16_t *g16, uint16_t *p16, int dt, float *m, float *v,
                       size_t n, adam_consts k) {
    if (dt != 1 && dt != 2) return (int)cudaErrorInvalidValue;
    if (n) MT_LAUNCH(adam_16, mt_blocks_for(n, MT_EW_THREADS), MT_EW_THREADS, 0, mt_stream(c), p, g16, p16, dt, m, v,
                     n, k);
    return mt_launch_status();
}

extern "C" int mt_cuda_adamw_update(const mt_cuda_ctx *c, float *p, const float *g, float *m, float *v, size_t n,
                                    float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                                    float grad_scale) {
    return run_adam(c, p, g, m, v, n, adam_setup(lr, beta1, beta2, eps, weight_decay, 0.0f, step, grad_scale));
}

extern "C" int mt_cuda_adam_update(const mt_cuda_ctx *c, float *p, const float *g, float *m, float *v, size_t n,
                                   float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                                   float grad_scale) {
    return run_adam(c, p, g, m, v, n, adam_setup(lr, beta1, beta2, eps, 0.0f, weight_decay, step, grad_scale));
}

extern "C" int mt_cuda_adamw_update_16(const mt_cuda_ctx *c, float *p, const uint16_t *g16, uint16_t *p16, int dt,
                                       float *m, float *v, size_t n, float lr, float beta1, float beta2, float eps,
                                       float weight_decay, int64_t step, float grad_scale) {
    return run_adam_16(c, p, g16, p16, dt, m, v, n,
                       adam_setup(lr, beta1, beta2, eps, weight_decay, 0.0f, step, grad_scale));
}

extern "C" int mt_cuda_adam_update_16(const mt_cuda_ctx *c, float *p, const uint16_t *g16, uint16_t *p16, int dt,
                                      float *m, float *v, size_t n, float lr, float beta1, float beta2, float eps,
                                      float weight_decay, int64_t step, float grad_scale) {
    return run_adam_16(c, p, g16, p16, dt, m, v, n,
                       adam_setup(lr, beta1, beta2, eps, 0.0f, weight_decay, step, grad_scale));
}

extern "C" int mt_cuda_sgd_update(const mt_cuda_ctx *c, float *p, const float *g, float *buf, size_t n, float lr,
                                  float momentum, float weight_decay, int64_t step, float grad_scale) {
    if (momentum == 0.0f) buf = NULL;
    if (n) MT_LAUNCH(sgd, mt_blocks_for(n, MT_EW_THREADS), MT_EW_THREADS, 0, mt_stream(c), p, g, buf, n, lr, momentum,
                     weight_decay, step <= 1, grad_scale);
    return mt_launch_status();
}
