/* GPT-2's decode step (models/decode.h): one row through every block with
 * the keys and values of earlier positions cached per layer. */
#include "models/decode.h"
#include "models/gpt2/gpt2.h"
#include "ops/ops.h"
#include <math.h>
#include <string.h>

/* Cache and row scratch, carved from mt_decoder.cache in this order. */
size_t mt_gpt2_decode_cache_floats(const mt_model_config *cfg) {
    size_t C = (size_t)cfg->n_embd, T = (size_t)cfg->seq_len, L = (size_t)cfg->n_layer;
    return 2 * L * T * C + 15 * C + T + 2;
}

void mt_gpt2_decode_step(mt_decoder *d, int32_t token) {
    const mt_model_config *cfg = &d->cfg;
    int C = cfg->n_embd, NH = cfg->n_head, HS = C / NH, T = cfg->seq_len, t = d->pos;
    size_t LTC = (size_t)cfg->n_layer * T * C;
    float *kcache = d->cache, *vcache = kcache + LTC, *x = vcache + LTC, *ln = x + C, *qkv = ln + C, *att = qkv + 3 * C,
          *tmp = att + C, *fc = tmp + C, *fcg = fc + 4 * C, *scores = fcg + 4 * C, *mean = scores + T, *rstd = mean + 1;
    const mt_unit_layout *eu = &d->l->units[0];
    const float *wte = d->params[0] + eu->t[MT_T_WTE].offset, *wpe = d->params[0] + eu->t[MT_T_WPE].offset;
    op_embed_forward(d->be, x, &token, wte, wpe, 1, 1, C, t);
    for (int l = 0; l < cfg->n_layer; l++) {
        const mt_unit_layout *u = &d->l->units[1 + l];
        const float *p = d->params[1 + l];
#define P(i) (p + u->t[i].offset)
        float *kc = kcache + (size_t)l * T * C, *vc = vcache + (size_t)l * T * C;
        op_layernorm_forward(d->be, ln, mean, rstd, x, P(MT_T_LN1_W), P(MT_T_LN1_B), 1, C);
        op_matmul_forward(d->be, qkv, ln, P(MT_T_QKV_W), P(MT_T_QKV_B), 1, C, 3 * C);
        op_copy(d->be, kc + (size_t)t * C, qkv + C, (size_t)C);
        op_copy(d->be, vc + (size_t)t * C, qkv + 2 * C, (size_t)C);
        for (int h = 0; h < NH; h++)
            op_attention_decode(d->be, qkv + h * HS, kc + h * HS, vc + h * HS, (size_t)C, t, HS, scores, att + h * HS);
        op_matmul_forward(d->be, tmp, att, P(MT_T_ATTPROJ_W), P(MT_T_ATTPROJ_B), 1, C, C);
        for (int c = 0; c < C; c++) x[c] += tmp[c];
        op_layernorm_forward(d->be, ln, mean, rstd, x, P(MT_T_LN2_W), P(MT_T_LN2_B), 1, C);
        op_matmul_forward(d->be, fc, ln, P(MT_T_FC_W), P(MT_T_FC_B), 1, C, 4 * C);
        op_gelu_forward(d->be, fcg, fc, (size_t)4 * C);
        op_matmul_forward(d->be, tmp, fcg, P(MT_T_FCPROJ_W), P(MT_T_FCPROJ_B), 1, 4 * C, C);
        for (int c = 0; c < C; c++) x[c] += tmp[c];
#undef P
    }
    const mt_unit_layout *hu = &d->l->units[cfg->n_layer + 1];
    const float *hp = d->params[cfg->n_layer + 1];
    op_layernorm_forward(d->be, ln, mean, rstd, x, hp + hu->t[MT_T_LNF_W].offset, hp + hu->t[MT_T_LNF_B].offset, 1, C);
    op_matmul_forward(d->be, d->logits, ln, wte, NULL, 1, C, cfg->padded_vocab);
}
