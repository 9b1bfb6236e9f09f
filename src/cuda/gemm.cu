// The GEMM wrapper (cuda/gemm.h): cuBLAS under nvcc; under the emulation a
// CPU loop with the same column-major conventions, run on the stream.
#include "cuda/gemm.h"
#include "cuda/compat.h"
#include "cuda/device_math.h"
#include <stdint.h>
#include <string.h>
#ifndef MT_CUDA_EMU
#include <cublas_v2.h>
#include <cublasLt.h>
#include <stdlib.h>
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

extern "C" int mt_cuda_gemm_bias(const mt_cuda_ctx *ctx, char ta, char tb, int m, int n, int k, const void *A,
                                 mt_cuda_dtype at, int lda, const void *B, int ldb, float *C, int ldc,
                                 const float *bias) {
    if (check_args(ta, tb, m, n, k, at, lda, at, ldb, MT_CUDA_F32, ldc, 1) || !bias) return BLAS_INVALID;
    int e = mt_cuda_gemm(ctx, ta, tb, m, n, k, 1.0f, A, at, lda, 0, B, at, ldb, 0, 0.0f, C, MT_CUDA_F32, ldc, 0, 1);
    if (e || m == 0 || n == 0) return e;
    return (int)mt_emu::enqueue_host((cudaStream_t)ctx->stream, [=] {
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) C[i + (long long)j * ldc] += bias[i];
    });
}

extern "C" int mt_cuda_gemm_lt_init(mt_cuda_ctx *ctx) {
    ctx->blas_lt = ctx->lt_workspace = ctx->lt_plans = NULL;
    return 0;
}
extern "C" void mt_cuda_gemm_lt_destroy(mt_cuda_ctx *ctx) { ctx->blas_lt = ctx->lt_workspace = ctx->lt_plans = NULL; }
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

/* mt_cuda_gemm_bias's plans: one per (shape, types, leading dimensions, operand alignments), made on first
 * use; state 1 ready, 2 no algorithm (the caller falls back every time, without asking again) */
struct lt_plan {
    int key[12];
    int state;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
};
struct lt_plans {
    lt_plan p[MT_CUDA_LT_PLANS];
};

extern "C" int mt_cuda_gemm_lt_init(mt_cuda_ctx *ctx) {
    ctx->blas_lt = ctx->lt_workspace = ctx->lt_plans = NULL;
    // MT_CUDA_NO_LT=1: no cuBLASLt (every bias its own pass), to compare or to step around a library fault
    const char *off = getenv("MT_CUDA_NO_LT");
    if (off && *off && strcmp(off, "0") != 0) return 0;
    cublasLtHandle_t lt;
    cublasStatus_t st = cublasLtCreate(&lt);
    if (st != CUBLAS_STATUS_SUCCESS) return MT_CUDA_BLAS_ERROR + (int)st;
    ctx->blas_lt = lt;
    cudaError_t e = cudaMalloc(&ctx->lt_workspace, MT_CUDA_LT_WORKSPACE);
    ctx->lt_plans = calloc(1, sizeof(lt_plans));
    if (e != cudaSuccess || !ctx->lt_plans) {
        if (e == cudaSuccess) e = cudaErrorMemoryAllocation;
        else ctx->lt_workspace = NULL;
        mt_cuda_gemm_lt_destroy(ctx);
        return (int)e;
    }
    return 0;
}

// a plan's descriptors freed, the plan empty again
static void plan_free(lt_plan *p) {
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    memset(p, 0, sizeof *p);
}

extern "C" void mt_cuda_gemm_lt_destroy(mt_cuda_ctx *ctx) {
    lt_plans *t = (lt_plans *)ctx->lt_plans;
    for (int i = 0; t && i < MT_CUDA_LT_PLANS; i++) plan_free(&t->p[i]);
    free(t);
    if (ctx->lt_workspace) cudaFree(ctx->lt_workspace);
    if (ctx->blas_lt) cublasLtDestroy((cublasLtHandle_t)ctx->blas_lt);
    ctx->blas_lt = ctx->lt_workspace = ctx->lt_plans = NULL;
}

// the largest power of two up to 256 dividing the address (cuBLASLt's heuristic otherwise assumes 256)
static int alignment(const void *p) {
    int a = 1;
    while (a < 256 && (uintptr_t)p % (2 * a) == 0) a *= 2;
    return a;
}

// the plan's descriptors, layouts and algorithm; 0, or a cuBLAS status (the plan then stays empty)
static cublasStatus_t plan_make(const mt_cuda_ctx *ctx, lt_plan *p, char ta, char tb, int m, int n, int k,
                                mt_cuda_dtype at, int lda, int ldb, int ldc, const int align[4]) {
    cudaDataType tab = at == MT_CUDA_F32 ? CUDA_R_32F : CUDA_R_16BF, tf = CUDA_R_32F;
    cublasOperation_t oa = ta == 'N' ? CUBLAS_OP_N : CUBLAS_OP_T, ob = tb == 'N' ? CUBLAS_OP_N : CUBLAS_OP_T;
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    uint64_t ws = MT_CUDA_LT_WORKSPACE;
    cublasStatus_t st = cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (!st) st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa);
    if (!st) st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob);
    if (!st) st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    if (!st) st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &tf, sizeof tf);
    // stored shapes (before op): A m x k or k x m, B k x n or n x k, C m x n; column-major
    if (!st) st = cublasLtMatrixLayoutCreate(&p->la, tab, ta == 'N' ? m : k, ta == 'N' ? k : m, lda);
    if (!st) st = cublasLtMatrixLayoutCreate(&p->lb, tab, tb == 'N' ? k : n, tb == 'N' ? n : k, ldb);
    if (!st) st = cublasLtMatrixLayoutCreate(&p->lc, tf, m, n, ldc);
    cublasLtMatmulPreference_t pref = NULL;
    if (!st) st = cublasLtMatmulPreferenceCreate(&pref);
    if (!st) st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    const cublasLtMatmulPreferenceAttributes_t al[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4 && !st; i++) {
        uint32_t v = (uint32_t)align[i];
        st = cublasLtMatmulPreferenceSetAttribute(pref, al[i], &v, sizeof v);
    }
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (!st)
        st = cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)ctx->blas_lt, p->op, p->la, p->lb, p->lc, p->lc, pref, 1,
                                            &res, &found);
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (st && st != CUBLAS_STATUS_NOT_SUPPORTED) return st;
    p->state = !st && found > 0 ? 1 : 2;
    if (p->state == 1) p->algo = res.algo;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" int mt_cuda_gemm_bias(const mt_cuda_ctx *ctx, char ta, char tb, int m, int n, int k, const void *A,
                                 mt_cuda_dtype at, int lda, const void *B, int ldb, float *C, int ldc,
                                 const float *bias) {
    if (check_args(ta, tb, m, n, k, at, lda, at, ldb, MT_CUDA_F32, ldc, 1) || !bias) return BLAS_INVALID;
    lt_plans *t = (lt_plans *)ctx->lt_plans;
    if (!t || (uintptr_t)bias % 16) return MT_CUDA_GEMM_NO_EPILOGUE;
    if (m == 0 || n == 0) return 0;
    const int align[4] = {alignment(A), alignment(B), alignment(C), alignment(C)};
    const int key[12] = {ta, tb, m, n, k, (int)at, lda, ldb, ldc, align[0], align[1], align[2]};
    lt_plan *p = NULL;
    for (int i = 0; i < MT_CUDA_LT_PLANS && !p; i++)
        if (t->p[i].state && !memcmp(t->p[i].key, key, sizeof key)) p = &t->p[i];
        else if (!t->p[i].state) { // the first empty plan: this shape's, new
            p = &t->p[i];
            memcpy(p->key, key, sizeof key);
            cublasStatus_t st = plan_make(ctx, p, ta, tb, m, n, k, at, lda, ldb, ldc, align);
            if (st) { // an error, not a missing algorithm: leave the plan empty, report it
                plan_free(p);
                return MT_CUDA_BLAS_ERROR + (int)st;
            }
        }
    if (!p || p->state != 1) return MT_CUDA_GEMM_NO_EPILOGUE; // the table is full, or no algorithm
    cublasStatus_t st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    const float one = 1.0f, zero = 0.0f;
    if (!st)
        st = cublasLtMatmul((cublasLtHandle_t)ctx->blas_lt, p->op, &one, A, p->la, B, p->lb, &zero, C, p->lc, C, p->lc,
                            &p->algo, ctx->lt_workspace, MT_CUDA_LT_WORKSPACE, (cudaStream_t)ctx->stream);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : MT_CUDA_BLAS_ERROR + (int)st;
}
#endif
