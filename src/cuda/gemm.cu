// The GEMM wrapper (cuda/gemm.h): cuBLAS under nvcc; under the emulation a
// CPU loop with the same column-major conventions, run on the stream.
#include "cuda/gemm.h"
#include "cuda/compat.h"
#include "cuda/device_math.h"
#include <stdint.h>
#include <string.h>
#ifndef MT_CUDA_EMU
#include <cublas_v2.h>
#endif

#define BLAS_INVALID (MT_CUDA_BLAS_ERROR + 7) /* CUBLAS_STATUS_INVALID_VALUE */

static int check_args(char ta, char tb, int m, int n, int k, mt_cuda_dtype at, int lda, mt_cuda_dtype bt, int ldb,
                      mt_cuda_dtype ct, int ldc, int batch) {
    if ((ta != 'N' && ta != 'T') || (tb != 'N' && tb != 'T') || m < 0 || n < 0 || k < 0 || batch < 0) return 1;
    if (at != bt || (at == MT_CUDA_F32 && ct != MT_CUDA_F32)) return 1;
    int rows_a = ta == 'N' ? m : k, rows_b = tb == 'N' ? k : n;
    return lda < (rows_a > 1 ? rows_a : 1) || ldb < (rows_b > 1 ? rows_b : 1) || ldc < (m > 1 ? m : 1);
}

#ifdef MT_CUDA_EMU
static float load(const void *p, mt_cuda_dtype t, long long i) {
    return t == MT_CUDA_F32 ? ((const float *)p)[i] : mt_dev_bf16_to_fp32(((const uint16_t *)p)[i]);
}
// an fp32 operand as the tensor cores' TF32 sees it: 10 mantissa bits, rounded to nearest (ties away)
static float tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u; // not inf/NaN
    memcpy(&x, &u, 4);
    return x;
}

extern "C" int mt_cuda_gemm(const mt_cuda_ctx *ctx, char ta, char tb, int m, int n, int k, float alpha,
                            const void *A, mt_cuda_dtype at, int lda, long long sA, const void *B, mt_cuda_dtype bt,
                            int ldb, long long sB, float beta, void *C, mt_cuda_dtype ct, int ldc, long long sC,
                            int batch) {
    if (check_args(ta, tb, m, n, k, at, lda, bt, ldb, ct, ldc, batch)) return BLAS_INVALID;
    if (m == 0 || n == 0 || batch == 0) return 0;
    bool round_tf32 = ctx->tf32 && at == MT_CUDA_F32;
    cudaError_t e = mt_emu::enqueue_host((cudaStream_t)ctx->stream, [=] {
        for (int b = 0; b < batch; b++)
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) {
                    float acc = 0.0f;
                    for (int l = 0; l < k; l++) {
                        long long ia = ta == 'N' ? i + (long long)l * lda : l + (long long)i * lda;
                        long long ib = tb == 'N' ? l + (long long)j * ldb : j + (long long)l * ldb;
                        float x = load(A, at, b * sA + ia), y = load(B, bt, b * sB + ib);
                        acc += round_tf32 ? tf32(x) * tf32(y) : x * y;
                    }
                    long long ic = b * sC + i + (long long)j * ldc;
                    float r = alpha * acc;
                    if (beta != 0.0f) r += beta * load(C, ct, ic);
                    if (ct == MT_CUDA_F32) ((float *)C)[ic] = r;
                    else ((uint16_t *)C)[ic] = mt_dev_fp32_to_bf16(r);
                }
    });
    return (int)e;
}
#else
extern "C" int mt_cuda_gemm(const mt_cuda_ctx *ctx, char ta, char tb, int m, int n, int k, float alpha,
                            const void *A, mt_cuda_dtype at, int lda, long long sA, const void *B, mt_cuda_dtype bt,
                            int ldb, long long sB, float beta, void *C, mt_cuda_dtype ct, int ldc, long long sC,
                            int batch) {
    if (check_args(ta, tb, m, n, k, at, lda, bt, ldb, ct, ldc, batch)) return BLAS_INVALID;
    if (m == 0 || n == 0 || batch == 0) return 0;
    cublasHandle_t h = (cublasHandle_t)ctx->blas;
    cudaDataType tA = at == MT_CUDA_F32 ? CUDA_R_32F : CUDA_R_16BF, tB = tA;
    cudaDataType tC = ct == MT_CUDA_F32 ? CUDA_R_32F : CUDA_R_16BF;
    cublasOperation_t oa = ta == 'N' ? CUBLAS_OP_N : CUBLAS_OP_T, ob = tb == 'N' ? CUBLAS_OP_N : CUBLAS_OP_T;
    cublasComputeType_t compute = ctx->tf32 && at == MT_CUDA_F32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasStatus_t st;
    if (batch == 1)
        st = cublasGemmEx(h, oa, ob, m, n, k, &alpha, A, tA, lda, B, tB, ldb, &beta, C, tC, ldc, compute,
                          CUBLAS_GEMM_DEFAULT);
    else
        st = cublasGemmStridedBatchedEx(h, oa, ob, m, n, k, &alpha, A, tA, lda, sA, B, tB, ldb, sB, &beta, C, tC, ldc,
                                        sC, batch, compute, CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : MT_CUDA_BLAS_ERROR + (int)st;
}
#endif
