/* Fused softmax + cross-entropy over the first V of Vp logit columns.
 * Per row (parallel over rows, static schedule):
 *   mx = max_j x_j
 *   S  = sum_j exp(x_j - mx)   (fp32, 16 lanes; every term <= 1 and S >= 1)
 *   lse = mx + log S ; loss = lse - x_target
 * With dlogits_scale != 0 the exponentials are stored into the row during
 * the sum pass, then scaled by dlogits_scale / S and the target column gets
 * -dlogits_scale: dlogits = scale * (softmax - onehot), with one exp per
 * element (a row of 50k logits is 200 KB, so the passes run from L2).
 * Padding columns [V, Vp) and rows with target -1 become 0 (loss 0). */
#include "ops/ops.h"
#include "core/error.h"
#include "ops/vmath.h"
#include <math.h>

void op_softmax_xent(float *logits, float *losses, const int32_t *targets, int N, int V, int Vp,
                     float dlogits_scale) {
    const int write_grad = dlogits_scale != 0.0f;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *x = logits + (size_t)n * Vp;
        const int tgt = targets[n];
        if (tgt < 0) {
            if (losses) losses[n] = 0.0f;
            if (write_grad) {
#pragma omp simd
                for (int j = 0; j < Vp; j++) x[j] = 0.0f;
            }
            continue;
        }
        if (tgt >= V) mt_die("op_softmax_xent: target %d out of range [0,%d)", tgt, V);
        const float xt = x[tgt];
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
        float s = 0.0f;
        if (write_grad) {
#pragma omp simd reduction(+ : s)
            for (int j = 0; j < V; j++) {
                float e = mt_vexpf(x[j] - mx);
                x[j] = e;
                s += e;
            }
            const float k = dlogits_scale / s;
#pragma omp simd
            for (int j = 0; j < V; j++) x[j] *= k;
            for (int j = V; j < Vp; j++) x[j] = 0.0f;
            x[tgt] -= dlogits_scale;
        } else {
#pragma omp simd reduction(+ : s)
            for (int j = 0; j < V; j++) s += mt_vexpf(x[j] - mx);
        }
        if (losses) losses[n] = mx + logf(s) - xt;
    }
}
