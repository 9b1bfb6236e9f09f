/* Falcon's decode step (models/decode.h): one row through every layer; the
 * cache holds the rotated keys and the values of the n_kv_head kv heads
 * only, and query head h attends with kv head h / G. */
#include "models/decode.h"
#include "models/falcon/falcon.h"
#include "ops/ops.h"
#include <string.h>

typedef struct {
    float *k, *v, *x, *xa, *xm, *grouped, *qkv, *att, *tmp, *pre, *act, *scores, *stats, *inv, *cos, *sin;
} bufs;

/* Cache and row scratch, carved from mt_decoder.cache in this order. */
static size_t carve(const mt_model_config *c, float *base, bufs *b) {
    size_t C = (size_t)c->n_embd, T = (size_t)c->seq_len, L = (size_t)c->n_layer, hd = (size_t)mt_model_head_dim(c);
    size_t KW = (size_t)mt_model_kv_heads(c) * hd, QW = (size_t)c->n_head * hd, F = (size_t)c->ffn_dim;
    size_t sizes[16] = {L * T * KW, L * T * KW, C, C, C, QW + 2 * KW, QW + 2 * KW, QW, C, F, F, T, 4, hd / 2,
                        T * hd / 2, T * hd / 2};
    float **slots[16] = {&b->k, &b->v, &b->x, &b->xa, &b->xm, &b->grouped, &b->qkv, &b->att, &b->tmp, &b->pre,
                         &b->act, &b->scores, &b->stats, &b->inv, &b->cos, &b->sin};
    size_t off = 0;
    for (int i = 0; i < 16; i++) {
        if (base) *slots[i] = base + off;
        off += sizes[i];
    }
    return off;
}

size_t mt_falcon_decode_cache_floats(const mt_model_config *cfg) {
    bufs b;
    return carve(cfg, NULL, &b);
}

void mt_falcon_decode_step(mt_decoder *d, int32_t token) {
    const mt_model_config *c = &d->cfg;
    bufs b;
    carve(c, d->cache, &b);
    int C = c->n_embd, T = c->seq_len, t = d->pos, hd = mt_model_head_dim(c), NH = c->n_head, KV = mt_model_kv_heads(c);
    int QW = NH * hd, KW = KV * hd, F = c->ffn_dim, qkvw = QW + 2 * KW, G = NH / KV;
    if (t == 0) { /* the rotation tables of every position, once */
        mt_rope_scaling none = {.type = MT_ROPE_NONE};
        op_rope_inv_freq(d->be, b.inv, hd, c->rope_theta, &none);
        op_rope_table(d->be, b.cos, b.sin, b.inv, T, hd);
    }
    const float *cs = b.cos + (size_t)t * (hd / 2), *sn = b.sin + (size_t)t * (hd / 2);
    mt_falcon_block_index ix = mt_falcon_block_tensors(c);
    const float *emb = d->params[0] + d->l->units[0].t[MT_F_EMBED].offset;
    op_copy(d->be, b.x, emb + (size_t)token * C, (size_t)C);
    for (int l = 0; l < c->n_layer; l++) {
        const mt_unit_layout *u = &d->l->units[1 + l];
        const float *p = d->params[1 + l];
#define P(i) (p + u->t[i].offset)
#define B(i) ((i) >= 0 ? P(i) : NULL)
        float *kc = b.k + (size_t)l * T * KW, *vc = b.v + (size_t)l * T * KW;
        op_layernorm_forward(d->be, b.xa, b.stats, b.stats + 1, b.x, P(ix.ln_attn_w), P(ix.ln_attn_b), 1, C);
        const float *xm = b.xa;
        if (ix.ln_mlp_w >= 0) {
            op_layernorm_forward(d->be, b.xm, b.stats + 2, b.stats + 3, b.x, P(ix.ln_mlp_w), P(ix.ln_mlp_b), 1, C);
            xm = b.xm;
        }
        op_matmul_forward(d->be, b.grouped, b.xa, P(ix.qkv), B(ix.qkv_b), 1, C, qkvw);
        op_qkv_grouped_to_planar(d->be, b.qkv, b.grouped, 1, KV, G, 0, G, hd);
        op_rope_apply(d->be, b.qkv, 1, 1, NH, hd, (size_t)qkvw, cs, sn, 0);
        op_rope_apply(d->be, b.qkv + QW, 1, 1, KV, hd, (size_t)qkvw, cs, sn, 0);
        op_copy(d->be, kc + (size_t)t * KW, b.qkv + QW, (size_t)KW);
        op_copy(d->be, vc + (size_t)t * KW, b.qkv + QW + KW, (size_t)KW);
        for (int h = 0; h < NH; h++) {
            size_t kh = (size_t)(h / G) * hd;
            op_attention_decode(d->be, b.qkv + (size_t)h * hd, kc + kh, vc + kh, (size_t)KW, t, hd, b.scores,
                                b.att + (size_t)h * hd);
        }
        op_matmul_forward(d->be, b.tmp, b.att, P(ix.dense), B(ix.dense_b), 1, QW, C);
        op_matmul_forward(d->be, b.pre, xm, P(ix.h_to_4h), B(ix.h_to_4h_b), 1, C, F);
        op_gelu_erf_forward(d->be, b.act, b.pre, (size_t)F);
        op_matmul_forward(d->be, b.xa, b.act, P(ix.four_h_to_h), B(ix.four_h_to_h_b), 1, F, C); /* xa is free here */
        op_add(d->be, b.tmp, b.xa, b.tmp, (size_t)C); /* mlp + attention, then the residual */
        op_add(d->be, b.x, b.x, b.tmp, (size_t)C);
#undef P
#undef B
    }
    int H = c->n_layer + 1;
    const mt_unit_layout *hu = &d->l->units[H];
    op_layernorm_forward(d->be, b.xa, b.stats, b.stats + 1, b.x, d->params[H] + hu->t[0].offset,
                         d->params[H] + hu->t[1].offset, 1, C);
    const float *w = hu->n_shared ? emb : d->params[H] + hu->t[2].offset;
    op_matmul_forward(d->be, d->logits, b.xa, w, NULL, 1, C, c->padded_vocab);
}
