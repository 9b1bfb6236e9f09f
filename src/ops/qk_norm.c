/* QK-norm (OLMoE's q_norm and k_norm): an RMSNorm of the whole q and of the
 * whole k projection output of each row, in place inside the row's q|k|v
 * (row stride ld), with op_rmsnorm_forward's arithmetic (fp32 statistics):
 *   rstd = 1 / sqrt(mean(x^2) + eps),  out = w * (x * rstd)
 * The inputs are kept in pre [N, QW + KW] and rstd [N, 2] for the backward,
 * which replaces the q and k gradients of the normed values by those of the
 * projections' outputs (v's columns untouched):
 *   dx = rstd * (g - xh * mean(g * xh)),  g = dout * w, xh = x * rstd
 * and adds dw += sum over rows of dout * xh, each thread summing its block
 * of columns over the rows in order (independent of the thread count). */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include <math.h>
#include <omp.h>

static void norm_row(float *x, float *keep, float *rstd, const float *w, int C, float eps) {
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; c++) ss += x[c] * x[c];
    float r = 1.0f / sqrtf(ss / (float)C + eps);
    *rstd = r;
    for (int c = 0; c < C; c++) keep[c] = x[c];
#pragma omp simd
    for (int c = 0; c < C; c++) x[c] = w[c] * (keep[c] * r);
}

void op_qk_norm_forward(mt_backend *be, float *qkv, float *pre, float *rstd, const float *wq, const float *wk, int N,
                        int QW, int KW, size_t ld, float eps) {
    MT_DISPATCH(be, qk_norm_forward, be, qkv, pre, rstd, wq, wk, N, QW, KW, ld, eps);
    const size_t P = (size_t)QW + (size_t)KW;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *x = qkv + (size_t)n * ld, *keep = pre + (size_t)n * P;
        norm_row(x, keep, rstd + 2 * (size_t)n, wq, QW, eps);
        norm_row(x + QW, keep + QW, rstd + 2 * (size_t)n + 1, wk, KW, eps);
    }
}

/* dw over columns [c0, c1) of one of the two norms (o: its offset in a q|k row). */
static void dw_cols(float *dw, const float *dqkv, size_t ld, const float *pre, size_t P, const float *rstd, int which,
                    int o, int c0, int c1, int N) {
    for (int n = 0; n < N; n++) {
        const float *d = dqkv + (size_t)n * ld + o, *x = pre + (size_t)n * P + o;
        float r = rstd[2 * (size_t)n + which];
#pragma omp simd
        for (int c = c0; c < c1; c++) dw[c] += d[c] * (x[c] * r);
    }
}

static void dx_row(float *d, const float *x, const float *w, float r, int C) {
    float sgx = 0.0f;
#pragma omp simd reduction(+ : sgx)
    for (int c = 0; c < C; c++) sgx += d[c] * w[c] * (x[c] * r);
    sgx /= (float)C;
#pragma omp simd
    for (int c = 0; c < C; c++) d[c] = r * (d[c] * w[c] - (x[c] * r) * sgx);
}

void op_qk_norm_backward(mt_backend *be, float *dqkv, float *dwq, float *dwk, const float *pre, const float *rstd,
                         const float *wq, const float *wk, int N, int QW, int KW, size_t ld) {
    MT_DISPATCH(be, qk_norm_backward, be, dqkv, dwq, dwk, pre, rstd, wq, wk, N, QW, KW, ld);
    const size_t P = (size_t)QW + (size_t)KW;
#pragma omp parallel
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        /* the weights' gradients first: they read the gradients the rows' pass then overwrites */
        int nq = (QW + 15) / 16, nk = (KW + 15) / 16, nb = nq + nk;
        int b0 = (int)((long)nb * t / T), b1 = (int)((long)nb * (t + 1) / T);
        if (dwq && b0 < nq) {
            int c1 = (b1 < nq ? b1 : nq) * 16;
            dw_cols(dwq, dqkv, ld, pre, P, rstd, 0, 0, b0 * 16, c1 > QW ? QW : c1, N);
        }
        if (dwk && b1 > nq) {
            int c0 = (b0 > nq ? b0 - nq : 0) * 16, c1 = (b1 - nq) * 16;
            dw_cols(dwk, dqkv, ld, pre, P, rstd, 1, QW, c0, c1 > KW ? KW : c1, N);
        }
#pragma omp barrier
        int n0 = (int)((long)N * t / T), n1 = (int)((long)N * (t + 1) / T);
        for (int n = n0; n < n1; n++) {
            float *d = dqkv + (size_t)n * ld;
            const float *x = pre + (size_t)n * P;
            dx_row(d, x, wq, rstd[2 * (size_t)n], QW);
            dx_row(d + QW, x + QW, wk, rstd[2 * (size_t)n + 1], KW);
        }
    }
}
