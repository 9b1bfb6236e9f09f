/* The one GEMM entry of the CUDA backend, with cuBLAS's conventions:
 * column-major matrices, C[m,n] = alpha op(A)[m,k] op(B)[k,n] + beta C,
 * op 'N' or 'T', leading dimensions in elements, `batch` matrices at
 * element strides sA, sB, sC (cublasGemmStridedBatchedEx; batch 1 is
 * cublasGemmEx). Compute type CUBLAS_COMPUTE_32F always (fp32 accumulation,
 * no TF32). Types: A and B both fp32 (C fp32) or both bf16 (C fp32 or bf16).
 * beta == 0 does not read C (it may hold NaN), as cuBLAS.
 *
 * A row-major matrix X[r][c] is the column-major X^T with ld = c, so the
 * row-major out[N,OC] = inp[N,C] w[OC,C]^T is, column-major,
 * out^T (OC x N) = op_T(w^T: C x OC) inp^T (C x N): m = OC, n = N, k = C,
 * A = w ('T', lda C), B = inp ('N', ldb C), ldc OC.
 *
 * Emulated form: the same call computes on the CPU, queued on the
 * context's stream, each C element a float sum over k in order. */
#ifndef MT_CUDA_GEMM_H
#define MT_CUDA_GEMM_H
#include "cuda/context.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MT_CUDA_F32 = 0, MT_CUDA_BF16 = 1 } mt_cuda_dtype;

int mt_cuda_gemm(const mt_cuda_ctx *ctx, char transa, char transb, int m, int n, int k, float alpha, const void *A,
                 mt_cuda_dtype at, int lda, long long sA, const void *B, mt_cuda_dtype bt, int ldb, long long sB,
                 float beta, void *C, mt_cuda_dtype ct, int ldc, long long sC, int batch);

#ifdef __cplusplus
}
#endif
#endif
