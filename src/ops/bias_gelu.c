/* Fused bias + GELU on the rows of the MLP's first linear layer.
 * forward:  pre[n,j] += bias[j]; out[n,j] = gelu(pre[n,j])      (one pass)
 * backward: dpre[n,j] = gelu'(pre[n,j]) dout[n,j]; dbias[j] += sum_n dpre[n,j]
 * The GEMM runs without its bias, so the bias costs no pass of its own and
 * the bias gradient is summed while dpre is being written. Backward splits
 * the columns over threads (16-aligned ranges, every row walked in order):
 * no column is summed by two threads, and each dbias[j] receives the rows
 * in the same order as op_matmul_backward's bias sum, so both agree bit for
 * bit for any thread count. */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include "ops/gelu_math.h"
#include <omp.h>

void op_bias_gelu_forward(mt_backend *be, float *pre, float *out, const float *bias, int N, int OC) {
    MT_DISPATCH(be, bias_gelu_forward, be, pre, out, bias, N, OC);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *p = pre + (size_t)n * OC, *o = out + (size_t)n * OC;
        if (bias) {
#pragma omp simd
            for (int j = 0; j < OC; j++) {
                float x = p[j] + bias[j];
                p[j] = x;
                o[j] = mt_gelu1(x);
            }
        } else {
#pragma omp simd
            for (int j = 0; j < OC; j++) o[j] = mt_gelu1(p[j]);
        }
    }
}

void op_gelu_bias_backward(mt_backend *be, float *dpre, float *dbias, const float *pre, const float *dout, int N,
                           int OC) {
    MT_DISPATCH(be, gelu_bias_backward, be, dpre, dbias, pre, dout, N, OC);
#pragma omp parallel
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int nblk = (OC + 15) / 16;
        int j0 = (int)((long)nblk * t / nt) * 16, j1 = (int)((long)nblk * (t + 1) / nt) * 16;
        if (j1 > OC) j1 = OC;
        for (int n = 0; n < N; n++) {
            const float *p = pre + (size_t)n * OC, *d = dout + (size_t)n * OC;
            float *g = dpre + (size_t)n * OC;
            if (dbias) {
#pragma omp simd
                for (int j = j0; j < j1; j++) {
                    float v = mt_gelu_grad1(p[j]) * d[j];
                    g[j] = v;
                    dbias[j] += v;
                }
            } else {
#pragma omp simd
                for (int j = j0; j < j1; j++) g[j] = mt_gelu_grad1(p[j]) * d[j];
            }
        }
    }
}
