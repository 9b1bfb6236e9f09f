/* RMSNorm (Llama), statistics in fp32 as Hugging Face's LlamaRMSNorm:
 *   rstd = 1 / sqrt(mean(x^2) + eps),  out = w * (x * rstd)
 * backward, with xh = x * rstd and g = dout * w:
 *   dinp += rstd * (g - xh * mean(g * xh)),  dw += sum over rows of dout * xh
 * The dw sum runs over rows in order within each thread's block of columns,
 * so it does not depend on the thread count (as op_layernorm_backward). */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include <math.h>
#include <omp.h>

void op_rmsnorm_forward(mt_backend *be, float *out, float *rstd, const float *inp, const float *w, int N, int C,
                        float eps) {
    MT_DISPATCH(be, rmsnorm_forward, be, out, rstd, inp, w, N, C, eps);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float r = 1.0f / sqrtf(ss / (float)C + eps);
        rstd[n] = r;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = w[c] * (x[c] * r);
    }
}

void op_rmsnorm_backward(mt_backend *be, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                         const float *rstd, int N, int C) {
    MT_DISPATCH(be, rmsnorm_backward, be, dinp, dw, dout, inp, w, rstd, N, C);
#pragma omp parallel
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        int n0 = (int)((long)N * t / T), n1 = (int)((long)N * (t + 1) / T);
        for (int n = n0; n < n1; n++) {
            const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
            float *di = dinp + (size_t)n * C;
            float r = rstd[n], sgx = 0.0f;
#pragma omp simd reduction(+ : sgx)
            for (int c = 0; c < C; c++) sgx += d[c] * w[c] * (x[c] * r);
            sgx /= (float)C;
#pragma omp simd
            for (int c = 0; c < C; c++) di[c] += r * (d[c] * w[c] - (x[c] * r) * sgx);
        }
        if (dw) {
            int nblk = (C + 15) / 16;
            int c0 = (int)((long)nblk * t / T) * 16, c1 = (int)((long)nblk * (t + 1) / T) * 16;
            if (c1 > C) c1 = C;
            for (int n = 0; n < N; n++) {
                const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
                float r = rstd[n];
#pragma omp simd
                for (int c = c0; c < c1; c++) dw[c] += d[c] * (x[c] * r);
            }
        }
    }
}
