/* QK-norm (OLMoE's q_norm and k_norm): an RMSNorm of the whole q and of the
 * whole k projection output of each row, in place inside the row's q|k|v
 * (row stride ld), with op_rmsnorm_forward's arithmetic (fp32 statistics):
 *   rstd = 1 / sqrt(sum(x^2) / n + eps),  out = w * (x * rstd)
 * In two steps, so that tensor parallelism can all-reduce each row's sums
 * between them: a rank holds QW (KW) of the n_q (n_k) columns the norm
 * spans. The inputs are kept in pre [N, QW + KW] for the backward, which
 * replaces the q and k gradients of the normed values by those of the
 * projections' outputs (v's columns untouched), again around a per-row sum:
 *   dot = sum(g * xh),  dx = rstd * (g - xh * dot / n),  g = dout * w, xh = x * rstd
 * and adds dw += sum over rows of dout * xh, each thread summing its block
 * of columns over the rows in order (independent of the thread count). */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include <math.h>
#include <omp.h>

void op_qk_norm_sumsq(mt_backend *be, float *ss, const float *qkv, int N, int QW, int KW, size_t ld) {
    MT_DISPATCH(be, qk_norm_sumsq, be, ss, qkv, N, QW, KW, ld);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = qkv + (size_t)n * ld;
        float sq = 0.0f, sk = 0.0f;
#pragma omp simd reduction(+ : sq)
        for (int c = 0; c < QW; c++) sq += x[c] * x[c];
#pragma omp simd reduction(+ : sk)
        for (int c = QW; c < QW + KW; c++) sk += x[c] * x[c];
        ss[2 * (size_t)n] = sq;
        ss[2 * (size_t)n + 1] = sk;
    }
}

static void norm_row(float *x, float *keep, float *rstd, const float *w, int C, float n, float eps) {
    float r = 1.0f / sqrtf(*rstd / n + eps);
    *rstd = r;
    for (int c = 0; c < C; c++) keep[c] = x[c];
#pragma omp simd
    for (int c = 0; c < C; c++) x[c] = w[c] * (keep[c] * r);
}

void op_qk_norm_apply(mt_backend *be, float *qkv, float *pre, float *ss_rstd, const float *wq, const float *wk, int N,
                      int QW, int KW, size_t ld, float nq, float nk, float eps) {
    MT_DISPATCH(be, qk_norm_apply, be, qkv, pre, ss_rstd, wq, wk, N, QW, KW, ld, nq, nk, eps);
    const size_t P = (size_t)QW + (size_t)KW;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *x = qkv + (size_t)n * ld, *keep = pre + (size_t)n * P;
        norm_row(x, keep, ss_rstd + 2 * (size_t)n, wq, QW, nq, eps);
        norm_row(x + QW, keep + QW, ss_rstd + 2 * (size_t)n + 1, wk, KW, nk, eps);
    }
}

void op_qk_norm_backward_dot(mt_backend *be, float *dot, const float *dqkv, const float *pre, const float *rstd,
                             const float *wq, const float *wk, int N, int QW, int KW, size_t ld) {
    MT_DISPATCH(be, qk_norm_backward_dot, be, dot, dqkv, pre, rstd, wq, wk, N, QW, KW, ld);
    const size_t P = (size_t)QW + (size_t)KW;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *d = dqkv + (size_t)n * ld, *x = pre + (size_t)n * P;
        float rq = rstd[2 * (size_t)n], rk = rstd[2 * (size_t)n + 1], sq = 0.0f, sk = 0.0f;
#pragma omp simd reduction(+ : sq)
        for (int c = 0; c < QW; c++) sq += d[c] * wq[c] * (x[c] * rq);
#pragma omp simd reduction(+ : sk)
        for (int c = 0; c < KW; c++) sk += d[QW + c] * wk[c] * (x[QW + c] * rk);
        dot[2 * (size_t)n] = sq;
        dot[2 * (size_t)n + 1] = sk;
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

static void dx_row(float *d, const float *x, const float *w, float r, float mean, int C) {
#pragma omp simd
    for (int c = 0; c < C; c++) d[c] = r * (d[c] * w[c] - (x[c] * r) * mean);
}

void op_qk_norm_backward_apply(mt_backend *be, float *dqkv, float *dwq, float *dwk, const float *pre, const float *rstd,
                               const float *dot, const float *wq, const float *wk, int N, int QW, int KW, size_t ld,
                               float nq, float nk) {
    MT_DISPATCH(be, qk_norm_backward_apply, be, dqkv, dwq, dwk, pre, rstd, dot, wq, wk, N, QW, KW, ld, nq, nk);
    const size_t P = (size_t)QW + (size_t)KW;
#pragma omp parallel
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        /* the weights' gradients first: they read the gradients the rows' pass then overwrites */
        int nbq = (QW + 15) / 16, nbk = (KW + 15) / 16, nb = nbq + nbk;
        int b0 = (int)((long)nb * t / T), b1 = (int)((long)nb * (t + 1) / T);
        if (dwq && b0 < nbq) {
            int c1 = (b1 < nbq ? b1 : nbq) * 16;
            dw_cols(dwq, dqkv, ld, pre, P, rstd, 0, 0, b0 * 16, c1 > QW ? QW : c1, N);
        }
        if (dwk && b1 > nbq) {
            int c0 = (b0 > nbq ? b0 - nbq : 0) * 16, c1 = (b1 - nbq) * 16;
            dw_cols(dwk, dqkv, ld, pre, P, rstd, 1, QW, c0, c1 > KW ? KW : c1, N);
        }
#pragma omp barrier
        int n0 = (int)((long)N * t / T), n1 = (int)((long)N * (t + 1) / T);
        for (int n = n0; n < n1; n++) {
            float *d = dqkv + (size_t)n * ld;
            const float *x = pre + (size_t)n * P;
            dx_row(d, x, wq, rstd[2 * (size_t)n], dot[2 * (size_t)n] / nq, QW);
            dx_row(d + QW, x + QW, wk, rstd[2 * (size_t)n + 1], dot[2 * (size_t)n + 1] / nk, KW);
        }
    }
}
