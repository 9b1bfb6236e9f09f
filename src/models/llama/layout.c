/* Llama's unit layout and tensor-parallel constraints. */
#include "models/llama/llama.h"
#include <stdio.h>

int mt_llama_tp_check(const mt_model_config *cfg, int tp, mt_error *err) {
    if (tp < 1) return mt_errorf(err, "{tp} must be >= 1, got %d", tp);
    if (cfg->n_head % tp)
        return mt_errorf(err, "{tp} %d does not divide the %d attention heads (each tp rank holds whole heads); "
                              "choose a tp that divides {heads}", tp, cfg->n_head);
    int kv = mt_model_kv_heads(cfg);
    if (tp <= kv ? kv % tp : tp % kv)
        return mt_errorf(err, "{tp} %d and the %d key/value heads: tp must divide the kv heads (each rank holds whole "
                              "kv heads) or be a multiple of them (each kv head is replicated on tp / kv ranks, as "
                              "Megatron does); choose such a tp", tp, kv);
    if (cfg->num_experts && cfg->moe_ffn_dim % tp)
        return mt_errorf(err, "{tp} %d does not divide the experts' width {moe-ffn-dim} %d (each expert is cut over tp "
                              "like the dense MLP); choose a tp that divides it", tp, cfg->moe_ffn_dim);
    if (cfg->num_experts && cfg->moe_shared_ffn_dim % tp)
        return mt_errorf(err, "{tp} %d does not divide the shared expert's width {moe-shared-ffn-dim} %d (it is cut over "
                              "tp like the dense MLP); choose a tp that divides it", tp, cfg->moe_shared_ffn_dim);
    if (!cfg->num_experts && cfg->ffn_dim % tp)
        return mt_errorf(err, "{tp} %d does not divide the MLP width {ffn-dim} %d; choose a tp that divides it", tp,
                         cfg->ffn_dim);
    return 0;
}

mt_llama_block_index mt_llama_block_tensors(const mt_model_config *cfg) {
    int qn = cfg->qkv_bias ? 7 : 4, b = (cfg->qkv_bias ? 3 : 0) + (cfg->qk_norm ? 2 : 0);
    mt_llama_block_index x = {MT_L_IN_NORM, MT_L_Q_W, MT_L_K_W, MT_L_V_W, -1, -1, -1, 4 + b, 5 + b, 6 + b, 7 + b, 8 + b,
                              -1, -1, -1, -1, -1, -1, -1};
    if (cfg->qk_norm) {
        x.qn = qn;
        x.kn = qn + 1;
    }
    if (cfg->num_experts) {
        x.gate = x.up = x.down = -1;
        x.router = 6 + b;
        x.expert = 7 + b;
        if (cfg->moe_shared_ffn_dim > 0) {
            x.shared = 7 + b;
            x.shared_down = 9 + b;
            x.shared_gate = 10 + b;
            x.expert = 11 + b;
        }
    }
    if (cfg->qkv_bias) {
        x.qb = MT_L_Q_B;
        x.kb = MT_L_K_B;
        x.vb = MT_L_V_B;
    }
    return x;
}

void mt_llama_build_layout(const mt_model_config *cfg, int tp, int tp_rank, mt_layout *out) {
    int L = cfg->n_layer;
    int64_t C = cfg->n_embd, hd = mt_model_head_dim(cfg), QW = (int64_t)cfg->n_head * hd,
            KW = (int64_t)mt_model_kv_heads(cfg) * hd, F = cfg->ffn_dim;
    const float std = 0.02f;
    int kv_rep = tp > mt_model_kv_heads(cfg) ? tp / mt_model_kv_heads(cfg) : 1;
    mt_layout_init(out, L + 2, tp, tp_rank);
    char name[MT_TENSOR_NAME_LEN];

    out->units[0].role = MT_UNIT_INPUT;
    mt_tensor *emb = mt_unit_add_tensor(out, 0, "model.embed_tokens.weight", mt_model_vocab_rows(cfg, tp), C, 2, 1, std, MT_TP_ROWS);
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
    (snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix), mt_unit_add_tensor(out, u, name, rows, cols, nd, decay, sd, split))
        T("input_layernorm.weight", C, 1, 1, 0, -1.0f, MT_TP_REPLICATED);
        /* the block's matrices by index: adding tensors may move the unit's tensor array (a pointer
           kept across the experts' tensors pointed into freed memory) */
#define IX(...) (T(__VA_ARGS__), out->units[u].n_tensors - 1)
        int mats[8];
        mats[0] = IX("self_attn.q_proj.weight", QW, C, 2, 1, std, MT_TP_ROWS);
        /* tp > kv heads: each kv head's rows on tp / kv consecutive ranks */
        mats[1] = IX("self_attn.k_proj.weight", KW, C, 2, 1, std, MT_TP_ROWS);
        mt_unit_set_tp_replicas(out, u, kv_rep);
        mats[2] = IX("self_attn.v_proj.weight", KW, C, 2, 1, std, MT_TP_ROWS);
        mt_unit_set_tp_replicas(out, u, kv_rep);
        if (cfg->qkv_bias) {
            T("self_attn.q_proj.bias", QW, 1, 1, 0, 0.0f, MT_TP_ROWS);
            T("self_attn.k_proj.bias", KW, 1, 1, 0, 0.0f, MT_TP_ROWS);
            mt_unit_set_tp_replicas(out, u, kv_rep);
            T("self_attn.v_proj.bias", KW, 1, 1, 0, 0.0f, MT_TP_ROWS);
            mt_unit_set_tp_replicas(out, u, kv_rep);
        }
        if (cfg->qk_norm) { /* OLMoE's, over the whole q and k: cut over tp with their heads (as the biases) */
            T("self_attn.q_norm.weight", QW, 1, 1, 0, -1.0f, MT_TP_ROWS);
            T("self_attn.k_norm.weight", KW, 1, 1, 0, -1.0f, MT_TP_ROWS);
            mt_unit_set_tp_replicas(out, u, kv_rep);
        }
        mats[3] = IX("self_attn.o_proj.weight", C, QW, 2, 1, std, MT_TP_COLS);
        T("post_attention_layernorm.weight", C, 1, 1, 0, -1.0f, MT_TP_REPLICATED);
        int n_mats = 6;
        if (cfg->num_experts) {
            /* Qwen-MoE / OLMoE names; each expert cut over tp like the dense MLP (gate|up by rows,
               down by columns), the router whole on every tp rank */
            int64_t Fe = cfg->moe_ffn_dim;
            mats[4] = IX("mlp.gate.weight", cfg->num_experts, C, 2, 1, std, MT_TP_REPLICATED);
            out->units[u].t[mats[4]].read_16bit_only = out->units[u].t[mats[4]].grad_by_one_gemm = 1;
            n_mats = 5;
            if (cfg->moe_shared_ffn_dim > 0) {
                /* the shared expert: a dense SwiGLU MLP cut over tp like the dense one; its gate whole on every
                   tp rank like the router. Dense tensors: replicated over ep, before the experts' */
                int64_t Fs = cfg->moe_shared_ffn_dim;
                mats[5] = IX("mlp.shared_expert.gate_proj.weight", Fs, C, 2, 1, std, MT_TP_ROWS);
                T("mlp.shared_expert.up_proj.weight", Fs, C, 2, 1, std, MT_TP_ROWS)->read_16bit_only = 1;
                mats[6] = IX("mlp.shared_expert.down_proj.weight", C, Fs, 2, 1, std, MT_TP_COLS);
                mats[7] = IX("mlp.shared_expert_gate.weight", 1, C, 2, 1, std, MT_TP_REPLICATED);
                n_mats = 8;
            }
            for (int e = 0; e < cfg->num_experts; e++) {
                char ename[36]; /* e < 256: three digits */
                /* an expert that gets no tokens gets no GEMM: its gradient is added into, never set */
                mt_tensor *w; /* expert parallelism holds the expert's tensors on one rank of the ep group */
                snprintf(ename, sizeof ename, "mlp.experts.%d.gate_proj.weight", (unsigned char)e);
                w = T(ename, Fe, C, 2, 1, std, MT_TP_ROWS);
                w->read_16bit_only = 1, w->expert = e + 1;
                snprintf(ename, sizeof ename, "mlp.experts.%d.up_proj.weight", (unsigned char)e);
                w = T(ename, Fe, C, 2, 1, std, MT_TP_ROWS);
                w->read_16bit_only = 1, w->expert = e + 1;
                snprintf(ename, sizeof ename, "mlp.experts.%d.down_proj.weight", (unsigned char)e);
                w = T(ename, C, Fe, 2, 1, std, MT_TP_COLS);
                w->read_16bit_only = 1, w->expert = e + 1;
            }
        } else {
            mats[4] = IX("mlp.gate_proj.weight", F, C, 2, 1, std, MT_TP_ROWS);
            T("mlp.up_proj.weight", F, C, 2, 1, std, MT_TP_ROWS)->read_16bit_only = 1;
            mats[5] = IX("mlp.down_proj.weight", C, F, 2, 1, std, MT_TP_COLS);
        }
#undef IX
#undef T
        for (int i = 0; i < n_mats; i++) out->units[u].t[mats[i]].read_16bit_only = 1;
        /* each is written whole by its layer's one weight-gradient GEMM (q|k|v and gate|up share one) */
        if (!cfg->num_experts)
            for (int i = 0; i < out->units[u].n_tensors; i++)
                out->units[u].t[i].grad_by_one_gemm = out->units[u].t[i].read_16bit_only;
        else /* the dense tensors, router and shared expert included: every token runs them */
            for (int i = 0; i < out->units[u].n_tensors && !out->units[u].t[i].expert; i++)
                out->units[u].t[i].grad_by_one_gemm = out->units[u].t[i].read_16bit_only;
    }
    int h = L + 1;
    out->units[h].role = MT_UNIT_OUTPUT;
    out->units[h].sp_partial = 1;
    mt_unit_add_tensor(out, h, "model.norm.weight", C, 1, 1, 0, -1.0f, MT_TP_REPLICATED);
    if (cfg->tie_embeddings) {
        mt_unit_add_shared(out, h, "lm_head.weight", "model.embed_tokens.weight");
    } else {
        mt_tensor *head = mt_unit_add_tensor(out, h, "lm_head.weight", mt_model_vocab_rows(cfg, tp), C, 2, 1, std, MT_TP_ROWS);
        head->init_rows = cfg->vocab_size;
        head->ckpt_rows = cfg->padded_vocab;
        head->read_16bit_only = head->grad_by_one_gemm = 1;
    }
    mt_layout_finish(out);
}
