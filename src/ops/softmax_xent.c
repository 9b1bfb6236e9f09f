/* Fused softmax + cross-entropy over the first V of Vp logit columns.
 * Per row (parallel over rows): mx = max_j x_j; S = sum_j exp(x_j - mx)
 * (fp32 lanes, max-subtracted so every term is <= 1, the sum >= 1);
 * lse = mx + log S; loss = lse - x_target. If dlogits_scale != 0 the row is
 * overwritten with scale * (exp(x_j - lse) - [j == target]), 0 on padding
 * columns [V, Vp). Rows with target -1 get loss 0 (and a zero gradient). */
#include "ops/ops.h"
#include "core/error.h"
#include "ops/vmath.h"
#include <math.h>

void op_softmax_xent(float *logits, float *losses, const int32_t *targets, int N, int V, int Vp,
                     float dlogits_scale) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *x = logits + (size_t)n * Vp;
        int tgt = targets[n];
        if (tgt < 0) {
            if (losses) losses[n] = 0.0f;
            if (dlogits_scale != 0.0f) {
#pragma omp simd
                for (int j = 0; j < Vp; j++) x[j] = 0.0f;
            }
            continue;
        }
        if (tgt >= V) mt_die("op_softmax_xent: target %d out of range [0,%d)", tgt, V);
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int j = 0; j < V; j++) s += mt_vexpf(x[j] - mx);
        float lse = mx + logf(s);
        if (losses) losses[n] = lse - x[tgt];
        if (dlogits_scale != 0.0f) {
#pragma omp simd
            for (int j = 0; j < V; j++) x[j] = dlogits_scale * mt_vexpf(x[j] - lse);
            for (int j = V; j < Vp; j++) x[j] = 0.0f;
            x[tgt] -= dlogits_scale;
        }
    }
}
