/* Model flags shared by train and plan (cli/model_flags.h). */
#include "cli/model_flags.h"
#include "models/family.h"
#include "models/llama/llama.h"
#include <stdio.h>
#include <string.h>

void mt_model_flags_spec(mt_model_flags *mf, mt_arg out[MT_MODEL_FLAG_COUNT], int with_defaults) {
    snprintf(mf->preset_help, sizeof mf->preset_help, "preset: "); /* the families' presets, from the registry */
    size_t n = strlen(mf->preset_help);
    mt_family_preset_list(mf->preset_help + n, sizeof mf->preset_help - n, " | ");
    int d = with_defaults;
    const mt_arg spec[MT_MODEL_FLAG_COUNT] = {
        {"model", MT_ARG_STR, &mf->preset, mf->preset_help, 0},
        {"preset", MT_ARG_STR, &mf->preset, "the same as --model", 0},
        {"family", MT_ARG_STR, &mf->family, "model family: gpt2 | llama | falcon (default gpt2, or the preset's)", 0},
        {"kv-heads", MT_ARG_INT, &mf->kv_heads, "llama, falcon: key/value heads, dividing --heads (default llama --heads, falcon 1)", 0},
        {"head-dim", MT_ARG_INT, &mf->head_dim, "llama, falcon: dimension per head (default dim / heads)", 0},
        {"ffn-dim", MT_ARG_INT, &mf->ffn_dim, "llama: SwiGLU width (default 8 dim / 3 rounded up to 32); falcon: MLP width (default 4 dim)", 0},
        {"rope-theta", MT_ARG_FLOAT, &mf->rope_theta, "llama, falcon: rotary base (default 10000)", 0},
        {"norm-eps", MT_ARG_FLOAT, &mf->norm_eps, "llama: RMSNorm epsilon (default 1e-5)", 0},
        {"tie-embeddings", MT_ARG_INT, &mf->tie, "llama, falcon: 1 = the head is the token embedding (default llama 0, falcon 1)", 0},
        {"qkv-bias", MT_ARG_INT, &mf->qkv_bias, "llama: 1 = q/k/v projections with biases, as Qwen2 (default 0)", 0},
        {"block-norms", MT_ARG_INT, &mf->block_norms,
         "falcon: LayerNorms per block, 1 = one shared (Falcon-7B), 2 = ln_attn and ln_mlp (40B/180B; default 1)", 0},
        {"linear-bias", MT_ARG_INT, &mf->linear_bias, "falcon: 1 = every linear of a block has a bias (HF bias: true; default 0)", 0},
        {"rope-scaling", MT_ARG_STR, &mf->rope_scaling, "llama: none | llama3 (Llama 3.1) | linear | dynamic (NTK) | yarn, as Hugging Face's rope_type", 0},
        {"rope-factor", MT_ARG_FLOAT, &mf->rope_factor, "rope scaling: factor (llama3: default 8)", 0},
        {"rope-low-freq-factor", MT_ARG_FLOAT, &mf->rope_low, "llama3 rope scaling: low_freq_factor (default 1)", 0},
        {"rope-high-freq-factor", MT_ARG_FLOAT, &mf->rope_high, "llama3 rope scaling: high_freq_factor (default 4)", 0},
        {"rope-original-max-pos", MT_ARG_INT, &mf->rope_orig,
         "rope scaling: original_max_position_embeddings (llama3: default 8192; dynamic, yarn: --seq-len)", 0},
        {"moe-experts", MT_ARG_INT, &mf->moe_experts, "llama: mixture of experts, E SwiGLU experts per block (default 0: dense)", 0},
        {"moe-top-k", MT_ARG_INT, &mf->moe_top_k, "llama MoE: experts per token (default 2)", 0},
        {"moe-ffn-dim", MT_ARG_INT, &mf->moe_ffn_dim, "llama MoE: each expert's SwiGLU width (default --ffn-dim)", 0},
        {"moe-router", MT_ARG_STR, &mf->moe_router,
         "llama MoE: mixtral (softmax over the top-k logits, default) | softmax_topk (softmax, then top-k: Qwen-MoE, OLMoE)", 0},
        {"moe-norm-topk", MT_ARG_INT, &mf->moe_norm_topk, "llama MoE, softmax_topk: 1 = divide the k weights by their sum", 0},
        {"moe-shared-ffn-dim", MT_ARG_INT, &mf->moe_shared_ffn_dim,
         "llama MoE: a shared expert of this SwiGLU width that every token runs, scaled by a sigmoid gate, as Qwen2-MoE's (default 0: none)", 0},
        {"qk-norm", MT_ARG_INT, &mf->qk_norm,
         "llama: 1 = RMSNorms of the whole q and k projections before RoPE, as OLMoE's q_norm, k_norm (default 0)", 0},
        {"layers", MT_ARG_INT, &mf->layers, d ? "transformer blocks L (default 4)" : "transformer blocks L", 0},
        {"dim", MT_ARG_INT, &mf->dim, d ? "model width C (default 128)" : "model width C", 0},
        {"heads", MT_ARG_INT, &mf->heads, d ? "attention heads (default 4)" : "attention heads", 0},
        {"vocab", MT_ARG_INT, &mf->vocab,
         d ? "vocabulary size (default: 256 for byte data, 50257 otherwise)" : "vocabulary size", 0},
        {"seq-len", MT_ARG_INT, &mf->seq_len, d ? "context length T (default 64)" : "context length T", 0},
        {"dropout", MT_ARG_FLOAT, &mf->dropout, "dropout probability (default 0)", 0},
    };
    memcpy(out, spec, sizeof spec);
}

int mt_model_flags_apply(const mt_model_flags *mf, const mt_arg *spec, int nspec, int base_given, mt_model_config *cfg,
                         mt_error *err) {
#define SEEN(name) mt_arg_seen(spec, nspec, name)
    if (mf->preset && !base_given) {
        if (mt_model_config_preset(mf->preset, cfg, err)) return -1;
    }
    const int preset = mf->preset || base_given; /* a whole config to start from: unset flags keep its values */
    if (mf->family) {
        mt_family_id f;
        if (mt_family_parse(mf->family, &f, err)) return -1;
        if (preset && f != cfg->family)
            return mt_errorf(err, "--family %s contradicts the %s preset '%s'", mf->family, mt_family_name(cfg->family),
                             mf->preset);
        if (f != cfg->family) mt_model_config_defaults(cfg, f);
    }
    if (SEEN("layers")) cfg->n_layer = mf->layers;
    if (SEEN("dim")) cfg->n_embd = mf->dim;
    if (SEEN("heads")) cfg->n_head = mf->heads;
    if (SEEN("seq-len")) cfg->seq_len = mf->seq_len;
    const char *llama_only[] = {"kv-heads", "head-dim", "ffn-dim", "rope-theta", "norm-eps", "tie-embeddings", "qkv-bias",
                                "rope-scaling", "rope-factor", "rope-low-freq-factor", "rope-high-freq-factor",
                                "rope-original-max-pos", "moe-experts", "moe-top-k", "moe-ffn-dim", "moe-router",
                                "moe-norm-topk", "moe-shared-ffn-dim", "qk-norm"};
    const char *also_falcon[] = {"kv-heads", "head-dim", "ffn-dim", "rope-theta", "tie-embeddings"};
    for (size_t i = 0; i < sizeof llama_only / sizeof llama_only[0]; i++) {
        int falcon_too = 0;
        for (size_t j = 0; j < sizeof also_falcon / sizeof also_falcon[0]; j++)
            falcon_too |= !strcmp(llama_only[i], also_falcon[j]);
        if (SEEN(llama_only[i]) && cfg->family != MT_FAMILY_LLAMA && !(falcon_too && cfg->family == MT_FAMILY_FALCON))
            return mt_errorf(err, "--%s applies to --family llama%s (this model is %s)", llama_only[i],
                             falcon_too ? " or falcon" : "", mt_family_name(cfg->family));
    }
    const char *falcon_only[] = {"block-norms", "linear-bias"};
    for (size_t i = 0; i < sizeof falcon_only / sizeof falcon_only[0]; i++)
        if (SEEN(falcon_only[i]) && cfg->family != MT_FAMILY_FALCON)
            return mt_errorf(err, "--%s applies to --family falcon (this model is %s)", falcon_only[i],
                             mt_family_name(cfg->family));
    if (cfg->family == MT_FAMILY_FALCON) {
        /* unset shapes follow the width: multi-query attention, C / H per head, the MLP 4C wide */
        if (SEEN("kv-heads")) cfg->n_kv_head = mf->kv_heads;
        else if (!preset) cfg->n_kv_head = 1;
        if (SEEN("head-dim")) cfg->head_dim = mf->head_dim;
        else if (!preset || SEEN("dim") || SEEN("heads")) cfg->head_dim = cfg->n_head > 0 ? cfg->n_embd / cfg->n_head : 0;
        if (SEEN("ffn-dim")) cfg->ffn_dim = mf->ffn_dim;
        else if (!preset || SEEN("dim")) cfg->ffn_dim = 4 * cfg->n_embd;
        if (SEEN("rope-theta")) cfg->rope_theta = mf->rope_theta;
        if (SEEN("tie-embeddings")) cfg->tie_embeddings = mf->tie;
        if (SEEN("block-norms")) cfg->block_norms = mf->block_norms;
        if (SEEN("linear-bias")) cfg->linear_bias = mf->linear_bias;
        if (cfg->max_pos < cfg->seq_len) cfg->max_pos = cfg->seq_len;
    }
    if (cfg->family == MT_FAMILY_LLAMA) {
        /* unset shapes follow the width: plain multi-head attention, C / H per
         * head, and the SwiGLU width 8C/3 rounded up to a multiple of 32 */
        if (SEEN("kv-heads")) cfg->n_kv_head = mf->kv_heads;
        else if (!preset || SEEN("heads")) cfg->n_kv_head = cfg->n_head;
        if (SEEN("head-dim")) cfg->head_dim = mf->head_dim;
        else if (!preset || SEEN("dim") || SEEN("heads")) cfg->head_dim = cfg->n_head > 0 ? cfg->n_embd / cfg->n_head : 0;
        if (SEEN("ffn-dim")) cfg->ffn_dim = mf->ffn_dim;
        else if (!preset || SEEN("dim")) cfg->ffn_dim = (8 * cfg->n_embd / 3 + 31) / 32 * 32;
        if (SEEN("rope-theta")) cfg->rope_theta = mf->rope_theta;
        if (SEEN("norm-eps")) cfg->norm_eps = mf->norm_eps;
        if (SEEN("tie-embeddings")) cfg->tie_embeddings = mf->tie;
        if (SEEN("qkv-bias")) cfg->qkv_bias = mf->qkv_bias;
        if (SEEN("qk-norm")) cfg->qk_norm = mf->qk_norm;
        if (SEEN("rope-scaling") && mt_llama_rope_type_parse(mf->rope_scaling, &cfg->rope_scaling))
            return mt_errorf(err, "--rope-scaling must be none, llama3, linear, dynamic or yarn, got '%s'",
                             mf->rope_scaling);
        if (cfg->rope_scaling == MT_ROPE_LLAMA3 && !cfg->rope_factor) { /* Llama 3.1's values unless given */
            cfg->rope_factor = 8.0f;
            cfg->rope_low_freq_factor = 1.0f;
            cfg->rope_high_freq_factor = 4.0f;
            cfg->rope_original_max_pos = 8192;
        }
        if (cfg->rope_scaling == MT_ROPE_YARN && SEEN("rope-scaling")) cfg->rope_truncate = 1; /* transformers' default */
        if (SEEN("rope-factor")) cfg->rope_factor = mf->rope_factor;
        if (SEEN("rope-low-freq-factor")) cfg->rope_low_freq_factor = mf->rope_low;
        if (SEEN("rope-high-freq-factor")) cfg->rope_high_freq_factor = mf->rope_high;
        if (SEEN("rope-original-max-pos")) cfg->rope_original_max_pos = mf->rope_orig;
        if ((cfg->rope_scaling == MT_ROPE_DYNAMIC || cfg->rope_scaling == MT_ROPE_YARN) && !cfg->rope_original_max_pos)
            cfg->rope_original_max_pos = cfg->seq_len; /* the context trained so far */
        if (cfg->rope_scaling > MT_ROPE_LLAMA3 && !cfg->rope_factor)
            return mt_errorf(err, "--rope-scaling %s needs --rope-factor F", mt_llama_rope_type_name(cfg->rope_scaling));
        if (cfg->max_pos < cfg->seq_len) cfg->max_pos = cfg->seq_len;
        if (SEEN("moe-experts")) {
            cfg->num_experts = mf->moe_experts;
            if (!cfg->moe_top_k) cfg->moe_top_k = 2 < mf->moe_experts ? 2 : mf->moe_experts;
            if (!cfg->moe_ffn_dim) cfg->moe_ffn_dim = cfg->ffn_dim;
        }
        const char *moe_only[] = {"moe-top-k", "moe-ffn-dim", "moe-router", "moe-norm-topk", "moe-shared-ffn-dim"};
        for (size_t i = 0; i < sizeof moe_only / sizeof moe_only[0]; i++)
            if (SEEN(moe_only[i]) && !cfg->num_experts)
                return mt_errorf(err, "--%s applies to a mixture-of-experts model (give --moe-experts E)", moe_only[i]);
        if (SEEN("moe-top-k")) cfg->moe_top_k = mf->moe_top_k;
        if (SEEN("moe-ffn-dim")) cfg->moe_ffn_dim = mf->moe_ffn_dim;
        if (SEEN("moe-router") && mt_moe_router_parse(mf->moe_router, &cfg->moe_router, err)) return -1;
        if (SEEN("moe-norm-topk")) cfg->moe_norm_topk = mf->moe_norm_topk;
        if (SEEN("moe-shared-ffn-dim")) cfg->moe_shared_ffn_dim = mf->moe_shared_ffn_dim;
    }
#undef SEEN
    return 0;
}
