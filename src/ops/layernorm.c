/* LayerNorm over the last dimension, eps 1e-5, biased variance (as
 * torch.nn.LayerNorm).
 * forward:  mean, rstd = 1/sqrt(var + eps); out = (x - mean) * rstd * w + b
 * backward: xhat = (x - mean) rstd, g = dout * w,
 *           dinp += rstd * (g - mean(g) - xhat * mean(g * xhat))
 *           dw += sum_rows dout * xhat ; db += sum_rows dout
 * The dw/db sums are accumulated per thread over a static row range into a
 * private partial, then reduced over threads in thread order, column-parallel:
 * deterministic for a fixed thread count. */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include "ops/layernorm_row.h"
#include "core/error.h"
#include <math.h>
#include <omp.h>
#include <stdlib.h>

void op_layernorm_forward(mt_backend *be, float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int N, int C) {
    MT_DISPATCH(be, layernorm_forward, be, out, mean, rstd, inp, w, b, N, C);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        layernorm_row(out + (size_t)n * C, mean ? mean + n : NULL, rstd ? rstd + n : NULL, inp + (size_t)n * C, w, b,
                      C);
}

/* Two passes inside one parallel region, no workspace: rows split across
 * threads for dinp, then columns split across threads for dw/db (each
 * thread walks all rows for its columns in order: deterministic for any
 * thread count, and no per-call allocation). */
void op_layernorm_backward(mt_backend *be, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int N, int C) {
    MT_DISPATCH(be, layernorm_backward, be, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
#pragma omp parallel
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        int n0 = (int)((long)N * t / T), n1 = (int)((long)N * (t + 1) / T);
        for (int n = n0; n < n1; n++) {
            const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
            float *di = dinp + (size_t)n * C;
            float m = mean[n], r = rstd[n];
            float sg = 0.0f, sgx = 0.0f;
#pragma omp simd reduction(+ : sg, sgx)
            for (int c = 0; c < C; c++) {
                float xh = (x[c] - m) * r;
                float g = d[c] * w[c];
                sg += g;
                sgx += g * xh;
            }
            sg /= (float)C;
            sgx /= (float)C;
#pragma omp simd
            for (int c = 0; c < C; c++) {
                float xh = (x[c] - m) * r;
                di[c] += r * (d[c] * w[c] - sg - xh * sgx);
            }
        }
        if (dw || db) {
            int nblk = (C + 15) / 16;
            int c0 = (int)((long)nblk * t / T) * 16, c1 = (int)((long)nblk * (t + 1) / T) * 16;
            if (c1 > C) c1 = C;
            for (int n = 0; n < N; n++) {
                const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
                float m = mean[n], r = rstd[n];
                if (dw) {
#pragma omp simd
                    for (int c = c0; c < c1; c++) dw[c] += d[c] * ((x[c] - m) * r);
                }
                if (db) {
#pragma omp simd
                    for (int c = c0; c < c1; c++) db[c] += d[c];
                }
            }
        }
    }
}
