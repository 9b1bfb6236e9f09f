// CUDA kernels (see cuda/kernels.h). One thread per element for the
// elementwise ones, one block per row for LayerNorm.
#include "cuda/kernels.h"
#include <cuda_runtime.h>
#include <math.h>

#define MT_GELU_K 0.7978845608028654f
#define MT_GELU_A 0.044715f

static unsigned blocks_for(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }

__global__ static void gelu_fwd(float *out, const float *inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = inp[i];
    float u = MT_GELU_K * (x + MT_GELU_A * x * x * x);
    float s = 1.0f / (1.0f + expf(-2.0f * u));
    out[i] = x * s;
}

__global__ static void gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = inp[i], x2 = x * x;
    float u = MT_GELU_K * (x + MT_GELU_A * x2 * x);
    float du = MT_GELU_K * (1.0f + 3.0f * MT_GELU_A * x2);
    float s = 1.0f / (1.0f + expf(-2.0f * u));
    dinp[i] = (s + 2.0f * x * s * (1.0f - s) * du) * dout[i];
}

// One block of 256 threads per row: sums in double by a tree in shared memory.
__global__ static void layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                     const float *b, int C) {
    __shared__ double red[256];
    const float *x = inp + (size_t)blockIdx.x * C;
    double s = 0;
    for (int j = threadIdx.x; j < C; j += blockDim.x) s += x[j];
    red[threadIdx.x] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k /= 2) {
        if (threadIdx.x < k) red[threadIdx.x] += red[threadIdx.x + k];
        __syncthreads();
    }
    float mu = (float)(red[0] / C);
    __syncthreads();
    double q = 0;
    for (int j = threadIdx.x; j < C; j += blockDim.x) q += (double)(x[j] - mu) * (x[j] - mu);
    red[threadIdx.x] = q;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k /= 2) {
        if (threadIdx.x < k) red[threadIdx.x] += red[threadIdx.x + k];
        __syncthreads();
    }
    float rs = (float)(1.0 / sqrt(red[0] / C + 1e-5));
    float *o = out + (size_t)blockIdx.x * C;
    for (int j = threadIdx.x; j < C; j += blockDim.x) o[j] = (x[j] - mu) * rs * w[j] + b[j];
    if (threadIdx.x == 0) {
        mean[blockIdx.x] = mu;
        rstd[blockIdx.x] = rs;
    }
}

struct adam_consts {
    float beta1, beta2, omb1, omb2, eps, step_size, bc2_sqrt, pdecay, grad_scale;
};

// The CPU's adam_element (ops/optim_update.c), operation for operation (built with -fmad=false).
__global__ static void adamw(float *p, const float *g, float *m, float *v, size_t n, adam_consts c) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float pi = p[i], gi = g[i] * c.grad_scale + 0.0f * pi;
    pi *= c.pdecay;
    float mi = m[i] * c.beta1 + c.omb1 * gi;
    float vi = v[i] * c.beta2 + c.omb2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float denom = sqrtf(vi) / c.bc2_sqrt + c.eps;
    p[i] = pi - c.step_size * (mi / denom);
}

static int status(void) { return (int)cudaGetLastError(); }

extern "C" int mt_cuda_gelu_forward(float *out, const float *inp, size_t n, mt_cuda_stream s) {
    if (n) gelu_fwd<<<blocks_for(n, 256), 256, 0, (cudaStream_t)s>>>(out, inp, n);
    return status();
}

extern "C" int mt_cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n, mt_cuda_stream s) {
    if (n) gelu_bwd<<<blocks_for(n, 256), 256, 0, (cudaStream_t)s>>>(dinp, inp, dout, n);
    return status();
}

extern "C" int mt_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                         const float *b, int N, int C, mt_cuda_stream s) {
    if (N > 0) layernorm_fwd<<<N, 256, 0, (cudaStream_t)s>>>(out, mean, rstd, inp, w, b, C);
    return status();
}

extern "C" int mt_cuda_adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                                    float beta2, float eps, float weight_decay, int64_t step, float grad_scale,
                                    mt_cuda_stream s) {
    // the constants as the CPU's adam_setup makes them (double, then rounded)
    double bc1 = 1.0 - pow((double)beta1, (double)step), bc2 = 1.0 - pow((double)beta2, (double)step);
    adam_consts c = {beta1, beta2, (float)(1.0 - (double)beta1), (float)(1.0 - (double)beta2), eps,
                     (float)((double)lr / bc1), (float)sqrt(bc2), (float)(1.0 - (double)lr * (double)weight_decay),
                     grad_scale};
    if (n) adamw<<<blocks_for(n, 256), 256, 0, (cudaStream_t)s>>>(p, g, m, v, n, c);
    return status();
}

extern "C" const char *mt_cuda_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }
