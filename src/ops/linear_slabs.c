#include "ops/linear_slabs.h"
#include "core/dtype.h"
#include "ops/ops.h"
#include <omp.h>

/* Rows are split when there are enough of them for every thread to get a
 * GEMM-sized slab; otherwise the columns. */
#define MIN_ROWS_PER_THREAD 64

/* [lo, hi) of `n` for thread t of nt, in multiples of `q` (except the end). */
static void split(int n, int q, int t, int nt, int *lo, int *hi) {
    int nb = (n + q - 1) / q;
    *lo = (int)((long)nb * t / nt) * q;
    *hi = (int)((long)nb * (t + 1) / nt) * q;
    if (*hi > n) *hi = n;
    if (*lo > n) *lo = n;
}

/* This thread's slab of an R x Cc output: rows [r0, r1), columns [c0, c1). */
static void slab(int R, int Cc, int t, int nt, int *r0, int *r1, int *c0, int *c1) {
    *r0 = 0, *r1 = R, *c0 = 0, *c1 = Cc;
    if (R >= MIN_ROWS_PER_THREAD * nt) split(R, 16, t, nt, r0, r1);
    else split(Cc, 16, t, nt, c0, c1);
}

void mt_gemm_scale_only(int M, int N, float beta, float *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
}

/* One slab's GEMM through the kind's library, or the scaling alone when
 * there are no products. */
static void slab_gemm(const mt_slab_kind *k, char transa, char transb, int M, int N, int K, const void *A, int lda,
                      const void *B, int ldb, float beta, float *C, int ldc) {
    if (K <= 0) mt_gemm_scale_only(M, N, beta, C, ldc);
    else k->gemm(transa, transb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

/* Element i of an operand array. */
static const void *at(const mt_slab_kind *k, const void *p, size_t i) { return (const char *)p + i * k->esize; }

void mt_slabs_forward(const mt_slab_kind *k, float *out, const void *inp, const void *w, const float *bias, int N,
                      int C, int OC) {
#pragma omp parallel
    {
        int n0, n1, o0, o1;
        slab(N, OC, omp_get_thread_num(), omp_get_num_threads(), &n0, &n1, &o0, &o1);
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
            slab_gemm(k, 'N', 'T', n1 - n0, o1 - o0, C, at(k, inp, (size_t)n0 * C), C, at(k, w, (size_t)o0 * C), C, beta,
                    out + (size_t)n0 * OC + o0, OC);
        }
    }
}

void mt_slabs_backward(const mt_slab_kind *k, float *dinp, float *dw, float *dbias, const void *dout, const void *inp,
                       const void *w, int N, int C, int OC, int flags) {
#pragma omp parallel
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        if (dinp) { /* dinp[N,C] = dout[N,OC] . w[OC,C] */
            int n0, n1, c0, c1;
            slab(N, C, t, nt, &n0, &n1, &c0, &c1);
            if (n1 > n0 && c1 > c0)
                slab_gemm(k, 'N', 'N', n1 - n0, c1 - c0, OC, at(k, dout, (size_t)n0 * OC), OC, at(k, w, (size_t)c0), C,
                        (flags & MT_ACC_DINP) ? 1.0f : 0.0f, dinp + (size_t)n0 * C + c0, C);
        }
        if (dw) { /* dw[OC,C] (+)= dout^T . inp */
            int o0, o1, c0, c1;
            slab(OC, C, t, nt, &o0, &o1, &c0, &c1);
            if (o1 > o0 && c1 > c0)
                slab_gemm(k, 'T', 'N', o1 - o0, c1 - c0, N, at(k, dout, (size_t)o0), OC, at(k, inp, (size_t)c0), C,
                          (flags & MT_SET_DW) ? 0.0f : 1.0f, dw + (size_t)o0 * C + c0, C);
        }
        if (dbias) { /* column sums, row by row in order */
            int j0, j1;
            split(OC, 16, t, nt, &j0, &j1);
            for (int n = 0; n < N; n++) {
                if (k->esize == sizeof(float)) {
                    const float *d = (const float *)dout + (size_t)n * OC;
#pragma omp simd
                    for (int j = j0; j < j1; j++) dbias[j] += d[j];
                } else {
                    const mt_bf16 *d = (const mt_bf16 *)dout + (size_t)n * OC;
#pragma omp simd
                    for (int j = j0; j < j1; j++) dbias[j] += mt_bf16_to_fp32(d[j]);
                }
            }
        }
    }
}
