/* bf16 linear layer on oneDNN's bf16 GEMM (semantics in matmul_lowp.h).
 *
 * Library: oneDNN 2.6's dnnl_gemm_bf16bf16f32 (Debian's libdnnl-dev). It
 * runs vdpbf16ps kernels on CPUs with AVX512_BF16 and reached about twice
 * the OpenBLAS sgemm rate on the model's shapes; OpenBLAS 0.3.21 in Debian
 * is built without its sbgemm (docs/precision.md has the numbers). The
 * function is exported by libdnnl (extern "C", DNNL_API, src/cpu/gemm/
 * gemm.cpp, same row-major convention as the public dnnl_sgemm) but its
 * public headers do not declare it, so it is declared here; its bf16 type
 * is a struct of one uint16_t, the same bits as mt_bf16.
 *
 * Threading as op_matmul_forward (linear_slabs.h): each OpenMP thread one
 * slab of the output, the library serial inside the parallel region. */
#include "ops/kernel_table.h"
#include "ops/matmul_lowp.h"
#include "core/error.h"
#include "ops/linear_slabs.h"
#include <dnnl.h>

dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N, dnnl_dim_t K, float alpha,
                                    const mt_bf16 *A, dnnl_dim_t lda, const mt_bf16 *B, dnnl_dim_t ldb, float beta,
                                    float *C, dnnl_dim_t ldc);

/* The CPU GEMM of op_gemm_bf16, on the calling thread (the slab driver's
 * threads call it too). */
static void gemm_bf16(char transa, char transb, int M, int N, int K, const mt_bf16 *A, int lda, const mt_bf16 *B,
                      int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { /* no products: C = beta C (beta 0 clears, whatever C held) */
        mt_gemm_scale_only(M, N, beta, C, ldc);
        return;
    }
    dnnl_status_t st = dnnl_gemm_bf16bf16f32(transa, transb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    if (st != dnnl_success)
        mt_die("oneDNN bf16 GEMM failed (status %d) on %c%c M=%d N=%d K=%d lda=%d ldb=%d ldc=%d", (int)st, transa,
               transb, M, N, K, lda, ldb, ldc);
}

void op_gemm_bf16(mt_backend *be, char transa, char transb, int M, int N, int K, const mt_bf16 *A, int lda,
                  const mt_bf16 *B, int ldb, float beta, float *C, int ldc) {
    MT_DISPATCH(be, gemm_bf16, be, transa, transb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    gemm_bf16(transa, transb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

/* gemm_bf16 in the slab driver's operand-agnostic form. */
static void bf16_slab(char transa, char transb, int M, int N, int K, const void *A, int lda, const void *B, int ldb,
                      float beta, float *C, int ldc) {
    gemm_bf16(transa, transb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

static const mt_slab_kind bf16_slabs = {bf16_slab, sizeof(mt_bf16)};

void op_matmul_forward_bf16(mt_backend *be, float *out, const mt_bf16 *inp, const mt_bf16 *w, const float *bias, int N,
                            int C, int OC) {
    MT_DISPATCH(be, matmul_forward_bf16, be, out, inp, w, bias, N, C, OC);
    mt_slabs_forward(&bf16_slabs, out, inp, w, bias, N, C, OC);
}

void op_matmul_backward_bf16(mt_backend *be, float *dinp, float *dw, float *dbias, const mt_bf16 *dout,
                             const mt_bf16 *inp, const mt_bf16 *w, int N, int C, int OC, int flags) {
    MT_DISPATCH(be, matmul_backward_bf16, be, dinp, dw, dbias, dout, inp, w, N, C, OC, flags);
    mt_slabs_backward(&bf16_slabs, dinp, dw, dbias, dout, inp, w, N, C, OC, flags);
}
