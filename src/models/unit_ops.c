/* Family-neutral pieces of a unit's forward and backward: the linear
 * layers through the profile, the tensor-parallel f/g operators, and the
 * output layer's logits with the fused softmax + cross-entropy (also
 * vocabulary-parallel). See models/unit_ops.h. */
#include "models/unit_ops.h"
#include "models/lora.h"
#include "models/ia3.h"
#include "quant/qweight.h"
#include "ops/matmul_lowp.h"
#include "ops/matmul_int8.h"
#include "ops/ops.h"
#include <string.h>

/* Linear layers (at the run's precision, model/linear.c) through the
 * profile: GEMM time and FLOPs (2 per multiply-add). */
void mt_unit_linear_forward(mt_model *m, float *out, const float *inp, const float *w, const float *bias, int N,
                           int C, int OC) {
    MT_TIMED(m->prof, MT_PROF_GEMM, mt_linear_forward(m, out, inp, w, bias, N, C, OC));
    mt_prof_add_gemm_flops(m->prof, 2.0 * N * C * OC);
}

void mt_unit_linear_backward(mt_model *m, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                            const float *w, int N, int C, int OC, int flags) {
    MT_TIMED(m->prof, MT_PROF_GEMM, mt_linear_backward(m, dinp, dw, dbias, dout, inp, w, N, C, OC, flags));
    mt_prof_add_gemm_flops(m->prof, 2.0 * N * C * OC * ((dinp != NULL) + (dw != NULL)));
}

void mt_unit_linear_backward_kept16(mt_model *m, float *dinp, float *dw, float *dbias, const float *dout,
                                    const uint16_t *inp16, const float *w, int N, int C, int OC, int flags) {
    MT_TIMED(m->prof, MT_PROF_GEMM, mt_linear_backward_kept16(m, dinp, dw, dbias, dout, inp16, w, N, C, OC, flags));
    mt_prof_add_gemm_flops(m->prof, 2.0 * N * C * OC * ((dinp != NULL) + (dw != NULL)));
}

void mt_unit_linear_backward_dout_bf16(mt_model *m, float *dinp, float *dw, const mt_bf16 *dout, const float *inp,
                                      const float *w, int N, int C, int OC, int flags) {
    MT_TIMED(m->prof, MT_PROF_GEMM, mt_linear_backward_dout_bf16(m, dinp, dw, dout, inp, w, N, C, OC, flags));
    mt_prof_add_gemm_flops(m->prof, 2.0 * N * C * OC * ((dinp != NULL) + (dw != NULL)));
}

/* The declared tensors k, k+1, ... that a GEMM of OC output rows spans:
 * they must sit side by side in one store (a fused GEMM over trainable and
 * frozen tensors would need two). Returns how many. */
static int fused_span(const mt_model *m, int u, int k, int OC) {
    const mt_unit_layout *ul = &m->layout.units[u];
    const mt_tensor *t0 = mt_unit_tensor(ul, k);
    int64_t rows = 0;
    int n = 0;
    while (rows < OC) {
        int decl = ul->ref ? ul->n_decl : ul->n_tensors;
        if (k + n >= decl) break;
        const mt_tensor *t = mt_unit_tensor(ul, k + n);
        int apart = t->quant != t0->quant || (!t->quant && t->offset != t0->offset + (size_t)rows * (size_t)t0->shape[1]);
        if (t->trainable != t0->trainable || apart)
            mt_die("%s and %s share one GEMM but live apart (one frozen, one trained): freeze both or neither",
                   t0->name, t->name);
        rows += t->shape[0];
        n++;
    }
    if (rows != OC) mt_die("linear layer on %s: %d output rows, its tensors hold %lld", t0->name, OC, (long long)rows);
    return n;
}

/* Declared tensor k of unit u's quantized form. */
static const mt_qweight *qweight_of(const mt_model *m, int u, int k) {
    const mt_unit_layout *ul = &m->layout.units[u];
    return &m->qw[u][-ul->ref[k] - 1];
}

/* Whole rows [row0, row0 + n) of a quantized matrix, row stride ld, by its op: fp32, or for NF4
 * and int8 also bf16 (dt). The codes are the device's copy where the backend made one. */
static void qweight_rows_as(mt_model *m, const mt_qweight *q, int64_t row0, int64_t n, int64_t ld, mt_dtype dt,
                            void *out) {
    const mt_gptqw *g = &q->gptq;
    if (q->kind == MT_QUANT_GPTQ) {
        op_gptq_dequant_rows(m->be, g->qweight, g->qzeros, g->scales, g->g_idx, g->bits, g->rows, g->cols, row0, n, ld,
                             out);
    } else if (q->kind == MT_QUANT_NF4) {
        const mt_nf4 *s = q->dev ? &q->nf4_dev : &q->nf4;
        mt_nf4_codes c = {s->packed, s->double_quant ? NULL : s->absmax, s->absmax_code, s->nested_absmax, s->offset,
                          s->quant_map, s->nested_quant_map, s->rows, s->cols};
        op_nf4_dequant_rows(m->be, &c, row0, n, ld, dt, out);
    } else {
        const mt_int8w *s = q->dev ? &q->i8_dev : &q->i8;
        op_int8_dequant_rows(m->be, s->q, s->scb, s->cols, row0, n, ld, dt, out);
    }
}
static void qweight_rows(mt_model *m, const mt_qweight *q, int64_t row0, int64_t n, int64_t ld, float *out) {
    qweight_rows_as(m, q, row0, n, ld, MT_FP32, out);
}

/* Local rows [r0, r0 + nr) of quantized tensor t (this rank's slice of the
 * whole quantized matrix) into out (fp32, or bf16 when bf16 is set), row
 * stride t->shape[1]. A GPTQ weight is never asked for bf16 here: its fp32
 * tile is rounded by the caller (tile16). */
static void dequant_local_rows(mt_model *m, const mt_tensor *t, const mt_qweight *q, int64_t r0, int64_t nr, void *out,
                               int bf16) {
    int64_t gc = t->gshape[1], lc = t->shape[1];
    float *of = out;
    uint16_t *ob = out;
    if (q->kind == MT_QUANT_NONE) mt_die("%s: its quantized base was never loaded", t->name);
#define ROWS(row0, n, ld, at) \
    (bf16 ? qweight_rows_as(m, q, row0, n, ld, MT_BF16, ob + (at)) : qweight_rows(m, q, row0, n, ld, of + (at)))
    if (t->split == MT_TP_REPLICATED) {
        ROWS(r0, nr, lc, 0);
        return;
    }
    for (int64_t r = r0; r < r0 + nr;) {
        size_t origin = mt_tensor_row_origin(&m->layout, t, r);
        int64_t fr = (int64_t)(origin / (size_t)gc), fc = (int64_t)(origin % (size_t)gc);
        if (t->split == MT_TP_ROWS) { /* a run of whole rows that follow each other in the matrix */
            int64_t e = r + 1;
            while (e < r0 + nr && mt_tensor_row_origin(&m->layout, t, e) == origin + (size_t)(e - r) * (size_t)gc) e++;
            ROWS(fr, e - r, lc, (r - r0) * lc);
            r = e;
        } else { /* cut by columns: the whole row in fp32, then this rank's columns */
            qweight_rows(m, q, fr, 1, gc, m->qrow);
            if (bf16) op_to_16(m->be, MT_BF16, ob + (r - r0) * lc, m->qrow + fc, (size_t)lc);
            else op_copy(m->be, of + (r - r0) * lc, m->qrow + fc, (size_t)lc);
            r++;
        }
    }
#undef ROWS
}

/* The bf16 operand of a row tile: NF4 and int8 dequantize straight into
 * bf16; a GPTQ tile goes through the fp32 tile and one rounding op. */
static void tile16(mt_model *m, const mt_tensor *t, const mt_qweight *q, int64_t r0, int64_t nr) {
    if (q->kind != MT_QUANT_GPTQ) {
        dequant_local_rows(m, t, q, r0, nr, m->qtile16, 1);
        return;
    }
    dequant_local_rows(m, t, q, r0, nr, m->qtile, 0);
    op_to_16(m->be, MT_BF16, m->qtile16, m->qtile, (size_t)nr * (size_t)t->shape[1]);
}

/* A linear on quantized weights: each tensor of the span dequantized a row
 * tile at a time (fp32), its GEMM writing that tile's output columns. */
static void quant_forward(mt_model *m, int u, int k, int n, float *out, const float *inp, const float *bias, int N, int C,
                          int OC) {
    int col0 = 0, bf = m->qtile16 != NULL; /* bf16: operands in bf16, fp32 accumulation, as the other linears */
    if (bf) MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_to_16(m->be, MT_BF16, m->op16[0], inp, (size_t)N * C));
    for (int i = 0; i < n; i++) {
        const mt_tensor *t = mt_unit_tensor(&m->layout.units[u], k + i);
        const mt_qweight *q = qweight_of(m, u, k + i);
        int rows = (int)t->shape[0], tr = (int)(m->qtile_floats / (size_t)C);
        if (m->i8scratch && q->kind == MT_QUANT_INT8) { /* LLM.int8(): int8 x int8 and fp32 outlier columns */
            MT_TIMED(m->prof, MT_PROF_GEMM, op_int8_outlier_matmul(m->be, out + col0, OC, inp, N, C, q->i8.q, q->i8.scb, rows,
                                                                m->cfg.adapters.int8_threshold, m->i8scratch));
            col0 += rows;
            continue;
        }
        for (int r0 = 0; r0 < rows; r0 += tr) {
            int nr = rows - r0 < tr ? rows - r0 : tr;
            if (bf) {
                MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, tile16(m, t, q, r0, nr));
                MT_TIMED(
                    m->prof, MT_PROF_GEMM,
                    op_gemm_bf16(m->be, 'N', 'T', N, nr, C, m->op16[0], C, m->qtile16, C, 0.0f, out + col0 + r0, OC));
            } else {
                MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, dequant_local_rows(m, t, q, r0, nr, m->qtile, 0));
                MT_TIMED(m->prof, MT_PROF_GEMM,
                         op_sgemm(m->be, 'N', 'T', N, nr, C, 1.0f, inp, C, m->qtile, C, 0.0f, out + col0 + r0, OC));
            }
        }
        col0 += rows;
    }
    mt_prof_add_gemm_flops(m->prof, 2.0 * N * C * OC);
    if (bias) MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_add_bias_rows(m->be, out, bias, N, OC));
}

/* Its backward: the input gradient only (a quantized weight is frozen). */
static void quant_backward(mt_model *m, int u, int k, int n, float *dinp, float *dbias, const float *dout, int N, int C,
                           int OC, int flags) {
    float beta = (flags & MT_ACC_DINP) ? 1.0f : 0.0f;
    int col0 = 0, bf = m->qtile16 != NULL;
    if (bf && dinp) MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_to_16(m->be, MT_BF16, m->op16[1], dout, (size_t)N * OC));
    for (int i = 0; i < n && dinp; i++) {
        const mt_tensor *t = mt_unit_tensor(&m->layout.units[u], k + i);
        const mt_qweight *q = qweight_of(m, u, k + i);
        int rows = (int)t->shape[0], tr = (int)(m->qtile_floats / (size_t)C);
        for (int r0 = 0; r0 < rows; r0 += tr) {
            int nr = rows - r0 < tr ? rows - r0 : tr;
            if (bf) {
                MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, tile16(m, t, q, r0, nr));
                MT_TIMED(
                    m->prof, MT_PROF_GEMM,
                    op_gemm_bf16(m->be, 'N', 'N', N, C, nr, m->op16[1] + col0 + r0, OC, m->qtile16, C, beta, dinp, C));
            } else {
                MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, dequant_local_rows(m, t, q, r0, nr, m->qtile, 0));
                MT_TIMED(m->prof, MT_PROF_GEMM,
                         op_sgemm(m->be, 'N', 'N', N, C, nr, 1.0f, dout + col0 + r0, OC, m->qtile, C, beta, dinp, C));
            }
            beta = 1.0f;
        }
        col0 += rows;
    }
    if (dinp) mt_prof_add_gemm_flops(m->prof, 2.0 * N * C * OC);
    if (dbias) mt_unit_linear_backward(m, NULL, NULL, dbias, dout, NULL, NULL, N, C, OC, 0);
}

/* The kept bf16 copy of the input of linear layer t0 (mt_act_compress_kept16), for a layer with no adapter,
 * scaling, quantized base or input hook (those read the fp32 input); NULL otherwise. */
static uint16_t *linear_kept16(mt_model *m, int u, const mt_tensor *t0, const float *inp, int N, int C,
                               mt_kept16_use use, int *rounded) {
    if (t0->quant || m->lora_scratch || m->ia3_x || m->linear_input_hook) return NULL;
    return mt_act_compress_kept16(m, u, inp, (size_t)N * C, use, rounded);
}

uint16_t *mt_unit_linear_input16(mt_model *m, int u, int k, const mt_fwd_ctx *fc, const float *inp, int N, int C) {
    if (!fc->training) return NULL;
    return linear_kept16(m, u, mt_unit_tensor(&m->layout.units[u], k), inp, N, C, MT_KEPT16_PRODUCER, NULL);
}

void mt_unit_linear_fwd(mt_model *m, int u, int k, const mt_fwd_ctx *fc, float *out, const float *inp, const float *bias,
                        int N, int C, int OC) {
    const mt_unit_layout *ul = &m->layout.units[u];
    const mt_tensor *t0 = mt_unit_tensor(ul, k);
    int n = fused_span(m, u, k, OC);
    const float *x = inp;
    if (t0->ia3 && t0->ia3_input) { /* IA3 on a feedforward module: its input scaled */
        mt_ia3_scale_input(m, u, k, m->ia3_x, inp, N, C);
        x = m->ia3_x;
    }
    if (m->linear_input_hook) m->linear_input_hook(m->linear_input_ctx, u, k, n, x, N, C);
    int rounded = 0;
    uint16_t *kept16 = fc->training ? linear_kept16(m, u, t0, x, N, C, MT_KEPT16_LINEAR, &rounded) : NULL;
    if (kept16) {
        const float *w = mt_model_tensor_data(m, u, k);
        if (rounded) MT_TIMED(m->prof, MT_PROF_GEMM, mt_linear_forward16(m, out, kept16, w, bias, N, C, OC));
        else MT_TIMED(m->prof, MT_PROF_GEMM, mt_linear_forward_keep16(m, out, x, kept16, w, bias, N, C, OC));
        mt_prof_add_gemm_flops(m->prof, 2.0 * N * C * OC);
    } else if (t0->quant) quant_forward(m, u, k, n, out, x, bias, N, C, OC);
    else mt_unit_linear_forward(m, out, x, mt_model_tensor_data(m, u, k), bias, N, C, OC);
    if (!m->lora_scratch && !m->ia3_x) return;
    int col0 = 0;
    for (int i = 0; i < n; i++) {
        const mt_tensor *t = mt_unit_tensor(ul, k + i);
        if (t->lora_a) mt_lora_forward(m, u, k + i, fc, out, inp, N, C, OC, col0);
        if (t->ia3 && !t->ia3_input) mt_ia3_scale_output(m, u, k + i, out, N, OC, col0);
        col0 += (int)t->shape[0];
    }
}

void mt_unit_linear_bwd(mt_model *m, int u, int k, const mt_fwd_ctx *fc, float *dinp, float *dbias, const float *dout,
                        const float *inp, int N, int C, int OC, int flags) {
    const mt_unit_layout *ul = &m->layout.units[u];
    const mt_tensor *t0 = mt_unit_tensor(ul, k);
    int n = fused_span(m, u, k, OC);
    const float *d = dout;
    if (m->ia3_x) { /* IA3 on outputs: dL/dl from the recomputed W x + b, and the base sees dy * l */
        int col0 = 0, copied = 0;
        for (int i = 0; i < n; i++) {
            const mt_tensor *t = mt_unit_tensor(ul, k + i);
            int R = (int)t->shape[0];
            if (t->ia3 && !t->ia3_input) {
                if (!copied) {
                    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_copy(m->be, m->ia3_d, dout, (size_t)N * OC));
                    copied = 1;
                }
                const float *b = t->bias_of ? mt_model_tensor_data(m, u, t->bias_of - 1) : NULL;
                if (t->quant) quant_forward(m, u, k + i, 1, m->ia3_y, inp, b, N, C, R);
                else mt_unit_linear_forward(m, m->ia3_y, inp, mt_model_tensor_data(m, u, k + i), b, N, C, R);
                mt_ia3_grad(m, u, k + i, dout, OC, col0, m->ia3_y, N, R);
                mt_ia3_scale_output(m, u, k + i, m->ia3_d, N, OC, col0);
            }
            col0 += R;
        }
        if (copied) d = m->ia3_d;
    }
    const uint16_t *kept16 = linear_kept16(m, u, t0, inp, N, C, MT_KEPT16_BACKWARD, NULL);
    if (kept16) {
        mt_unit_linear_backward_kept16(m, dinp, mt_model_tensor_grad(m, u, k), dbias, dout, kept16,
                                       mt_model_tensor_data(m, u, k), N, C, OC, flags);
        return;
    }
    int in_scaled = t0->ia3 && t0->ia3_input && dinp;
    float *dx = in_scaled ? m->ia3_x : dinp; /* input scaling: g = dy W first */
    int fl = in_scaled ? flags & ~MT_ACC_DINP : flags;
    if (t0->quant)
        quant_backward(m, u, k, n, dx, dbias, d, N, C, OC, fl);
    else
        mt_unit_linear_backward(m, dx, mt_model_tensor_grad(m, u, k), dbias, d, inp, mt_model_tensor_data(m, u, k), N,
                                C, OC, fl);
    if (in_scaled) { /* dL/dl = column sums of g * x; dL/dx = g * l */
        mt_ia3_grad(m, u, k, m->ia3_x, C, 0, inp, N, C);
        const float *l = mt_model_tensor_data(m, u, t0->ia3 - 1);
        int acc = (flags & MT_ACC_DINP) != 0;
        MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_scale_cols_into(m->be, dinp, m->ia3_x, l, N, C, acc));
    }
    if (!m->lora_scratch) return;
    int col0 = 0;
    for (int i = 0; i < n; i++) {
        const mt_tensor *t = mt_unit_tensor(ul, k + i);
        if (t->lora_a) mt_lora_backward(m, u, k + i, fc, dinp, dout, inp, N, C, OC, col0);
        col0 += (int)t->shape[0];
    }
}

/* Residual-stream rows held here: n, and the first one's index in the microbatch. */
int mt_unit_resid_n(const mt_model *m) { return (int)(mt_model_resid_floats(m) / (size_t)m->cfg.n_embd); }
size_t mt_unit_resid_row0(const mt_model *m) { return mt_tp_sp(m->tp) ? (size_t)m->tp->rank * (size_t)mt_unit_resid_n(m) : 0; }

int mt_unit_positions_at(const mt_model *m) { return m->acts.packed || m->cp; }
int mt_unit_seq_len(const mt_model *m) { return m->acts.T * mt_cp_size(m->cp); }

void mt_unit_dropout_rows(const mt_model *m, float *x, const mt_dropout *d) {
    const size_t row0 = mt_unit_resid_row0(m);
    const int n = mt_unit_resid_n(m), C = m->cfg.n_embd;
    if (!m->cp) {
        op_dropout_rows(m->be, x, d, m->acts.sample_ids, row0, n, m->acts.T, C);
        return;
    }
    /* local rows [k c, (k+1) c) are chunk mt_cp_chunk(k % 2) of sample k / 2: one call per piece held
       here, with that sample's id and the chunk's positions as rows of one sequence of seq_len */
    const int c = m->acts.T / 2, Tg = mt_unit_seq_len(m);
    for (int k = 0; k < 2 * m->acts.B; k++) {
        size_t lo = (size_t)k * c > row0 ? (size_t)k * c : row0;
        size_t hi = (size_t)(k + 1) * c < row0 + (size_t)n ? (size_t)(k + 1) * c : row0 + (size_t)n;
        if (lo >= hi) continue;
        op_dropout_rows(m->be, x + (lo - row0) * (size_t)C, d, m->acts.sample_ids + k / 2,
                        (size_t)mt_cp_chunk(m->cp, k % 2) * c + (lo - (size_t)k * c), (int)(hi - lo), Tg, C);
    }
}

/* The f/g operators through the profile. */
const float *mt_unit_tp_gather(mt_model *m, const float *local, float *buf) {
    if (!mt_tp_sp(m->tp)) return local;
    double t0 = mt_prof_begin(m->prof);
    const float *r = mt_tp_gather(m->tp, local, buf, mt_model_resid_floats(m));
    mt_prof_end(m->prof, MT_PROF_ALLGATHER, t0);
    return r;
}

void mt_unit_tp_scatter(mt_model *m, float *full) {
    if (mt_tp_size(m->tp) == 1) return;
    double t0 = mt_prof_begin(m->prof);
    mt_tp_scatter(m->tp, full, (size_t)m->acts.B * m->acts.T * m->cfg.n_embd);
    mt_prof_end(m->prof, mt_tp_sp(m->tp) ? MT_PROF_REDUCE_SCATTER : MT_PROF_ALLREDUCE, t0);
}

/* Vocabulary-parallel cross-entropy over this rank's logit columns
 * [v0, v0 + Vl) of all N rows: each rank's per-row max, sum of exponentials
 * and target logit are all-gathered (3 floats per row and rank), every rank
 * combines them in the same order into the same losses, and writes the
 * gradient of its columns. The full logits never leave the rank. */
static void vocab_parallel_xent(mt_model *m, int Vl, float dlogits_scale) {
    mt_acts *a = &m->acts;
    const mt_model_config *cfg = &m->cfg;
    int N = a->B * a->T, S = m->layout.tp, v0 = m->layout.tp_rank * Vl;
    int Vr = cfg->vocab_size - v0 < Vl ? cfg->vocab_size - v0 : Vl; /* real (non-padding) columns here */
    if (Vr < 0) Vr = 0;
    float *st = m->gs.xent_stats, *mine = st + (size_t)m->layout.tp_rank * 3 * N, *lse = m->gs.xent_lse;
    double t0 = mt_prof_begin(m->prof);
    op_xent_shard_stats(m->be, a->logits, mine, mine + N, mine + 2 * N, a->targets, N, Vr, Vl, v0);
    mt_prof_end(m->prof, MT_PROF_SOFTMAX_XENT, t0);
    t0 = mt_prof_begin(m->prof);
    mt_tp_allgather(m->tp, mine, st, (size_t)3 * N);
    mt_prof_end(m->prof, MT_PROF_ALLGATHER, t0);
    t0 = mt_prof_begin(m->prof);
    op_xent_combine_lse(m->be, lse, st, st + N, S, N, 3 * N);
    op_xent_losses_from_stats(m->be, a->losses, lse, st, S, N, a->targets, cfg->vocab_size);
    if (dlogits_scale != 0.0f) {
        op_xent_shard_grad(m->be, a->logits, lse, a->targets, N, Vr, Vl, v0, dlogits_scale);
        if (Vr < Vl) op_zero_cols(m->be, a->logits, N, (size_t)Vl, Vr, Vl - Vr);
    }
    mt_prof_end(m->prof, MT_PROF_SOFTMAX_XENT, t0);
}

/* The rows the output layer's GEMMs see: its input of all N rows (gathered
 * under sequence parallelism; gs.gathered still holds them in backward). */
static const float *logits_input(mt_model *m, const float *x) { return mt_tp_sp(m->tp) ? m->gs.gathered : x; }

double mt_unit_logits_loss(mt_model *m, const float *x, const float *w, int Vl, float dlogits_scale) {
    mt_acts *a = &m->acts;
    const mt_model_config *cfg = &m->cfg;
    int N = a->B * a->T, C = cfg->n_embd;
    const float *xg = mt_unit_tp_gather(m, x, m->gs.gathered);
    mt_unit_linear_forward(m, a->logits, xg, w, NULL, N, C, Vl);
    /* bf16: the gradient goes straight into the head's bf16 GEMM operand */
    m->dlogits16 = m->layout.tp == 1 && m->precision == MT_BF16 && dlogits_scale != 0.0f;
    if (m->dlogits16)
        MT_TIMED(m->prof, MT_PROF_SOFTMAX_XENT,
                 op_softmax_xent_bf16(m->be, a->logits, m->op16[1], a->losses, a->targets, N, cfg->vocab_size,
                                      cfg->padded_vocab, dlogits_scale));
    else if (m->layout.tp == 1)
        MT_TIMED(m->prof, MT_PROF_SOFTMAX_XENT,
                 op_softmax_xent(m->be, a->logits, a->losses, a->targets, N, cfg->vocab_size, cfg->padded_vocab,
                                 dlogits_scale));
    else
        vocab_parallel_xent(m, Vl, dlogits_scale);
    return op_sum(m->be, a->losses, (size_t)N);
}

void mt_unit_logits_backward(mt_model *m, const float *x, const float *w, float *dw, int Vl, int flags) {
    mt_acts *a = &m->acts;
    int N = a->B * a->T, C = m->cfg.n_embd;
    /* acts.logits (op16[1] in bf16) holds dL/dlogits (written by the fused
     * softmax + xent) */
    const float *xg = logits_input(m, x);
    if (m->dlogits16) mt_unit_linear_backward_dout_bf16(m, m->gs.dln, dw, m->op16[1], xg, w, N, C, Vl, flags);
    else mt_unit_linear_backward(m, m->gs.dln, dw, NULL, a->logits, xg, w, N, C, Vl, flags);
    mt_unit_tp_scatter(m, m->gs.dln);
}

const mt_tensor *mt_unit_output_weight(const mt_model *m, int own, int *unit, int *decl) {
    const mt_unit_layout *hu = &m->layout.units[m->layout.n_units - 1];
    if (hu->n_shared) {
        *unit = hu->shared[0].unit;
        *decl = hu->shared[0].tensor;
        return mt_unit_tensor(&m->layout.units[*unit], *decl);
    }
    *unit = m->layout.n_units - 1;
    *decl = own;
    return mt_unit_tensor(hu, own);
}
