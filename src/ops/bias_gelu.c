/* Fused bias + GELU on the rows of the MLP's first linear layer.
 * forward:  pre[n,j] += bias[j]; out[n,j] = gelu(pre[n,j])      (one pass)
 *           out16 (optional, out then may be NULL): gelu(pre[n,j]) rounded to bf16 as op_to_16 rounds it,
 *           for the next linear layer's bf16 input (models/act_compress.c)
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
#include "core/dtype.h"
#include <omp.h>

void op_bias_gelu_forward(mt_backend *be, float *pre, float *out, uint16_t *out16, const float *bias, int N, int OC) {
    MT_DISPATCH(be, bias_gelu_forward, be, pre, out, out16, bias, N, OC);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *p = pre + (size_t)n * OC, *o = out ? out + (size_t)n * OC : NULL;
        uint16_t *o16 = out16 ? out16 + (size_t)n * OC : NULL;
        if (bias)
#pragma omp simd
            for (int j = 0; j < OC; j++) p[j] += bias[j];
        if (o)
#pragma omp simd
            for (int j = 0; j < OC; j++) o[j] = mt_gelu1(p[j]);
        if (o16 && o) /* GELU once: the fp32 output rounded */
#pragma omp simd
            for (int j = 0; j < OC; j++) o16[j] = mt_fp32_to_bf16(o[j]);
        else if (o16)
#pragma omp simd
            for (int j = 0; j < OC; j++) o16[j] = mt_fp32_to_bf16(mt_gelu1(p[j]));
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
