/* IA3's scalings and its vector's gradient (see models/ia3.h). */
#include "models/ia3.h"
#include "models/unit_ops.h"

static const float *vec(const mt_model *m, int u, int k) {
    return mt_model_tensor_data(m, u, mt_unit_tensor(&m->layout.units[u], k)->ia3 - 1);
}

void mt_ia3_scale_input(mt_model *m, int u, int k, float *xs, const float *x, int N, int C) {
    const float *l = vec(m, u, k);
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_scale_cols(m->be, xs, x, l, N, C));
}

void mt_ia3_scale_output(mt_model *m, int u, int k, float *out, int N, int OC, int col0) {
    const float *l = vec(m, u, k);
    int R = (int)mt_unit_tensor(&m->layout.units[u], k)->shape[0];
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_scale_cols_in_place(m->be, out, l, N, OC, col0, R));
}

void mt_ia3_grad(mt_model *m, int u, int k, const float *a, int lda, int col0, const float *b, int N, int n) {
    float *dl = mt_model_tensor_grad(m, u, mt_unit_tensor(&m->layout.units[u], k)->ia3 - 1);
    if (!dl) return;
    /* column sums in a fixed order (rows summed in sequence): the same on every layout */
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_col_dot_acc(m->be, dl, a, lda, col0, b, N, n));
}
