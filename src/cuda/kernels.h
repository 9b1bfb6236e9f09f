/* CUDA kernels of the ops table (issue: GPU backend), host-callable launchers
 * on device pointers and a stream. Built only by `make cuda` (nvcc from
 * /usr/local/cuda); the CPU build never includes this. Each kernel has a test
 * against its CPU reference in tests/gpu/test_kernels.cu.
 *
 * Numerics: compiled with -fmad=false and IEEE division/sqrt, so the AdamW
 * update is the CPU's operation for operation (ops/optim_update.c, constants
 * computed on the host the same way); GELU uses CUDA's expf (within a few
 * ulp of the CPU's vector exp); LayerNorm reduces in another order. */
#ifndef MT_CUDA_KERNELS_H
#define MT_CUDA_KERNELS_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *mt_cuda_stream; /* cudaStream_t */

/* 0 on success, else the CUDA error's code (message from mt_cuda_error_string). */
int mt_cuda_gelu_forward(float *out, const float *inp, size_t n, mt_cuda_stream s);
int mt_cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n, mt_cuda_stream s);
/* LayerNorm over rows of C (eps 1e-5, biased variance): out, mean, rstd as op_layernorm_forward. */
int mt_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                              int N, int C, mt_cuda_stream s);
/* AdamW on a flat range, as op_adamw_update (step 1-based). */
int mt_cuda_adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1, float beta2,
                         float eps, float weight_decay, int64_t step, float grad_scale, mt_cuda_stream s);
const char *mt_cuda_error_string(int code);

#ifdef __cplusplus
}
#endif
#endif
