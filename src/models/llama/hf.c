/* Llama's Hugging Face names (ours are HF's) and config.json
 * (LlamaForCausalLM; Qwen2ForCausalLM for the q/k/v-bias variant; the
 * mixtures of experts as MixtralForCausalLM, Qwen2MoeForCausalLM, and with
 * QK-norm OlmoeForCausalLM). */
#include "models/llama/llama.h"
#include "ops/moe.h"
#include <stdio.h>
#include <string.h>

/* Mixtral's names for the MoE tensors (ours are Qwen-MoE's): block_sparse_moe.gate, and per expert w1
 * (gate), w3 (up), w2 (down). */
static int mixtral_name(const char *name, char *buf, size_t cap) {
    int l, e, n = 0;
    char proj[16];
    if (sscanf(name, "model.layers.%d.mlp.gate.weight%n", &l, &n) == 1 && name[n] == 0) {
        snprintf(buf, cap, "model.layers.%d.block_sparse_moe.gate.weight", l);
        return 1;
    }
    if (sscanf(name, "model.layers.%d.mlp.experts.%d.%15[a-z_].weight%n", &l, &e, proj, &n) == 3 && name[n] == 0) {
        const char *w = !strcmp(proj, "gate_proj") ? "w1" : !strcmp(proj, "up_proj") ? "w3" : "w2";
        snprintf(buf, cap, "model.layers.%d.block_sparse_moe.experts.%d.%s.weight", l, e, w);
        return 1;
    }
    return 0;
}

void mt_llama_hf_name(const mt_model_config *cfg, const char *name, char *buf, size_t cap, int *transpose) {
    *transpose = 0;
    if (cfg->num_experts && cfg->moe_router == 0 && mixtral_name(name, buf, cap)) return;
    snprintf(buf, cap, "%s", name);
}

int mt_llama_hf_export_check(const mt_model_config *c, mt_error *err) {
    /* QK-norm exports as OLMoE, whose q_norm spans hidden_size (transformers sizes it so) */
    if (c->qk_norm && !(c->num_experts && c->moe_router == MT_MOE_ROUTER_SOFTMAX_TOPK && !c->moe_shared_ffn_dim &&
                        mt_model_head_dim(c) * c->n_head == c->n_embd))
        return mt_errorf(err, "this model has {qk-norm} 1: the Hugging Face format that holds it is OLMoE's, a "
                              "mixture of experts with {moe-router} softmax_topk, no shared expert and {head-dim} x "
                              "{heads} = {dim} (here experts %d, router %s, shared width %d, %d x %d vs %d)",
                         c->num_experts, mt_moe_router_name(c->moe_router), c->moe_shared_ffn_dim, mt_model_head_dim(c),
                         c->n_head, c->n_embd);
    if (c->num_experts && c->moe_router == MT_MOE_ROUTER_TOPK_SOFTMAX && c->moe_shared_ffn_dim)
        return mt_errorf(err, "this model has Mixtral's routing ({moe-router} mixtral) and a shared expert "
                              "({moe-shared-ffn-dim} %d): Mixtral's format has no shared expert and Qwen2-MoE's routes "
                              "softmax then top-k, so neither holds it; train with {moe-router} softmax_topk to export",
                         c->moe_shared_ffn_dim);
    return 0;
}

void mt_llama_hf_config_write(const mt_model_config *c, const char *torch_dtype, mt_json_writer *w) {
    int olmoe = c->num_experts && c->qk_norm; /* (mt_llama_hf_export_check: OLMoE's form) */
    int qwen = c->qkv_bias && !olmoe, mixtral = c->num_experts && c->moe_router == 0;
    const char *arch = qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM", *type = qwen ? "qwen2" : "llama";
    if (c->num_experts) {
        arch = mixtral ? "MixtralForCausalLM" : olmoe ? "OlmoeForCausalLM" : "Qwen2MoeForCausalLM";
        type = mixtral ? "mixtral" : olmoe ? "olmoe" : "qwen2_moe";
    }
    mt_jw_begin_object(w);
    mt_jw_key(w, "architectures");
    mt_jw_begin_array(w);
    mt_jw_string(w, arch);
    mt_jw_end_array(w);
    mt_jw_key(w, "model_type"); mt_jw_string(w, type);
    if (c->num_experts) {
        mt_jw_key(w, mixtral ? "num_local_experts" : "num_experts"); mt_jw_int(w, c->num_experts);
        mt_jw_key(w, "num_experts_per_tok"); mt_jw_int(w, c->moe_top_k);
        if (olmoe) {
            mt_jw_key(w, "norm_topk_prob"); mt_jw_bool(w, c->moe_norm_topk);
        } else if (!mixtral) {
            mt_jw_key(w, "moe_intermediate_size"); mt_jw_int(w, c->moe_ffn_dim);
            mt_jw_key(w, "norm_topk_prob"); mt_jw_bool(w, c->moe_norm_topk);
            mt_jw_key(w, "shared_expert_intermediate_size"); mt_jw_int(w, c->moe_shared_ffn_dim);
        }
    }
    mt_jw_key(w, "hidden_act"); mt_jw_string(w, "silu");
    mt_jw_key(w, "hidden_size"); mt_jw_int(w, c->n_embd);
    /* Mixtral, OLMoE: the experts' */
    mt_jw_key(w, "intermediate_size"); mt_jw_int(w, mixtral || olmoe ? c->moe_ffn_dim : c->ffn_dim);
    mt_jw_key(w, "num_attention_heads"); mt_jw_int(w, c->n_head);
    mt_jw_key(w, "num_key_value_heads"); mt_jw_int(w, mt_model_kv_heads(c));
    if (!olmoe) { /* OLMoE's head width is hidden_size / heads */
        mt_jw_key(w, "head_dim"); mt_jw_int(w, mt_model_head_dim(c));
    }
    mt_jw_key(w, "num_hidden_layers"); mt_jw_int(w, c->n_layer);
    mt_jw_key(w, "rms_norm_eps"); mt_jw_float(w, c->norm_eps);
    mt_jw_key(w, "rope_theta"); mt_jw_float(w, c->rope_theta);
    mt_jw_key(w, "rope_scaling");
    if (c->rope_scaling)
        mt_llama_rope_scaling_write(w, c, 1);
    else
        mt_jw_null(w);
    if (olmoe) {
        mt_jw_key(w, "attention_bias"); mt_jw_bool(w, c->qkv_bias);
        mt_jw_key(w, "clip_qkv"); mt_jw_null(w);
    } else if (!qwen) {
        mt_jw_key(w, "attention_bias"); mt_jw_bool(w, 0);
        mt_jw_key(w, "mlp_bias"); mt_jw_bool(w, 0);
    }
    mt_jw_key(w, "attention_dropout"); mt_jw_float(w, 0.0f);
    mt_jw_key(w, "tie_word_embeddings"); mt_jw_bool(w, c->tie_embeddings);
    mt_jw_key(w, "vocab_size"); mt_jw_int(w, c->vocab_size);
    /* dynamic NTK's original context is max_position_embeddings itself */
    int max_pos = c->rope_scaling == MT_ROPE_DYNAMIC ? c->rope_original_max_pos
                  : c->max_pos > c->seq_len                ? c->max_pos
                                                           : c->seq_len;
    mt_jw_key(w, "max_position_embeddings"); mt_jw_int(w, max_pos);
    mt_jw_key(w, "torch_dtype"); mt_jw_string(w, torch_dtype);
    mt_jw_end_object(w);
}

static int need_int(const mt_json *o, const char *key, int *out, mt_error *err) {
    int64_t v;
    if (mt_json_get_int64(o, key, &v, err)) return -1;
    if (v < 1 || v > (1 << 24)) return mt_errorf(err, "%s = %lld is out of range", key, (long long)v);
    *out = (int)v;
    return 0;
}

static int flag_of(const mt_json *o, const char *key, int *out, mt_error *err) {
    const mt_json *j = mt_json_get(o, key);
    if (!j || j->type == MT_JSON_NULL) return 0;
    if (j->type != MT_JSON_BOOL) return mt_errorf(err, "%s must be true or false", key);
    *out = j->boolean;
    return 0;
}

static int float_of(const mt_json *o, const char *key, float *out, mt_error *err) {
    double d;
    if (!mt_json_get(o, key)) return 0;
    if (mt_json_get_double(o, key, &d, err)) return -1;
    *out = (float)d;
    return 0;
}

int mt_llama_hf_config_read(const mt_json *o, mt_model_config *c, mt_error *err) {
    const char *type = NULL; /* the caller set the family and its defaults */
    if (mt_json_get_string(o, "model_type", &type, err)) return -1;
    c->qkv_bias = !strcmp(type, "qwen2") || !strcmp(type, "qwen2_moe");
    int olmoe = !strcmp(type, "olmoe");
    c->qk_norm = olmoe;
    if (olmoe) { /* softmax then top-k, no shared expert; intermediate_size is the experts' width */
        if (need_int(o, "num_experts", &c->num_experts, err) || need_int(o, "num_experts_per_tok", &c->moe_top_k, err) ||
            need_int(o, "intermediate_size", &c->moe_ffn_dim, err) || flag_of(o, "norm_topk_prob", &c->moe_norm_topk, err))
            return -1;
        c->moe_router = MT_MOE_ROUTER_SOFTMAX_TOPK;
        c->moe_shared_ffn_dim = 0;
        const mt_json *clip = mt_json_get(o, "clip_qkv");
        if (clip && clip->type != MT_JSON_NULL)
            return mt_errorf(err, "clip_qkv is not supported (OLMoE's optional clamp of q, k and v; only null)");
    }
    if (!strcmp(type, "mixtral") || !strcmp(type, "qwen2_moe")) {
        int mixtral = !strcmp(type, "mixtral");
        if (need_int(o, mixtral ? "num_local_experts" : "num_experts", &c->num_experts, err) ||
            need_int(o, "num_experts_per_tok", &c->moe_top_k, err) ||
            need_int(o, mixtral ? "intermediate_size" : "moe_intermediate_size", &c->moe_ffn_dim, err))
            return -1;
        c->moe_router = mixtral ? 0 : 1;
        if (!mixtral && flag_of(o, "norm_topk_prob", &c->moe_norm_topk, err)) return -1;
        const mt_json *sh = mt_json_get(o, "shared_expert_intermediate_size");
        c->moe_shared_ffn_dim = 0;
        if (!mixtral && sh && sh->type != MT_JSON_NULL) { /* Qwen2-MoE's shared expert (0: none) */
            int64_t v;
            if (mt_json_get_int64(o, "shared_expert_intermediate_size", &v, err)) return -1;
            if (v < 0 || v > (1 << 20))
                return mt_errorf(err, "shared_expert_intermediate_size = %lld is out of range (0..1048576; 0: none)",
                                 (long long)v);
            c->moe_shared_ffn_dim = (int)v;
        }
        int every = 1, step = 1;
        const mt_json *mlp_only = mt_json_get(o, "mlp_only_layers");
        if (mlp_only && mlp_only->type == MT_JSON_ARRAY && mlp_only->count > 0)
            return mt_errorf(err, "mlp_only_layers: dense layers between MoE layers are not supported (every layer is MoE)");
        if (mt_json_get(o, "decoder_sparse_step") && need_int(o, "decoder_sparse_step", &step, err)) return -1;
        if (step != every) return mt_errorf(err, "decoder_sparse_step %d: only every layer MoE (1) is supported", step);
    }
    if (need_int(o, "hidden_size", &c->n_embd, err) || need_int(o, "intermediate_size", &c->ffn_dim, err) ||
        need_int(o, "num_attention_heads", &c->n_head, err) || need_int(o, "num_hidden_layers", &c->n_layer, err) ||
        need_int(o, "vocab_size", &c->vocab_size, err))
        return -1;
    c->n_kv_head = c->n_head;
    if (mt_json_get(o, "num_key_value_heads") && need_int(o, "num_key_value_heads", &c->n_kv_head, err)) return -1;
    c->head_dim = c->n_embd / c->n_head;
    const mt_json *hd = mt_json_get(o, "head_dim");
    if (hd && hd->type != MT_JSON_NULL && need_int(o, "head_dim", &c->head_dim, err)) return -1;
    if (olmoe && c->head_dim * c->n_head != c->n_embd)
        return mt_errorf(err, "olmoe: head_dim %d x num_attention_heads %d must equal hidden_size %d (transformers "
                              "sizes q_norm by hidden_size)", c->head_dim, c->n_head, c->n_embd);
    if (mt_json_get(o, "max_position_embeddings") && need_int(o, "max_position_embeddings", &c->max_pos, err)) return -1;
    if (float_of(o, "rms_norm_eps", &c->norm_eps, err) || float_of(o, "rope_theta", &c->rope_theta, err)) return -1;
    if (flag_of(o, "tie_word_embeddings", &c->tie_embeddings, err) || flag_of(o, "attention_bias", &c->qkv_bias, err))
        return -1;
    int mlp_bias = 0;
    if (flag_of(o, "mlp_bias", &mlp_bias, err)) return -1;
    if (mlp_bias) return mt_errorf(err, "mlp_bias true is not supported (the llama family's MLP has no biases)");
    const char *act = NULL;
    if (mt_json_get(o, "hidden_act") && !mt_json_get_string(o, "hidden_act", &act, NULL) && strcmp(act, "silu"))
        return mt_errorf(err, "hidden_act '%s' is not supported (SwiGLU with silu only)", act);
    const mt_json *rs = mt_json_get(o, "rope_scaling");
    if (rs && rs->type == MT_JSON_OBJECT) {
        if (mt_llama_rope_scaling_read(rs, c, 1, c->max_pos, err)) return -1;
    }
    return 0;
}
