/* Token + position embeddings.
 * backward is parallel over channel ranges: every thread walks all tokens in
 * order for its own columns, so there are no races on repeated tokens and
 * the sums are deterministic for any thread count. */
#include "ops/ops.h"
#include <omp.h>

void op_embed_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe, int B,
                      int T, int C, int pos0) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < B * T; n++) {
        int t = n % T;
        const float *e = wte + (size_t)tokens[n] * C, *p = wpe + (size_t)(pos0 + t) * C;
        float *o = out + (size_t)n * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
    }
}

void op_embed_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B,
                       int T, int C, int pos0) {
#pragma omp parallel
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int nblk = (C + 15) / 16;
        int c0 = (int)((long)nblk * t / nt) * 16, c1 = (int)((long)nblk * (t + 1) / nt) * 16;
        if (c1 > C) c1 = C;
        for (int n = 0; n < B * T; n++) {
            const float *d = dout + (size_t)n * C;
            if (dwte) {
                float *g = dwte + (size_t)tokens[n] * C;
#pragma omp simd
                for (int c = c0; c < c1; c++) g[c] += d[c];
            }
            if (dwpe) {
                float *g = dwpe + (size_t)(pos0 + n % T) * C;
#pragma omp simd
                for (int c = c0; c < c1; c++) g[c] += d[c];
            }
        }
    }
}
