/* Llama's decode step (models/decode.h): one row through every layer; the
 * cache holds the rotated keys and the values of the n_kv_head kv heads
 * only, and query head h attends with kv head h * n_kv / n_head. */
#include "models/decode.h"
#include "models/llama/llama.h"
#include "ops/moe.h"
#include "ops/ops.h"
#include <math.h>
#include <string.h>

typedef struct {
    float *k, *v, *x, *xn, *qkv, *att, *tmp, *gu, *h, *scores, *rstd, *cos, *sin;
    float *probs, *topw, *route, *y; /* MoE: probabilities and log-sum-exp, weights, chosen experts and slots
                                        (int32), the chosen experts' outputs [K, C]; empty when dense */
    float *sgu, *sh, *sy; /* the shared expert's gate|up, SwiGLU, and output [C] then its gate; empty without */
    float *qkn;           /* QK-norm: q|k before the norms and their rstd; empty without */
} bufs;

/* Cache and row scratch, carved from mt_decoder.cache in this order. */
static size_t carve(const mt_model_config *c, float *base, bufs *b) {
    size_t C = (size_t)c->n_embd, T = (size_t)c->seq_len, L = (size_t)c->n_layer, hd = (size_t)mt_model_head_dim(c);
    size_t KW = (size_t)mt_model_kv_heads(c) * hd, QW = (size_t)c->n_head * hd;
    size_t F = (size_t)(c->num_experts ? c->moe_ffn_dim : c->ffn_dim), E = (size_t)c->num_experts,
           K = E ? (size_t)c->moe_top_k : 0, Fs = E ? (size_t)c->moe_shared_ffn_dim : 0;
    size_t sizes[21] = {L * T * KW, L * T * KW, C, C, QW + 2 * KW, QW, C, 2 * F, F, T, 1, T * hd / 2, T * hd / 2,
                        E ? E + 1 : 0, K, 2 * K, K * C, 2 * Fs, Fs, Fs ? C + 1 : 0, c->qk_norm ? QW + KW + 2 : 0};
    float **slots[21] = {&b->k, &b->v, &b->x, &b->xn, &b->qkv, &b->att, &b->tmp, &b->gu, &b->h, &b->scores, &b->rstd,
                         &b->cos, &b->sin, &b->probs, &b->topw, &b->route, &b->y, &b->sgu, &b->sh, &b->sy, &b->qkn};
    size_t off = 0;
    for (int i = 0; i < 21; i++) {
        if (base) *slots[i] = base + off;
        off += sizes[i];
    }
    return off;
}

size_t mt_llama_decode_cache_floats(const mt_model_config *cfg) {
    bufs b;
    return carve(cfg, NULL, &b);
}

void mt_llama_decode_step(mt_decoder *d, int32_t token) {
    const mt_model_config *c = &d->cfg;
    bufs b;
    carve(c, d->cache, &b);
    int C = c->n_embd, T = c->seq_len, t = d->pos, hd = mt_model_head_dim(c), NH = c->n_head, KV = mt_model_kv_heads(c);
    int QW = NH * hd, KW = KV * hd, F = c->num_experts ? c->moe_ffn_dim : c->ffn_dim, qkvw = QW + 2 * KW;
    if (t == 0) { /* the rotation tables of every position, once */
        mt_rope_scaling s = mt_llama_rope_scaling(c, T); /* dynamic: the frequencies of the model's context */
        op_rope_tables(d->be, b.cos, b.sin, T, hd, c->rope_theta, &s);
    }
    const float *cs = b.cos + (size_t)t * (hd / 2), *sn = b.sin + (size_t)t * (hd / 2); /* this position's row */
    mt_llama_block_index ix = mt_llama_block_tensors(c);
    const float *emb = d->params[0] + d->l->units[0].t[MT_L_EMBED].offset;
    op_copy(d->be, b.x, emb + (size_t)token * C, (size_t)C);
    for (int l = 0; l < c->n_layer; l++) {
        const mt_unit_layout *u = &d->l->units[1 + l];
        const float *p = d->params[1 + l];
#define P(i) (p + u->t[i].offset)
        float *kc = b.k + (size_t)l * T * KW, *vc = b.v + (size_t)l * T * KW;
        op_rmsnorm_forward(d->be, b.xn, b.rstd, b.x, P(ix.in_norm), 1, C, c->norm_eps);
        op_matmul_forward(d->be, b.qkv, b.xn, P(ix.q), ix.qb >= 0 ? P(ix.qb) : NULL, 1, C, qkvw);
        if (ix.qn >= 0) { /* QK-norm (OLMoE), before RoPE: the training forward's arithmetic */
            op_qk_norm_sumsq(d->be, b.qkn + QW + KW, b.qkv, 1, QW, KW, (size_t)qkvw);
            op_qk_norm_apply(d->be, b.qkv, b.qkn, b.qkn + QW + KW, P(ix.qn), P(ix.kn), 1, QW, KW, (size_t)qkvw,
                             (float)QW, (float)KW, c->norm_eps);
        }
        op_rope_apply(d->be, b.qkv, 1, 1, NH, hd, (size_t)qkvw, cs, sn, 0);
        op_rope_apply(d->be, b.qkv + QW, 1, 1, KV, hd, (size_t)qkvw, cs, sn, 0);
        op_copy(d->be, kc + (size_t)t * KW, b.qkv + QW, (size_t)KW);
        op_copy(d->be, vc + (size_t)t * KW, b.qkv + QW + KW, (size_t)KW);
        for (int h = 0; h < NH; h++) { /* query head h reads kv head h * KV / NH */
            size_t kh = (size_t)(h / (NH / KV)) * hd;
            op_attention_decode(d->be, b.qkv + (size_t)h * hd, kc + kh, vc + kh, (size_t)KW, t, hd, b.scores,
                                b.att + (size_t)h * hd);
        }
        op_matmul_forward(d->be, b.tmp, b.att, P(ix.o), NULL, 1, QW, C);
        op_accumulate(d->be, b.x, b.tmp, (size_t)C);
        op_rmsnorm_forward(d->be, b.xn, b.rstd, b.x, P(ix.post_norm), 1, C, c->norm_eps);
        if (c->num_experts) { /* the k chosen experts (dropless: capacity applies to training microbatches) */
            int E = c->num_experts, K = c->moe_top_k;
            int32_t *topk = (int32_t *)b.route, *slot = topk + K;
            op_matmul_forward(d->be, b.probs, b.xn, P(ix.router), NULL, 1, C, E);
            op_moe_route_forward(d->be, b.probs, b.probs + E, topk, b.topw, 1, E, K, (mt_moe_router)c->moe_router,
                                 c->moe_norm_topk);
            int32_t chosen[MT_MOE_MAX_EXPERTS], slots[MT_MOE_MAX_EXPERTS]; /* host: which weights the GEMMs read */
            op_copy_to_host(d->be, chosen, topk, (size_t)K * sizeof(int32_t));
            for (int k = 0; k < K; k++) {
                int e = chosen[k];
                op_matmul_forward(d->be, b.gu, b.xn, P(ix.expert + 3 * e), NULL, 1, C, 2 * F);
                op_swiglu_forward(d->be, b.h, b.gu, 1, F);
                op_matmul_forward(d->be, b.y + (size_t)k * C, b.h, P(ix.expert + 3 * e + 2), NULL, 1, F, C);
                slots[k] = k;
            }
            op_copy_from_host(d->be, slot, slots, (size_t)K * sizeof(int32_t));
            op_moe_combine_forward(d->be, b.tmp, b.y, b.topw, slot, 1, K, C);
            if (ix.shared >= 0) { /* the shared expert, scaled by its gate */
                int Fs = c->moe_shared_ffn_dim;
                op_matmul_forward(d->be, b.sgu, b.xn, P(ix.shared), NULL, 1, C, 2 * Fs);
                op_swiglu_forward(d->be, b.sh, b.sgu, 1, Fs);
                op_matmul_forward(d->be, b.sy, b.sh, P(ix.shared_down), NULL, 1, Fs, C);
                op_matmul_forward(d->be, b.sy + C, b.xn, P(ix.shared_gate), NULL, 1, C, 1);
                op_moe_shared_gate_forward(d->be, b.tmp, b.sy, b.sy + C, 1, C);
            }
        } else {
            op_matmul_forward(d->be, b.gu, b.xn, P(ix.gate), NULL, 1, C, 2 * F);
            op_swiglu_forward(d->be, b.h, b.gu, 1, F);
            op_matmul_forward(d->be, b.tmp, b.h, P(ix.down), NULL, 1, F, C);
        }
        op_accumulate(d->be, b.x, b.tmp, (size_t)C);
#undef P
    }
    int H = c->n_layer + 1;
    const mt_unit_layout *hu = &d->l->units[H];
    op_rmsnorm_forward(d->be, b.xn, b.rstd, b.x, d->params[H] + hu->t[0].offset, 1, C, c->norm_eps);
    const float *w = hu->n_shared ? emb : d->params[H] + hu->t[1].offset;
    op_matmul_forward(d->be, d->logits, b.xn, w, NULL, 1, C, c->padded_vocab);
}
