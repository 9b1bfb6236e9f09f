// Linear layers on row-major tensors through the GEMM wrapper (cuda/gemm.h
// explains the row-major / column-major mapping); the bias and its
// gradient are kernels here (the gradient by column blocks of row lanes,
// launch_util.h).
#include "cuda/kernels.h"
#include "cuda/device_math.h"
#include "cuda/launch_util.h"

__global__ static void add_bias(void *out, int out_t, const float *bias, size_t n, int OC) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (out_t == MT_CUDA_F32) ((float *)out)[i] += bias[i % OC];
    else ((uint16_t *)out)[i] = mt_dev_fp32_to_bf16(mt_dev_bf16_to_fp32(((uint16_t *)out)[i]) + bias[i % OC]);
}

// a block of MT_COL_GROUP columns x MT_COL_LANES row lanes (launch_util.h)
__global__ static void bias_grad(float *dbias, float *part, mt_col_split sp, const void *dout, int dt, int N, int OC) {
    __shared__ float red[MT_COL_LANES][MT_COL_GROUP + 1];
    int o = blockIdx.x * MT_COL_GROUP + threadIdx.x, r0 = blockIdx.y * sp.rows;
    int r1 = r0 + sp.rows < N ? r0 + sp.rows : N;
    float a = 0.0f;
    if (o < OC)
        for (int n = r0 + threadIdx.y; n < r1; n += MT_COL_LANES) {
            size_t i = (size_t)n * OC + o;
            a += dt == MT_CUDA_F32 ? ((const float *)dout)[i] : mt_dev_bf16_to_fp32(((const uint16_t *)dout)[i]);
        }
    a = mt_col_lanes_sum(a, red);
    if (o < OC && !threadIdx.y) mt_col_put(dbias, part, sp.groups, OC, o, a);
}

static int forward(const mt_cuda_ctx *c, void *out, mt_cuda_dtype out_t, const void *inp, const void *w,
                   mt_cuda_dtype in_t, const float *bias, int N, int C, int OC) {
    // out^T (OC x N) = w^T' (OC x C) inp^T (C x N), column-major; an fp32 out takes the bias in the GEMM's
    // epilogue where cuBLASLt offers it (one pass over out instead of two)
    if (bias && out_t == MT_CUDA_F32) {
        int e = mt_cuda_gemm_bias(c, 'T', 'N', OC, N, C, w, in_t, C, inp, C, (float *)out, OC, bias);
        if (e != MT_CUDA_GEMM_NO_EPILOGUE) return e;
    }
    int e = mt_cuda_gemm(c, 'T', 'N', OC, N, C, 1.0f, w, in_t, C, 0, inp, in_t, C, 0, 0.0f, out, out_t, OC, 0, 1);
    if (e || !bias) return e;
    size_t n = (size_t)N * OC;
    if (n) MT_LAUNCH(add_bias, mt_blocks_for(n, MT_EW_THREADS), MT_EW_THREADS, 0, mt_stream(c), out, (int)out_t, bias,
                     n, OC);
    return mt_launch_status();
}

static int backward(const mt_cuda_ctx *c, float *dinp, float *dw, float *dbias, const void *dout, const void *inp,
                    const void *w, mt_cuda_dtype t, int N, int C, int OC, int flags) {
    int e = 0;
    if (dinp) // dinp^T (C x N) = w^T (C x OC) dout^T (OC x N)
        e = mt_cuda_gemm(c, 'N', 'N', C, N, OC, 1.0f, w, t, C, 0, dout, t, OC, 0, (flags & 1) ? 1.0f : 0.0f, dinp,
                         MT_CUDA_F32, C, 0, 1);
    if (!e && dw) // dw^T (C x OC) = inp^T (C x N) dout (N x OC)
        e = mt_cuda_gemm(c, 'N', 'T', C, OC, N, 1.0f, inp, t, C, 0, dout, t, OC, 0, (flags & 2) ? 0.0f : 1.0f, dw,
                         MT_CUDA_F32, C, 0, 1);
    if (e || !dbias || OC <= 0) return e;
    if (N <= 0) return e;
    mt_col_split sp = mt_col_split_for(N, OC, 1);
    MT_LAUNCH(bias_grad, dim3(mt_blocks_for(OC, MT_COL_GROUP), sp.groups), dim3(MT_COL_GROUP, MT_COL_LANES), 0,
              mt_stream(c), dbias, c->col_scratch, sp, dout, (int)t, N, OC);
    mt_col_finish(c, dbias, c->col_scratch, sp.groups, OC);
    return mt_launch_status();
}

extern "C" int mt_cuda_matmul_forward(const mt_cuda_ctx *c, float *out, const float *inp, const float *w,
                                      const float *bias, int N, int C, int OC) {
    return forward(c, out, MT_CUDA_F32, inp, w, MT_CUDA_F32, bias, N, C, OC);
}

extern "C" int mt_cuda_matmul_backward(const mt_cuda_ctx *c, float *dinp, float *dw, float *dbias, const float *dout,
                                       const float *inp, const float *w, int N, int C, int OC, int flags) {
    return backward(c, dinp, dw, dbias, dout, inp, w, MT_CUDA_F32, N, C, OC, flags);
}

extern "C" int mt_cuda_matmul_forward_bf16(const mt_cuda_ctx *c, float *out, const uint16_t *inp, const uint16_t *w,
                                           const float *bias, int N, int C, int OC) {
    return forward(c, out, MT_CUDA_F32, inp, w, MT_CUDA_BF16, bias, N, C, OC);
}

extern "C" int mt_cuda_matmul_forward_bf16_out16(const mt_cuda_ctx *c, uint16_t *out, const uint16_t *inp,
                                                 const uint16_t *w, const float *bias, int N, int C, int OC) {
    return forward(c, out, MT_CUDA_BF16, inp, w, MT_CUDA_BF16, bias, N, C, OC);
}

extern "C" int mt_cuda_matmul_backward_bf16(const mt_cuda_ctx *c, float *dinp, float *dw, float *dbias,
                                            const uint16_t *dout, const uint16_t *inp, const uint16_t *w, int N, int C,
                                            int OC, int flags) {
    return backward(c, dinp, dw, dbias, dout, inp, w, MT_CUDA_BF16, N, C, OC, flags);
}
