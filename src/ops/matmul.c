/* Linear layer on BLAS (row-major cblas_sgemm).
 * forward:  out[N,OC] = inp[N,C] . w[OC,C]^T + bias
 * backward: dinp = dout . w ; dw += dout^T . inp ; dbias += column sums.
 *
 * Threading (linear_slabs.h): the GEMMs are split across the OpenMP threads,
 * one output slab each, with OpenBLAS itself single-threaded for the
 * duration. Letting OpenBLAS's own pthread pool run next to OpenMP's
 * spinning workers cost ~35% on 2 cores (measured); with one pool there is
 * no such contention. */
#include "ops/ops.h"
#include "ops/blas_threads.h"
#include "ops/linear_slabs.h"
#include <cblas.h>

/* The row-major sgemm of one slab, on the calling thread. */
static void sgemm_slab(char transa, char transb, int M, int N, int K, const void *A, int lda, const void *B, int ldb,
                       float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, transa == 'T' ? CblasTrans : CblasNoTrans, transb == 'T' ? CblasTrans : CblasNoTrans,
                M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

static const mt_slab_kind fp32_slabs = {sgemm_slab, sizeof(float)};

void op_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC) {
    int saved = mt_blas_threads_enter();
    mt_slabs_forward(&fp32_slabs, out, inp, w, bias, N, C, OC);
    mt_blas_threads_leave(saved);
}

void op_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int N, int C, int OC, int accumulate_dinp) {
    int saved = mt_blas_threads_enter();
    mt_slabs_backward(&fp32_slabs, dinp, dw, dbias, dout, inp, w, N, C, OC, accumulate_dinp);
    mt_blas_threads_leave(saved);
}
