/* Fused softmax + cross-entropy over the vocabulary, and its vocab-parallel
 * pieces. Per row of logits x (parallel over rows, static schedule):
 *
 * stats, one read of the row: the row is taken in chunks of CHUNK columns
 *   (L1-resident). Per vector lane l a running max m_l and sum s_l of
 *   exp(x - m_l): a chunk's lane max c_l first, then s_l = s_l exp(m_l - m')
 *   + sum over the chunk of exp(x - m'), m' = max(m_l, c_l) (online softmax:
 *   about one exp per element). Lanes combine at the end: M = max m_l,
 *   S = sum s_l exp(m_l - M); lse = M + log S; loss = lse - x_target.
 * gradient, one write of the row: x <- scale * exp(x - lse), the target
 *   column gets -scale, padding columns [V, Vp) 0.
 * So the probabilities are written once (the unfused form writes the
 * exponentials, then scales them in a second pass), at the price of a
 * second exp per element, which is cheaper than a pass over a 200 KB row.
 * Rows with target -1 are ignored (loss 0, gradient 0). */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include "core/error.h"
#include "ops/vmath.h"
#include <float.h>
#include <math.h>

#define CHUNK 256 /* columns whose lane maxima are taken before their exponentials */

#ifdef __AVX512F__
/* Lane-wise max and rescaled sum of x[0, n); lanes past n take no part
 * (their max stays -FLT_MAX and their sum 0). */
static void row_stats(const float *x, int n, float *mx_out, float *se_out) {
    __m512 m = _mm512_set1_ps(-FLT_MAX), s = _mm512_setzero_ps();
    for (int c0 = 0; c0 < n; c0 += CHUNK) {
        int c1 = c0 + CHUNK < n ? c0 + CHUNK : n;
        __m512 cm = m;
        for (int j = c0; j < c1; j += 16) {
            __mmask16 k = j + 16 <= c1 ? 0xFFFF : (__mmask16)((1u << (c1 - j)) - 1);
            cm = _mm512_max_ps(cm, _mm512_mask_loadu_ps(_mm512_set1_ps(-FLT_MAX), k, x + j));
        }
        s = _mm512_mul_ps(s, mt_vexp16(_mm512_sub_ps(m, cm)));
        m = cm;
        for (int j = c0; j < c1; j += 16) {
            __mmask16 k = j + 16 <= c1 ? 0xFFFF : (__mmask16)((1u << (c1 - j)) - 1);
            __m512 v = _mm512_maskz_loadu_ps(k, x + j);
            s = _mm512_mask_add_ps(s, k, s, mt_vexp16(_mm512_sub_ps(v, m)));
        }
    }
    float M = _mm512_reduce_max_ps(m);
    *mx_out = M;
    *se_out = _mm512_reduce_add_ps(_mm512_mul_ps(s, mt_vexp16(_mm512_sub_ps(m, _mm512_set1_ps(M)))));
}

/* x[0, n) <- scale * exp(x - lse); x[n, n_zero) <- 0 */
static void row_grad(float *x, int n, int n_zero, float lse, float scale) {
    const __m512 l = _mm512_set1_ps(lse), k = _mm512_set1_ps(scale);
    int j = 0;
    for (; j + 16 <= n; j += 16)
        _mm512_storeu_ps(x + j, _mm512_mul_ps(k, mt_vexp16(_mm512_sub_ps(_mm512_loadu_ps(x + j), l))));
    if (j < n) {
        __mmask16 m = (__mmask16)((1u << (n - j)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(m, x + j);
        _mm512_mask_storeu_ps(x + j, m, _mm512_mul_ps(k, mt_vexp16(_mm512_sub_ps(v, l))));
    }
    for (j = n; j < n_zero; j++) x[j] = 0.0f;
}

/* d[0, n) <- bf16(scale * exp(x - lse)), the values row_grad writes,
 * rounded; d[n, n_zero) <- 0 */
static void row_grad_bf16(const float *x, mt_bf16 *d, int n, int n_zero, float lse, float scale) {
    const __m512 l = _mm512_set1_ps(lse), k = _mm512_set1_ps(scale);
    for (int j = 0; j < n; j += 16) {
        __mmask16 m = j + 16 <= n ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1);
        __m512 y = _mm512_mul_ps(k, mt_vexp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + j), l)));
#ifdef MT_BF16_X16
        _mm256_mask_storeu_epi16(d + j, m, mt_fp32_to_bf16_x16(y));
#else
        float t[16];
        _mm512_storeu_ps(t, y);
        for (int i = 0; i < 16 && j + i < n; i++) d[j + i] = mt_fp32_to_bf16(t[i]);
#endif
    }
    for (int j = n; j < n_zero; j++) d[j] = 0;
}

/* The gradient row_grad gives the target column x_t, before the -scale. */
static float target_grad(float xt, float lse, float scale) {
    __m512 y = _mm512_mul_ps(_mm512_set1_ps(scale), mt_vexp16(_mm512_set1_ps(xt - lse)));
    return _mm512_cvtss_f32(y);
}
#else
static void row_stats(const float *x, int n, float *mx_out, float *se_out) {
    float mx = -FLT_MAX, s = 0.0f;
    for (int c0 = 0; c0 < n; c0 += CHUNK) {
        int c1 = c0 + CHUNK < n ? c0 + CHUNK : n;
        float cm = mx;
        for (int j = c0; j < c1; j++) cm = x[j] > cm ? x[j] : cm;
        s *= mt_vexpf(mx - cm);
        mx = cm;
        float cs = 0.0f;
#pragma omp simd reduction(+ : cs)
        for (int j = c0; j < c1; j++) cs += mt_vexpf(x[j] - mx);
        s += cs;
    }
    *mx_out = mx;
    *se_out = s;
}

static void row_grad(float *x, int n, int n_zero, float lse, float scale) {
#pragma omp simd
    for (int j = 0; j < n; j++) x[j] = scale * mt_vexpf(x[j] - lse);
    for (int j = n; j < n_zero; j++) x[j] = 0.0f;
}

static void row_grad_bf16(const float *x, mt_bf16 *d, int n, int n_zero, float lse, float scale) {
    for (int j = 0; j < n; j++) d[j] = mt_fp32_to_bf16(scale * mt_vexpf(x[j] - lse));
    for (int j = n; j < n_zero; j++) d[j] = 0;
}

static float target_grad(float xt, float lse, float scale) { return scale * mt_vexpf(xt - lse); }
#endif

int mt_softmax_exp_fused(void) {
#ifdef __AVX512F__
    return 1;
#else
    return 0;
#endif
}

/* op_softmax_xent and op_softmax_xent_bf16: the gradient in place (d16
 * NULL) or rounded into d16. */
static void softmax_xent(float *logits, mt_bf16 *d16, float *losses, const int32_t *targets, int N, int V, int Vp,
                         float dlogits_scale) {
    const int write_grad = dlogits_scale != 0.0f;
    for (int n = 0; n < N; n++) /* checked before the parallel region: mt_die must not run inside it */
        if (targets[n] >= V) mt_die("op_softmax_xent: target %d of row %d out of range [0,%d)", targets[n], n, V);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *x = logits + (size_t)n * Vp;
        mt_bf16 *d = d16 ? d16 + (size_t)n * Vp : NULL;
        const int tgt = targets[n];
        if (tgt < 0) {
            if (losses) losses[n] = 0.0f;
            if (write_grad && d) row_grad_bf16(x, d, 0, Vp, 0.0f, 0.0f);
            else if (write_grad) row_grad(x, 0, Vp, 0.0f, 0.0f);
            continue;
        }
        const float xt = x[tgt];
        float mx, se;
        row_stats(x, V, &mx, &se);
        const float lse = mx + logf(se);
        if (losses) losses[n] = lse - xt;
        if (write_grad && d) {
            row_grad_bf16(x, d, V, Vp, lse, dlogits_scale);
            d[tgt] = mt_fp32_to_bf16(target_grad(xt, lse, dlogits_scale) - dlogits_scale);
        } else if (write_grad) {
            row_grad(x, V, Vp, lse, dlogits_scale);
            x[tgt] -= dlogits_scale;
        }
    }
}

void op_softmax_xent(mt_backend *be, float *logits, float *losses, const int32_t *targets, int N, int V, int Vp,
                     float dlogits_scale) {
    MT_DISPATCH(be, softmax_xent, be, logits, losses, targets, N, V, Vp, dlogits_scale);
    softmax_xent(logits, NULL, losses, targets, N, V, Vp, dlogits_scale);
}

void op_softmax_xent_bf16(mt_backend *be, const float *logits, mt_bf16 *dlogits, float *losses, const int32_t *targets,
                          int N, int V, int Vp, float dlogits_scale) {
    MT_DISPATCH(be, softmax_xent_bf16, be, logits, dlogits, losses, targets, N, V, Vp, dlogits_scale);
    softmax_xent((float *)logits, dlogits, losses, targets, N, V, Vp, dlogits_scale);
}

void op_xent_shard_stats(mt_backend *be, const float *logits, float *mx, float *se, float *xt, const int32_t *targets,
                         int N, int Vl, int ld, int v0) {
    MT_DISPATCH(be, xent_shard_stats, be, logits, mx, se, xt, targets, N, Vl, ld, v0);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * ld;
        row_stats(x, Vl, &mx[n], &se[n]);
        const int t = targets[n] - v0;
        xt[n] = targets[n] >= 0 && t >= 0 && t < Vl ? x[t] : 0.0f;
    }
}

void op_xent_combine_lse(mt_backend *be, float *lse, const float *mx, const float *se, int S, int N, int ld) {
    MT_DISPATCH(be, xent_combine_lse, be, lse, mx, se, S, N, ld);
    for (int n = 0; n < N; n++) {
        float M = -FLT_MAX;
        for (int s = 0; s < S; s++) M = mx[(size_t)s * ld + n] > M ? mx[(size_t)s * ld + n] : M;
        float sum = 0.0f;
        for (int s = 0; s < S; s++)
            if (se[(size_t)s * ld + n] > 0.0f) sum += se[(size_t)s * ld + n] * mt_vexpf(mx[(size_t)s * ld + n] - M);
        lse[n] = M + logf(sum);
    }
}

void op_xent_shard_grad(mt_backend *be, float *logits, const float *lse, const int32_t *targets, int N, int Vl, int ld,
                        int v0, float scale) {
    MT_DISPATCH(be, xent_shard_grad, be, logits, lse, targets, N, Vl, ld, v0, scale);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *x = logits + (size_t)n * ld;
        if (targets[n] < 0) {
            row_grad(x, 0, Vl, 0.0f, 0.0f);
            continue;
        }
        row_grad(x, Vl, Vl, lse[n], scale);
        const int t = targets[n] - v0;
        if (t >= 0 && t < Vl) x[t] -= scale;
    }
}
