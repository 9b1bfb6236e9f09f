/* The CUDA backend's context: the stream every kernel of a process runs on
 * and the GEMM handle bound to it (cuBLAS under nvcc, the emulation's CPU
 * GEMM under `make gpu-emu`). Every launcher takes it first, then the CPU
 * op's arguments in the CPU op's order (ops/ops.h), device pointers for
 * tensors. Launchers return 0 or an error code for mt_cuda_error_string:
 * a CUDA runtime error (< 10000) or 10000 + a cuBLAS status. They only
 * queue work: results are visible after mt_cuda_sync (or an event). */
#ifndef MT_CUDA_CONTEXT_H
#define MT_CUDA_CONTEXT_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *mt_cuda_stream; /* cudaStream_t */

typedef struct mt_cuda_ctx {
    mt_cuda_stream stream;
    void *blas; /* cublasHandle_t (NULL under the emulation) */
    /* 1: mt_cuda_gemm's fp32 GEMMs multiply in TF32 (CUBLAS_COMPUTE_32F_FAST_TF32: operands rounded to
       10 mantissa bits, fp32 accumulation); 0 (mt_cuda_ctx_init): full fp32. The backend sets it on a
       copy for attention under bf16 mixed precision (device/backend.h, attention_mixed). */
    int tf32;
    /* the column sums' partials (launch_util.h, mt_col_split): MT_CUDA_COL_SCRATCH floats of device
       memory made with the context, so no kernel allocates */
    float *col_scratch;
    /* cuBLASLt under nvcc (NULL under the emulation): its handle, a GEMM workspace of
       MT_CUDA_LT_WORKSPACE bytes made with the context, and mt_cuda_gemm_bias's plans (cuda/gemm.h) */
    void *blas_lt, *lt_workspace, *lt_plans;
} mt_cuda_ctx;
#define MT_CUDA_LT_WORKSPACE ((size_t)32 << 20) /* cuBLAS's own default on Hopper */
#define MT_CUDA_COL_SCRATCH ((size_t)1 << 21) /* 8 MB: 64 row groups x 16k columns x 2 sums */

#define MT_CUDA_BLAS_ERROR 10000

/* A new stream and GEMM handle on the current device (fp32 GEMMs without
 * TF32: CUBLAS_COMPUTE_32F, default math mode). */
int mt_cuda_ctx_init(mt_cuda_ctx *ctx);
void mt_cuda_ctx_destroy(mt_cuda_ctx *ctx);
/* Waits for the context's stream; returns its first error. */
int mt_cuda_sync(const mt_cuda_ctx *ctx);
const char *mt_cuda_error_string(int code);

#ifdef __cplusplus
}
#endif
#endif
