/* Positions of packed samples: see positions.h. */
#include "ops/positions.h"
#include "ops/kernel_table.h"
#include <omp.h>

void op_rope_apply_at(mt_backend *be, float *x, int N, int nh, int HS, size_t ld, const float *cos_t, const float *sin_t, int inverse,
                      const int32_t *pos) {
    MT_DISPATCH(be, rope_apply_at, be, x, N, nh, HS, ld, cos_t, sin_t, inverse, pos);
    int h = HS / 2;
    float sgn = inverse ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *c = cos_t + (size_t)pos[i] * h, *s = sin_t + (size_t)pos[i] * h;
        for (int k = 0; k < nh; k++) {
            float *a = x + (size_t)i * ld + (size_t)k * HS, *b = a + h;
#pragma omp simd
            for (int j = 0; j < h; j++) {
                float sj = sgn * s[j], aj = a[j], bj = b[j];
                a[j] = aj * c[j] - bj * sj;
                b[j] = bj * c[j] + aj * sj;
            }
        }
    }
}

void op_add_positions_at(mt_backend *be, float *out, const float *wpe, const int32_t *pos, int n, int C) {
    MT_DISPATCH(be, add_positions_at, be, out, wpe, pos, n, C);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        const float *p = wpe + (size_t)pos[i] * C;
        float *o = out + (size_t)i * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] += p[c];
    }
}

void op_positions_backward_at(mt_backend *be, float *dwpe, const float *dout, const int32_t *pos, int N, int C) {
    MT_DISPATCH(be, positions_backward_at, be, dwpe, dout, pos, N, C);
#pragma omp parallel
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int nblk = (C + 15) / 16;
        int c0 = (int)((long)nblk * t / nt) * 16, c1 = (int)((long)nblk * (t + 1) / nt) * 16;
        if (c1 > C) c1 = C;
        for (int n = 0; n < N; n++) {
            const float *d = dout + (size_t)n * C;
            float *g = dwpe + (size_t)pos[n] * C;
#pragma omp simd
            for (int c = c0; c < c1; c++) g[c] += d[c];
        }
    }
}
