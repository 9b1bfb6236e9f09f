/* Linear layer on an fp32 sgemm (row-major), from one of two libraries:
 * oneDNN's dnnl_sgemm (the default) or OpenBLAS's cblas_sgemm ({gemm}).
 * forward:  out[N,OC] = inp[N,C] . w[OC,C]^T + bias
 * backward: dinp = dout . w ; dw += dout^T . inp ; dbias += column sums.
 *
 * Threading (linear_slabs.h): the GEMMs are split across the OpenMP threads,
 * one output slab each, with the library single-threaded inside the
 * parallel region (both run serially when called from one; for OpenBLAS's
 * pthreads build blas_threads.h makes it so). Letting OpenBLAS's own pthread
 * pool run next to OpenMP's spinning workers cost ~35% on 2 cores
 * (measured); with one pool there is no such contention. */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include "core/error.h"
#include "ops/blas_threads.h"
#include "ops/linear_slabs.h"
#include <cblas.h>
#include <dnnl.h>
#include <string.h>

/* The row-major sgemm of one slab, on the calling thread. */
static void openblas_slab(char transa, char transb, int M, int N, int K, const void *A, int lda, const void *B,
                          int ldb, float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, transa == 'T' ? CblasTrans : CblasNoTrans, transb == 'T' ? CblasTrans : CblasNoTrans,
                M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

static void onednn_slab(char transa, char transb, int M, int N, int K, const void *A, int lda, const void *B,
                        int ldb, float beta, float *C, int ldc) {
    dnnl_status_t st = dnnl_sgemm(transa, transb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    if (st != dnnl_success)
        mt_die("oneDNN sgemm failed (status %d) on %c%c M=%d N=%d K=%d lda=%d ldb=%d ldc=%d; {gemm} openblas "
               "avoids it", (int)st, transa, transb, M, N, K, lda, ldb, ldc);
}

static const mt_slab_kind openblas_slabs = {openblas_slab, sizeof(float)};
static const mt_slab_kind onednn_slabs = {onednn_slab, sizeof(float)};

static const mt_slab_kind *slabs_of(mt_gemm_lib lib) {
    return lib == MT_GEMM_OPENBLAS ? &openblas_slabs : &onednn_slabs;
}

void op_sgemm(mt_backend *be, char transa, char transb, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
    MT_DISPATCH(be, sgemm, be, transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (M <= 0 || N <= 0) return;
    int saved = mt_blas_threads_enter();
    if (be->gemm == MT_GEMM_OPENBLAS) {
        cblas_sgemm(CblasRowMajor, transa == 'T' ? CblasTrans : CblasNoTrans, transb == 'T' ? CblasTrans : CblasNoTrans,
                    M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    } else {
        dnnl_status_t st = dnnl_sgemm(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        if (st != dnnl_success)
            mt_die("oneDNN sgemm failed (status %d) on %c%c M=%d N=%d K=%d; {gemm} openblas avoids it", (int)st, transa,
                   transb, M, N, K);
    }
    mt_blas_threads_leave(saved);
}

void op_matmul_forward(mt_backend *be, float *out, const float *inp, const float *w, const float *bias, int N, int C,
                       int OC) {
    MT_DISPATCH(be, matmul_forward, be, out, inp, w, bias, N, C, OC);
    int saved = mt_blas_threads_enter();
    mt_slabs_forward(slabs_of(be->gemm), out, inp, w, bias, N, C, OC);
    mt_blas_threads_leave(saved);
}

void op_matmul_backward(mt_backend *be, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int N, int C, int OC, int flags) {
    MT_DISPATCH(be, matmul_backward, be, dinp, dw, dbias, dout, inp, w, N, C, OC, flags);
    int saved = mt_blas_threads_enter();
    mt_slabs_backward(slabs_of(be->gemm), dinp, dw, dbias, dout, inp, w, N, C, OC, flags);
    mt_blas_threads_leave(saved);
}
