// The backend context (cuda/context.h): a stream and, under nvcc, a cuBLAS
// handle bound to it and cuBLASLt's part (cuda/gemm.cu).
#include "cuda/context.h"
#include "cuda/compat.h"
#include "cuda/gemm.h"
#include <stdio.h>
#ifndef MT_CUDA_EMU
#include <cublas_v2.h>
#endif

extern "C" int mt_cuda_ctx_init(mt_cuda_ctx *ctx) {
    ctx->stream = NULL;
    ctx->blas = NULL;
    ctx->blas_lt = ctx->lt_workspace = ctx->lt_plans = NULL;
    ctx->tf32 = 0;
    ctx->col_scratch = NULL;
    cudaError_t e = cudaMalloc((void **)&ctx->col_scratch, MT_CUDA_COL_SCRATCH * sizeof(float));
    if (e != cudaSuccess) {
        ctx->col_scratch = NULL;
        return (int)e;
    }
    cudaStream_t s;
    e = cudaStreamCreate(&s);
    if (e != cudaSuccess) {
        cudaFree(ctx->col_scratch);
        ctx->col_scratch = NULL;
        return (int)e;
    }
    ctx->stream = (mt_cuda_stream)s;
#ifndef MT_CUDA_EMU
    cublasHandle_t h;
    cublasStatus_t st = cublasCreate(&h);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasSetStream(h, s);
    // no TF32 (fp32 GEMMs are the CPU's arithmetic up to order); CUBLAS_COMPUTE_32F is passed per call too
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
    if (st != CUBLAS_STATUS_SUCCESS) {
        cudaStreamDestroy(s);
        cudaFree(ctx->col_scratch);
        ctx->col_scratch = NULL;
        ctx->stream = NULL;
        return MT_CUDA_BLAS_ERROR + (int)st;
    }
    ctx->blas = h;
#endif
    int rc = mt_cuda_gemm_lt_init(ctx);
    if (rc) {
        mt_cuda_ctx_destroy(ctx);
        return rc;
    }
    return 0;
}

extern "C" void mt_cuda_ctx_destroy(mt_cuda_ctx *ctx) {
    if (ctx->stream) cudaStreamSynchronize((cudaStream_t)ctx->stream); // the workspace may be in use
    mt_cuda_gemm_lt_destroy(ctx);
#ifndef MT_CUDA_EMU
    if (ctx->blas) cublasDestroy((cublasHandle_t)ctx->blas);
#endif
    if (ctx->stream) cudaStreamSynchronize((cudaStream_t)ctx->stream); // the scratch may be in use
    if (ctx->stream) cudaStreamDestroy((cudaStream_t)ctx->stream);
    if (ctx->col_scratch) cudaFree(ctx->col_scratch);
    ctx->col_scratch = NULL;
    ctx->stream = NULL;
    ctx->blas = NULL;
}

extern "C" int mt_cuda_sync(const mt_cuda_ctx *ctx) {
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)ctx->stream);
    if (e == cudaSuccess) e = cudaGetLastError();
    return (int)e;
}

extern "C" const char *mt_cuda_error_string(int code) {
    if (code >= MT_CUDA_BLAS_ERROR) {
        switch (code - MT_CUDA_BLAS_ERROR) {
        case 1: return "cuBLAS: library not initialized";
        case 3: return "cuBLAS: resource allocation failed";
        case 7: return "cuBLAS: invalid value (a GEMM dimension, leading dimension or type combination)";
        case 8: return "cuBLAS: architecture mismatch";
        case 13: return "cuBLAS: execution failed";
        case 14: return "cuBLAS: internal error";
        case 15: return "cuBLAS: not supported";
        }
        return "cuBLAS: unknown status";
    }
    return cudaGetErrorString((cudaError_t)code);
}
