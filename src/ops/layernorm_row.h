/* One row of the LayerNorm forward, shared by op_layernorm_forward and the
 * fused residual add + LayerNorm so both compute bitwise the same thing:
 * mean, then the centred sum of squares (biased variance), eps 1e-5 as
 * torch.nn.LayerNorm. Private to src/ops. */
#ifndef MT_OPS_LAYERNORM_ROW_H
#define MT_OPS_LAYERNORM_ROW_H
#include <math.h>

#define LN_EPS 1e-5f

static inline void layernorm_row(float *o, float *mean, float *rstd, const float *x, const float *w,
                                 const float *b, int C) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++) s += x[c];
    float m = s / (float)C;
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++) {
        float d = x[c] - m;
        v += d * d;
    }
    float r = 1.0f / sqrtf(v / (float)C + LN_EPS);
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c] + b[c];
    if (mean) *mean = m;
    if (rstd) *rstd = r;
}

#endif
