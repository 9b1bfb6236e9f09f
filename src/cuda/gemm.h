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

/* C (m x n fp32, ldc) = op(A) op(B) + bias (m floats, added to every column): a linear layer's forward
 * with the bias added in the GEMM's epilogue (cuBLASLt, CUBLASLT_EPILOGUE_BIAS, fp32 accumulation)
 * instead of a pass of its own over C. A and B both fp32 or both bf16 (at). Returns
 * MT_CUDA_GEMM_NO_EPILOGUE, having done nothing, where cuBLASLt offers no algorithm for the shape and
 * alignments (or bias is not 16-byte aligned): the caller then runs mt_cuda_gemm and adds the bias
 * itself. A shape's plan (descriptors, layouts, the heuristic's algorithm) is made on its first call and
 * kept in the context (at most MT_CUDA_LT_PLANS shapes; later ones fall back), so steps after the first
 * allocate nothing. Emulated form: mt_cuda_gemm's loop, then bias[i] added to each C element (what the
 * caller's separate pass computes). */
#define MT_CUDA_GEMM_NO_EPILOGUE (MT_CUDA_BLAS_ERROR + 100)
#define MT_CUDA_LT_PLANS 48
int mt_cuda_gemm_bias(const mt_cuda_ctx *ctx, char transa, char transb, int m, int n, int k, const void *A,
                      mt_cuda_dtype at, int lda, const void *B, int ldb, float *C, int ldc, const float *bias);
/* cuBLASLt's part of the context (cuda/context.h): made by mt_cuda_ctx_init, freed by mt_cuda_ctx_destroy;
 * not made when the environment sets MT_CUDA_NO_LT (not 0): then every bias is a pass of its own */
int mt_cuda_gemm_lt_init(mt_cuda_ctx *ctx);
void mt_cuda_gemm_lt_destroy(mt_cuda_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
