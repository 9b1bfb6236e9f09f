/* Row-wise helpers of the model's layers on [N, C] rows (row-major): the
 * dropout of residual-stream rows and of an adapter's input, a bias added
 * to every row, IA3's per-column scalings and its vector's gradient, and
 * the vocabulary-parallel loss from the gathered shard statistics. They
 * were loops of models/; here they are the CPU backend's kernels, with the
 * same arithmetic in the same order (bitwise the same results). */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include "core/error.h"

void op_dropout_rows(mt_backend *be, float *x, const mt_dropout *d, const uint64_t *sample_ids, size_t row0, int n,
                     int T, int C) {
    MT_DISPATCH(be, dropout_rows, be, x, d, sample_ids, row0, n, T, C);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        float s[64];
        size_t r = row0 + (size_t)i;
        size_t b = r / (size_t)T, t = r % (size_t)T;
        float *row = x + (size_t)i * C;
        for (int c0 = 0; c0 < C; c0 += 64) {
            int k = C - c0 < 64 ? C - c0 : 64;
            mt_dropout_block_scales(s, d, sample_ids[b], (uint32_t)t, 0, (uint32_t)c0 / 4, (k + 3) / 4);
            for (int j = 0; j < k; j++) row[c0 + j] *= s[j];
        }
    }
}

void op_dropout_feature_rows(mt_backend *be, float *dst, const float *src, const mt_dropout *d,
                             const uint64_t *sample_ids, int N, int T, int C, uint32_t site_layer, uint32_t col0) {
    MT_DISPATCH(be, dropout_feature_rows, be, dst, src, d, sample_ids, N, T, C, site_layer, col0);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float s[64];
        const float *in = src + (size_t)i * C;
        float *o = dst + (size_t)i * C;
        for (int c0 = 0; c0 < C; c0 += 64) {
            int n = C - c0 < 64 ? C - c0 : 64;
            mt_dropout_row_scales(s, d, sample_ids[i / T], (uint32_t)(i % T), site_layer, col0 + (uint32_t)c0, n);
            for (int j = 0; j < n; j++) o[c0 + j] = in[c0 + j] * s[j];
        }
    }
}

void op_add_bias_rows(mt_backend *be, float *x, const float *bias, int N, int C) {
    MT_DISPATCH(be, add_bias_rows, be, x, bias, N, C);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *r = x + (size_t)i * C;
#pragma omp simd
        for (int c = 0; c < C; c++) r[c] += bias[c];
    }
}

void op_scale_cols(mt_backend *be, float *dst, const float *src, const float *l, int N, int C) {
    MT_DISPATCH(be, scale_cols, be, dst, src, l, N, C);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++)
#pragma omp simd
        for (int j = 0; j < C; j++) dst[(size_t)i * C + j] = src[(size_t)i * C + j] * l[j];
}

void op_scale_cols_in_place(mt_backend *be, float *x, const float *l, int N, int ld, int col0, int R) {
    MT_DISPATCH(be, scale_cols_in_place, be, x, l, N, ld, col0, R);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++)
#pragma omp simd
        for (int j = 0; j < R; j++) x[(size_t)i * ld + col0 + j] *= l[j];
}

void op_scale_cols_into(mt_backend *be, float *dst, const float *src, const float *l, int N, int C, int accumulate) {
    MT_DISPATCH(be, scale_cols_into, be, dst, src, l, N, C, accumulate);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++)
        for (int j = 0; j < C; j++) {
            float v = src[(size_t)i * C + j] * l[j];
            dst[(size_t)i * C + j] = accumulate ? dst[(size_t)i * C + j] + v : v;
        }
}

void op_col_dot_acc(mt_backend *be, float *dl, const float *a, int lda, int col0, const float *b, int N, int n) {
    MT_DISPATCH(be, col_dot_acc, be, dl, a, lda, col0, b, N, n);
#pragma omp parallel for schedule(static)
    for (int j = 0; j < n; j++) {
        double s = 0;
        for (int i = 0; i < N; i++) s += (double)a[(size_t)i * lda + col0 + j] * (double)b[(size_t)i * n + j];
        dl[j] += (float)s;
    }
}

void op_xent_losses_from_stats(mt_backend *be, float *losses, const float *lse, const float *stats, int S, int N,
                               const int32_t *targets, int V) {
    MT_DISPATCH(be, xent_losses_from_stats, be, losses, lse, stats, S, N, targets, V);
    for (int i = 0; i < N; i++) {
        float xt = 0.0f;
        for (int s = 0; s < S; s++) xt += stats[(size_t)s * 3 * N + 2 * (size_t)N + i];
        if (targets[i] >= V) mt_die("cross-entropy: target %d of row %d out of range [0,%d)", targets[i], i, V);
        losses[i] = targets[i] < 0 ? 0.0f : lse[i] - xt;
    }
}
