/* Linear layer on BLAS (row-major cblas_sgemm).
 * forward:  out[N,OC] = inp[N,C] . w[OC,C]^T + bias
 * backward: dinp = dout . w ; dw += dout^T . inp ; dbias += column sums.
 *
 * Threading: the GEMMs are split across the OpenMP threads (each thread one
 * slab of the output: a range of rows, or of columns when the rows are few)
 * with OpenBLAS itself single-threaded for the duration. Letting OpenBLAS's
 * own pthread pool run next to OpenMP's spinning workers cost ~35% on 2
 * cores (measured); with one pool there is no such contention, and the
 * partition is fixed for a thread count, so results are deterministic.
 * No output element is summed across threads. The bias sum is parallel over
 * column ranges (each thread walks all rows for its columns). */
#include "ops/ops.h"
#include "ops/blas_threads.h"
#include <cblas.h>
#include <omp.h>

/* [lo, hi) of `n` for thread t of nt, in multiples of `q` (except the end). */
static void split(int n, int q, int t, int nt, int *lo, int *hi) {
    int nb = (n + q - 1) / q;
    *lo = (int)((long)nb * t / nt) * q;
    *hi = (int)((long)nb * (t + 1) / nt) * q;
    if (*hi > n) *hi = n;
    if (*lo > n) *lo = n;
}

/* Rows are split when there are enough of them for every thread to get a
 * GEMM-sized slab; otherwise the columns. */
#define MIN_ROWS_PER_THREAD 64

void op_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC) {
    int saved = mt_blas_threads_enter();
#pragma omp parallel
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int by_rows = N >= MIN_ROWS_PER_THREAD * nt;
        int n0 = 0, n1 = N, o0 = 0, o1 = OC;
        if (by_rows) split(N, 16, t, nt, &n0, &n1);
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
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n1 - n0, o1 - o0, C, 1.0f, inp + (size_t)n0 * C, C,
                        w + (size_t)o0 * C, C, beta, out + (size_t)n0 * OC + o0, OC);
        }
    }
    mt_blas_threads_leave(saved);
}

void op_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int N, int C, int OC, int accumulate_dinp) {
    int saved = mt_blas_threads_enter();
#pragma omp parallel
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        if (dinp) { /* dinp[N,C] = dout[N,OC] . w[OC,C] */
            int n0 = 0, n1 = N, c0 = 0, c1 = C;
            if (N >= MIN_ROWS_PER_THREAD * nt) split(N, 16, t, nt, &n0, &n1);
            else split(C, 16, t, nt, &c0, &c1);
            if (n1 > n0 && c1 > c0)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n1 - n0, c1 - c0, OC, 1.0f,
                            dout + (size_t)n0 * OC, OC, w + c0, C, accumulate_dinp ? 1.0f : 0.0f,
                            dinp + (size_t)n0 * C + c0, C);
        }
        if (dw) { /* dw[OC,C] += dout^T . inp */
            int o0 = 0, o1 = OC, c0 = 0, c1 = C;
            if (OC >= MIN_ROWS_PER_THREAD * nt) split(OC, 16, t, nt, &o0, &o1);
            else split(C, 16, t, nt, &c0, &c1);
            if (o1 > o0 && c1 > c0)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, o1 - o0, c1 - c0, N, 1.0f, dout + o0, OC,
                            inp + c0, C, 1.0f, dw + (size_t)o0 * C + c0, C);
        }
        if (dbias) {
            int j0, j1;
            split(OC, 16, t, nt, &j0, &j1);
            for (int n = 0; n < N; n++) {
                const float *d = dout + (size_t)n * OC;
#pragma omp simd
                for (int j = j0; j < j1; j++) dbias[j] += d[j];
            }
        }
    }
    mt_blas_threads_leave(saved);
}
