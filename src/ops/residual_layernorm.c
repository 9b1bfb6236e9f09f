/* Fused residual add + LayerNorm forward (the block's "x + branch" followed
 * by the next LayerNorm):
 *   res = x + (branch + branch_bias);  out = (res - mean) rstd w + b
 * Each row of res is formed and normalised while it is in L1, instead of
 * a write pass for res and a second read pass for the LayerNorm. The
 * row normalisation is op_layernorm_forward's own (layernorm_row.h), so the
 * result equals the unfused pair. Rows are
 * split over threads (one parallel region). */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include "ops/layernorm_row.h"

void op_residual_layernorm_forward(mt_backend *be, float *res, float *out, float *mean, float *rstd, const float *x,
                                   const float *branch, const float *branch_bias, const float *w, const float *b, int N,
                                   int C) {
    MT_DISPATCH(be, residual_layernorm_forward, be, res, out, mean, rstd, x, branch, branch_bias, w, b, N, C);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *xi = x + (size_t)n * C, *br = branch + (size_t)n * C;
        float *r = res + (size_t)n * C, *o = out + (size_t)n * C;
        if (branch_bias) {
#pragma omp simd
            for (int c = 0; c < C; c++) r[c] = xi[c] + (br[c] + branch_bias[c]);
        } else {
#pragma omp simd
            for (int c = 0; c < C; c++) r[c] = xi[c] + br[c];
        }
        layernorm_row(o, mean ? mean + n : NULL, rstd ? rstd + n : NULL, r, w, b, C);
    }
}
