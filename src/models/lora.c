/* LoRA's forward and backward on one target (see models/lora.h). */
#include "models/lora.h"
#include "nn/adapter_spec.h"
#include "models/unit_ops.h"
#include "ops/ops.h"
#include <string.h>

#define MT_DROPOUT_LORA 5

typedef struct {
    const mt_tensor *t, *a, *b;
    float *A, *B, *dA, *dB;
    int r, in_cols, out_rows;
    int row_parallel, col_parallel;
    uint32_t in_col0; /* global index of this rank's first input column (dropout coordinates) */
} lora_target;

static lora_target target_of(const mt_model *m, int u, int k) {
    const mt_unit_layout *ul = &m->layout.units[u];
    lora_target x;
    x.t = mt_unit_tensor(ul, k);
    x.a = mt_unit_tensor(ul, x.t->lora_a - 1);
    x.b = mt_unit_tensor(ul, x.t->lora_b - 1);
    x.A = mt_model_tensor_data(m, u, x.t->lora_a - 1);
    x.B = mt_model_tensor_data(m, u, x.t->lora_b - 1);
    x.dA = mt_model_tensor_grad(m, u, x.t->lora_a - 1);
    x.dB = mt_model_tensor_grad(m, u, x.t->lora_b - 1);
    x.r = (int)x.a->shape[0];
    x.in_cols = (int)x.a->shape[1];
    x.out_rows = (int)x.b->shape[0];
    x.row_parallel = x.a->split == MT_TP_COLS;
    x.col_parallel = x.b->split == MT_TP_ROWS;
    x.in_col0 = x.row_parallel ? (uint32_t)(m->layout.tp_rank * x.in_cols) : 0;
    return x;
}

static mt_dropout lora_dropout(const mt_model *m, int u, const mt_fwd_ctx *fc) {
    float p = fc && fc->training ? m->cfg.adapters.dropout : 0.0f;
    mt_dropout d = {p, m->seed, fc ? fc->step : 0, (uint32_t)m->layout.units[u].layer, MT_DROPOUT_LORA};
    return d;
}

/* dst = x with the adapter's dropout applied (row i is microbatch row i). */
static void drop_input(const mt_model *m, const mt_dropout *d, int k, const lora_target *x, float *dst, const float *src,
                       int N) {
    op_dropout_feature_rows(m->be, dst, src, d, m->acts.sample_ids, N, m->acts.T, x->in_cols, (uint32_t)k, x->in_col0);
}

/* h = dropout(x) A^T (summed over tp for a row-parallel target); returns
 * the adapter's input as used (x itself without dropout). */
static const float *adapter_h(mt_model *m, int u, int k, const mt_fwd_ctx *fc, const lora_target *x, const float *inp,
                              int N, float *h) {
    mt_dropout d = lora_dropout(m, u, fc);
    const float *xd = inp;
    if (d.p > 0) {
        MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, drop_input(m, &d, k, x, m->lora_scratch, inp, N));
        xd = m->lora_scratch;
    }
    MT_TIMED(m->prof, MT_PROF_GEMM, op_matmul_forward(m->be, h, xd, x->A, NULL, N, x->in_cols, x->r));
    mt_prof_add_gemm_flops(m->prof, 2.0 * N * x->in_cols * x->r);
    if (x->row_parallel) {
        double t0 = mt_prof_begin(m->prof);
        mt_tp_allreduce(m->tp, h, (size_t)N * (size_t)x->r);
        mt_prof_end(m->prof, MT_PROF_ALLREDUCE, t0);
    }
    return xd;
}

void mt_lora_forward(mt_model *m, int u, int k, const mt_fwd_ctx *fc, float *out, const float *inp, int N, int C, int OC,
                     int col0) {
    lora_target x = target_of(m, u, k);
    if (x.in_cols != C) mt_die("LoRA on %s: input width %d, the adapter's A has %d columns", x.t->name, C, x.in_cols);
    float *h = m->lora_scratch + m->lora_scratch_floats[0];
    adapter_h(m, u, k, fc, &x, inp, N, h);
    if (x.row_parallel && m->layout.tp_rank != 0) return; /* rank 0 adds B h once to the partial sums */
    /* out[:, col0:col0+R] += s h B^T, in place (the fused output's column block) */
    float s = mt_lora_scale(&m->cfg.adapters);
    MT_TIMED(m->prof, MT_PROF_GEMM,
             op_sgemm(m->be, 'N', 'T', N, x.out_rows, x.r, s, h, x.r, x.B, x.r, 1.0f, out + col0, OC));
    mt_prof_add_gemm_flops(m->prof, 2.0 * N * x.r * x.out_rows);
}

void mt_lora_backward(mt_model *m, int u, int k, const mt_fwd_ctx *fc, float *dinp, const float *dout, const float *inp,
                      int N, int C, int OC, int col0) {
    lora_target x = target_of(m, u, k);
    if (x.in_cols != C) mt_die("LoRA on %s: input width %d, the adapter's A has %d columns", x.t->name, C, x.in_cols);
    float *h = m->lora_scratch + m->lora_scratch_floats[0];
    float *dh = h + m->lora_scratch_floats[1];
    int R = x.out_rows, sp = mt_tp_sp(m->tp) && m->layout.units[u].sp_partial;
    float s = mt_lora_scale(&m->cfg.adapters);
    const float *xd = adapter_h(m, u, k, fc, &x, inp, N, h);
    /* dB += s dy^T h (a row-parallel target's B is whole on every rank: under sequence parallelism the
     * unit's reduction sums it over tp, so one rank contributes it) and dh = s dy B, dy the target's
     * column block of dout */
    const float *dy = dout + col0;
    int add_db = !(x.row_parallel && sp && m->layout.tp_rank != 0);
    if (add_db)
        MT_TIMED(m->prof, MT_PROF_GEMM, op_sgemm(m->be, 'T', 'N', R, x.r, N, s, dy, OC, h, x.r, 1.0f, x.dB, x.r));
    MT_TIMED(m->prof, MT_PROF_GEMM, op_sgemm(m->be, 'N', 'N', N, x.r, R, s, dy, OC, x.B, x.r, 0.0f, dh, x.r));
    mt_prof_add_gemm_flops(m->prof, 2.0 * N * x.r * R * (1 + add_db));
    const float *dh_for_a = dh;
    float *dh_sum = NULL;
    if (x.col_parallel && !sp) { /* A is whole: its gradient needs dh summed over the tp ranks */
        dh_sum = h; /* h is dead once dB is formed */
        op_copy(m->be, dh_sum, dh, (size_t)N * x.r);
        double t1 = mt_prof_begin(m->prof);
        mt_tp_allreduce(m->tp, dh_sum, (size_t)N * (size_t)x.r);
        mt_prof_end(m->prof, MT_PROF_ALLREDUCE, t1);
        dh_for_a = dh_sum;
    }
    MT_TIMED(m->prof, MT_PROF_GEMM, op_matmul_backward(m->be, NULL, x.dA, NULL, dh_for_a, xd, NULL, N, C, x.r, 0));
    mt_prof_add_gemm_flops(m->prof, 2.0 * N * C * x.r);
    if (!dinp) return;
    mt_dropout d = lora_dropout(m, u, fc);
    if (d.p > 0) { /* d(dropped input) = dh A, then the mask: into the dropout scratch, added to dinp */
        float *dxd = m->lora_scratch;
        MT_TIMED(m->prof, MT_PROF_GEMM, op_matmul_backward(m->be, dxd, NULL, NULL, dh, NULL, x.A, N, C, x.r, 0));
        MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, drop_input(m, &d, k, &x, dxd, dxd, N));
        MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_accumulate(m->be, dinp, dxd, (size_t)N * C));
    } else {
        MT_TIMED(m->prof, MT_PROF_GEMM,
                 op_matmul_backward(m->be, dinp, NULL, NULL, dh, NULL, x.A, N, C, x.r, MT_ACC_DINP));
    }
    mt_prof_add_gemm_flops(m->prof, 2.0 * N * C * x.r);
}
