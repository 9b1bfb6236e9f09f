/* Falcon's unit layout and tensor-parallel constraints. */
#include "models/falcon/falcon.h"
#include <stdio.h>

int mt_falcon_tp_check(const mt_model_config *cfg, int tp, mt_error *err) {
    if (tp < 1) return mt_errorf(err, "{tp} must be >= 1, got %d", tp);
    if (cfg->n_head % tp)
        return mt_errorf(err, "{tp} %d does not divide the %d attention heads (each tp rank holds whole heads); "
                              "choose a tp that divides {heads}", tp, cfg->n_head);
    int kv = mt_model_kv_heads(cfg);
    if (tp <= kv ? kv % tp : tp % kv)
        return mt_errorf(err, "{tp} %d and the %d key/value heads: falcon's fused query_key_value is cut into whole "
                              "(query heads, key, value) groups, so tp must divide the kv heads or be a multiple of "
                              "them (each group then replicated on tp / kv ranks); choose such a tp", tp, kv);
    if (cfg->ffn_dim % tp)
        return mt_errorf(err, "{tp} %d does not divide the MLP width {ffn-dim} %d; choose a tp that divides it", tp,
                         cfg->ffn_dim);
    return 0;
}

mt_falcon_block_index mt_falcon_block_tensors(const mt_model_config *cfg) {
    int k = cfg->block_norms == 2 ? 4 : 2, b = cfg->linear_bias ? 1 : 0;
    mt_falcon_block_index x = {0, 1, -1, -1, k, -1, k + 1 + b, -1, k + 2 + 2 * b, -1, k + 3 + 3 * b, -1};
    if (cfg->block_norms == 2) x.ln_mlp_w = 2, x.ln_mlp_b = 3;
    if (b) x.qkv_b = x.qkv + 1, x.dense_b = x.dense + 1, x.h_to_4h_b = x.h_to_4h + 1, x.four_h_to_h_b = x.four_h_to_h + 1;
    return x;
}

void mt_falcon_build_layout(const mt_model_config *cfg, int tp, int tp_rank, mt_layout *out) {
    int L = cfg->n_layer;
    int64_t C = cfg->n_embd, hd = mt_model_head_dim(cfg), QW = (int64_t)cfg->n_head * hd,
            QKV = QW + 2 * (int64_t)mt_model_kv_heads(cfg) * hd, F = cfg->ffn_dim;
    const float std = 0.02f;
    int kv_rep = tp > mt_model_kv_heads(cfg) ? tp / mt_model_kv_heads(cfg) : 1;
    mt_layout_init(out, L + 2, tp, tp_rank);
    char name[MT_TENSOR_NAME_LEN];

    out->units[0].role = MT_UNIT_INPUT;
    mt_tensor *emb = mt_unit_add_tensor(out, 0, "transformer.word_embeddings.weight", mt_model_vocab_rows(cfg, tp), C, 2,
                                        1, std, MT_TP_ROWS);
    emb->init_rows = cfg->vocab_size;
    emb->ckpt_rows = cfg->padded_vocab;
    emb->read_16bit_only = 1;
    emb->grad_by_one_gemm = cfg->tie_embeddings; /* tied: the head's GEMM writes it before the lookup adds rows */

    for (int l = 0; l < L; l++) {
        int u = 1 + l;
        out->units[u].role = MT_UNIT_BLOCK;
        out->units[u].layer = l;
        out->units[u].sp_partial = 1;
#define T(suffix, rows, cols, nd, decay, sd, split) \
    (snprintf(name, sizeof name, "transformer.h.%d.%s", l, suffix), mt_unit_add_tensor(out, u, name, rows, cols, nd, decay, sd, split))
        if (cfg->block_norms == 2) {
            T("ln_attn.weight", C, 1, 1, 0, -1.0f, MT_TP_REPLICATED);
            T("ln_attn.bias", C, 1, 1, 0, 0.0f, MT_TP_REPLICATED);
            T("ln_mlp.weight", C, 1, 1, 0, -1.0f, MT_TP_REPLICATED);
            T("ln_mlp.bias", C, 1, 1, 0, 0.0f, MT_TP_REPLICATED);
        } else {
            T("input_layernorm.weight", C, 1, 1, 0, -1.0f, MT_TP_REPLICATED);
            T("input_layernorm.bias", C, 1, 1, 0, 0.0f, MT_TP_REPLICATED);
        }
        /* whole (q heads, k, v) groups per rank; tp > kv heads: each group on tp / kv consecutive ranks, which
           compute all its query heads, use their share and sum the gradient */
        /* a bias after each weight: column-parallel ones cut as their rows, row-parallel ones replicated
           (added once: by tp rank 0's partial output) */
        int bias = cfg->linear_bias;
        mt_tensor *mats[4];
        mats[0] = T("self_attention.query_key_value.weight", QKV, C, 2, 1, std, MT_TP_ROWS);
        mt_unit_set_tp_replicas(out, u, kv_rep);
        if (bias) {
            T("self_attention.query_key_value.bias", QKV, 1, 1, 0, 0.0f, MT_TP_ROWS);
            mt_unit_set_tp_replicas(out, u, kv_rep);
        }
        mats[1] = T("self_attention.dense.weight", C, QW, 2, 1, std, MT_TP_COLS);
        if (bias) T("self_attention.dense.bias", C, 1, 1, 0, 0.0f, MT_TP_REPLICATED);
        mats[2] = T("mlp.dense_h_to_4h.weight", F, C, 2, 1, std, MT_TP_ROWS);
        if (bias) T("mlp.dense_h_to_4h.bias", F, 1, 1, 0, 0.0f, MT_TP_ROWS);
        mats[3] = T("mlp.dense_4h_to_h.weight", C, F, 2, 1, std, MT_TP_COLS);
        if (bias) T("mlp.dense_4h_to_h.bias", C, 1, 1, 0, 0.0f, MT_TP_REPLICATED);
#undef T
        for (int i = 0; i < 4; i++) mats[i]->read_16bit_only = mats[i]->grad_by_one_gemm = 1;
    }
    int h = L + 1;
    out->units[h].role = MT_UNIT_OUTPUT;
    out->units[h].sp_partial = 1;
    mt_unit_add_tensor(out, h, "transformer.ln_f.weight", C, 1, 1, 0, -1.0f, MT_TP_REPLICATED);
    mt_unit_add_tensor(out, h, "transformer.ln_f.bias", C, 1, 1, 0, 0.0f, MT_TP_REPLICATED);
    if (cfg->tie_embeddings) {
        mt_unit_add_shared(out, h, "lm_head.weight", "transformer.word_embeddings.weight");
    } else {
        mt_tensor *head = mt_unit_add_tensor(out, h, "lm_head.weight", mt_model_vocab_rows(cfg, tp), C, 2, 1, std, MT_TP_ROWS);
        head->init_rows = cfg->vocab_size;
        head->ckpt_rows = cfg->padded_vocab;
        head->read_16bit_only = head->grad_by_one_gemm = 1;
    }
    mt_layout_finish(out);
}
