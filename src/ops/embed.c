/* Token + position embeddings.
 * backward is parallel over channel ranges: every thread walks all tokens in
 * order for its own columns, so there are no races on repeated tokens and
 * the sums are deterministic for any thread count. */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include <omp.h>
#include <stdint.h>
#include <string.h>

void op_embed_forward(mt_backend *be, float *out, const int32_t *tokens, const float *wte, const float *wpe, int B,
                      int T, int C, int pos0) {
    MT_DISPATCH(be, embed_forward, be, out, tokens, wte, wpe, B, T, C, pos0);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < B * T; n++) {
        int t = n % T;
        const float *e = wte + (size_t)tokens[n] * C, *p = wpe + (size_t)(pos0 + t) * C;
        float *o = out + (size_t)n * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
    }
}

void op_embed_shard_forward(mt_backend *be, float *out, const int32_t *tokens, const float *wte, int v0, int Vl, int N,
                            int C) {
    MT_DISPATCH(be, embed_shard_forward, be, out, tokens, wte, v0, Vl, N, C);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        int r = tokens[n] - v0;
        float *o = out + (size_t)n * C;
        if (r < 0 || r >= Vl) {
            memset(o, 0, (size_t)C * sizeof(float));
            continue;
        }
        memcpy(o, wte + (size_t)r * C, (size_t)C * sizeof(float));
    }
}

void op_embed_shard_forward_16(mt_backend *be, float *out, const int32_t *tokens, mt_dtype dt, const uint16_t *wte,
                               int v0, int Vl, int N, int C) {
    MT_DISPATCH(be, embed_shard_forward_16, be, out, tokens, dt, wte, v0, Vl, N, C);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        int r = tokens[n] - v0;
        float *o = out + (size_t)n * C;
        if (r < 0 || r >= Vl) memset(o, 0, (size_t)C * sizeof(float));
        else mt_convert_from_16(dt, o, wte + (size_t)r * C, (size_t)C);
    }
}

void op_add_positions(mt_backend *be, float *out, const float *wpe, size_t row0, int n, int T, int C) {
    MT_DISPATCH(be, add_positions, be, out, wpe, row0, n, T, C);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        const float *p = wpe + (size_t)((row0 + (size_t)i) % (size_t)T) * C;
        float *o = out + (size_t)i * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] += p[c];
    }
}

/* Columns [c0, c1) of every row, in row order: one thread's share. */
static void embed_backward_cols(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int v0, int Vl,
                                int N, int T, int C, int pos0, int c0, int c1) {
    for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * C;
        int r = tokens[n] - v0;
        if (dwte && r >= 0 && r < Vl) {
            float *g = dwte + (size_t)r * C;
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

void op_embed_shard_backward(mt_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int v0,
                             int Vl, int B, int T, int C) {
    MT_DISPATCH(be, embed_shard_backward, be, dwte, dwpe, dout, tokens, v0, Vl, B, T, C);
#pragma omp parallel
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int nblk = (C + 15) / 16;
        int c0 = (int)((long)nblk * t / nt) * 16, c1 = (int)((long)nblk * (t + 1) / nt) * 16;
        embed_backward_cols(dwte, dwpe, dout, tokens, v0, Vl, B * T, T, C, 0, c0, c1 > C ? C : c1);
    }
}

void op_embed_backward(mt_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B, int T,
                       int C, int pos0) {
    MT_DISPATCH(be, embed_backward, be, dwte, dwpe, dout, tokens, B, T, C, pos0);
#pragma omp parallel
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int nblk = (C + 15) / 16;
        int c0 = (int)((long)nblk * t / nt) * 16, c1 = (int)((long)nblk * (t + 1) / nt) * 16;
        embed_backward_cols(dwte, dwpe, dout, tokens, 0, INT32_MAX, B * T, T, C, pos0, c0, c1 > C ? C : c1);
    }
}
