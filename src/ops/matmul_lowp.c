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
 * Threading as op_matmul_forward: each OpenMP thread one slab of the output
 * (rows, or columns when the rows are few), the library serial inside the
 * parallel region, so the partition is fixed for a thread count and no
 * output element is summed across threads. */
#include "ops/matmul_lowp.h"
#include "core/error.h"
#include <dnnl.h>
#include <omp.h>

dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N, dnnl_dim_t K, float alpha,
                                    const mt_bf16 *A, dnnl_dim_t lda, const mt_bf16 *B, dnnl_dim_t ldb, float beta,
                                    float *C, dnnl_dim_t ldc);

void op_gemm_bf16(char transa, char transb, int M, int N, int K, const mt_bf16 *A, int lda, const mt_bf16 *B,
                  int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { /* no products: C = beta C (beta 0 clears, whatever C held) */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
        return;
    }
    dnnl_status_t st = dnnl_gemm_bf16bf16f32(transa, transb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    if (st != dnnl_success)
        mt_die("oneDNN bf16 GEMM failed (status %d) on %c%c M=%d N=%d K=%d lda=%d ldb=%d ldc=%d", (int)st, transa,
               transb, M, N, K, lda, ldb, ldc);
}

/* [lo, hi) of `n` for thread t of nt, in multiples of `q` (except the end). */
static void split(int n, int q, int t, int nt, int *lo, int *hi) {
    int nb = (n + q - 1) / q;
    *lo = (int)((long)nb * t / nt) * q;
    *hi = (int)((long)nb * (t + 1) / nt) * q;
    if (*hi > n) *hi = n;
    if (*lo > n) *lo = n;
}

/* Rows are split when there are enough of them for every thread to get a
 * GEMM-sized slab; otherwise the columns (as matmul.c). */
#define MIN_ROWS_PER_THREAD 64

void op_matmul_forward_bf16(float *out, const mt_bf16 *inp, const mt_bf16 *w, const float *bias, int N, int C,
                            int OC) {
#pragma omp parallel
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int n0 = 0, n1 = N, o0 = 0, o1 = OC;
        if (N >= MIN_ROWS_PER_THREAD * nt) split(N, 16, t, nt, &n0, &n1);
        else split(OC, 16, t, nt, &o0, &o1);
        if (n1 > n0 && o1 > o0) {
            float beta = 0.0f;
            if (bias) {
                for (int n = n0; n < n1; n++) {
                    float *o = out + (size_t)n * OC;
#pragma omp simd
                    for (int j = o0; j < o1; j++) o[j] = bias[j];
                }
                beta = 1.0f;
            }
            op_gemm_bf16('N', 'T', n1 - n0, o1 - o0, C, inp + (size_t)n0 * C, C, w + (size_t)o0 * C, C, beta,
                         out + (size_t)n0 * OC + o0, OC);
        }
    }
}

void op_matmul_backward_bf16(float *dinp, float *dw, float *dbias, const mt_bf16 *dout, const mt_bf16 *inp,
                             const mt_bf16 *w, int N, int C, int OC, int accumulate_dinp) {
#pragma omp parallel
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        if (dinp) { /* dinp[N,C] = dout[N,OC] . w[OC,C] */
            int n0 = 0, n1 = N, c0 = 0, c1 = C;
            if (N >= MIN_ROWS_PER_THREAD * nt) split(N, 16, t, nt, &n0, &n1);
            else split(C, 16, t, nt, &c0, &c1);
            if (n1 > n0 && c1 > c0)
                op_gemm_bf16('N', 'N', n1 - n0, c1 - c0, OC, dout + (size_t)n0 * OC, OC, w + c0, C,
                             accumulate_dinp ? 1.0f : 0.0f, dinp + (size_t)n0 * C + c0, C);
        }
        if (dw) { /* dw[OC,C] += dout^T . inp */
            int o0 = 0, o1 = OC, c0 = 0, c1 = C;
            if (OC >= MIN_ROWS_PER_THREAD * nt) split(OC, 16, t, nt, &o0, &o1);
            else split(C, 16, t, nt, &c0, &c1);
            if (o1 > o0 && c1 > c0)
                op_gemm_bf16('T', 'N', o1 - o0, c1 - c0, N, dout + o0, OC, inp + c0, C, 1.0f,
                             dw + (size_t)o0 * C + c0, C);
        }
        if (dbias) { /* column sums, row by row in order (as op_matmul_backward) */
            int j0, j1;
            split(OC, 16, t, nt, &j0, &j1);
            for (int n = 0; n < N; n++) {
                const mt_bf16 *d = dout + (size_t)n * OC;
#pragma omp simd
                for (int j = j0; j < j1; j++) dbias[j] += mt_bf16_to_fp32(d[j]);
            }
        }
    }
}
