/* Linear layer on BLAS (row-major cblas_sgemm).
 * forward:  out[N,OC] = inp[N,C] . w[OC,C]^T + bias
 * backward: dinp = dout . w ; dw += dout^T . inp ; dbias += column sums.
 * The bias sum is parallel over column ranges (each thread walks all rows
 * for its columns in order), so it is deterministic for any thread count. */
#include "ops/ops.h"
#include <cblas.h>
#include <omp.h>

void op_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC) {
    float beta = 0.0f;
    if (bias) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            float *o = out + (size_t)n * OC;
#pragma omp simd
            for (int j = 0; j < OC; j++) o[j] = bias[j];
        }
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, beta, out, OC);
}

void op_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int N, int C, int OC, int accumulate_dinp) {
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C,
                    accumulate_dinp ? 1.0f : 0.0f, dinp, C);
    if (dw) cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
    if (dbias) {
#pragma omp parallel
        {
            int t = omp_get_thread_num(), nt = omp_get_num_threads();
            /* column range in multiples of 16 floats (one cache line) */
            int nblk = (OC + 15) / 16;
            int j0 = (int)((long)nblk * t / nt) * 16, j1 = (int)((long)nblk * (t + 1) / nt) * 16;
            if (j1 > OC) j1 = OC;
            for (int n = 0; n < N; n++) {
                const float *d = dout + (size_t)n * OC;
#pragma omp simd
                for (int j = j0; j < j1; j++) dbias[j] += d[j];
            }
        }
    }
}
