/* Forward and backward of the Falcon units on one microbatch (the family
 * table is at the end).
 *   input:  x0 = word_embeddings[tok]
 *   block:  a  = ln_attn(x), b = ln_mlp(x) (one norm: b = a)
 *           q|k|v = planar(query_key_value(a)), rotated by RoPE
 *           out = x + (dense_4h_to_h(gelu(dense_h_to_4h(b))) + dense(attn(q, k, v)))
 *   output: loss = xent(ln_f(x) . lm_head^T)   (lm_head may be word_embeddings)
 * Tensor parallelism: query_key_value (whole kv groups; with more ranks
 * than kv heads a group's ranks compute all its query heads and take their
 * share, the planar copy's zeros keeping the others' gradient out) and
 * dense_h_to_4h column-parallel, dense and dense_4h_to_h row-parallel with their two
 * partial outputs summed before the one reduction of the block (the
 * branches are parallel), the embedding and head vocabulary-parallel. */
#include "models/falcon/falcon.h"
#include "models/model.h"
#include "models/unit_ops.h"
#include "ops/ops.h"
#include "ops/positions.h"
#include <omp.h>
#include <stdlib.h>
#include <string.h>

enum { FB_X1, FB_MEAN1, FB_RSTD1, FB_X2, FB_MEAN2, FB_RSTD2, FB_QKV, FB_ATTY, FB_LSE, FB_PRE, FB_ACT, FB_OUT, FB_COUNT };
enum { FH_XF, FH_MEANF, FH_RSTDF, FH_COUNT };
/* scratch: the grouped q|k|v (the GEMM's rows, forward and backward) and the gradients */
enum { FS_DATTY, FS_DQKV, FS_QKVG, FS_DPRE, FS_COS, FS_SIN };

/* Local (this tp rank's) widths: nkv groups of G query heads in the GEMM's
 * grouped rows (width gw), of which query heads [q0, q0 + nq) are this
 * rank's (all G unless tp > kv heads: a group replicated on G / nq ranks);
 * nh query heads and the planar q|k|v width qkv. */
typedef struct {
    int C, hd, nh, nkv, G, q0, nq, gw, qkv, F;
} dims;

static dims local_dims(const mt_model *m) {
    const mt_model_config *c = &m->cfg;
    int tp = m->layout.tp, kv = mt_model_kv_heads(c), rep = tp > kv ? tp / kv : 1;
    dims d = {c->n_embd, mt_model_head_dim(c), c->n_head / tp, tp > kv ? 1 : kv / tp, c->n_head / kv, 0, 0, 0, 0,
              c->ffn_dim / tp};
    d.nq = d.G / rep;
    d.q0 = (m->layout.tp_rank % rep) * d.nq;
    d.gw = d.nkv * (d.G + 2) * d.hd;
    d.qkv = (d.nh + 2 * d.nkv) * d.hd;
    return d;
}

static const float *block_input(const mt_model *m, int layer) {
    return layer == 0 ? m->acts.encoded : m->acts.blocks[layer - 1].b[FB_OUT];
}

static void input_forward(mt_model *m, const mt_fwd_ctx *fc) {
    (void)fc;
    mt_acts *a = &m->acts;
    const mt_tensor *t = mt_unit_tensor(&m->layout.units[0], MT_F_EMBED);
    const float *w = mt_model_tensor_data(m, 0, MT_F_EMBED);
    int C = m->cfg.n_embd, N = a->B * a->T, Vl = (int)t->shape[0], v0 = m->layout.tp_rank * Vl;
    float *part = m->layout.tp == 1 ? a->encoded : m->gs.dtmp; /* a masked lookup, summed over tp */
    if (m->precision == MT_FP32)
        MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_embed_shard_forward(m->be, part, a->tokens, w, v0, Vl, N, C));
    else
        MT_TIMED(
            m->prof, MT_PROF_ELEMENTWISE,
            op_embed_shard_forward_16(m->be, part, a->tokens, m->precision, mt_model_weight16(m, w), v0, Vl, N, C));
    if (m->layout.tp > 1) {
        mt_unit_tp_scatter(m, part);
        MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_copy(m->be, a->encoded, part, mt_model_resid_floats(m)));
    }
}

static void input_backward(mt_model *m, const mt_fwd_ctx *fc) {
    (void)fc;
    mt_acts *a = &m->acts;
    const mt_tensor *t = mt_unit_tensor(&m->layout.units[0], MT_F_EMBED);
    float *dw = mt_model_tensor_grad(m, 0, MT_F_EMBED);
    if (!dw) return;
    int Vl = (int)t->shape[0];
    const float *dfull = mt_unit_tp_gather(m, m->gs.dresid, m->gs.gathered);
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE,
             op_embed_shard_backward(m->be, dw, NULL, dfull, a->tokens, m->layout.tp_rank * Vl, Vl, a->B, a->T,
                                     m->cfg.n_embd));
}

/* q and k of every planar row rotated by their positions (inverse: the backward). */
static void rope(mt_model *m, float *qkv, const dims *d, int inverse) {
    int N = m->acts.B * m->acts.T;
    const float *cs = m->gs.f[FS_COS], *sn = m->gs.f[FS_SIN];
    if (m->acts.packed) /* packed samples: each document's positions start at 0 */
        MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, {
            op_rope_apply_at(m->be, qkv, N, d->nh, d->hd, (size_t)d->qkv, cs, sn, inverse, m->acts.pos);
            op_rope_apply_at(m->be, qkv + (size_t)d->nh * d->hd, N, d->nkv, d->hd, (size_t)d->qkv, cs, sn, inverse,
                             m->acts.pos);
        });
    else
        MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, {
            op_rope_apply(m->be, qkv, N, m->acts.T, d->nh, d->hd, (size_t)d->qkv, cs, sn, inverse);
            op_rope_apply(m->be, qkv + (size_t)d->nh * d->hd, N, m->acts.T, d->nkv, d->hd, (size_t)d->qkv, cs, sn,
                          inverse);
        });
}

static void attention_core_forward(mt_model *m, int layer) {
    mt_acts *a = &m->acts;
    mt_block_acts *ba = &a->blocks[layer];
    dims d = local_dims(m);
    mt_attn_dropout none = {{0.0f, m->seed, 0, (uint32_t)layer, MT_DROPOUT_ATTN_PROBS}, a->sample_ids, 0,
                            a->packed ? a->doc_start : NULL};
    MT_TIMED(m->prof, MT_PROF_ATTENTION,
             op_attention_forward_gqa(m->be, ba->b[FB_ATTY], ba->b[FB_LSE], ba->b[FB_QKV], a->B, a->T, d.nh, d.nkv,
                                      d.hd, &none, m->gs.attn_scratch));
}

static void block_forward(mt_model *m, int layer, const mt_fwd_ctx *fc) {
    mt_acts *a = &m->acts;
    const int U = 1 + layer;
    mt_block_acts *ba = &a->blocks[layer];
    mt_falcon_block_index ix = mt_falcon_block_tensors(&m->cfg);
    dims d = local_dims(m);
    int N = a->B * a->T, n = mt_unit_resid_n(m), C = d.C, two = ix.ln_mlp_w >= 0;
    const float *x = block_input(m, layer);
    float *grouped = m->gs.f[FS_QKVG], *attn_out = m->gs.dtmp, *mlp_out = m->gs.dln; /* free during forward */
#define P(i) mt_model_tensor_data(m, U, i)
#define B(i) ((i) >= 0 ? P(i) : NULL)
#define RB(i) ((i) >= 0 && m->layout.tp_rank == 0 ? P(i) : NULL) /* a row-parallel bias: in one rank's partial sum */
    MT_TIMED(m->prof, MT_PROF_LAYERNORM,
             op_layernorm_forward(m->be, ba->b[FB_X1], ba->b[FB_MEAN1], ba->b[FB_RSTD1], x, P(ix.ln_attn_w),
                                  P(ix.ln_attn_b), n, C));
    const float *x1 = mt_unit_tp_gather(m, ba->b[FB_X1], m->gs.gathered);
    mt_unit_linear_fwd(m, U, ix.qkv, fc, grouped, x1, B(ix.qkv_b), N, C, d.gw);
    if (two) {
        MT_TIMED(m->prof, MT_PROF_LAYERNORM,
                 op_layernorm_forward(m->be, ba->b[FB_X2], ba->b[FB_MEAN2], ba->b[FB_RSTD2], x, P(ix.ln_mlp_w),
                                      P(ix.ln_mlp_b), n, C));
        x1 = mt_unit_tp_gather(m, ba->b[FB_X2], m->gs.gathered);
    }
    mt_unit_linear_fwd(m, U, ix.h_to_4h, fc, ba->b[FB_PRE], x1, B(ix.h_to_4h_b), N, C, d.F);
    MT_TIMED(m->prof, MT_PROF_GELU, op_gelu_erf_forward(m->be, ba->b[FB_ACT], ba->b[FB_PRE], (size_t)N * d.F));
    mt_unit_linear_fwd(m, U, ix.four_h_to_h, fc, mlp_out, ba->b[FB_ACT], RB(ix.four_h_to_h_b), N, d.F, C);
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE,
             op_qkv_grouped_to_planar(m->be, ba->b[FB_QKV], grouped, N, d.nkv, d.G, d.q0, d.nq, d.hd));
    rope(m, ba->b[FB_QKV], &d, 0);
    attention_core_forward(m, layer);
    mt_unit_linear_fwd(m, U, ix.dense, fc, attn_out, ba->b[FB_ATTY], RB(ix.dense_b), N, d.nh * d.hd, C);
    /* HF: mlp_output += attention_output; the tp ranks' partial sums reduced once */
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_add(m->be, attn_out, mlp_out, attn_out, (size_t)N * C));
    mt_unit_tp_scatter(m, attn_out);
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_residual_add(m->be, ba->b[FB_OUT], x, attn_out, NULL, n, C));
#undef P
#undef B
#undef RB
}

static void block_recompute(mt_model *m, int layer, const mt_fwd_ctx *fc) {
    /* full: rerun the block into the shared buffers; selective: the attention core */
    if (m->recompute == MT_RECOMPUTE_FULL) block_forward(m, layer, fc);
    else if (m->recompute == MT_RECOMPUTE_SELECTIVE) attention_core_forward(m, layer);
}

/* A row-parallel layer's backward: its input and weight gradients need the
 * output gradient of all N rows (gathered under sequence parallelism); its
 * replicated bias takes the rows held here (under sequence parallelism a
 * partial sum, completed by the tp reduction of replicated gradients). */
static void row_parallel_backward(mt_model *m, int u, int wk, const mt_fwd_ctx *fc, float *dinp, float *dbias,
                                  const float *dbranch, const float *inp, int IC, int C, int flags) {
    int N = m->acts.B * m->acts.T;
    const float *dfull = mt_unit_tp_gather(m, dbranch, m->gs.gathered);
    mt_unit_linear_bwd(m, u, wk, fc, dinp, mt_tp_sp(m->tp) ? NULL : dbias, dfull, inp, N, IC, C, flags);
    if (dbias && mt_tp_sp(m->tp))
        mt_unit_linear_backward(m, NULL, NULL, dbias, dbranch, NULL, NULL, mt_unit_resid_n(m), IC, C, 0);
}

static void block_backward(mt_model *m, int layer, const mt_fwd_ctx *fc) {
    mt_acts *a = &m->acts;
    mt_grad_scratch *gs = &m->gs;
    const int U = 1 + layer;
    mt_block_acts *ba = &a->blocks[layer];
    mt_falcon_block_index ix = mt_falcon_block_tensors(&m->cfg);
    dims d = local_dims(m);
    int N = a->B * a->T, n = mt_unit_resid_n(m), C = d.C, two = ix.ln_mlp_w >= 0;
    const float *x = block_input(m, layer);
    int dwf = m->grad_fresh[1 + layer] ? MT_SET_DW : 0;
#define P(i) mt_model_tensor_data(m, U, i)
#define G(i) mt_model_tensor_grad_or_sink(m, U, i)
#define GB(i) ((i) >= 0 ? mt_model_tensor_grad(m, U, i) : NULL) /* a bias: NULL when absent or frozen */
    /* dresid holds dL/dout, both branches' output gradient: both read it before a norm's backward adds to it */
    row_parallel_backward(m, U, ix.four_h_to_h, fc, gs->f[FS_DPRE], GB(ix.four_h_to_h_b), gs->dresid, ba->b[FB_ACT], d.F,
                          C, dwf);
    row_parallel_backward(m, U, ix.dense, fc, gs->f[FS_DATTY], GB(ix.dense_b), gs->dresid, ba->b[FB_ATTY], d.nh * d.hd,
                          C, dwf);
    /* MLP branch */
    MT_TIMED(m->prof, MT_PROF_GELU,
             op_gelu_erf_backward(m->be, gs->f[FS_DPRE], ba->b[FB_PRE], gs->f[FS_DPRE], (size_t)N * d.F));
    const float *xm = mt_unit_tp_gather(m, ba->b[two ? FB_X2 : FB_X1], gs->gathered);
    mt_unit_linear_bwd(m, U, ix.h_to_4h, fc, gs->dln, GB(ix.h_to_4h_b), gs->f[FS_DPRE], xm, N, C, d.F, dwf);
    if (two) {
        mt_unit_tp_scatter(m, gs->dln);
        MT_TIMED(m->prof, MT_PROF_LAYERNORM,
                 op_layernorm_backward(m->be, gs->dresid, G(ix.ln_mlp_w), G(ix.ln_mlp_b), gs->dln, x, P(ix.ln_mlp_w),
                                       ba->b[FB_MEAN2], ba->b[FB_RSTD2], n, C));
    }
    /* attention branch; with one norm its input gradient adds to the MLP's */
    mt_attn_dropout none = {{0.0f, m->seed, 0, (uint32_t)layer, MT_DROPOUT_ATTN_PROBS}, a->sample_ids, 0,
                            a->packed ? a->doc_start : NULL};
    MT_TIMED(m->prof, MT_PROF_ATTENTION,
             op_attention_backward_gqa(m->be, gs->f[FS_DQKV], gs->f[FS_DATTY], ba->b[FB_QKV], ba->b[FB_ATTY],
                                       ba->b[FB_LSE], a->B, a->T, d.nh, d.nkv, d.hd, &none, gs->attn_scratch));
    rope(m, gs->f[FS_DQKV], &d, 1);
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE,
             op_qkv_planar_to_grouped(m->be, gs->f[FS_QKVG], gs->f[FS_DQKV], N, d.nkv, d.G, d.q0, d.nq, d.hd));
    const float *x1 = mt_unit_tp_gather(m, ba->b[FB_X1], gs->gathered);
    mt_unit_linear_bwd(m, U, ix.qkv, fc, gs->dln, GB(ix.qkv_b), gs->f[FS_QKVG], x1, N, C, d.gw,
                       dwf | (two ? 0 : MT_ACC_DINP));
    mt_unit_tp_scatter(m, gs->dln);
    MT_TIMED(m->prof, MT_PROF_LAYERNORM,
             op_layernorm_backward(m->be, gs->dresid, G(ix.ln_attn_w), G(ix.ln_attn_b), gs->dln, x, P(ix.ln_attn_w),
                                   ba->b[FB_MEAN1], ba->b[FB_RSTD1], n, C));
#undef P
#undef G
#undef GB
}

/* The head's weight: its own lm_head (tensor 2 of the output unit), or the embedding it is tied to. */
static const mt_tensor *head_weight(const mt_model *m, int *unit, int *decl) { return mt_unit_output_weight(m, 2, unit, decl); }

static double output_forward(mt_model *m, const mt_fwd_ctx *fc, float dlogits_scale) {
    (void)fc;
    mt_acts *a = &m->acts;
    int H = m->layout.n_units - 1, L = m->cfg.n_layer, wu, wk;
    const mt_tensor *wt = head_weight(m, &wu, &wk);
    MT_TIMED(m->prof, MT_PROF_LAYERNORM,
             op_layernorm_forward(m->be, a->head[FH_XF], a->head[FH_MEANF], a->head[FH_RSTDF],
                                  a->blocks[L - 1].b[FB_OUT], mt_model_tensor_data(m, H, 0),
                                  mt_model_tensor_data(m, H, 1), mt_unit_resid_n(m), m->cfg.n_embd));
    return mt_unit_logits_loss(m, a->head[FH_XF], mt_model_tensor_data(m, wu, wk), (int)wt->shape[0], dlogits_scale);
}

static void output_backward(mt_model *m, const mt_fwd_ctx *fc) {
    (void)fc;
    mt_acts *a = &m->acts;
    int H = m->layout.n_units - 1, L = m->cfg.n_layer, n = mt_unit_resid_n(m), C = m->cfg.n_embd, wu, wk;
    const mt_tensor *wt = head_weight(m, &wu, &wk);
    mt_unit_logits_backward(m, a->head[FH_XF], mt_model_tensor_data(m, wu, wk), mt_model_tensor_grad(m, wu, wk),
                            (int)wt->shape[0], m->grad_fresh[wu] ? MT_SET_DW : 0);
    double t0 = mt_prof_begin(m->prof);
    op_zero(m->be, m->gs.dresid, (size_t)n * C);
    op_layernorm_backward(m->be, m->gs.dresid, mt_model_tensor_grad_or_sink(m, H, 0),
                          mt_model_tensor_grad_or_sink(m, H, 1), m->gs.dln, a->blocks[L - 1].b[FB_OUT],
                          mt_model_tensor_data(m, H, 0), a->head[FH_MEANF], a->head[FH_RSTDF], n, C);
    mt_prof_end(m->prof, MT_PROF_LAYERNORM, t0);
}

/* ---- the family table ---- */

static const mt_act_buf block_bufs[FB_COUNT] = {
    [FB_X1] = {"ln_attn", MT_OWN(1, 1, 0), MT_ACT_GEMM_INPUT}, /* read back only as q/k/v's (and, one norm, the MLP's) input */
    [FB_MEAN1] = {"ln_attn mean", MT_OWN(1, 1, 0), MT_ACT_KEEP},
    [FB_RSTD1] = {"ln_attn rstd", MT_OWN(1, 1, 0), MT_ACT_KEEP},
    [FB_X2] = {"ln_mlp", MT_OWN(1, 1, 0), MT_ACT_GEMM_INPUT},
    [FB_MEAN2] = {"ln_mlp mean", MT_OWN(1, 1, 0), MT_ACT_KEEP},
    [FB_RSTD2] = {"ln_mlp rstd", MT_OWN(1, 1, 0), MT_ACT_KEEP},
    [FB_QKV] = {"qkv (planar, rotated)", MT_OWN(1, 1, 0), MT_ACT_LOSSY}, /* attention's backward */
    [FB_ATTY] = {"attention output", MT_OWN(1, 0, 0), MT_ACT_LOSSY}, /* dense's input and attention's backward */
    [FB_LSE] = {"attention lse", MT_OWN(1, 0, 0), MT_ACT_KEEP},
    [FB_PRE] = {"dense_h_to_4h", MT_OWN(1, 1, 0), MT_ACT_LOSSY}, /* GELU's backward */
    [FB_ACT] = {"gelu", MT_OWN(1, 1, 0), MT_ACT_GEMM_INPUT}, /* dense_4h_to_h's input */
    [FB_OUT] = {"block output", MT_OWN(1, 1, 1), MT_ACT_KEEP}, /* the block output: the next block's input */
};

static size_t block_buf_floats(const mt_model *m, int i, size_t N) {
    dims d = local_dims(m);
    size_t n = mt_tp_sp(m->tp) ? N / (size_t)m->layout.tp : N;
    int two = m->cfg.block_norms == 2;
    switch (i) {
    case FB_MEAN1: case FB_RSTD1: return n;
    case FB_MEAN2: case FB_RSTD2: return two ? n : 0;
    case FB_X2: return two ? n * (size_t)d.C : 0;
    case FB_QKV: return N * (size_t)d.qkv;
    case FB_ATTY: return N * (size_t)(d.nh * d.hd);
    case FB_LSE: return N * (size_t)d.nh;
    case FB_PRE: case FB_ACT: return N * (size_t)d.F;
    default: return n * (size_t)d.C;
    }
}

/* {compress-activations} int8: one scale per head of q/k/v and the attention
 * output, per MLP columns of a head's width (a tp cut never splits either) */
static size_t block_buf_group(const mt_model *m, int i) {
    dims d = local_dims(m);
    const mt_model_config *c = &m->cfg;
    switch (i) {
    case FB_QKV: case FB_ATTY: return (size_t)d.hd;
    case FB_PRE: case FB_ACT: return c->ffn_dim % c->n_head ? (size_t)d.F : (size_t)(c->ffn_dim / c->n_head);
    default: return (size_t)d.C;
    }
}

static const mt_act_buf head_bufs[FH_COUNT] = {
    [FH_XF] = {"ln_f", 0, MT_ACT_KEEP}, [FH_MEANF] = {"ln_f mean", 0, MT_ACT_KEEP}, [FH_RSTDF] = {"ln_f rstd", 0, MT_ACT_KEEP}};

static size_t head_buf_floats(const mt_model *m, int i, size_t N) {
    size_t n = mt_tp_sp(m->tp) ? N / (size_t)m->layout.tp : N;
    return i == FH_XF ? n * (size_t)m->cfg.n_embd : n;
}

static void scratch_floats(const mt_model *m, size_t N, size_t out[MT_FAMILY_SCRATCH]) {
    dims d = local_dims(m);
    out[FS_DATTY] = N * (size_t)(d.nh * d.hd);
    out[FS_DQKV] = N * (size_t)d.qkv;
    out[FS_QKVG] = N * (size_t)d.gw;
    out[FS_DPRE] = N * (size_t)d.F;
    out[FS_COS] = out[FS_SIN] = (size_t)m->acts.T * (size_t)(d.hd / 2);
}

/* The RoPE tables of the context's positions. */
static void init_model(mt_model *m) {
    const mt_model_config *c = &m->cfg;
    int hd = mt_model_head_dim(c);
    mt_rope_scaling none = {.type = MT_ROPE_NONE};
    float *inv = mt_xcalloc((size_t)hd / 2, sizeof(float), "rope frequencies");
    op_rope_inv_freq(m->be, inv, hd, c->rope_theta, &none);
    op_rope_table(m->be, m->gs.f[FS_COS], m->gs.f[FS_SIN], inv, m->acts.T, hd);
    free(inv);
}

static size_t attention_scratch_floats(const mt_model *m, int B, int T) {
    dims d = local_dims(m);
    return op_attention_scratch_floats_gqa(m->be, B, T, d.nh, d.nkv, d.hd);
}

static void gemm_extents(const mt_model *m, int own_output, size_t *wmax, size_t *wnum) {
    dims d = local_dims(m);
    size_t C = (size_t)d.C, qkv = (size_t)d.gw, F = (size_t)d.F, o = (size_t)(d.nh * d.hd);
    *wmax = C;
    size_t widths[3] = {qkv, F, o};
    for (int i = 0; i < 3; i++) *wmax = widths[i] > *wmax ? widths[i] : *wmax;
    *wnum = qkv * C > F * C ? qkv * C : F * C;
    if (o * C > *wnum) *wnum = o * C;
    if (own_output) {
        size_t vl = (size_t)mt_model_vocab_rows(&m->cfg, m->layout.tp) / (size_t)m->layout.tp;
        *wmax = vl > *wmax ? vl : *wmax;
        *wnum = vl * C > *wnum ? vl * C : *wnum;
    }
}

/* 6 x (matrix parameters without the embedding lookup, with the head) +
 * attention's 12 L T (n_head hd), as Llama's count. */
static double flops_per_token(const mt_model_config *cfg, const mt_layout *l, int T) {
    double emb = (double)mt_unit_tensor(&l->units[0], MT_F_EMBED)->gnumel;
    double n = (double)(l->gtotal_params + l->gtotal_frozen) - emb;
    if (cfg->tie_embeddings) n += emb;
    return 6.0 * n - 2.0 * mt_layout_frozen_matrix_params(l) + 12.0 * cfg->n_layer * (double)cfg->n_head * mt_model_head_dim(cfg) * (double)T;
}

const mt_family mt_family_falcon = {
    .name = "falcon",
    .tp_check = mt_falcon_tp_check,
    .build_layout = mt_falcon_build_layout,
    .n_block_bufs = FB_COUNT,
    .block_bufs = block_bufs,
    .block_out = FB_OUT,
    .block_buf_floats = block_buf_floats,
    .block_buf_group = block_buf_group,
    .n_head_bufs = FH_COUNT,
    .head_bufs = head_bufs,
    .head_park = FH_XF,
    .head_buf_floats = head_buf_floats,
    .scratch_floats = scratch_floats,
    .gemm_extents = gemm_extents,
    .attention_scratch_floats = attention_scratch_floats,
    .init_model = init_model,
    .input_forward = input_forward,
    .block_forward = block_forward,
    .output_forward = output_forward,
    .output_backward = output_backward,
    .block_recompute = block_recompute,
    .block_backward = block_backward,
    .input_backward = input_backward,
    .flops_per_token = flops_per_token,
    .decode_cache_floats = mt_falcon_decode_cache_floats,
    .decode_step = mt_falcon_decode_step,
    .hf_name = mt_falcon_hf_name,
    .hf_config_write = mt_falcon_hf_config_write,
    .hf_config_read = mt_falcon_hf_config_read,
    .lora_targets = "query_key_value",
    .peft_module_prefix = "",
    .ia3_feedforward = "dense_4h_to_h",
    .ia3_targets = "query_key_value,dense_4h_to_h",
    .hf_model_types = "falcon,RefinedWeb,RefinedWebModel",
    .hf_ignored = "",
    .preset_names = "falcon-tiny,falcon-tiny-gqa,falcon-7b,falcon-40b",
    .preset = mt_falcon_preset,
    .config_defaults = mt_falcon_config_defaults,
    .config_validate = mt_falcon_config_validate,
    .config_write_json = mt_falcon_config_write_json,
    .config_read_json = mt_falcon_config_read_json,
    .plan_act_floats = mt_falcon_plan_act_floats,
};
