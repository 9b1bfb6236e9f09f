/* Forward and backward of the GPT-2 units on one microbatch (the family
 * table is at the end).
 *   embed:  x0 = dropout(wte[tok] + wpe[pos])
 *   block:  r2 = x + dropout(proj(attn(ln1(x))));  r3 = r2 + dropout(mlp(ln2(r2)))
 *   head:   loss = xent(ln_f(x) . wte^T)   (output head tied to wte)
 * Dropout masks are regenerated in backward from global coordinates
 * (core/philox.h), so no mask is stored.
 *
 * Tensor parallelism (Megatron-LM) changes only what the linears see: c_attn
 * and c_fc are column-parallel (this rank's heads / MLP columns), the two
 * c_proj are row-parallel and produce partial sums that mt_tp_scatter adds
 * up (their biases join afterwards); wte is split by vocabulary rows, so the
 * embedding is a masked lookup summed over tp and the loss a
 * vocabulary-parallel cross-entropy that exchanges three numbers per row
 * instead of the logits. mt_tp_gather/mt_tp_scatter are the f/g operators of
 * comm/tp.h; with sequence parallelism the residual stream between them
 * holds this rank's rows only (rows [row0, row0 + n) of the N = B*T). */
#include "models/model.h"
#include "models/gpt2/gpt2.h"
#include "models/unit_ops.h"
#include "models/alltoall_attention.h"
#include "ops/ops.h"
#include "ops/positions.h"
#include <string.h>

#define EMBED_LAYER_ID 0xFFFu

/* The family's activation buffers (mt_family.block_bufs / head_bufs) and
 * backward scratch (mt_grad_scratch.f). */
enum { GB_LN1, GB_LN1_MEAN, GB_LN1_RSTD, GB_QKV, GB_ATTY, GB_ATT_LSE, GB_RES2, GB_LN2, GB_LN2_MEAN, GB_LN2_RSTD,
       GB_FCH, GB_FCH_GELU, GB_RES3, GB_COUNT };
enum { GH_LNF, GH_LNF_MEAN, GH_LNF_RSTD, GH_COUNT };
enum { GS_DATTY, GS_DQKV, GS_DFCH };

static int dropout_on(const mt_model *m, const mt_fwd_ctx *fc) {
    return fc->training && m->cfg.dropout > 0.0f;
}

/* The dropout of one site; p = 0 (off) outside training or without {dropout}. */
static mt_dropout make_dropout(const mt_model *m, const mt_fwd_ctx *fc, uint32_t layer, uint32_t site) {
    mt_dropout d = {dropout_on(m, fc) ? m->cfg.dropout : 0.0f, m->seed, fc->step, layer, site};
    return d;
}

/* Applies the (layer, site) dropout to the residual-stream rows of x held
 * here, if it is on. */
static void apply_dropout(const mt_model *m, const mt_fwd_ctx *fc, uint32_t layer, uint32_t site, float *x) {
    mt_dropout d = make_dropout(m, fc, layer, site);
    if (d.p > 0.0f) MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, mt_unit_dropout_rows(m, x, &d));
}

/* The gradient of a residual branch's output given dL/d(residual) in
 * gs.dresid: dresid itself without dropout, else a dropout-scaled copy. */
static const float *branch_grad(mt_model *m, const mt_fwd_ctx *fc, uint32_t layer, uint32_t site) {
    if (!dropout_on(m, fc)) return m->gs.dresid;
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_copy(m->be, m->gs.dtmp, m->gs.dresid, mt_model_resid_floats(m)));
    apply_dropout(m, fc, layer, site, m->gs.dtmp);
    return m->gs.dtmp;
}

static void input_forward(mt_model *m, const mt_fwd_ctx *fc) {
    mt_acts *a = &m->acts;
    const mt_model_config *cfg = &m->cfg;
    const mt_unit_layout *u = &m->layout.units[0];
    int C = cfg->n_embd, N = a->B * a->T;
    const mt_tensor *wte = mt_unit_tensor(u, MT_T_WTE);
    const float *wte_p = mt_model_tensor_data(m, 0, MT_T_WTE), *wpe_p = mt_model_tensor_data(m, 0, MT_T_WPE);
    const int at = mt_unit_positions_at(m); /* packed documents, or context parallelism's chunks */
    if (m->precision == MT_FP32 && m->layout.tp == 1 && !at) {
        MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_embed_forward(m->be, a->encoded, a->tokens, wte_p, wpe_p, a->B, a->T, C, 0));
    } else { /* a lookup of this rank's vocabulary rows (vocabulary-parallel: masked, summed over tp),
                then the positions */
        int Vl = (int)wte->shape[0], v0 = m->layout.tp_rank * Vl;
        float *part = m->layout.tp == 1 ? a->encoded : m->gs.dtmp;
        if (m->precision == MT_FP32)
            MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_embed_shard_forward(m->be, part, a->tokens, wte_p, v0, Vl, N, C));
        else /* wte is read in 16 bits: just the rows looked up are widened */
            MT_TIMED(m->prof, MT_PROF_ELEMENTWISE,
                     op_embed_shard_forward_16(m->be, part, a->tokens, m->precision, mt_model_weight16(m, wte_p), v0,
                                               Vl, N, C));
        if (m->layout.tp > 1) {
            mt_unit_tp_scatter(m, part);
            MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_copy(m->be, a->encoded, part, mt_model_resid_floats(m)));
        }
        if (at) /* packed samples: each document's positions start at 0; cp: the chunks' positions */
            MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_add_positions_at(m->be, a->encoded, wpe_p, a->pos + mt_unit_resid_row0(m),
                                                                      mt_unit_resid_n(m), C));
        else
            MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_add_positions(m->be, a->encoded, wpe_p, mt_unit_resid_row0(m), mt_unit_resid_n(m), a->T, C));
    }
    apply_dropout(m, fc, EMBED_LAYER_ID, MT_DROPOUT_EMBED, a->encoded);
}

static const float *block_input(const mt_model *m, int layer) {
    return layer == 0 ? m->acts.encoded : m->acts.blocks[layer - 1].b[GB_RES3];
}

/* The attention core of a block (this rank's heads): forward, and again
 * before backward under selective recomputation. */
static void attention_core_forward(mt_model *m, int layer, const mt_fwd_ctx *fc) {
    mt_acts *a = &m->acts;
    mt_block_acts *ba = &a->blocks[layer];
    int C = m->cfg.n_embd, NH = m->cfg.n_head, NHl = NH / m->layout.tp;
    mt_attn_dropout ad = {make_dropout(m, fc, (uint32_t)layer, MT_DROPOUT_ATTN_PROBS), a->sample_ids,
                          m->layout.tp_rank * NHl, a->packed ? a->doc_start : NULL};
    if (m->cp)
        MT_TIMED(m->prof, MT_PROF_ATTENTION,
                 mt_cp_attention_forward(m->be, m->cp, ba->b[GB_ATTY], ba->b[GB_ATT_LSE], ba->b[GB_QKV], a->B, a->T / 2,
                                           NHl, NHl, C / NH, &ad, m->gs.attn_scratch));
    else
        MT_TIMED(m->prof, MT_PROF_ATTENTION,
                 op_attention_forward(m->be, ba->b[GB_ATTY], ba->b[GB_ATT_LSE], ba->b[GB_QKV], a->B, a->T, NHl, C / NH,
                                      &ad, m->gs.attn_scratch));
}

static void block_forward(mt_model *m, int layer, const mt_fwd_ctx *fc) {
    mt_acts *a = &m->acts;
    const mt_model_config *cfg = &m->cfg;
    const int U = 1 + layer;
    mt_block_acts *ba = &a->blocks[layer];
    int N = a->B * a->T, n = mt_unit_resid_n(m), C = cfg->n_embd, tp = m->layout.tp;
    const float *x = block_input(m, layer);
    float *tmp = m->gs.dtmp; /* branch output before dropout; scratch is free during forward */
    /* Without dropout the projections' biases join the fused residual kernels
     * (res = x + (branch + bias)); with it they are added before the dropout:
     * in the GEMM, or under tensor parallelism after the partial sums are
     * reduced. The fc bias always joins the GELU. */
    const int drop = dropout_on(m, fc), bias_in_gemm = drop && tp == 1, bias_after = drop && tp > 1;
#define P(i) mt_model_tensor_data(m, U, i)
    MT_TIMED(m->prof, MT_PROF_LAYERNORM,
             op_layernorm_forward(m->be, ba->b[GB_LN1], ba->b[GB_LN1_MEAN], ba->b[GB_LN1_RSTD], x, P(MT_T_LN1_W),
                                  P(MT_T_LN1_B), n, C));
    const float *ln1 = mt_unit_tp_gather(m, ba->b[GB_LN1], m->gs.gathered);
    mt_unit_linear_fwd(m, U, MT_T_QKV_W, fc, ba->b[GB_QKV], ln1, P(MT_T_QKV_B), N, C, 3 * C / tp);
    attention_core_forward(m, layer, fc);
    mt_unit_linear_fwd(m, U, MT_T_ATTPROJ_W, fc, tmp, ba->b[GB_ATTY], bias_in_gemm ? P(MT_T_ATTPROJ_B) : NULL, N, C / tp, C);
    mt_unit_tp_scatter(m, tmp);
    if (bias_after) MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_add_bias_rows(m->be, tmp, P(MT_T_ATTPROJ_B), n, C));
    apply_dropout(m, fc, (uint32_t)layer, MT_DROPOUT_ATTN_RESID, tmp);
    MT_TIMED(m->prof, MT_PROF_LAYERNORM,
             op_residual_layernorm_forward(m->be, ba->b[GB_RES2], ba->b[GB_LN2], ba->b[GB_LN2_MEAN], ba->b[GB_LN2_RSTD],
                                           x, tmp, drop ? NULL : P(MT_T_ATTPROJ_B), P(MT_T_LN2_W), P(MT_T_LN2_B), n,
                                           C));
    const float *ln2 = mt_unit_tp_gather(m, ba->b[GB_LN2], m->gs.gathered);
    mt_unit_linear_fwd(m, U, MT_T_FC_W, fc, ba->b[GB_FCH], ln2, NULL, N, C, 4 * C / tp);
    /* c_proj's bf16 input kept for its backward: GELU writes it, and the fp32 output is not needed */
    uint16_t *gelu16 = mt_unit_linear_input16(m, U, MT_T_FCPROJ_W, fc, ba->b[GB_FCH_GELU], N, 4 * C / tp);
    MT_TIMED(m->prof, MT_PROF_GELU,
             op_bias_gelu_forward(m->be, ba->b[GB_FCH], gelu16 ? NULL : ba->b[GB_FCH_GELU], gelu16, P(MT_T_FC_B), N,
                                  4 * C / tp));
    mt_unit_linear_fwd(m, U, MT_T_FCPROJ_W, fc, tmp, ba->b[GB_FCH_GELU], bias_in_gemm ? P(MT_T_FCPROJ_B) : NULL, N, 4 * C / tp, C);
    mt_unit_tp_scatter(m, tmp);
    if (bias_after) MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_add_bias_rows(m->be, tmp, P(MT_T_FCPROJ_B), n, C));
    apply_dropout(m, fc, (uint32_t)layer, MT_DROPOUT_MLP_RESID, tmp);
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE,
             op_residual_add(m->be, ba->b[GB_RES3], ba->b[GB_RES2], tmp, drop ? NULL : P(MT_T_FCPROJ_B), n, C));
#undef P
}

static double output_forward(mt_model *m, const mt_fwd_ctx *fc, float dlogits_scale) {
    (void)fc;
    mt_acts *a = &m->acts;
    const mt_model_config *cfg = &m->cfg;
    int L = cfg->n_layer, n = mt_unit_resid_n(m), C = cfg->n_embd;
    int wu, wk;
    const mt_tensor *wt = mt_unit_output_weight(m, -1, &wu, &wk); /* lm_head.weight: wte */
    MT_TIMED(m->prof, MT_PROF_LAYERNORM,
             op_layernorm_forward(m->be, a->head[GH_LNF], a->head[GH_LNF_MEAN], a->head[GH_LNF_RSTD],
                                  a->blocks[L - 1].b[GB_RES3], mt_model_tensor_data(m, L + 1, MT_T_LNF_W),
                                  mt_model_tensor_data(m, L + 1, MT_T_LNF_B), n, C));
    return mt_unit_logits_loss(m, a->head[GH_LNF], mt_model_tensor_data(m, wu, wk), (int)wt->shape[0], dlogits_scale);
}

static void output_backward(mt_model *m, const mt_fwd_ctx *fc) {
    (void)fc;
    mt_acts *a = &m->acts;
    const mt_model_config *cfg = &m->cfg;
    int L = cfg->n_layer, n = mt_unit_resid_n(m), C = cfg->n_embd;
    int wu, wk;
    const mt_tensor *wt = mt_unit_output_weight(m, -1, &wu, &wk); /* lm_head.weight: wte */
    mt_unit_logits_backward(m, a->head[GH_LNF], mt_model_tensor_data(m, wu, wk), mt_model_tensor_grad(m, wu, wk),
                            (int)wt->shape[0], m->grad_fresh[wu] ? MT_SET_DW : 0);
    double t0 = mt_prof_begin(m->prof);
    op_zero_bytes(m->be, m->gs.dresid, (size_t)n * C * sizeof(float));
    op_layernorm_backward(m->be, m->gs.dresid, mt_model_tensor_grad_or_sink(m, L + 1, MT_T_LNF_W),
                          mt_model_tensor_grad_or_sink(m, L + 1, MT_T_LNF_B), m->gs.dln, a->blocks[L - 1].b[GB_RES3],
                          mt_model_tensor_data(m, L + 1, MT_T_LNF_W), a->head[GH_LNF_MEAN], a->head[GH_LNF_RSTD], n, C);
    mt_prof_end(m->prof, MT_PROF_LAYERNORM, t0);
}

static void block_recompute(mt_model *m, int layer, const mt_fwd_ctx *fc) {
    /* full: rerun the block into the shared buffers (its kept output, res3,
     * is rewritten with the same values); selective: the attention core. */
    if (m->recompute == MT_RECOMPUTE_FULL) block_forward(m, layer, fc);
    else if (m->recompute == MT_RECOMPUTE_SELECTIVE) attention_core_forward(m, layer, fc);
}

/* A row-parallel layer's backward: its input gradient and weight gradient
 * need the output gradient of all N rows (gathered under sequence
 * parallelism); its replicated bias takes the rows held here (under
 * sequence parallelism a partial sum, completed by mt_model_tp_reduce_grads). */
static void row_parallel_backward(mt_model *m, int u, int wk, const mt_fwd_ctx *fc, float *dinp, float *dbias,
                                  const float *dbranch, const float *inp, int IC, int C, int flags) {
    int N = m->acts.B * m->acts.T;
    if (!mt_tp_sp(m->tp)) {
        mt_unit_linear_bwd(m, u, wk, fc, dinp, dbias, dbranch, inp, N, IC, C, flags);
        return;
    }
    const float *dfull = mt_unit_tp_gather(m, dbranch, m->gs.gathered);
    mt_unit_linear_bwd(m, u, wk, fc, dinp, NULL, dfull, inp, N, IC, C, flags);
    if (dbias) mt_unit_linear_backward(m, NULL, NULL, dbias, dbranch, NULL, NULL, mt_unit_resid_n(m), IC, C, 0);
}

static void block_backward(mt_model *m, int layer, const mt_fwd_ctx *fc) {
    mt_acts *a = &m->acts;
    mt_grad_scratch *gs = &m->gs;
    const mt_model_config *cfg = &m->cfg;
    const int U = 1 + layer;
    mt_block_acts *ba = &a->blocks[layer];
    int B = a->B, T = a->T, N = B * T, n = mt_unit_resid_n(m), C = cfg->n_embd, NH = cfg->n_head, tp = m->layout.tp;
    const float *x = block_input(m, layer);
    int dwf = m->grad_fresh[1 + layer] ? MT_SET_DW : 0; /* the four matrices' gradients (grad_by_one_gemm) */
#define P(i) mt_model_tensor_data(m, U, i)
#define G(i) mt_model_tensor_grad_or_sink(m, U, i)
#define GB(i) mt_model_tensor_grad(m, U, i) /* a bias: NULL (skipped) when frozen */
    /* MLP branch: dresid holds dL/dres3; it is the branch's gradient itself
     * unless dropout scales a copy. */
    const float *dbranch = branch_grad(m, fc, (uint32_t)layer, MT_DROPOUT_MLP_RESID);
    row_parallel_backward(m, U, MT_T_FCPROJ_W, fc, gs->f[GS_DFCH], GB(MT_T_FCPROJ_B), dbranch, ba->b[GB_FCH_GELU],
                          4 * C / tp, C, dwf);
    MT_TIMED(m->prof, MT_PROF_GELU,
             op_gelu_bias_backward(m->be, gs->f[GS_DFCH], G(MT_T_FC_B), ba->b[GB_FCH], gs->f[GS_DFCH], N, 4 * C / tp));
    const float *ln2 = mt_unit_tp_gather(m, ba->b[GB_LN2], gs->gathered); /* sequence parallelism: gathered again */
    mt_unit_linear_bwd(m, U, MT_T_FC_W, fc, gs->dln, NULL, gs->f[GS_DFCH], ln2, N, C, 4 * C / tp, dwf);
    mt_unit_tp_scatter(m, gs->dln);
    MT_TIMED(m->prof, MT_PROF_LAYERNORM,
             op_layernorm_backward(m->be, gs->dresid, G(MT_T_LN2_W), G(MT_T_LN2_B), gs->dln, ba->b[GB_RES2],
                                   P(MT_T_LN2_W), ba->b[GB_LN2_MEAN], ba->b[GB_LN2_RSTD], n, C));
    /* Attention branch: dresid now holds dL/dres2. */
    dbranch = branch_grad(m, fc, (uint32_t)layer, MT_DROPOUT_ATTN_RESID);
    row_parallel_backward(m, U, MT_T_ATTPROJ_W, fc, gs->f[GS_DATTY], GB(MT_T_ATTPROJ_B), dbranch, ba->b[GB_ATTY], C / tp,
                          C, dwf);
    int NHl = NH / tp;
    mt_attn_dropout ad = {make_dropout(m, fc, (uint32_t)layer, MT_DROPOUT_ATTN_PROBS), a->sample_ids,
                          m->layout.tp_rank * NHl, a->packed ? a->doc_start : NULL};
    if (m->cp)
        MT_TIMED(m->prof, MT_PROF_ATTENTION,
                 mt_cp_attention_backward(m->be, m->cp, gs->f[GS_DQKV], gs->f[GS_DATTY], ba->b[GB_QKV], ba->b[GB_ATTY],
                                            ba->b[GB_ATT_LSE], B, T / 2, NHl, NHl, C / NH, &ad, gs->attn_scratch));
    else
        MT_TIMED(m->prof, MT_PROF_ATTENTION, op_attention_backward(m->be, gs->f[GS_DQKV], gs->f[GS_DATTY], ba->b[GB_QKV], ba->b[GB_ATTY], ba->b[GB_ATT_LSE], B, T, NHl,
                                                       C / NH, &ad, gs->attn_scratch));
    const float *ln1 = mt_unit_tp_gather(m, ba->b[GB_LN1], gs->gathered);
    mt_unit_linear_bwd(m, U, MT_T_QKV_W, fc, gs->dln, GB(MT_T_QKV_B), gs->f[GS_DQKV], ln1, N, C, 3 * C / tp, dwf);
    mt_unit_tp_scatter(m, gs->dln);
    MT_TIMED(m->prof, MT_PROF_LAYERNORM,
             op_layernorm_backward(m->be, gs->dresid, G(MT_T_LN1_W), G(MT_T_LN1_B), gs->dln, x, P(MT_T_LN1_W),
                                   ba->b[GB_LN1_MEAN], ba->b[GB_LN1_RSTD], n, C));
#undef P
#undef G
#undef GB
}

static void input_backward(mt_model *m, const mt_fwd_ctx *fc) {
    mt_acts *a = &m->acts;
    const mt_model_config *cfg = &m->cfg;
    const mt_unit_layout *u = &m->layout.units[0];
    if (!m->layout.units[0].numel) return; /* a frozen embedding: nothing before it to feed */
    /* one of the two frozen: its gradient goes to the sink */
    float *dwte = mt_model_tensor_grad_or_sink(m, 0, MT_T_WTE), *dwpe = mt_model_tensor_grad_or_sink(m, 0, MT_T_WPE);
    apply_dropout(m, fc, EMBED_LAYER_ID, MT_DROPOUT_EMBED, m->gs.dresid);
    const int at = mt_unit_positions_at(m);
    if (m->layout.tp == 1) {
        MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_embed_backward(m->be, dwte, at ? NULL : dwpe, m->gs.dresid, a->tokens,
                                                                 a->B, a->T, cfg->n_embd, 0));
        if (at)
            MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_positions_backward_at(m->be, dwpe, m->gs.dresid, a->pos, a->B * a->T, cfg->n_embd));
        return;
    }
    /* Every rank's vocabulary rows take the gradient of all N rows; wpe's
     * gradient from all rows is then complete on every rank. */
    const float *dfull = mt_unit_tp_gather(m, m->gs.dresid, m->gs.gathered);
    int Vl = (int)mt_unit_tensor(u, MT_T_WTE)->shape[0];
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_embed_shard_backward(m->be, dwte, at ? NULL : dwpe, dfull,
                                                       a->tokens, m->layout.tp_rank * Vl, Vl, a->B, a->T, cfg->n_embd));
    if (at)
        MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_positions_backward_at(m->be, dwpe, dfull, a->pos, a->B * a->T, cfg->n_embd));
}


/* ---- the family table ---- */

/* Each block buffer's row width: the residual stream's C (or 1: a
 * statistic) on its rows, or this rank's heads / MLP columns on all N rows;
 * and the recompute modes under which every block keeps its own. */
static const mt_act_buf block_bufs[GB_COUNT] = {
    [GB_LN1] = {"ln1", MT_OWN(1, 1, 0), MT_ACT_GEMM_INPUT},
    [GB_LN1_MEAN] = {"ln1 mean", MT_OWN(1, 1, 0), MT_ACT_KEEP},
    [GB_LN1_RSTD] = {"ln1 rstd", MT_OWN(1, 1, 0), MT_ACT_KEEP},
    [GB_QKV] = {"qkv", MT_OWN(1, 1, 0), MT_ACT_LOSSY},                  /* attention's backward */
    [GB_ATTY] = {"attention output", MT_OWN(1, 0, 0), MT_ACT_LOSSY},    /* c_proj's input and attention's backward */
    [GB_ATT_LSE] = {"attention lse", MT_OWN(1, 0, 0), MT_ACT_KEEP},
    [GB_RES2] = {"residual 2", MT_OWN(1, 1, 0), MT_ACT_LOSSY},          /* ln2's backward */
    [GB_LN2] = {"ln2", MT_OWN(1, 1, 0), MT_ACT_GEMM_INPUT},
    [GB_LN2_MEAN] = {"ln2 mean", MT_OWN(1, 1, 0), MT_ACT_KEEP},
    [GB_LN2_RSTD] = {"ln2 rstd", MT_OWN(1, 1, 0), MT_ACT_KEEP},
    [GB_FCH] = {"fc", MT_OWN(1, 1, 0), MT_ACT_LOSSY},                   /* GELU's backward */
    [GB_FCH_GELU] = {"gelu", MT_OWN(1, 1, 0), MT_ACT_GEMM_INPUT},
    [GB_RES3] = {"residual 3", MT_OWN(1, 1, 1), MT_ACT_KEEP},           /* the block output: the next block's input */
};

static size_t block_buf_floats(const mt_model *m, int i, size_t N) {
    size_t C = (size_t)m->cfg.n_embd, NH = (size_t)m->cfg.n_head, tp = (size_t)m->layout.tp;
    size_t n = mt_tp_sp(m->tp) ? N / tp : N; /* residual-stream rows held here */
    switch (i) {
    case GB_LN1_MEAN: case GB_LN1_RSTD: case GB_LN2_MEAN: case GB_LN2_RSTD: return n;
    case GB_QKV: return N * 3 * C / tp;
    case GB_ATTY: return N * C / tp;
    case GB_ATT_LSE: return N * NH / tp;
    case GB_FCH: case GB_FCH_GELU: return N * 4 * C / tp;
    default: return n * C;
    }
}

/* {compress-activations} int8: one scale per residual-stream row, per head (qkv: each of a head's q, k, v;
 * the attention output), per 4C/heads MLP columns -- groups no tp cut splits (tp divides the heads). */
static size_t block_buf_group(const mt_model *m, int i) {
    size_t C = (size_t)m->cfg.n_embd, NH = (size_t)m->cfg.n_head;
    switch (i) {
    case GB_QKV: case GB_ATTY: return C / NH;
    case GB_FCH: case GB_FCH_GELU: return 4 * C / NH;
    default: return C;
    }
}

static const mt_act_buf head_bufs[GH_COUNT] = {
    [GH_LNF] = {"lnf", 0, MT_ACT_KEEP}, [GH_LNF_MEAN] = {"lnf mean", 0, MT_ACT_KEEP}, [GH_LNF_RSTD] = {"lnf rstd", 0, MT_ACT_KEEP}};

static size_t head_buf_floats(const mt_model *m, int i, size_t N) {
    size_t n = mt_tp_sp(m->tp) ? N / (size_t)m->layout.tp : N;
    return i == GH_LNF ? n * (size_t)m->cfg.n_embd : n;
}

static void scratch_floats(const mt_model *m, size_t N, size_t out[MT_FAMILY_SCRATCH]) {
    size_t C = (size_t)m->cfg.n_embd, tp = (size_t)m->layout.tp;
    out[GS_DATTY] = N * C / tp;
    out[GS_DQKV] = N * 3 * C / tp;
    out[GS_DFCH] = N * 4 * C / tp;
}

static void gemm_extents(const mt_model *m, int own_output, size_t *wmax, size_t *wnum) {
    size_t C = (size_t)m->cfg.n_embd, tp = (size_t)m->layout.tp;
    *wmax = 4 * C / tp > C ? 4 * C / tp : C;
    *wnum = 4 * C * C / tp;
    if (own_output) {
        size_t vl = (size_t)mt_model_vocab_rows(&m->cfg, (int)tp) / tp;
        *wmax = vl > *wmax ? vl : *wmax;
        *wnum = vl * C > *wnum ? vl * C : *wnum;
    }
}

/* 6N + 12 L C T, N without the position table (the whole model under tp). */
static double flops_per_token(const mt_model_config *cfg, const mt_layout *l, int T) {
    double n = (double)(l->gtotal_params + l->gtotal_frozen) - (double)mt_unit_tensor(&l->units[0], MT_T_WPE)->gnumel;
    return 6.0 * n - 2.0 * mt_layout_frozen_matrix_params(l) + 12.0 * cfg->n_layer * (double)cfg->n_embd * (double)T;
}

size_t mt_gpt2_decode_cache_floats(const mt_model_config *cfg);
void mt_gpt2_decode_step(struct mt_decoder *d, int32_t token);

const mt_family mt_family_gpt2 = {
    .name = "gpt2",
    .position_table = 1,
    .tp_check = mt_gpt2_tp_check,
    .build_layout = mt_gpt2_build_layout,
    .n_block_bufs = GB_COUNT,
    .block_bufs = block_bufs,
    .block_out = GB_RES3,
    .block_buf_floats = block_buf_floats,
    .block_buf_group = block_buf_group,
    .n_head_bufs = GH_COUNT,
    .head_bufs = head_bufs,
    .head_park = GH_LNF,
    .head_buf_floats = head_buf_floats,
    .scratch_floats = scratch_floats,
    .gemm_extents = gemm_extents,
    .input_forward = input_forward,
    .block_forward = block_forward,
    .output_forward = output_forward,
    .output_backward = output_backward,
    .block_recompute = block_recompute,
    .block_backward = block_backward,
    .input_backward = input_backward,
    .flops_per_token = flops_per_token,
    .decode_cache_floats = mt_gpt2_decode_cache_floats,
    .hf_name = mt_gpt2_hf_name,
    .hf_config_write = mt_gpt2_hf_config_write,
    .hf_config_read = mt_gpt2_hf_config_read,
    .decode_step = mt_gpt2_decode_step,
    .lora_targets = "c_attn",
    .peft_module_prefix = "transformer.",
    .peft_fan_in_fan_out = 1,
    .ia3_feedforward = "mlp.c_proj",
    .ia3_targets = "c_attn,mlp.c_proj",
    .hf_model_types = "gpt2",
    .hf_ignored = ".attn.bias,.attn.masked_bias,lm_head.weight", /* attention-mask buffers; the tied head */
    .preset_names = "gpt2,gpt2-medium,gpt2-large,gpt2-xl",
    .preset = mt_gpt2_preset,
    .config_validate = mt_gpt2_config_validate,
    .plan_block_matrix_flops = mt_gpt2_plan_block_matrix_flops,
    .plan_act_floats = mt_gpt2_plan_act_floats,
};
