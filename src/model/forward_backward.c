/* Forward and backward of the GPT-2 units on one microbatch.
 *   embed:  x0 = dropout(wte[tok] + wpe[pos])
 *   block:  r2 = x + dropout(proj(attn(ln1(x))));  r3 = r2 + dropout(mlp(ln2(r2)))
 *   head:   loss = xent(ln_f(x) . wte^T)   (output head tied to wte)
 * Dropout masks are regenerated in backward from global coordinates
 * (core/philox.h), so no mask is stored. */
#include "model/model.h"
#include "ops/ops.h"
#include <string.h>

#define EMBED_LAYER_ID 0xFFFu

/* Times one kernel call into the model's profile category (no-op when
 * m->prof is NULL). */
#define TIMED(cat, call)                                  \
    do {                                                  \
        double t0_ = mt_prof_begin(m->prof);              \
        call;                                             \
        mt_prof_end(m->prof, cat, t0_);                   \
    } while (0)

/* Linear layers through the profile: GEMM time and FLOPs (2 per multiply-add). */
static void linear_forward(mt_model *m, float *out, const float *inp, const float *w, const float *bias, int N,
                           int C, int OC) {
    TIMED(MT_PROF_GEMM, op_matmul_forward(out, inp, w, bias, N, C, OC));
    mt_prof_add_gemm_flops(m->prof, 2.0 * N * C * OC);
}

static void linear_backward(mt_model *m, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                            const float *w, int N, int C, int OC, int accumulate_dinp) {
    TIMED(MT_PROF_GEMM, op_matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC, accumulate_dinp));
    mt_prof_add_gemm_flops(m->prof, 2.0 * N * C * OC * ((dinp != NULL) + (dw != NULL)));
}

static int dropout_on(const mt_model *m, const mt_fwd_ctx *fc) {
    return fc->training && m->layout.cfg.dropout > 0.0f;
}

/* The dropout of one site; p = 0 (off) outside training or without --dropout. */
static mt_dropout make_dropout(const mt_model *m, const mt_fwd_ctx *fc, uint32_t layer, uint32_t site) {
    mt_dropout d = {dropout_on(m, fc) ? m->layout.cfg.dropout : 0.0f, m->seed, fc->step, layer, site};
    return d;
}

/* x[b,t,:] *= keep/(1-p) for every row; rows are (sample_ids[b], position t). */
static void dropout_rows(float *x, const mt_dropout *d, const uint64_t *sample_ids, int B, int T, int C) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < B * T; r++) {
        float s[64];
        int b = r / T, t = r % T;
        float *row = x + (size_t)r * C;
        for (int c0 = 0; c0 < C; c0 += 64) {
            int n = C - c0 < 64 ? C - c0 : 64;
            mt_dropout_block_scales(s, d, sample_ids[b], (uint32_t)t, 0, (uint32_t)c0 / 4, (n + 3) / 4);
            for (int j = 0; j < n; j++) row[c0 + j] *= s[j];
        }
    }
}

/* Applies the (layer, site) dropout to the [B*T, C] rows of x, if it is on. */
static void apply_dropout(const mt_model *m, const mt_fwd_ctx *fc, uint32_t layer, uint32_t site, float *x, int C) {
    mt_dropout d = make_dropout(m, fc, layer, site);
    if (d.p > 0.0f) TIMED(MT_PROF_ELEMENTWISE, dropout_rows(x, &d, m->acts.sample_ids, m->acts.B, m->acts.T, C));
}

/* The gradient of a residual branch's output given dL/d(residual) in
 * gs.dresid: dresid itself without dropout, else a dropout-scaled copy. */
static const float *branch_grad(mt_model *m, const mt_fwd_ctx *fc, uint32_t layer, uint32_t site) {
    if (!dropout_on(m, fc)) return m->gs.dresid;
    size_t n = (size_t)m->acts.B * m->acts.T * m->layout.cfg.n_embd;
    TIMED(MT_PROF_ELEMENTWISE, memcpy(m->gs.dtmp, m->gs.dresid, n * sizeof(float)));
    apply_dropout(m, fc, layer, site, m->gs.dtmp, m->layout.cfg.n_embd);
    return m->gs.dtmp;
}

void mt_embed_forward(mt_model *m, const mt_fwd_ctx *fc) {
    mt_acts *a = &m->acts;
    const mt_gpt_config *cfg = &m->layout.cfg;
    const mt_unit_layout *u = &m->layout.units[0];
    const float *p = m->params[0];
    TIMED(MT_PROF_ELEMENTWISE, op_embed_forward(a->encoded, a->tokens, p + u->t[MT_T_WTE].offset,
                                                p + u->t[MT_T_WPE].offset, a->B, a->T, cfg->n_embd, 0));
    apply_dropout(m, fc, EMBED_LAYER_ID, MT_DROPOUT_EMBED, a->encoded, cfg->n_embd);
}

static const float *block_input(const mt_model *m, int layer) {
    return layer == 0 ? m->acts.encoded : m->acts.blocks[layer - 1].res3;
}

/* The attention core of a block: forward, and again before backward under
 * selective recomputation. */
static void attention_core_forward(mt_model *m, int layer, const mt_fwd_ctx *fc) {
    mt_acts *a = &m->acts;
    mt_block_acts *ba = &a->blocks[layer];
    int C = m->layout.cfg.n_embd, NH = m->layout.cfg.n_head;
    mt_attn_dropout ad = {make_dropout(m, fc, (uint32_t)layer, MT_DROPOUT_ATTN_PROBS), a->sample_ids, 0};
    TIMED(MT_PROF_ATTENTION,
          op_attention_forward(ba->atty, ba->att_lse, ba->qkv, a->B, a->T, NH, C / NH, &ad, m->gs.attn_scratch));
}

void mt_block_forward(mt_model *m, int layer, const mt_fwd_ctx *fc) {
    mt_acts *a = &m->acts;
    const mt_gpt_config *cfg = &m->layout.cfg;
    const mt_unit_layout *u = &m->layout.units[1 + layer];
    const float *p = m->params[1 + layer];
    mt_block_acts *ba = &a->blocks[layer];
    int B = a->B, T = a->T, N = B * T, C = cfg->n_embd;
    const float *x = block_input(m, layer);
    float *tmp = m->gs.dtmp; /* branch output before dropout; scratch is free during forward */
    /* Without dropout the projections' biases join the fused residual kernels
     * (res = x + (branch + bias)); with it they stay in the GEMM, since
     * dropout applies to branch + bias. The fc bias always joins the GELU. */
    const int drop = dropout_on(m, fc);
#define P(i) (p + u->t[i].offset)
    TIMED(MT_PROF_LAYERNORM,
          op_layernorm_forward(ba->ln1, ba->ln1_mean, ba->ln1_rstd, x, P(MT_T_LN1_W), P(MT_T_LN1_B), N, C));
    linear_forward(m, ba->qkv, ba->ln1, P(MT_T_QKV_W), P(MT_T_QKV_B), N, C, 3 * C);
    attention_core_forward(m, layer, fc);
    linear_forward(m, tmp, ba->atty, P(MT_T_ATTPROJ_W), drop ? P(MT_T_ATTPROJ_B) : NULL, N, C, C);
    apply_dropout(m, fc, (uint32_t)layer, MT_DROPOUT_ATTN_RESID, tmp, C);
    TIMED(MT_PROF_LAYERNORM,
          op_residual_layernorm_forward(ba->res2, ba->ln2, ba->ln2_mean, ba->ln2_rstd, x, tmp,
                                        drop ? NULL : P(MT_T_ATTPROJ_B), P(MT_T_LN2_W), P(MT_T_LN2_B), N, C));
    linear_forward(m, ba->fch, ba->ln2, P(MT_T_FC_W), NULL, N, C, 4 * C);
    TIMED(MT_PROF_GELU, op_bias_gelu_forward(ba->fch, ba->fch_gelu, P(MT_T_FC_B), N, 4 * C));
    linear_forward(m, tmp, ba->fch_gelu, P(MT_T_FCPROJ_W), drop ? P(MT_T_FCPROJ_B) : NULL, N, 4 * C, C);
    apply_dropout(m, fc, (uint32_t)layer, MT_DROPOUT_MLP_RESID, tmp, C);
    TIMED(MT_PROF_ELEMENTWISE, op_residual_add(ba->res3, ba->res2, tmp, drop ? NULL : P(MT_T_FCPROJ_B), N, C));
#undef P
}

double mt_head_forward(mt_model *m, const mt_fwd_ctx *fc, float dlogits_scale) {
    (void)fc;
    mt_acts *a = &m->acts;
    const mt_gpt_config *cfg = &m->layout.cfg;
    int L = cfg->n_layer, N = a->B * a->T, C = cfg->n_embd;
    const mt_unit_layout *hu = &m->layout.units[L + 1];
    const float *hp = m->params[L + 1];
    const float *wte = m->params[0] + m->layout.units[0].t[MT_T_WTE].offset;
    TIMED(MT_PROF_LAYERNORM, op_layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, a->blocks[L - 1].res3,
                                                  hp + hu->t[MT_T_LNF_W].offset, hp + hu->t[MT_T_LNF_B].offset, N, C));
    linear_forward(m, a->logits, a->lnf, wte, NULL, N, C, cfg->padded_vocab);
    TIMED(MT_PROF_SOFTMAX_XENT, op_softmax_xent(a->logits, a->losses, a->targets, N, cfg->vocab_size,
                                                cfg->padded_vocab, dlogits_scale));
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += a->losses[i];
    return sum;
}

void mt_head_backward(mt_model *m, const mt_fwd_ctx *fc) {
    (void)fc;
    mt_acts *a = &m->acts;
    const mt_gpt_config *cfg = &m->layout.cfg;
    int L = cfg->n_layer, N = a->B * a->T, C = cfg->n_embd;
    const mt_unit_layout *hu = &m->layout.units[L + 1];
    const float *hp = m->params[L + 1];
    float *hg = m->grads[L + 1];
    const float *wte = m->params[0] + m->layout.units[0].t[MT_T_WTE].offset;
    float *dwte = m->grads[0] + m->layout.units[0].t[MT_T_WTE].offset;
    /* acts.logits holds dL/dlogits (written by the fused softmax + xent). */
    linear_backward(m, m->gs.dln, dwte, NULL, a->logits, a->lnf, wte, N, C, cfg->padded_vocab, 0);
    double t0 = mt_prof_begin(m->prof);
    memset(m->gs.dresid, 0, (size_t)N * C * sizeof(float));
    op_layernorm_backward(m->gs.dresid, hg + hu->t[MT_T_LNF_W].offset, hg + hu->t[MT_T_LNF_B].offset, m->gs.dln,
                          a->blocks[L - 1].res3, hp + hu->t[MT_T_LNF_W].offset, a->lnf_mean, a->lnf_rstd, N, C);
    mt_prof_end(m->prof, MT_PROF_LAYERNORM, t0);
}

void mt_block_recompute(mt_model *m, int layer, const mt_fwd_ctx *fc) {
    /* full: rerun the block into the shared buffers (its kept output, res3,
     * is rewritten with the same values); selective: the attention core. */
    if (m->recompute == MT_RECOMPUTE_FULL) mt_block_forward(m, layer, fc);
    else if (m->recompute == MT_RECOMPUTE_SELECTIVE) attention_core_forward(m, layer, fc);
}

void mt_block_backward(mt_model *m, int layer, const mt_fwd_ctx *fc) {
    mt_acts *a = &m->acts;
    mt_grad_scratch *gs = &m->gs;
    const mt_gpt_config *cfg = &m->layout.cfg;
    const mt_unit_layout *u = &m->layout.units[1 + layer];
    const float *p = m->params[1 + layer];
    float *g = m->grads[1 + layer];
    mt_block_acts *ba = &a->blocks[layer];
    int B = a->B, T = a->T, N = B * T, C = cfg->n_embd, NH = cfg->n_head;
    const float *x = block_input(m, layer);
#define P(i) (p + u->t[i].offset)
#define G(i) (g + u->t[i].offset)
    /* MLP branch: dresid holds dL/dres3; it is the branch's gradient itself
     * unless dropout scales a copy. */
    const float *dbranch = branch_grad(m, fc, (uint32_t)layer, MT_DROPOUT_MLP_RESID);
    linear_backward(m, gs->dfch, G(MT_T_FCPROJ_W), G(MT_T_FCPROJ_B), dbranch, ba->fch_gelu, P(MT_T_FCPROJ_W), N,
                    4 * C, C, 0);
    TIMED(MT_PROF_GELU, op_gelu_bias_backward(gs->dfch, G(MT_T_FC_B), ba->fch, gs->dfch, N, 4 * C));
    linear_backward(m, gs->dln, G(MT_T_FC_W), NULL, gs->dfch, ba->ln2, P(MT_T_FC_W), N, C, 4 * C, 0);
    TIMED(MT_PROF_LAYERNORM, op_layernorm_backward(gs->dresid, G(MT_T_LN2_W), G(MT_T_LN2_B), gs->dln, ba->res2,
                                                   P(MT_T_LN2_W), ba->ln2_mean, ba->ln2_rstd, N, C));
    /* Attention branch: dresid now holds dL/dres2. */
    dbranch = branch_grad(m, fc, (uint32_t)layer, MT_DROPOUT_ATTN_RESID);
    linear_backward(m, gs->datty, G(MT_T_ATTPROJ_W), G(MT_T_ATTPROJ_B), dbranch, ba->atty, P(MT_T_ATTPROJ_W), N, C,
                    C, 0);
    mt_attn_dropout ad = {make_dropout(m, fc, (uint32_t)layer, MT_DROPOUT_ATTN_PROBS), a->sample_ids, 0};
    TIMED(MT_PROF_ATTENTION, op_attention_backward(gs->dqkv, gs->datty, ba->qkv, ba->atty, ba->att_lse, B, T, NH,
                                                   C / NH, &ad, gs->attn_scratch));
    linear_backward(m, gs->dln, G(MT_T_QKV_W), G(MT_T_QKV_B), gs->dqkv, ba->ln1, P(MT_T_QKV_W), N, C, 3 * C, 0);
    TIMED(MT_PROF_LAYERNORM, op_layernorm_backward(gs->dresid, G(MT_T_LN1_W), G(MT_T_LN1_B), gs->dln, x,
                                                   P(MT_T_LN1_W), ba->ln1_mean, ba->ln1_rstd, N, C));
#undef P
#undef G
}

void mt_embed_backward(mt_model *m, const mt_fwd_ctx *fc) {
    mt_acts *a = &m->acts;
    const mt_gpt_config *cfg = &m->layout.cfg;
    const mt_unit_layout *u = &m->layout.units[0];
    float *g = m->grads[0];
    apply_dropout(m, fc, EMBED_LAYER_ID, MT_DROPOUT_EMBED, m->gs.dresid, cfg->n_embd);
    TIMED(MT_PROF_ELEMENTWISE, op_embed_backward(g + u->t[MT_T_WTE].offset, g + u->t[MT_T_WPE].offset, m->gs.dresid,
                                                 a->tokens, a->B, a->T, cfg->n_embd, 0));
}

double mt_model_forward(mt_model *m, const mt_fwd_ctx *fc, float dlogits_scale) {
    mt_embed_forward(m, fc);
    for (int l = 0; l < m->layout.cfg.n_layer; l++) mt_block_forward(m, l, fc);
    return mt_head_forward(m, fc, dlogits_scale);
}

void mt_model_backward(mt_model *m, const mt_fwd_ctx *fc) {
    mt_head_backward(m, fc);
    for (int l = m->layout.cfg.n_layer - 1; l >= 0; l--) mt_block_backward(m, l, fc);
    mt_embed_backward(m, fc);
}
