/* IA3's scalings and its vector's gradient (see models/ia3.h). */
#include "models/ia3.h"
#include "models/unit_ops.h"

static const float *vec(const mt_model *m, int u, int k) {
    return mt_model_tensor_data(m, u, mt_unit_tensor(&m->layout.units[u], k)->ia3 - 1);
}

void mt_ia3_scale_input(mt_model *m, int u, int k, float *xs, const float *x, int N, int C) {
    const float *l = vec(m, u, k);
    double t0 = mt_prof_begin(m->prof);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++)
#pragma omp simd
        for (int j = 0; j < C; j++) xs[(size_t)i * C + j] = x[(size_t)i * C + j] * l[j];
    mt_prof_end(m->prof, MT_PROF_ELEMENTWISE, t0);
}

void mt_ia3_scale_output(mt_model *m, int u, int k, float *out, int N, int OC, int col0) {
    const float *l = vec(m, u, k);
    int R = (int)mt_unit_tensor(&m->layout.units[u], k)->shape[0];
    double t0 = mt_prof_begin(m->prof);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++)
#pragma omp simd
        for (int j = 0; j < R; j++) out[(size_t)i * OC + col0 + j] *= l[j];
    mt_prof_end(m->prof, MT_PROF_ELEMENTWISE, t0);
}

void mt_ia3_grad(mt_model *m, int u, int k, const float *a, int lda, int col0, const float *b, int N, int n) {
    float *dl = mt_model_tensor_grad(m, u, mt_unit_tensor(&m->layout.units[u], k)->ia3 - 1);
    if (!dl) return;
    double t0 = mt_prof_begin(m->prof);
    /* column sums in a fixed order (row blocks summed in sequence): the same on every layout */
#pragma omp parallel for schedule(static)
    for (int j = 0; j < n; j++) {
        double s = 0;
        for (int i = 0; i < N; i++) s += (double)a[(size_t)i * lda + col0 + j] * (double)b[(size_t)i * n + j];
        dl[j] += (float)s;
    }
    mt_prof_end(m->prof, MT_PROF_ELEMENTWISE, t0);
}
